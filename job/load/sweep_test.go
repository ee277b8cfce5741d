package load

import (
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/loadgen/sweep"
)

// The knee's interval line says the fit's own bounds and the drift that
// widened them, with the probes it came from; a capacity that held says
// so; without a closing probe, nothing.
func TestPrintKneeSaysTheDrift(t *testing.T) {
	in := &sweep.Interval{Knee: 19.5, Low: 18, High: 21, Repeats: 3, Stable: true, FitRuns: 12, FitKnee: 19.5,
		CILow: 17.2, CIHigh: 21.9, FitLow: 18.4, FitHigh: 20.6, CapacityDrift: 0.052}
	r := &sweep.Result{Mode: sweep.ModeRate, Capacity: 19.36, Capacities: []float64{16.0, 19.40, 19.36}, CapacityAfter: 17.5, Interval: in}
	var b strings.Builder
	printKnee(&b, r)
	want := "95% interval of the knee: 17.20-21.90 req/s (the half-way point of a logistic curve of the pass probability fitted to all 12 runs: " +
		"18.40-20.60 req/s, each half widened in quadrature by the capacity's drift of ±5.2% over the sweep (probes 19.40, 19.36 req/s before the search, 17.50 after))"
	if !strings.Contains(b.String(), want) {
		t.Errorf("printed:\n%s\nwant a line with:\n%s", b.String(), want)
	}
	in.CapacityRef = 18.75
	b.Reset()
	printKnee(&b, r)
	if want := "over the capacity measured around the sweep (18.75 req/s, the mean of those probes): the knee is 1.04x it, 95% interval 0.92-1.17x"; !strings.Contains(b.String(), want) {
		t.Errorf("printed:\n%s\nwant a line with:\n%s", b.String(), want)
	}
	in.CapacityDrift, r.CapacityAfter = 0, 19.38
	if got := driftText(r); got != "; the capacity held over the sweep (probes 19.40, 19.36 req/s before the search, 19.38 after)" {
		t.Errorf("held: %q", got)
	}
	if r.CapacityAfter = 0; driftText(r) != "" {
		t.Errorf("no closing probe: %q, want nothing", driftText(r))
	}
}
