package cuda

import (
	"context"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
	"github.com/bpfbench/bpfbench/internal/uprobecost"
)

// BenchmarkAttachDetach times a session's CUDA section attaching to both
// stub libraries of a waiting cudastub-driver (Start: load, target,
// every probe of both libraries) and detaching (Close), one op each, and
// reports the links it held: through uprobe_multi links (where the kernel
// has them) and through the per-symbol perf-event uprobes of the fallback.
// The uprobe cost is measured once per process, before the first op, so it
// is not in the figures.
//
//	sudo go test -run '^$' -bench AttachDetach -benchtime 5x ./collectors/cuda/
func BenchmarkAttachDetach(b *testing.B) {
	privtest.Require(b)
	for _, mode := range []string{"uprobe_multi", "per-symbol"} {
		b.Run(mode, func(b *testing.B) {
			if mode == "uprobe_multi" && !uprobecost.HaveMulti() {
				privtest.Skip(b, "this kernel has no uprobe_multi links (Linux 6.6+)")
			}
			perSymbolOnly = mode == "per-symbol"
			defer func() { perSymbolOnly = false }()
			benchAttachDetach(b)
		})
	}
}

func benchAttachDetach(b *testing.B) {
	d := startDriver(b, "driver")
	libs := []string{libPath("driver"), libPath("runtime")}
	var attach, detach []float64
	links := 0
	b.ResetTimer()
	for range b.N {
		s, err := NewSectionConfig(collectors.Options{Pid: d.pid(), CUDALibs: libs}, SectionConfig{})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := s.Start(context.Background()); err != nil {
			b.Fatalf("start: %+v", err)
		}
		t1 := time.Now()
		ids := s.LinkIDs()
		progs := s.ProgramIDs()
		links = len(ids)
		t2 := time.Now()
		if err := s.Close(); err != nil {
			b.Fatalf("close: %v", err)
		}
		t3 := time.Now()
		privtest.AssertReleased(b, progs, ids)
		attach = append(attach, float64(t1.Sub(t0))/1e6)
		detach = append(detach, float64(t3.Sub(t2))/1e6)
		b.Logf("attach %.1f ms, detach %.1f ms, %d links", attach[len(attach)-1], detach[len(detach)-1], links)
	}
	b.ReportMetric(testutil.Median(attach), "attach-ms")
	b.ReportMetric(testutil.Median(detach), "detach-ms")
	b.ReportMetric(float64(links), "links")
}
