package cuda

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
)

// benchDurationMs is how long each measured loop of launches runs.
const benchDurationMs = 2000

var benchArgs = []string{"--loop", "--duration-ms", fmt.Sprint(benchDurationMs), "--syncs", "0", "--kernel-us", "0", "--launches", "100000"}

type loopResult struct {
	Launches       uint64  `json:"launches"`
	LaunchesPerSec float64 `json:"launches_per_second"`
}

func decodeLoop(tb testing.TB, d *driver) loopResult {
	tb.Helper()
	if err := d.wait(); err != nil {
		tb.Fatalf("cudastub-driver: %v", err)
	}
	var r loopResult
	if err := json.Unmarshal(d.stdout.Bytes(), &r); err != nil {
		tb.Fatalf("decoding cudastub-driver's JSON: %v\n%s", err, d.stdout.String())
	}
	return r
}

// launchesBare measures the stub's launch rate (cuLaunchKernel, or what
// extra asks for) with nothing attached.
func launchesBare(tb testing.TB, extra ...string) float64 {
	d := startDriver(tb, "driver", append(benchArgs, extra...)...)
	d.release(tb)
	return decodeLoop(tb, d).LaunchesPerSec
}

// launchesCollector measures it with the session section attached, and
// returns the BPF run time per program run.
func launchesCollector(tb testing.TB, extra ...string) (rate float64, bpfNs float64) {
	return launchesSection(tb, Budget{}, extra...)
}

// launchesSection is launchesCollector with a budget of its own.
func launchesSection(tb testing.TB, b Budget, extra ...string) (rate float64, bpfNs float64) {
	d := startDriver(tb, "driver", append(benchArgs, extra...)...)
	s, err := NewSectionConfig(collectors.Options{Pid: d.pid()}, SectionConfig{Budget: b})
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		tb.Fatalf("%+v", err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	d.release(tb)
	r := decodeLoop(tb, d)
	cancel()
	<-done
	// The launch probes are one uprobe_multi link (CudaEnterMulti), or
	// per-symbol uprobes (CudaEnter) where the kernel has no multi links.
	for _, p := range []*ebpf.Program{s.objs.CudaEnterMulti, s.objs.CudaEnter} {
		if st, err := p.Stats(); err == nil && st.RunCount > 0 {
			bpfNs = float64(st.Runtime.Nanoseconds()) / float64(st.RunCount)
			break
		}
	}
	call := "cuLaunchKernel"
	if len(extra) > 0 {
		call = "cuGraphLaunch"
	}
	sum := s.Aggregate()
	if c, _ := findCall(sum, call); c.Count != r.Launches && sum.LaunchProbes != nil && sum.LaunchProbes.Mode == "full" {
		tb.Errorf("collector counted %d launches, the driver made %d", c.Count, r.Launches)
	}
	return r.LaunchesPerSec, bpfNs
}

// launchesHost measures it with the daemon's collector following the process.
func launchesHost(tb testing.TB, extra ...string) float64 {
	d := startDriver(tb, "driver", append(benchArgs, extra...)...)
	h := NewHost(nil, func() map[uint32]string { return map[uint32]string{1: "bench"} })
	if err := h.Start(context.Background()); err != nil {
		tb.Fatalf("%+v", err)
	}
	defer h.Close()
	if err := h.SetTarget(uint32(d.pid()), 1); err != nil {
		tb.Fatal(err)
	}
	d.release(tb)
	return decodeLoop(tb, d).LaunchesPerSec
}

// launchesBpftrace measures it with the same probe as a bpftrace one-liner
// filtered to the process (-p), as bpftrace users would write it.
func launchesBpftrace(tb testing.TB, bpftrace string) float64 {
	d := startDriver(tb, "driver", benchArgs...)
	lib := filepath.Join(stubDir, "libcuda.so.1")
	prog := fmt.Sprintf(`uprobe:%s:cuLaunchKernel { @launches = count(); } BEGIN { printf("attached\n"); }`, lib)
	cmd := exec.Command(bpftrace, "-p", fmt.Sprint(d.pid()), "-e", prog)
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting bpftrace: %v", err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
	}()
	br := bufio.NewReader(out)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			tb.Fatalf("bpftrace did not attach: %v", err)
		}
		if strings.TrimSpace(line) == "attached" {
			break
		}
	}
	go func() { _, _ = bufio.NewReader(br).WriteTo(discard{}) }()
	d.release(tb)
	return decodeLoop(tb, d).LaunchesPerSec
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkLaunchOverhead measures what the collector's entry-only uprobe
// costs each cuLaunchKernel of the stub: launches per second with nothing
// attached, with the session section attached, with the daemon's
// collector following the process, and with the same probe as
// a one-line bpftrace uprobe, measured in turn in one run. The per-call
// overhead is 1/with - 1/without; bpftrace-ratio is ours over bpftrace's.
// The bpftrace part is left out (logged) when bpftrace is not installed.
//
//	sudo go test -run '^$' -bench LaunchOverhead -benchtime 3x ./collectors/cuda/
func BenchmarkLaunchOverhead(b *testing.B) {
	privtest.Require(b)
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatalf("enabling BPF run-time stats: %v", err)
	}
	defer stats.Close()
	bt, _ := exec.LookPath("bpftrace")
	if bt == "" {
		b.Log("bpftrace not installed (apt-get install bpftrace): measuring without the bpftrace comparison")
	}
	var bare, ours, theirs, ourNs, theirNs, ratios, bpfNs, hostNs []float64
	b.ResetTimer()
	for range b.N {
		base := launchesBare(b)
		with, ns := launchesCollector(b)
		host := launchesHost(b)
		hostNs = append(hostNs, 1e9/host-1e9/base)
		bare = append(bare, base)
		ours = append(ours, with)
		ourNs = append(ourNs, 1e9/with-1e9/base)
		bpfNs = append(bpfNs, ns)
		line := fmt.Sprintf("launches/s: bare %.0f, collector %.0f (%.2f µs/call, %.0f ns of BPF), daemon %.0f (%.2f µs/call)",
			base, with, (1e9/with-1e9/base)/1e3, ns, host, (1e9/host-1e9/base)/1e3)
		if bt != "" {
			tr := launchesBpftrace(b, bt)
			theirs = append(theirs, tr)
			theirNs = append(theirNs, 1e9/tr-1e9/base)
			ratios = append(ratios, (1e9/with-1e9/base)/(1e9/tr-1e9/base))
			line += fmt.Sprintf(", bpftrace %.0f (%.2f µs/call)", tr, (1e9/tr-1e9/base)/1e3)
		}
		b.Log(line)
	}
	b.ReportMetric(testutil.Median(bare), "bare-launches/s")
	b.ReportMetric(testutil.Median(ours), "collector-launches/s")
	b.ReportMetric(testutil.Median(ourNs), "collector-ns/call")
	b.ReportMetric(testutil.Median(bpfNs), "bpf-ns/call")
	b.ReportMetric(testutil.Median(hostNs), "daemon-ns/call")
	b.ReportMetric(testutil.Median(ours)/testutil.Median(bare), "collector/bare")
	if len(theirs) > 0 {
		b.ReportMetric(testutil.Median(theirs), "bpftrace-launches/s")
		b.ReportMetric(testutil.Median(theirNs), "bpftrace-ns/call")
		b.ReportMetric(testutil.Median(ratios), "overhead-ratio-vs-bpftrace")
	}
}

