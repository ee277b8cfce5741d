package sweep

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/loadgen/metrics"
)

func TestParseSLOs(t *testing.T) {
	s, err := ParseSLOs("p99_ttft_ms<=200, p99_itl_ms<50,request_goodput>=1")
	if err != nil || len(s) != 3 || s[0].Op != "<=" || s[1].Op != "<" || s[1].Value != 50 || s[2].Op != ">=" {
		t.Fatalf("%+v %v", s, err)
	}
	if !s[0].Met(200) || s[1].Met(50) {
		t.Error("Met")
	}
	for _, bad := range []string{"", "p99_ttft_ms=3", "p99_ttft_ms<=x"} {
		if _, err := ParseSLOs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// scripted is a server whose verdict at a level is a script: verdict(level,
// visit) says whether its visit-th run there (from 0) meets the SLO. The
// saturation probe measures capacity req/s (warming: probes[i] at the
// i-th probe first).
type scripted struct {
	mode     string
	capacity float64
	warming  []float64
	verdict  func(level float64, visit int) bool
	visits   map[string]int
	runs     int
	probes   int
}

func (s *scripted) run(_ context.Context, l Load) (*Outcome, error) {
	s.runs++
	if s.visits == nil {
		s.visits = map[string]int{}
	}
	m := &metrics.Metrics{Completed: l.Requests, RequestThroughput: s.capacity}
	if math.IsInf(l.Rate, 1) && s.mode != ModeConcurrency {
		if s.probes < len(s.warming) {
			m.RequestThroughput = s.warming[s.probes]
		}
		s.probes++
		m.TTFT.Percentiles = []metrics.PV{{P: 99, Value: 5000}}
		return &Outcome{Metrics: m, Requests: l.Requests}, nil
	}
	v := l.Rate
	if s.mode == ModeConcurrency {
		v = float64(l.Concurrency)
	}
	k := levelKey(v)
	ttft := 900.0
	if s.verdict(v, s.visits[k]) {
		ttft = 100
	}
	s.visits[k]++
	m.TTFT.Percentiles = []metrics.PV{{P: 99, Value: ttft}}
	return &Outcome{Metrics: m, Requests: l.Requests}, nil
}

func search(t *testing.T, s *scripted, sc Config) *Result {
	t.Helper()
	sc.SLOs, _ = ParseSLOs("p99_ttft_ms<=500")
	sc.Mode = s.mode
	sc.RequestsPerStep = 10
	sc.MaxErrorRate = -1
	res, err := Search(context.Background(), sc, s.run)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range res.Steps {
		t.Logf("step %2d %-7s %s pass %v", st.N, st.Phase, StepLevel(res.Mode, st), st.Pass)
	}
	t.Log(res.Conclusion)
	return res
}

// A clean boundary: every level at or below 10 req/s passes, every level
// above fails. The two levels around it are run three times each and the
// interval is one search step wide.
func TestKneeStableBoundary(t *testing.T) {
	s := &scripted{capacity: 16, verdict: func(v float64, _ int) bool { return v <= 10 }}
	res := search(t, s, Config{Step: 1})
	in := res.Interval
	if in == nil || !in.Stable {
		t.Fatalf("interval %+v: want a stable one", in)
	}
	if !(in.Low <= 10 && in.Low > 9 && in.High > 10 && in.High <= 11) {
		t.Errorf("interval [%.3f, %.3f], want the pass within a step under 10 and the fail within a step over it", in.Low, in.High)
	}
	// The stated knee is the fit's; with no mixed level the crossing of
	// the settled levels is their middle, and the fit is near it.
	if in.Knee != in.FitKnee || in.Knee <= in.Low || in.Knee >= in.High {
		t.Errorf("knee %.3f (fit %.3f), want the fit's, inside [%.3f, %.3f] (no mixed level)", in.Knee, in.FitKnee, in.Low, in.High)
	}
	if mid := kneeOf(in); math.Abs(mid-(in.Low+in.High)/2) > 1e-9 {
		t.Errorf("crossing of the settled levels %.3f, want the middle of [%.3f, %.3f]", mid, in.Low, in.High)
	}
	if in.ConfirmSteps != 4 {
		t.Errorf("%d confirming steps, want 4 (two more runs on each side)", in.ConfirmSteps)
	}
	for _, l := range in.Levels {
		if l.Runs != 3 || l.Mixed() {
			t.Errorf("level %+v: want 3 runs with one verdict", l)
		}
	}
	if res.Answer != in.Low || res.Best == nil || !res.Best.Pass || res.Limit == nil || res.Limit.Rate != in.High {
		t.Errorf("answer %.3f best %+v limit %+v: want the interval's bounds", res.Answer, res.Best, res.Limit)
	}
	want := fmt.Sprintf("the knee is at %s%s, between %s (3 of 3 runs passed) and %s (3 of 3 failed)",
		levelText(ModeRate, in.Knee), in.ciText(ModeRate), levelText(ModeRate, in.Low), levelText(ModeRate, in.High))
	// The knee's confidence from every run: an interval that holds the
	// settled bounds' middle and reaches past them (three runs a side
	// settle a level, not the knee).
	if in.FitRuns != len(res.Steps)-len(res.Capacities)-1 || len(res.Capacities) != 2 || res.CapacityAfter != 16 || in.CILow > in.Knee || in.CIHigh < in.Knee || in.CIHigh-in.CILow <= in.High-in.Low {
		t.Errorf("fit of %d runs: knee %.3f in [%.3f, %.3f]; want every run but the two probes %v and the one after, holding %.3f, wider than [%.3f, %.3f]",
			in.FitRuns, in.FitKnee, in.CILow, in.CIHigh, res.Capacities, in.Knee, in.Low, in.High)
	}
	if !strings.HasSuffix(res.Conclusion, "; "+want) {
		t.Errorf("conclusion %q\nwant it to end with %q", res.Conclusion, want)
	}
}

// Noise at the boundary: from 9.5 to 11.5 req/s a run passes or fails in
// turn. The pass side moves down and the fail side up past the levels
// whose runs disagree, which stay in the interval as mixed levels.
func TestKneeNoisyBoundary(t *testing.T) {
	s := &scripted{capacity: 16, verdict: func(v float64, visit int) bool {
		switch {
		case v < 9.5:
			return true
		case v > 11.5:
			return false
		}
		return visit%2 == 0
	}}
	res := search(t, s, Config{Step: 1, RepeatBudget: 30})
	in := res.Interval
	if !in.Stable {
		t.Fatalf("not stable: %s", in.Why)
	}
	if in.Low >= 9.5 || in.High <= 11.5 {
		t.Errorf("interval [%.3f, %.3f] does not cover the noisy band [9.5, 11.5]", in.Low, in.High)
	}
	if in.High-in.Low > 2+2*res.StepSize+1e-9 {
		t.Errorf("interval [%.3f, %.3f] wider than the band and a step on each side", in.Low, in.High)
	}
	mixed := 0
	for _, l := range in.Levels {
		if l.Mixed() {
			mixed++
			if l.Level < 9.5 || l.Level > 11.5 {
				t.Errorf("mixed level %+v outside the noisy band", l)
			}
		}
	}
	if mixed == 0 {
		t.Errorf("no mixed level in %+v", in.Levels)
	}
	if in.Knee <= in.Low || in.Knee >= in.High {
		t.Errorf("knee %.3f outside [%.3f, %.3f]", in.Knee, in.Low, in.High)
	}
	if !strings.Contains(res.Conclusion, " passed 1 of 2") && !strings.Contains(res.Conclusion, " passed 2 of 3") && !strings.Contains(res.Conclusion, " passed 1 of 3") {
		t.Errorf("conclusion %q names no mixed level", res.Conclusion)
	}
}

// The budget runs out before the verdicts settle: the interval is what
// was measured, and the conclusion says it is not stable and why.
func TestKneeBudgetRunsOut(t *testing.T) {
	s := &scripted{capacity: 16, verdict: func(v float64, visit int) bool {
		if v < 4 {
			return true
		}
		if v > 14 {
			return false
		}
		return visit%2 == 0
	}}
	res := search(t, s, Config{Step: 1, RepeatBudget: 3})
	in := res.Interval
	if in.Stable || in.ConfirmSteps != 3 {
		t.Fatalf("stable %v after %d confirming steps, want not stable after the budget of 3", in.Stable, in.ConfirmSteps)
	}
	if !strings.Contains(in.Why, "the budget of 3 confirming steps ran out") || !strings.Contains(res.Conclusion, "; not stable: "+in.Why) {
		t.Errorf("why %q, conclusion %q", in.Why, res.Conclusion)
	}
	for _, l := range in.Levels {
		if (l.Level == in.Low && l.Passed != l.Runs) || (l.Level == in.High && l.Passed != 0) {
			t.Errorf("bound %+v: a bound's runs must agree", l)
		}
	}
}

// One run a level: no confirmation, the bisection's own boundary.
func TestKneeOneRun(t *testing.T) {
	s := &scripted{capacity: 16, verdict: func(v float64, _ int) bool { return v <= 10 }}
	res := search(t, s, Config{Step: 1, Repeats: 1})
	if in := res.Interval; !in.Stable || in.ConfirmSteps != 0 || in.High-in.Low > 1+1e-9 {
		t.Errorf("interval %+v: want the bisection's boundary, unconfirmed", in)
	}
	for _, st := range res.Steps {
		if st.Phase == "confirm" {
			t.Errorf("step %d confirms with --repeats 1", st.N)
		}
	}
}

// The concurrency search settles its boundary the same way, a request in
// flight a step: 6 in flight passes in one run of two.
func TestKneeConcurrency(t *testing.T) {
	s := &scripted{mode: ModeConcurrency, capacity: 16, verdict: func(v float64, visit int) bool {
		return v <= 5 || v == 6 && visit%2 == 1
	}}
	res := search(t, s, Config{MaxConcurrency: 64})
	in := res.Interval
	if !in.Stable || in.Low != 5 || in.High != 7 || res.Answer != 5 {
		t.Errorf("interval %+v answer %v: want [5, 7], 6 mixed", in, res.Answer)
	}
	if !strings.Contains(res.Conclusion, "between 5 requests in flight (3 of 3 runs passed) and 7 requests in flight (3 of 3 failed); 6 requests in flight passed ") {
		t.Errorf("conclusion %q", res.Conclusion)
	}
}

// Every level passes: no knee in the range, no confirmation.
func TestKneeNoneInRange(t *testing.T) {
	s := &scripted{capacity: 16, verdict: func(float64, int) bool { return true }}
	res := search(t, s, Config{Step: 1, MaxRate: 20})
	if in := res.Interval; in.High != 0 || in.ConfirmSteps != 0 || res.Answer != 20 {
		t.Errorf("interval %+v answer %v", in, res.Answer)
	}
	if !strings.HasSuffix(res.Conclusion, "the top of the search: no step reached a limit") {
		t.Errorf("conclusion %q", res.Conclusion)
	}
}

// The knee is where the share of passing runs crosses one half; a level
// that passed more often than the one under it is pooled with it.
func TestKneeOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		levels []LevelRuns
		want   float64
	}{
		{"no mixed level", []LevelRuns{{Level: 10, Runs: 3, Passed: 3}, {Level: 12, Runs: 3}}, 11},
		{"one at two thirds", []LevelRuns{{Level: 10, Runs: 3, Passed: 3}, {Level: 11, Runs: 3, Passed: 2}, {Level: 12, Runs: 3}}, 11 + (2.0/3-0.5)/(2.0/3)},
		{"one at a third", []LevelRuns{{Level: 10, Runs: 3, Passed: 3}, {Level: 11, Runs: 3, Passed: 1}, {Level: 12, Runs: 3}}, 10 + 0.5/(1-1.0/3)},
		// 11 passes 1 of 3, 12 passes 2 of 3: pooled, both 1/2 (weights 3, 3): the middle of the two.
		{"pooled", []LevelRuns{{Level: 10, Runs: 3, Passed: 3}, {Level: 11, Runs: 3, Passed: 1}, {Level: 12, Runs: 3, Passed: 2}, {Level: 13, Runs: 3}}, 11.5},
	} {
		in := &Interval{Low: tc.levels[0].Level, High: tc.levels[len(tc.levels)-1].Level, Levels: tc.levels}
		if got := kneeOf(in); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: knee %.4f, want %.4f", tc.name, got, tc.want)
		}
	}
}

