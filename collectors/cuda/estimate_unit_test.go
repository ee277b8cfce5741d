package cuda

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func sample(launches, syncs, firstL, firstS, lastL, lastS uint64, gen uint32, cpuMs float64) threadSample {
	return threadSample{l: cudaLauncher{Launches: launches, Syncs: syncs, FirstLaunches: firstL, FirstSyncs: firstS,
		LastLaunches: lastL, LastSyncs: lastS, Gen: gen}, cpuNs: uint64(cpuMs * 1e6), ok: true}
}

// Whole steps of a window give launches per step; a detached stretch's
// synchronizes times that is the estimate, with two steps of bound per
// boundary.
func TestEstimatePerStep(t *testing.T) {
	var e estimator
	// A window of gen 2: first synchronize at 1000 launches, the last at
	// 1000+3*300, with 1000 launches on 10 ms of CPU.
	a := threads{7: sample(1000, 10, 0, 0, 0, 0, 1, 100)}
	b := threads{7: sample(2000, 13, 1000, 10, 1900, 13, 2, 110)}
	e.probed(a, b, 1000, 2)
	e.boundary(b, b)
	// Detached: 100 synchronizes on 200 ms of CPU.
	c := threads{7: sample(2000, 113, 1000, 10, 2000, 113, 2, 310)}
	e.detached(b, c)
	e.finish()
	if e.estimated != 30000 || e.lower || e.method() != "per_step" {
		t.Fatalf("estimated %.0f lower %v method %q, want 30000 per_step", e.estimated, e.lower, e.method())
	}
	if e.errAbs != 600 {
		t.Errorf("absolute bound %.0f, want two steps (600)", e.errAbs)
	}
}

// Without synchronizes the on-CPU figure is a lower bound; a thread that
// ran detached with no window rate makes the count a lower bound too, and
// so does one that exited.
func TestEstimateOnCPUIsALowerBound(t *testing.T) {
	var e estimator
	a := threads{7: sample(0, 0, 0, 0, 0, 0, 0, 0)}
	b := threads{7: sample(1000, 0, 0, 0, 0, 0, 0, 10)}
	e.probed(a, b, 1000, 1)
	e.detached(b, threads{7: sample(1000, 0, 0, 0, 0, 0, 0, 110)})
	if e.estimated != 10000 || !e.lower || e.method() != "on_cpu" {
		t.Fatalf("estimated %.0f lower %v method %q, want 10000 on_cpu as a lower bound", e.estimated, e.lower, e.method())
	}

	var u estimator
	u.detached(threads{8: sample(0, 0, 0, 0, 0, 0, 0, 0)}, threads{8: sample(0, 0, 0, 0, 0, 0, 0, 50)})
	u.finish()
	if !u.lower || u.estimated != 0 || !strings.Contains(u.lowerBy, "no window") {
		t.Errorf("a thread never measured: lower %v (%s), estimated %.0f", u.lower, u.lowerBy, u.estimated)
	}

	var x estimator
	x.detached(threads{9: sample(0, 0, 0, 0, 0, 0, 0, 10)}, threads{})
	if !x.lower || !strings.Contains(x.lowerBy, "exited") {
		t.Errorf("an exited thread: lower %v (%s)", x.lower, x.lowerBy)
	}
}

// A burst inside a stepping thread's stretch (its on-CPU figure well above
// the steps') is taken from the CPU, as a lower bound.
func TestEstimateBurstBetweenSteps(t *testing.T) {
	var e estimator
	a := threads{7: sample(0, 0, 0, 0, 0, 0, 0, 0)}
	b := threads{7: sample(1000, 10, 100, 1, 1000, 10, 1, 10)} // 100 per step, 100k/s of CPU
	e.probed(a, b, 0, 1)
	e.detached(b, threads{7: sample(1000, 11, 100, 1, 1000, 11, 1, 110)}) // 1 step, 100 ms on CPU
	if e.estimated != 10000 || !e.lower {
		t.Errorf("estimated %.0f lower %v, want the CPU's 10000 as a lower bound", e.estimated, e.lower)
	}
}

// The daemon never adds an estimate to a count: it is a series of its
// own, with its bound and the lower-bound mark.
func TestHostEstimateMetrics(t *testing.T) {
	h := NewHost(nil, nil)
	ch := make(chan prometheus.Metric, 8)
	h.collectBudget(ch, LaunchProbes{Mode: "sampled", EstimatedLaunches: 900, EstimateError: 0.04, Method: "per_step", LowerBound: true, ProbedSeconds: 1, UnprobedSeconds: 9}, "t")
	close(ch)
	got := map[string]float64{}
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		name := m.Desc().String()
		name = name[strings.Index(name, `"`)+1:]
		name = name[:strings.Index(name, `"`)]
		switch {
		case d.Counter != nil:
			got[name] = d.Counter.GetValue()
		case d.Gauge != nil:
			got[name] = d.Gauge.GetValue()
		}
	}
	want := map[string]float64{
		"bpfbench_cuda_launch_probe_duty_ratio":       0.1,
		"bpfbench_cuda_launches_estimated_total":      900,
		"bpfbench_cuda_launches_estimate_error_ratio": 0.04,
		"bpfbench_cuda_launches_lower_bound":          1,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g < v-1e-9 || g > v+1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}