// BenchmarkGraphLaunchOverhead is BenchmarkLaunchOverhead for cuGraphLaunch
// (the stub's driver with --launch graph): what the entry-only graph launch
// probe costs a call, and the launch rate at which it would reach the
// launch-probe budget (DefaultBudget.Ratio of a CPU).
//
//	sudo go test -run '^$' -bench GraphLaunchOverhead -benchtime 3x ./collectors/cuda/
func BenchmarkGraphLaunchOverhead(b *testing.B) {
	privtest.Require(b)
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatalf("enabling BPF run-time stats: %v", err)
	}
	defer stats.Close()
	graph := []string{"--launch", "graph"}
	var bare, ours, ourNs, probedNs, bpfNs, hostNs []float64
	b.ResetTimer()
	for range b.N {
		base := launchesBare(b, graph...)
		with, _ := launchesCollector(b, graph...)
		// Probes held on (a budget of a whole CPU): the cost of every hit.
		probed, ns := launchesSection(b, Budget{Ratio: 1}, graph...)
		host := launchesHost(b, graph...)
		bare = append(bare, base)
		ours = append(ours, with)
		ourNs = append(ourNs, 1e9/with-1e9/base)
		probedNs = append(probedNs, 1e9/probed-1e9/base)
		hostNs = append(hostNs, 1e9/host-1e9/base)
		bpfNs = append(bpfNs, ns)
		b.Logf("graph launches/s: bare %.0f, collector %.0f (%.2f µs/call), every launch probed %.0f (%.2f µs/call, %.0f ns of BPF), daemon %.0f (%.2f µs/call)",
			base, with, (1e9/with-1e9/base)/1e3, probed, (1e9/probed-1e9/base)/1e3, ns, host, (1e9/host-1e9/base)/1e3)
	}
	b.ReportMetric(testutil.Median(bare), "bare-launches/s")
	b.ReportMetric(testutil.Median(ours), "collector-launches/s")
	b.ReportMetric(testutil.Median(ourNs), "collector-ns/call")
	b.ReportMetric(testutil.Median(probedNs), "probed-ns/call")
	b.ReportMetric(testutil.Median(bpfNs), "bpf-ns/call")
	b.ReportMetric(testutil.Median(hostNs), "daemon-ns/call")
	// The graph launch rate at which every-launch probing reaches the budget.
	if c := testutil.Median(probedNs); c > 0 {
		b.ReportMetric(DefaultBudget.Ratio*1e9/c, "budget-launches/s")
	}
}
