package sweep

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/bpfbench/bpfbench/loadgen/metrics"
)

// The knee's confirmation. One short step near the boundary is noise: the
// same rate can pass once and fail the next time. After the bisection, the
// highest passing level and the lowest failing one are run again until
// each has Repeats runs with one verdict; a level whose runs disagree is
// mixed, and the boundary moves past it (a step down for the pass, a step
// up for the fail) to a level that is run Repeats times in turn. The pass
// side moves at its level's first failing run (the answer is a settled
// pass; the fail side, which only bounds it, keeps its level). It ends
// when both sides are settled (stable) or when RepeatBudget more steps
// have run (not stable: the interval is what was measured, and says so).

// Default confirmation: every level at the boundary is run three times in
// all, within twelve more steps.
const (
	DefaultRepeats      = 3
	DefaultRepeatBudget = 12
)

// LevelRuns are the runs of one level (a rate or a concurrency) of the
// search: how many, how many passed, and their step numbers.
type LevelRuns struct {
	Level  float64 `json:"level"`
	Runs   int     `json:"runs"`
	Passed int     `json:"passed"`
	Steps  []int   `json:"steps"`
}

// Settled says whether the level's runs agree and there are at least n of
// them.
func (l *LevelRuns) Settled(n int) bool {
	return l.Runs >= n && (l.Passed == 0 || l.Passed == l.Runs)
}

// Mixed says whether some of the level's runs passed and some failed.
func (l *LevelRuns) Mixed() bool { return l.Passed > 0 && l.Passed < l.Runs }

// Interval is the knee with its confidence: Low is the highest level whose
// every run passed, High the lowest level above it whose every run failed;
// Knee is the fitted curve's half-way point (FitKnee, below) when the runs
// have a pass and a fail, else where the share of passing runs,
// interpolated over the levels between Low and High, crosses one half.
type Interval struct {
	Knee float64 `json:"knee"`
	Low  float64 `json:"low"`
	High float64 `json:"high"`
	// Repeats is how many runs with one verdict settle a level; Stable
	// whether Low and High are settled (else Why says what was not).
	Repeats int    `json:"repeats"`
	Stable  bool   `json:"stable"`
	Why     string `json:"unstable_why,omitempty"`
	// ConfirmSteps are the steps run to confirm, of Budget at most.
	ConfirmSteps int `json:"confirm_steps"`
	Budget       int `json:"budget"`
	// Levels are the runs from Low to High, ascending: the boundary and
	// the mixed levels between.
	Levels []LevelRuns `json:"levels"`
	// The knee's confidence from every run of the search (kneefit.go):
	// CILow and CIHigh bound, at 95%, the half-way point of a logistic
	// curve of the pass probability over the level fitted to the FitRuns
	// runs (the bisection's and the confirmation's), FitKnee that point.
	// Set when a level passed and one failed. [Low, High] says which
	// levels settled; this is how far the knee may be from what one
	// search saw.
	FitKnee float64 `json:"fit_knee,omitempty"`
	CILow   float64 `json:"ci_low,omitempty"`
	CIHigh  float64 `json:"ci_high,omitempty"`
	FitRuns int     `json:"fit_runs,omitempty"`
	// The fit takes every run as a trial of one curve; a server whose
	// speed moves while they are taken breaks that, and a later sweep
	// finds the knee where the server's speed has gone (drift.go).
	// CapacityDrift is how far the saturation probes that held before
	// the search and the one after the confirmation lie from their middle
	// ((max-min)/(max+min)); with it, CILow and CIHigh are the fit's
	// bounds (FitLow, FitHigh) each moved out by CapacityDrift x FitKnee,
	// added in quadrature.
	CapacityDrift float64 `json:"capacity_drift,omitempty"`
	FitLow        float64 `json:"fit_ci_low,omitempty"`
	FitHigh       float64 `json:"fit_ci_high,omitempty"`
	// CapacityRef is the mean of those probes: the knee and its interval
	// over it (Relative) carry to the server at another speed.
	CapacityRef float64 `json:"capacity_ref_req_s,omitempty"`
}

