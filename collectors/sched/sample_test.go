package sched

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

func TestHostSampleFor(t *testing.T) {
	for _, c := range []struct {
		rate float64
		want uint32
	}{
		{0, 1}, {math.NaN(), 1}, {-5, 1}, {HostSamplesPerSecond, 1}, {HostSamplesPerSecond * 1.5, 2},
		{HostSamplesPerSecond * 3, 4}, {HostSamplesPerSecond * 8, 8}, {HostSamplesPerSecond * 300, 512},
		{HostSamplesPerSecond * 1e6, MaxHostSample},
	} {
		if got := hostSampleFor(c.rate); got != c.want {
			t.Errorf("hostSampleFor(%v) = %d, want %d", c.rate, got, c.want)
		}
	}
}

func TestParseCtxt(t *testing.T) {
	now := time.Now()
	n, _, err := parseCtxt([]byte("cpu  1 2 3\nintr 5 6\nctxt 123456789\nbtime 1\n"), now)
	if err != nil || n != 123456789 {
		t.Errorf("parseCtxt = %d, %v; want 123456789", n, err)
	}
	if _, _, err := parseCtxt([]byte("cpu 1 2 3\n"), now); err == nil {
		t.Error("no ctxt line: no error")
	}
	if _, _, err := procCtxt(); err != nil {
		t.Errorf("this host's /proc/stat: %v", err)
	}
}

// The host-wide histogram stays an unbiased count of the host's switches
// while its sampling changes under it: a collector that samples (one
// switch in 1, then 16, then 4) against one that counts every switch, over
// the same storms, in the same run. The full count is the ground truth.
func TestHostSampleChangesStayUnbiased(t *testing.T) {
	privtest.Require(t)
	full := New(Config{HostWide: true})
	if err := full.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	defer full.Close()
	sampled := New(Config{HostWide: true, HostSample: 1})
	if err := sampled.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	defer sampled.Close()
	storm(t, 5000) // both attached before the first count
	f0, err := full.RunqueueHist(0)
	if err != nil {
		t.Fatal(err)
	}
	s0, err := sampled.RunqueueHist(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []uint32{1, 16, 4} {
		if err := sampled.SetHostSample(n); err != nil {
			t.Fatal(err)
		}
		if got := sampled.HostSample(); got != n {
			t.Fatalf("HostSample() = %d after SetHostSample(%d)", got, n)
		}
		storm(t, 40000)
	}
	f1, err := full.RunqueueHist(0)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := sampled.RunqueueHist(0)
	if err != nil {
		t.Fatal(err)
	}
	fc, sc := float64(f1.Count-f0.Count), float64(s1.Count-s0.Count)
	fs, ss := float64(f1.SumNs-f0.SumNs), float64(s1.SumNs-s0.SumNs)
	t.Logf("switches with a run-queue wait: %0.f counted in full, %0.f estimated from samples (%.3f); wait sum %.1f ms against %.1f ms (%.3f)",
		fc, sc, sc/fc, fs/1e6, ss/1e6, ss/fs)
	// One switch in 16 of ~80,000 is ~5,000 samples: the estimate's
	// standard error is about 1.4%; 10% is seven of them.
	if fc < 50000 || math.Abs(sc/fc-1) > 0.10 {
		t.Errorf("sampled count %.0f against the full %.0f: want within 10%% of at least 50,000", sc, fc)
	}
	if err := sampled.SetHostSample(3); err != nil || sampled.HostSample() != 4 {
		t.Errorf("SetHostSample(3): %v, in force %d; want rounded up to 4", err, sampled.HostSample())
	}
}
