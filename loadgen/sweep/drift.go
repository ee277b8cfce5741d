package sweep

import (
	"context"
	"math"
)

// The knee's between-sweep term. The logistic fit (kneefit.go) bounds
// the knee for runs of one curve: its interval covers 96% on such runs
// (TestFitKneeCoverage). A server whose speed moves over minutes is not
// one curve: on llama-server three sweeps in a row found knees 17.7, 18.1
// and 20.7 req/s, each interval narrower than that spread, and a sweep's
// probes read 17.9 then 16.1 req/s a minute apart. So the rate search
// measures its own server's movement: after the confirmation it runs the
// saturation probe once more, and the probes that held before the search
// (the last two) and that one give the capacity's drift over the sweep,
// (max-min)/(max+min). The knee moves with the capacity (a rate is a
// share of it), so each half of the fit's interval is widened by
// drift x knee, added in quadrature (the two are independent: the
// binomial noise of the runs and the server's speed). A sweep whose
// server held still keeps the fit's interval, within the probes' own
// noise.

// closingProbe runs the saturation probe after the confirmation and
// widens the interval by the capacity's drift over the sweep. It runs
// only for a rate search whose runs gave a fit.
func (se *searcher) closingProbe(ctx context.Context) error {
	res := se.res
	in := res.Interval
	if se.sc.Mode != ModeRate || in == nil || in.FitRuns == 0 || res.Capacity <= 0 {
		return nil
	}
	s, err := se.step(ctx, "probe", math.Inf(1), se.sc.Concurrency)
	if err != nil {
		return err
	}
	res.CapacityAfter = s.Metrics.RequestThroughput
	if res.CapacityAfter <= 0 {
		in.widen(0) // the probe completed nothing: no drift to state
		return nil
	}
	held := res.HeldProbes()
	caps := append(held[:len(held):len(held)], res.CapacityAfter)
	in.widen(drift(caps))
	for _, c := range caps {
		in.CapacityRef += c / float64(len(caps))
	}
	return nil
}

// Relative is the knee and its 95% interval over the capacity measured
// around the sweep (CapacityRef): a server that runs slower in the next
// sweep moves its knee in req/s, not this (three sweeps of llama-server
// whose probes read 38.4, 35.4 and 33.7 req/s found knees of 46.2, 40.6
// and 39.5 req/s: 1.20, 1.15 and 1.17 of their capacities).
// The interval is the widened one over the reference, the drift standing
// for the reference's own uncertainty. ok is false without a closing
// probe.
func (in *Interval) Relative() (knee, lo, hi float64, ok bool) {
	if in == nil || in.CapacityRef <= 0 || in.FitRuns == 0 {
		return 0, 0, 0, false
	}
	return in.Knee / in.CapacityRef, in.CILow / in.CapacityRef, in.CIHigh / in.CapacityRef, true
}

// HeldProbes are the saturation probes that held before the search (the
// last two; the only one when a single probe ran): with CapacityAfter,
// the probes the drift is taken from.
func (r *Result) HeldProbes() []float64 {
	if len(r.Capacities) == 0 {
		return []float64{r.Capacity}
	}
	return r.Capacities[max(0, len(r.Capacities)-2):]
}

// drift is how far the capacities lie from their middle, relative to it:
// (max-min)/(max+min).
func drift(caps []float64) float64 {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range caps {
		lo, hi = min(lo, c), max(hi, c)
	}
	if len(caps) < 2 || lo <= 0 {
		return 0
	}
	return (hi - lo) / (hi + lo)
}

// widen keeps the fit's interval as FitLow and FitHigh and moves each
// bound out by d x FitKnee, in quadrature with its distance from the knee.
func (in *Interval) widen(d float64) {
	in.CapacityDrift, in.FitLow, in.FitHigh = d, in.CILow, in.CIHigh
	if d <= 0 {
		return
	}
	term := d * in.FitKnee
	in.CILow = in.FitKnee - math.Hypot(in.FitKnee-in.FitLow, term)
	in.CIHigh = in.FitKnee + math.Hypot(in.FitHigh-in.FitKnee, term)
}