// levels groups the steps of a search by level (the rate search's probe
// aside), ascending.
func levels(mode string, steps []*Step) []*LevelRuns {
	by := map[string]*LevelRuns{}
	var out []*LevelRuns
	for _, s := range steps {
		if s.Phase == "probe" && mode == ModeRate {
			continue
		}
		v := level(mode, s)
		k := levelKey(v)
		l := by[k]
		if l == nil {
			l = &LevelRuns{Level: v}
			by[k] = l
			out = append(out, l)
		}
		l.Runs++
		if s.Pass {
			l.Passed++
		}
		l.Steps = append(l.Steps, s.N)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Level < out[j].Level })
	return out
}

// levelKey identifies a level across steps: rates computed the same way
// twice are equal, a rate a step away is not.
func levelKey(v float64) string { return strconv.FormatFloat(v, 'g', 9, 64) }

// boundary is the confirmation's state: the levels so far, and the pass
// and fail levels it is settling.
type boundary struct {
	mode    string
	repeats int
	step    float64
	lo, hi  float64 // 0: none
}

// find returns the runs at level v, or empty runs there.
func find(ls []*LevelRuns, v float64) *LevelRuns {
	k := levelKey(v)
	for _, l := range ls {
		if levelKey(l.Level) == k {
			return l
		}
	}
	return &LevelRuns{Level: v}
}

// below is the next level under v to try as the pass: a level already run
// within a step under v (the highest), else v less one step; 0 when that
// is no level.
func (b *boundary) below(ls []*LevelRuns, v float64) float64 {
	for i := len(ls) - 1; i >= 0; i-- {
		if l := ls[i]; l.Level < v && l.Level >= v-b.step*(1+1e-9) && l.Level > 0 {
			return l.Level
		}
	}
	next := v - b.step
	if b.mode == ModeConcurrency {
		next = math.Round(next)
	}
	if next < b.step*0.5 || next <= 0 {
		return 0
	}
	return next
}

// above is the next level over v to try as the fail: a level already run
// within a step over v (the lowest), else v plus one step.
func (b *boundary) above(ls []*LevelRuns, v float64) float64 {
	for _, l := range ls {
		if l.Level > v && l.Level <= v+b.step*(1+1e-9) {
			return l.Level
		}
	}
	next := v + b.step
	if b.mode == ModeConcurrency {
		next = math.Round(next)
	}
	return next
}

// next says which level to run next (0 and done when both sides are
// settled), moving a side past a mixed level first. A fail side whose
// runs all passed is a pass: the pass side moves up to it and the fail
// side a step further (and a pass side whose runs all failed the other
// way): a server that sped up since the search (a fresh server warming
// up: capacity probes of 15.2, 28.2 and 27.1 req/s; the search's fail at
// 33.9 req/s, then three passes at 36.6) would otherwise end with no
// failing level.
func (b *boundary) next(ls []*LevelRuns) (v float64, done bool) {
	for b.hi > 0 {
		h := find(ls, b.hi)
		if h.Settled(b.repeats) && h.Passed == h.Runs {
			b.lo = max(b.lo, h.Level)
			b.hi = b.above(ls, b.hi)
			continue
		}
		if h.Mixed() {
			b.hi = b.above(ls, b.hi)
			continue
		}
		if !h.Settled(b.repeats) {
			return b.hi, false
		}
		break
	}
	for b.lo > 0 {
		l := find(ls, b.lo)
		if l.Settled(b.repeats) && l.Passed == 0 {
			b.hi = min(b.hi, l.Level)
			b.lo = b.below(ls, b.lo)
			continue
		}
		if l.Passed < l.Runs {
			// A run failed here: it can no longer settle as the
			// pass, and the side moves down at once rather than
			// settle it as a fail. The answer is the settled pass,
			// so the budget goes to finding it first: a server
			// slower at confirming than at searching (capacity
			// probes of 14.1-14.4 req/s, a search pass at 17.6)
			// then reaches its passes at one run a level, not
			// three, and the fail side stays where it settled.
			b.lo = b.below(ls, b.lo)
			continue
		}
		if !l.Settled(b.repeats) {
			return b.lo, false
		}
		break
	}
	return 0, true
}

