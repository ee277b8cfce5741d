package live

import (
	"slices"

	"github.com/bpfbench/bpfbench/correlate/critpath"
)

// Defaults of Rolling.
const (
	DefaultWindow  = int64(10e9)
	DefaultWindows = 30 // five minutes of 10 s windows
	// windowSample bounds the gaps a window keeps for its medians.
	windowSample = 4096
	// minWindowGaps: a window with fewer gaps after the first token has
	// no median worth comparing.
	minWindowGaps = 20
)

// Rolling is the live view's normal gap: the server's own recent quiet
// window. Gaps are kept by window (Window long, a uniform sample of at
// most 4,096 each); of the last Windows windows with 20 gaps or more, the
// one whose median gap after the first token is the shortest is the
// quiet one, and its per-cause medians (critpath.Baseline, of the gaps
// walked: see rollWindow) are the normal gap. A contention that starts now is measured against the
// minutes before it, for as long as they are in the history; one that
// lasts longer than the history becomes the normal. Memory is bounded:
// one sample per window kept.
type Rolling struct {
	Window  int64
	Windows int

	cur     rollWindow
	started bool
	past    []rollStat // oldest first
	// early caches the current window's figures before a window closes
	// (quiet): taken again once its gaps have grown by a quarter or the
	// window moved, not at every call (a sort of its sample and the
	// per-cause medians: the live prefill rule asks once an advance).
	early struct {
		st    rollStat
		ok    bool
		seen  int
		start int64
	}
}

// rollWindow is the current window: a sample of its gaps (their
// durations: the median that picks the quiet window, and its p99) and one
// of the walked gaps among them (their causes: the normal gap's per-cause
// medians). A gap the walk left out over its budget (AddUnwalked) has no
// causes; the gaps a walk over its budget leaves out are the short ones, so
// a window of walked gaps alone would be a slow window.
type rollWindow struct {
	start  int64
	walked sample
	sample
}

type rollStat struct {
	start       int64
	itlN        int
	median, p99 int64
	base        critpath.Baseline
}

// NewRolling returns a rolling baseline with the defaults.
func NewRolling() *Rolling {
	return &Rolling{Window: DefaultWindow, Windows: DefaultWindows, cur: rollWindow{sample: sample{n: windowSample}, walked: sample{n: windowSample}}}
}

// Add takes a walked gap; gaps come in their end's order, roughly.
func (r *Rolling) Add(g Gap) { r.AddWeighted(g, 1) }

// AddWeighted takes a walked gap that stands for w (one of a uniform
// sample of 1 in w): it counts once in the window's durations and w times
// in its per-cause medians.
func (r *Rolling) AddWeighted(g Gap, w int) {
	r.roll(g.End)
	r.cur.add(g)
	for range w {
		r.cur.walked.add(g)
	}
}

// AddUnwalked takes a gap the walk left out (no causes): it counts in the
// window's durations, not in its per-cause medians.
func (r *Rolling) AddUnwalked(g Gap) {
	r.roll(g.End)
	r.cur.add(g)
}

// roll closes the current window when t is past it.
func (r *Rolling) roll(t int64) {
	if !r.started {
		r.started = true
		r.cur.start = t // the first window starts with the first gap
		return
	}
	if t-r.cur.start < r.Window {
		return
	}
	if st, ok := statOf(r.cur); ok {
		r.past = append(r.past, st)
		if len(r.past) > r.Windows {
			r.past = slices.Delete(r.past, 0, len(r.past)-r.Windows)
		}
	}
	r.cur.reset()
	r.cur.walked.reset()
	// Windows with no gaps at all are skipped, not kept empty.
	r.cur.start += (t - r.cur.start) / r.Window * r.Window
}

func statOf(w rollWindow) (rollStat, bool) {
	var durs []int64
	for _, g := range w.gaps {
		if g.Index > 0 {
			durs = append(durs, g.Duration())
		}
	}
	if len(durs) < minWindowGaps {
		return rollStat{}, false
	}
	slices.Sort(durs)
	return rollStat{start: w.start, itlN: len(durs), median: critpath.Median(durs), p99: Quantile(durs, 0.99),
		base: BaselineOf(slices.Values(w.walked.gaps))}, true
}

// Baseline is the quiet window's normal gap and when that window started;
// with no full window yet, the current window's (ok false when it has too
// few gaps for a median either).
func (r *Rolling) Baseline() (base critpath.Baseline, from int64, ok bool) {
	st, ok := r.quiet()
	return st.base, st.start, ok
}

// quiet is the quiet window's figures (see Baseline).
func (r *Rolling) quiet() (rollStat, bool) {
	if st, ok := r.quietPast(); ok {
		return st, true
	}
	e := &r.early
	if e.seen == 0 || e.start != r.cur.start || 4*r.cur.seen >= 5*e.seen || !e.ok && r.cur.seen > e.seen {
		e.st, e.ok = statOf(r.cur)
		e.seen, e.start = max(r.cur.seen, 1), r.cur.start
	}
	return e.st, e.ok
}

// quietPast is the quietest full window's figures; none before the first
// window closes.
func (r *Rolling) quietPast() (rollStat, bool) {
	best := -1
	for i, st := range r.past {
		if best < 0 || st.median < r.past[best].median {
			best = i
		}
	}
	if best < 0 {
		return rollStat{}, false
	}
	return r.past[best], true
}