// Every level above the pass disagrees with itself and the budget runs
// out as the fail side moves to a level not run yet (after 31 steps,
// deterministic): no level failed every run, no upper bound, said so.
func TestKneeNoUpperBound(t *testing.T) {
	s := &scripted{capacity: 16, verdict: func(v float64, visit int) bool { return v <= 10 || visit%2 == 1 }}
	res := search(t, s, Config{Step: 1, RepeatBudget: 31})
	in := res.Interval
	if in.Stable || in.High != 0 || in.Low == 0 {
		t.Fatalf("interval %+v: want not stable, no upper bound", in)
	}
	if !strings.Contains(res.Conclusion, "the knee is above "+levelText(ModeRate, in.Low)+", but no level above it failed in every run") || !strings.Contains(res.Conclusion, "; not stable: ") {
		t.Errorf("conclusion %q", res.Conclusion)
	}
}

// A server still warming up: the saturation probe runs again until two in
// a row agree within WarmHold, and the search starts from the last; a
// server that keeps speeding up is probed WarmProbes times.
func TestProbeWaitsForTheCapacityToHold(t *testing.T) {
	pass := func(v float64, _ int) bool { return v <= 10 }
	s := &scripted{capacity: 16, warming: []float64{8, 12, 15, 16}, verdict: pass}
	res := search(t, s, Config{Step: 1})
	if want := []float64{8, 12, 15, 16}; fmt.Sprint(res.Capacities) != fmt.Sprint(want) || res.Capacity != 16 || res.CapacityAfter != 16 {
		t.Errorf("capacities %v, capacity %.1f, after %.1f: want %v and 16 (15 to 16 is within %.0f%%), 16 after", res.Capacities, res.Capacity, res.CapacityAfter, want, 100*WarmHold)
	}
	for i, st := range res.Steps {
		if (st.Phase == "probe") != (i < 4 || i == len(res.Steps)-1) {
			t.Errorf("step %d is a %s: want the four probes first and one last", st.N, st.Phase)
		}
	}
	if res.Interval == nil || res.Interval.Low != 10 {
		t.Errorf("interval %+v: want the knee found after the probes", res.Interval)
	}
	s = &scripted{capacity: 16, warming: []float64{2, 4, 8, 12, 14, 15}, verdict: pass}
	res = search(t, s, Config{Step: 1})
	if len(res.Capacities) != WarmProbes || res.Capacity != 14 || res.CapacityAfter != 15 || math.Abs(res.Interval.CapacityDrift-3.0/27) > 1e-9 {
		t.Errorf("capacities %v, capacity %.1f, after %.1f, drift %.3f: want %d probes, the last 14, 15 after: a drift of 3/27 (12 and 14 before)", res.Capacities, res.Capacity, res.CapacityAfter, res.Interval.CapacityDrift, WarmProbes)
	}
}