// confirm runs the boundary's levels again until both sides are settled
// or the budget is spent, and sets the result's interval, answer and best
// step from the runs. lo is the bisection's highest passing level (0:
// none), hi its lowest failing one (0: none, every step passed).
func (se *searcher) confirm(ctx context.Context, lo, hi, step float64) error {
	sc, res := se.sc, se.res
	b := &boundary{mode: sc.Mode, repeats: sc.Repeats, step: step, lo: lo, hi: hi}
	in := &Interval{Repeats: sc.Repeats, Budget: sc.RepeatBudget}
	res.Interval = in
	if hi == 0 {
		// Every step passed: there is no knee in the range.
		se.settle(in, b)
		return nil
	}
	for {
		v, done := b.next(levels(sc.Mode, res.Steps))
		if done {
			in.Stable = true
			break
		}
		if in.ConfirmSteps >= sc.RepeatBudget {
			break
		}
		rate, conc := v, sc.Concurrency
		if sc.Mode == ModeConcurrency {
			rate, conc = math.Inf(1), int(v)
		}
		if _, err := se.step(ctx, "confirm", rate, conc); err != nil {
			return err
		}
		in.ConfirmSteps++
	}
	se.settle(in, b)
	return nil
}

// settle fills the interval from the runs: its bounds, the mixed levels
// between them, the knee, and why it is not stable; the answer is its Low.
func (se *searcher) settle(in *Interval, b *boundary) {
	res := se.res
	ls := levels(se.sc.Mode, res.Steps)
	// Low: the highest level at or under the pass side whose runs all
	// passed; High: the lowest at or over the fail side whose runs all
	// failed. With a stable boundary these are the pass and fail sides.
	for _, l := range ls {
		if l.Passed == l.Runs && (b.lo > 0 && l.Level <= b.lo*(1+1e-9) || b.hi == 0) {
			in.Low = l.Level
		}
	}
	for i := len(ls) - 1; i >= 0; i-- {
		if l := ls[i]; l.Passed == 0 && b.hi > 0 && l.Level >= b.hi*(1-1e-9) {
			in.High = l.Level
		}
	}
	for _, l := range ls {
		if l.Level >= in.Low && (in.High == 0 || l.Level <= in.High) && (l.Level > 0) {
			if in.High == 0 && l.Level != in.Low && b.hi == 0 {
				continue
			}
			in.Levels = append(in.Levels, *l)
		}
	}
	in.Knee = kneeOf(in)
	var ts []trial
	for _, st := range res.Steps {
		if !(st.Phase == "probe" && se.sc.Mode == ModeRate) {
			ts = append(ts, trial{level(se.sc.Mode, st), st.Pass})
		}
	}
	if k, lo, hi, ok := fitKnee(ts); ok {
		// One knee is stated: the fit's, which weighs every run, with
		// its interval; the settled levels' crossing is the knee only
		// without a fit.
		in.FitKnee, in.CILow, in.CIHigh, in.FitRuns = k, lo, hi, len(ts)
		in.Knee = k
	}
	if !in.Stable && b.hi > 0 {
		var open []string
		say := func(l *LevelRuns, verdict string, n int) {
			if l.Runs == 0 {
				open = append(open, levelText(se.sc.Mode, l.Level)+" not run yet")
				return
			}
			open = append(open, fmt.Sprintf("%s %s %d of %d %s", levelText(se.sc.Mode, l.Level), verdict, n, l.Runs, plural(l.Runs, "run", "runs")))
		}
		if h := find(ls, b.hi); !h.Settled(b.repeats) {
			say(h, "failed", h.Runs-h.Passed)
		}
		if b.lo > 0 {
			if l := find(ls, b.lo); !l.Settled(b.repeats) {
				say(l, "passed", l.Passed)
			}
		}
		in.Why = fmt.Sprintf("the budget of %d confirming %s ran out before every level at the boundary had %d runs with one verdict: %s",
			se.sc.RepeatBudget, plural(se.sc.RepeatBudget, "step", "steps"), b.repeats, strings.Join(open, ", "))
	}
	// The answer is the highest level whose every run passed.
	res.Answer, res.Best = 0, nil
	if in.Low > 0 {
		res.Answer = in.Low
		for _, s := range res.Steps {
			if s.Pass && levelKey(level(se.sc.Mode, s)) == levelKey(in.Low) && !(s.Phase == "probe" && se.sc.Mode == ModeRate) {
				res.Best = s
			}
		}
	}
}

// kneeOf is where the share of passing runs crosses one half between Low
// (every run passed) and High (every run failed), interpolated linearly
// over the levels between, their shares made non-increasing first (pooled
// with their neighbours, weighted by their runs, where a higher level
// passed more often than a lower one).
func kneeOf(in *Interval) float64 {
	if in.High == 0 {
		return in.Low
	}
	type pt struct{ x, y, w float64 }
	pts := []pt{{in.Low, 1, 1}}
	for _, l := range in.Levels {
		if l.Level > in.Low && l.Level < in.High && l.Runs > 0 {
			pts = append(pts, pt{l.Level, float64(l.Passed) / float64(l.Runs), float64(l.Runs)})
		}
	}
	pts = append(pts, pt{in.High, 0, 1})
	// Pool adjacent violators: blocks of points with one mean share.
	type block struct {
		y, w float64
		n    int
	}
	var bs []block
	for _, p := range pts {
		bs = append(bs, block{p.y, p.w, 1})
		for len(bs) > 1 && bs[len(bs)-2].y < bs[len(bs)-1].y {
			a, c := bs[len(bs)-2], bs[len(bs)-1]
			bs = bs[:len(bs)-2]
			bs = append(bs, block{(a.y*a.w + c.y*c.w) / (a.w + c.w), a.w + c.w, a.n + c.n})
		}
	}
	i := 0
	for _, bl := range bs {
		for range bl.n {
			pts[i].y = bl.y
			i++
		}
	}
	// The first level at or under one half and the last at or over it:
	// the same point unless the shares rest at one half between them.
	cross := func(a, c pt) float64 { return a.x + (a.y-0.5)/(a.y-c.y)*(c.x-a.x) }
	first, last := math.NaN(), math.NaN()
	for i := 1; i < len(pts); i++ {
		a, c := pts[i-1], pts[i]
		if math.IsNaN(first) && a.y > 0.5 && c.y <= 0.5 {
			first = cross(a, c)
		}
		if a.y >= 0.5 && c.y < 0.5 {
			last = cross(a, c)
		}
	}
	if math.IsNaN(first) {
		first = last
	}
	if math.IsNaN(last) {
		return (in.Low + in.High) / 2
	}
	return (first + last) / 2
}

// levelText says a level: "14.1 req/s" or "8 requests in flight".
func levelText(mode string, v float64) string {
	if mode == ModeConcurrency {
		return StepLevel(mode, &Step{Concurrency: int(v)})
	}
	return StepLevel(mode, &Step{Rate: v})
}

// Text is the interval in words: "the knee is at 14.1 req/s, between 13.2
// req/s (3 of 3 runs passed) and 15 req/s (3 of 3 failed); 14.1 req/s
// passed 1 of 3", and, when the budget ran out first, that it is not
// stable and why.
func (in *Interval) Text(mode string) string {
	if in == nil {
		return ""
	}
	at := func(v float64) string { return levelText(mode, v) }
	runs := func(v float64) (LevelRuns, bool) {
		for _, l := range in.Levels {
			if levelKey(l.Level) == levelKey(v) {
				return l, true
			}
		}
		return LevelRuns{}, false
	}
	var b strings.Builder
	switch {
	case in.High == 0 && in.Stable:
		return ""
	case in.High == 0:
		fmt.Fprintf(&b, "the knee is above %s, but no level above it failed in every run", at(in.Low))
	case in.Low == 0:
		h, _ := runs(in.High)
		fmt.Fprintf(&b, "no %s passed in every run; the lowest that failed every run is %s (%d of %d)", mode, at(in.High), h.Runs-h.Passed, h.Runs)
	default:
		l, _ := runs(in.Low)
		h, _ := runs(in.High)
		fmt.Fprintf(&b, "the knee is at %s%s, between %s (%d of %d %s passed) and %s (%d of %d failed)",
			at(in.Knee), in.ciText(mode), at(in.Low), l.Passed, l.Runs, plural(l.Runs, "run", "runs"), at(in.High), h.Runs-h.Passed, h.Runs)
	}
	var mixed []string
	for _, l := range in.Levels {
		if l.Mixed() {
			mixed = append(mixed, fmt.Sprintf("%s passed %d of %d", at(l.Level), l.Passed, l.Runs))
		}
	}
	if len(mixed) > 0 {
		b.WriteString("; " + strings.Join(mixed, ", "))
	}
	if !in.Stable {
		b.WriteString("; not stable: " + in.Why)
	}
	return b.String()
}