// kneeMoves is a server whose knee is at 10 during the search (its first
// 8 runs) and at to after it.
func kneeMoves(to float64) *scripted {
	s := &scripted{capacity: 16}
	s.verdict = func(v float64, _ int) bool {
		if s.runs > 8 {
			return v <= to
		}
		return v <= 10
	}
	return s
}

// A server that slowed after the search: the search's pass level and the
// levels under it fail. The pass side moves down at each level's first
// failing run, so the default budget reaches a level that passes every run
// (three runs a level would spend it four levels down, with no answer).
func TestKneePassSideFailsLater(t *testing.T) {
	res := search(t, kneeMoves(6), Config{Step: 1})
	in := res.Interval
	if in == nil || !in.Stable || in.Low == 0 {
		t.Fatalf("interval %+v: want a stable one with a passing level within the budget of %d", in, DefaultRepeatBudget)
	}
	if in.Low > 6 || in.Low <= 5 {
		t.Errorf("interval [%.3f, %.3f], want the pass at the knee's new place, 6, within a step", in.Low, in.High)
	}
	if res.Answer != in.Low {
		t.Errorf("answer %.3f, want the interval's pass %.3f", res.Answer, in.Low)
	}
}

// A server that sped up after the search: the search's fail level passes
// every confirming run. It is a pass then, and the fail side moves up
// until a level fails every run; the interval has a failing level.
func TestKneeFailSidePassesLater(t *testing.T) {
	res := search(t, kneeMoves(12.5), Config{Step: 1, RepeatBudget: 30})
	in := res.Interval
	if in == nil || !in.Stable || in.High == 0 {
		t.Fatalf("interval %+v: want a stable one with a failing level", in)
	}
	if !(in.Low <= 12.5 && in.Low > 11.5 && in.High > 12.5 && in.High <= 13.5) {
		t.Errorf("interval [%.3f, %.3f], want the knee's new place, 12.5, between them within a step", in.Low, in.High)
	}
	if res.Answer != in.Low {
		t.Errorf("answer %.3f, want the interval's pass %.3f", res.Answer, in.Low)
	}
}