// ciText is " (95% interval A-B req/s from a logistic fit of its N
// runs)", or nothing without a fit.
func (in *Interval) ciText(mode string) string {
	if in.FitRuns == 0 {
		return ""
	}
	lo, hi := strconv.FormatFloat(in.CILow, 'g', 3, 64), levelText(mode, in.CIHigh)
	if mode == ModeConcurrency {
		lo, hi = strconv.FormatFloat(in.CILow, 'f', 1, 64), strconv.FormatFloat(in.CIHigh, 'f', 1, 64)+" requests in flight"
	}
	if in.CapacityDrift > 0 {
		return fmt.Sprintf(" (95%% interval %s-%s from a logistic fit of its %d runs and the capacity's drift of ±%.1f%% over the sweep)", lo, hi, in.FitRuns, 100*in.CapacityDrift)
	}
	return fmt.Sprintf(" (95%% interval %s-%s from a logistic fit of its %d runs)", lo, hi, in.FitRuns)
}

// Judge checks the SLOs against a run's metrics, as a step of the search
// is judged: whether every SLO held (and no more than maxFailed of its n
// requests failed), the violations, and the values.
func Judge(slos []SLO, m *metrics.Metrics, maxFailed float64, n int) (bool, []string, map[string]float64) {
	if maxFailed <= 0 {
		maxFailed = 0.01
	}
	return evaluate(slos, m, maxFailed, n)
}

// Explanation is what following the server at the knee found (`sweep
// --pid`): the runs taken at the interval's bounds, whether they
// reproduced the search's verdicts, and the cause of the breach on the
// metric that broke.
type Explanation struct {
	// Reproduced: a run at Low passed and a run at High failed.
	Reproduced bool `json:"reproduced"`
	// Sentence is the explanation, or why there is none.
	Sentence string `json:"sentence"`
	// PassRuns and FailRuns are the runs taken at each side, in order;
	// the last is the one explained when Reproduced.
	PassRuns []FollowedRun `json:"pass_runs,omitempty"`
	FailRuns []FollowedRun `json:"fail_runs,omitempty"`
	// Cause is the breach's cause on the metric that broke ("ttft" or
	// "itl"): the cause that added most to that metric's slowest 10% of
	// intervals at High over Low, its share of what they added, and
	// every cause's share (Basis says the rule).
	Cause *BreachCause `json:"cause,omitempty"`
}

// FollowedRun is one run at the knee with the collectors attached.
type FollowedRun struct {
	Level      float64            `json:"level"`
	Dir        string             `json:"dir"`
	Pass       bool               `json:"pass"`
	Violations []string           `json:"violations,omitempty"`
	Values     map[string]float64 `json:"values,omitempty"`
}

// BreachCause is the cause of the breach on the metric that broke.
type BreachCause struct {
	// Metric is "ttft" or "itl"; SLO the objective that broke.
	Metric string `json:"metric"`
	SLO    string `json:"slo"`
	// PassValue and FailValue are the SLO's metric in the two runs.
	PassValue float64 `json:"pass_value"`
	FailValue float64 `json:"fail_value"`
	// Cause holds Share of AddedMs, the excess per interval the slowest
	// 10% of the failing run's intervals added over the passing run's
	// (every cause's addition, floored at 0, summed); Shares per cause.
	Cause   string             `json:"cause"`
	Share   float64            `json:"share"`
	AddedMs float64            `json:"added_ms"`
	Shares  map[string]float64 `json:"added_shares"`
	// Tail is how many intervals the failing run's slowest 10% are.
	Tail int `json:"tail"`
	// Slots and QueueMs: the engine's slots and the mean time the tail's
	// requests waited for one (TTFT, when the engine's metrics say so).
	Slots   int     `json:"slots,omitempty"`
	QueueMs float64 `json:"tail_queue_ms,omitempty"`
	Basis   string  `json:"basis"`
}