// A server that slowed during the sweep: the probes held at 20 req/s
// before the search and read 16 after the confirmation. The interval is
// the fit's, each half widened by the drift (4/36 of the capacity) times
// the knee, in quadrature, and says so; a concurrency search runs no
// closing probe.
func TestKneeIntervalWidenedByCapacityDrift(t *testing.T) {
	s := &scripted{capacity: 16, warming: []float64{20, 20}, verdict: func(v float64, _ int) bool { return v <= 10 }}
	res := search(t, s, Config{Step: 0.5})
	in := res.Interval
	if fmt.Sprint(res.Capacities) != "[20 20]" || res.CapacityAfter != 16 || math.Abs(in.CapacityDrift-4.0/36) > 1e-9 {
		t.Fatalf("capacities %v then %.1f, drift %.4f: want [20 20] then 16, %.4f", res.Capacities, res.CapacityAfter, in.CapacityDrift, 4.0/36)
	}
	term := in.CapacityDrift * in.FitKnee
	if in.FitLow >= in.FitKnee || in.FitHigh <= in.FitKnee ||
		math.Abs(in.CILow-(in.FitKnee-math.Hypot(in.FitKnee-in.FitLow, term))) > 1e-9 ||
		math.Abs(in.CIHigh-(in.FitKnee+math.Hypot(in.FitHigh-in.FitKnee, term))) > 1e-9 {
		t.Errorf("interval [%.3f, %.3f] from the fit's [%.3f, %.3f] around %.3f: want each half widened by %.3f in quadrature", in.CILow, in.CIHigh, in.FitLow, in.FitHigh, in.FitKnee, term)
	}
	if k, lo, hi, ok := in.Relative(); !ok || math.Abs(in.CapacityRef-56.0/3) > 1e-9 || math.Abs(k-in.Knee/in.CapacityRef) > 1e-9 || lo != in.CILow/in.CapacityRef || hi != in.CIHigh/in.CapacityRef {
		t.Errorf("relative knee %.3f [%.3f, %.3f] (%v) over %.3f: want the knee and interval over the probes' mean %.3f", k, lo, hi, ok, in.CapacityRef, 56.0/3)
	}
	if !strings.Contains(res.Conclusion, "and the capacity's drift of ±11.1% over the sweep") {
		t.Errorf("conclusion %q: want the drift said", res.Conclusion)
	}
	c := &scripted{mode: ModeConcurrency, verdict: func(v float64, _ int) bool { return v <= 6 }}
	res = search(t, c, Config{Mode: ModeConcurrency})
	if last := res.Steps[len(res.Steps)-1]; last.Phase != "confirm" || res.Interval.CapacityDrift != 0 {
		t.Errorf("concurrency search: last step %s, drift %.3f: want no closing probe", last.Phase, res.Interval.CapacityDrift)
	}
}
