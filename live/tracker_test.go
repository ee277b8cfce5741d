package live

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/result"
)

// server writes a token every period on each of conns connections: its
// thread runs 2 ms, sends, and sleeps on a timer until the next step;
// from contendFrom on, it then waits runq for its CPU behind busy[99].
type server struct {
	t       *Tracker
	now     int64
	conns   int
	period  int64
	runq    int64
	lastOut int64
	// jitter: the steps' period grows by 0, 1, ... jitter-1 ms in turn.
	jitter, steps int64
}

func (s *server) step(contended bool) {
	wake := s.now
	in := wake
	if contended {
		in += s.runq
	}
	// The scheduler's spans of a switch-in: the run-queue wait first,
	// then the off-CPU stretch it ended.
	if contended {
		s.t.Record(collectors.Span{Kind: collectors.SpanRunqueue, Start: wake, End: in, Tid: 10, Tgid: 10,
			HolderTid: 99, HolderTgid: 99, HolderComm: "busy"})
	}
	s.t.Record(collectors.Span{Kind: collectors.SpanOffCPU, Start: s.lastOut, End: in, Tid: 10, Tgid: 10, Detail: "sleep",
		WakeTs: wake, WakeCtx: "hardirq:timer"})
	out := in + 2*ms
	for c := range s.conns {
		s.t.Record(collectors.Span{Kind: collectors.SpanSend, Start: out, End: out, Tid: 10, Tgid: 10,
			LocalPort: 8000, Port: uint16(40000 + c), Bytes: 120})
	}
	s.lastOut = out
	s.now = in + s.period
	if s.jitter > 0 {
		s.now += s.steps % s.jitter * ms
		s.steps++
	}
}

// requests starts a stream on each connection.
func (s *server) requests() {
	for c := range s.conns {
		s.t.Record(collectors.Span{Kind: collectors.SpanRequest, Start: s.now - ms, End: s.now - ms, LocalPort: 8000,
			Port: uint16(40000 + c), Bytes: 400})
	}
}

// second runs the steps of second sec: from 30 s on, those that start in
// the first contend ns of each 100 ms wait for their CPU.
func (s *server) second(sec int, contend int64) {
	for range 100 {
		s.step(sec >= 30 && s.now%(100*ms) < contend)
		if s.now > int64(sec+1)*1e9+1e9 {
			break
		}
	}
}

// The live view on a server whose steps start to wait for a CPU held by
// another process: the intervals before are the quiet window, and the
// p99 gap of the contended intervals is the run-queue wait, held by the
// busy process.
func TestTrackerBlamesContention(t *testing.T) {
	tr := NewTracker(Options{})
	s := &server{t: tr, now: 1e9, lastOut: 1e9 - 8*ms, conns: 4, period: 10 * ms, runq: 15 * ms}
	for c := range s.conns {
		tr.Record(collectors.Span{Kind: collectors.SpanRequest, Start: s.now - ms, End: s.now - ms, LocalPort: 8000,
			Port: uint16(40000 + c), Bytes: 400})
	}
	var quiet, contended IntervalView
	for sec := range 60 {
		for range 100 {
			s.step(sec >= 30 && s.now%(100*ms) < 50*ms) // half the steps of a contended second wait
			if s.now > int64(sec+1)*1e9+1e9 {
				break
			}
		}
		tr.Advance(s.now)
		v := tr.Interval(s.now, 1)
		switch sec {
		case 25:
			quiet = v
		case 50:
			contended = v
		}
		if h := tr.feed.Held; h > 200_000 {
			t.Fatalf("%d spans of history held at %d s", h, sec)
		}
	}
	tr.Finish()
	if quiet.ITLP99 == nil || contended.ITLP99 == nil {
		t.Fatalf("no band: quiet %+v, contended %+v", quiet, contended)
	}
	if sh := contended.ITLP99.ExcessShares["cpu_runqueue"]; sh < 0.9 {
		t.Errorf("contended p99 gap's excess: %.2f cpu_runqueue, want nearly all (%v)", sh, contended.ITLP99.ExcessShares)
	}
	if sh := quiet.ITLP99.ExcessShares["cpu_runqueue"]; sh > 0 {
		t.Errorf("quiet p99 gap's excess: %.2f cpu_runqueue, want none", sh)
	}
	if len(contended.Neighbours) == 0 || contended.Neighbours[0].Process != "busy[99]" {
		t.Errorf("contended neighbours %+v, want busy[99] first", contended.Neighbours)
	}
	if contended.Baseline != "quiet window at +0s" && quiet.Baseline == contended.Baseline {
		t.Logf("baseline %q", contended.Baseline)
	}
	if contended.Streams != 4 {
		t.Errorf("%d streams active, want 4", contended.Streams)
	}
	r := tr.Result(s.now, nil)
	cp := r.CriticalPath
	if r.Live.FirstBytes != 4 || r.Live.Streams != 4 || cp.Gaps == 0 {
		t.Errorf("live %+v, %d gaps walked", r.Live, cp.Gaps)
	}
	if cp.ITLP99 == nil || cp.ITLP99.Top != "cpu_runqueue" || cp.UnexplainedFraction > 0.01 {
		t.Errorf("session: p99 %+v, unexplained %.3f", cp.ITLP99, cp.UnexplainedFraction)
	}
	if len(cp.Slowest) == 0 || cp.Slowest[0].CausesMs["cpu_runqueue"] < 14 {
		t.Errorf("slowest gaps %+v", cp.Slowest)
	}
	tot := tr.Totals(s.now)
	if tot.Gap.Count != r.Live.Gaps || tot.CauseNs[critpath.CPURunqueue] == 0 {
		t.Errorf("totals: %d gaps in the histogram (%d walked), %d ns cpu_runqueue", tot.Gap.Count, r.Live.Gaps, tot.CauseNs[critpath.CPURunqueue])
	}
}

// The quiet window is the recent window with the shortest median gap; a
// window with too few gaps is no window.
func TestRollingQuietWindow(t *testing.T) {
	r := NewRolling()
	add := func(from int64, n int, dur, runq int64) {
		for i := range n {
			end := from + 30*ms + int64(i)*(r.Window/int64(n))
			g := Gap{Index: 1, Start: end - dur, End: end}
			g.Ns[critpath.ServerCompute] = dur - runq
			g.Ns[critpath.CPURunqueue] = runq
			r.Add(g)
		}
	}
	if _, _, ok := r.Baseline(); ok {
		t.Fatal("a baseline with no gaps")
	}
	// Windows start with the first gap (30 ms): 30 ms, 10.03 s, ...
	add(0, 100, 30*ms, 20*ms) // contended
	add(10e9, 100, 10*ms, 0)  // quiet
	add(20e9, 10, 1*ms, 0)    // too few to judge
	add(30e9, 100, 25*ms, 15*ms)
	add(40e9, 1, 10*ms, 0) // closes the last window
	b, from, ok := r.Baseline()
	if !ok || from != 10e9+30*ms || b.ITL[critpath.CPURunqueue] != 0 || b.ITL[critpath.ServerCompute] != 10*ms {
		t.Errorf("baseline %v from %d (ok %v), want the quiet window at 10 s", b.ITL, from, ok)
	}
	// The quiet window leaves the history: the next quietest is normal.
	r.Windows = 1
	add(50e9, 100, 20*ms, 5*ms)
	add(60e9, 1, 10*ms, 0)
	if _, from, _ := r.Baseline(); from != 50e9+30*ms {
		t.Errorf("baseline from %d, want the only window kept (50 s)", from)
	}
}

// Before a window closes the normal gap is the current window's, taken
// again once its gaps have grown by a quarter, not at every call: 40 gaps
// of 10 ms, then 9 of 50 ms (fewer than a quarter more) leave it at 10 ms
// of compute; 41 more of 50 ms take the new median in.
func TestRollingEarlyBaselineRefresh(t *testing.T) {
	r := NewRolling()
	end := int64(30 * ms)
	add := func(n int, dur int64) {
		for range n {
			end += ms
			g := Gap{Index: 1, Start: end - dur, End: end}
			g.Ns[critpath.ServerCompute] = dur
			r.Add(g)
		}
	}
	compute := func() int64 {
		b, _, ok := r.Baseline()
		if !ok {
			t.Fatal("no baseline from the current window")
		}
		return b.ITL[critpath.ServerCompute]
	}
	add(40, 10*ms)
	if c := compute(); c != 10*ms {
		t.Fatalf("compute %d, want 10 ms", c)
	}
	add(9, 50*ms)
	if c := compute(); c != 10*ms {
		t.Errorf("compute %d after 9 gaps more (of 40): want 10 ms, the figures kept", c)
	}
	add(41, 50*ms)
	if c := compute(); c != 50*ms {
		t.Errorf("compute %d after 50 gaps of 50 ms (of 90): want the new median, 50 ms", c)
	}
}

// The walk over its budget: with a clock on which every reading takes a
// millisecond, the gaps below the running p90 are left unwalked once the
// walk has emptied its bucket (5% of the time that passed); the
// contended seconds' p99 band is still walked whole and blamed on the
// run queue, every gap is in the distribution, and the unwalked ones are
// counted and said.
func TestTrackerWalkBudget(t *testing.T) {
	// Walking every gap costs about 15% of a CPU, the gaps above the
	// running p90 (half of the contended ones) up to 8%: over the budget
	// (5%), within its ceiling (20%).
	run := func(budget float64) (*Tracker, *server, IntervalView) { return walkBudgetRun(budget, ms/2) }
	tr, s, contended := run(0.05)
	r := tr.Result(s.now, nil)
	all := r.Live.Gaps + r.Live.FirstBytes
	t.Logf("%d gaps and first bytes, %d walked, %d unwalked (%.0f ms), %d of them slow", all, r.CriticalPath.Gaps, r.Live.UnwalkedGaps, r.Live.UnwalkedMs, r.Live.UnwalkedSlowGaps)
	if r.Live.UnwalkedGaps == 0 || r.Live.UnwalkedGaps != tr.Totals(s.now).Unwalked {
		t.Fatalf("unwalked: result %d, totals %d; want the same, above 0", r.Live.UnwalkedGaps, tr.Totals(s.now).Unwalked)
	}
	if r.Live.UnwalkedGaps >= all || r.Live.UnwalkedSlowGaps != 0 {
		t.Errorf("%d of %d gaps unwalked, %d slow: the p90 and slower are walked below the ceiling", r.Live.UnwalkedGaps, all, r.Live.UnwalkedSlowGaps)
	}
	if tot := tr.Totals(s.now); tot.Gap.Count != r.Live.Gaps {
		t.Errorf("the gap histogram holds %d gaps, the distribution %d: unwalked gaps count in both", tot.Gap.Count, r.Live.Gaps)
	}
	if contended.ITLP99 == nil || contended.ITLP99.ExcessShares["cpu_runqueue"] < 0.9 {
		t.Errorf("contended p99 band %+v: want it walked, cpu_runqueue nearly all", contended.ITLP99)
	}
	// The normal gap (the quiet window's median and p99, which the
	// incident rules judge against) is every gap's: the same as with
	// every gap walked, though the walk left the short ones out.
	whole, _, _ := run(0)
	got, want := tr.Normal(), whole.Normal()
	t.Logf("normal: median %d ns, p99 %d ns over its budget; %d, %d walking every gap", got.MedianNs, got.P99Ns, want.MedianNs, want.P99Ns)
	if !got.OK || got.MedianNs != want.MedianNs || got.P99Ns != want.P99Ns {
		t.Errorf("normal gap over the walk's budget: median %d, p99 %d ns; every gap walked: %d, %d", got.MedianNs, got.P99Ns, want.MedianNs, want.P99Ns)
	}
}

// The walk's ceiling: where the gaps above the p90 cost more than
// ceilingFactor times the budget (up to 75% of a CPU against 20%), the walk
// leaves the slow ones out too (counted apart): over the session it
// spends at most its ceiling, the ceiling's bucket and Finish's (and one
// gap's walk), and the distributions still hold every gap.
func TestTrackerWalkCeiling(t *testing.T) {
	const budget, walkNs = 0.05, 5 * ms
	tr, s, _ := walkBudgetRun(budget, walkNs)
	r := tr.Result(s.now, nil)
	spent := int64(r.CriticalPath.Gaps) * walkNs
	bound := int64(ceilingFactor*budget*float64(s.now-1e9)) + int64(ceilingFactor*budget*walkBurst) + finishBudget + walkNs
	t.Logf("%d gaps and first bytes, %d walked (%.1f s of walking, bound %.1f s), %d unwalked, %d slow", r.Live.Gaps+r.Live.FirstBytes,
		r.CriticalPath.Gaps, float64(spent)/1e9, float64(bound)/1e9, r.Live.UnwalkedGaps, r.Live.UnwalkedSlowGaps)
	if r.Live.UnwalkedSlowGaps == 0 {
		t.Fatalf("no slow gap unwalked: the ceiling never held the walk")
	}
	if spent > bound {
		t.Errorf("the walk spent %.2f s, over its bound %.2f s", float64(spent)/1e9, float64(bound)/1e9)
	}
	if tot := tr.Totals(s.now); tot.Gap.Count != r.Live.Gaps {
		t.Errorf("the gap histogram holds %d gaps, the distribution %d: unwalked gaps count in both", tot.Gap.Count, r.Live.Gaps)
	}
}

// walkBudgetRun runs the live view with the walk's budget (0: none) on a
// server of 4 connections that, from 30 s on, waits for its CPU half of
// each 100 ms, for 60 s: the budget's wall clock is the server's, and each
// walked gap costs walkNs of it. It returns the tracker, the server and
// the view of a contended interval (at 50 s).
func walkBudgetRun(budget float64, walkNs int64) (*Tracker, *server, IntervalView) {
	tr := NewTracker(Options{WalkBudget: budget})
	s := &server{t: tr, now: 1e9, lastOut: 1e9 - 8*ms, conns: 4, period: 10 * ms, runq: 15 * ms, jitter: 3}
	tr.clock = func() int64 { return s.now }
	tr.spend = func() int64 { return int64(tr.agg.Gaps) * walkNs }
	s.requests()
	var contended IntervalView
	for sec := range 60 {
		s.second(sec, 50*ms)
		tr.Advance(s.now)
		if v := tr.Interval(s.now, 1); sec == 50 {
			contended = v
		}
	}
	tr.Finish()
	return tr, s, contended
}

// The walk over its target: with a clock on which every reading takes a
// millisecond, each advance costs more than the target and the stride
// grows to its bound; below the p90 one gap in the stride is walked,
// standing for the stride. Against the same server walked whole, each
// cause's total lies within twice its stated 95% bound (a cause the sample
// never saw, within 0.1% of the gaps' time), the gap count is
// exact in the distribution and estimated in the totals, and the p99
// bands and the slowest gaps are the same.
func TestTrackerWalkSample(t *testing.T) {
	run := func(target float64) *Tracker {
		tr := NewTracker(Options{WalkTarget: target})
		var fake int64
		tr.clock = func() int64 { fake += 1e6; return fake }
		tr.spend = tr.clock
		s := &server{t: tr, now: 1e9, lastOut: 1e9 - 8*ms, conns: 4, period: 10 * ms, runq: 15 * ms, jitter: 5}
		s.requests()
		for sec := range 60 {
			s.second(sec, 30*ms)
			tr.Advance(s.now)
		}
		tr.Finish()
		return tr
	}
	sampled, whole := run(0.0025).Result(0, nil), run(0).Result(0, nil)
	sm := sampled.Live.Sampling
	if sm == nil || sm.StrideMax != maxStride || sm.StrideP90Max != maxStride || sm.Out == 0 || sm.Walked == 0 {
		t.Fatalf("sampling %+v: want both strides at %d, gaps left out and walked for them", sm, maxStride)
	}
	if whole.Live.Sampling != nil {
		t.Errorf("every gap walked, yet sampling %+v", whole.Live.Sampling)
	}
	t.Logf("stride %d, %d walked for %d left out; %d gaps walked of %d (estimated %d)", sm.Stride, sm.Walked, sm.Out,
		sm.Walked, whole.CriticalPath.Gaps, sampled.CriticalPath.Gaps)
	for c, got := range sampled.CriticalPath.TotalsMs {
		want, bound := whole.CriticalPath.TotalsMs[c], sm.BoundsMs[c]
		t.Logf("%s: %.0f ms estimated ±%.0f, %.0f ms walking every gap", c, got, bound, want)
		// A cause that no sampled gap showed has no variance to read:
		// its bound is 0, and what the sample missed of it is allowed
		// (0.1% of the gaps' time: here 8 ms unexplained in two gaps).
		if math.Abs(got-want) > 2*bound+0.001*whole.CriticalPath.GapMs {
			t.Errorf("%s: estimated %.0f ms ±%.0f (95%%), every gap walked %.0f ms", c, got, bound, want)
		}
	}
	if sampled.Live.Gaps != whole.Live.Gaps || sampled.Live.FirstBytes != whole.Live.FirstBytes {
		t.Errorf("distributions of %d gaps and %d first bytes, walking every gap %d and %d", sampled.Live.Gaps, sampled.Live.FirstBytes, whole.Live.Gaps, whole.Live.FirstBytes)
	}
	// The band's gaps walked whole are those at or above the lower end
	// of the running p99's interval when they came: a band gap below it
	// (the p99 still moving) may be one of the sample, counted apart.
	if a, b := sampled.CriticalPath.ITLP99, whole.CriticalPath.ITLP99; a == nil || b == nil || a.Gaps+a.Unwalked != b.Gaps || a.Unwalked > b.Gaps/20 || a.Top != b.Top ||
		math.Abs(a.ExcessMs/float64(a.Gaps)-b.ExcessMs/float64(b.Gaps)) > 0.02*b.ExcessMs/float64(b.Gaps) {
		t.Errorf("p99 band %+v, walking every gap %+v", a, b)
	} else {
		t.Logf("p99 band: %d gaps walked, %d of the sample left out, against %d walking every gap", a.Gaps, a.Unwalked, b.Gaps)
	}
	if q := sm.ExactFrom[1]; q < 0.98 || q >= 0.99 {
		t.Errorf("later gaps walked whole from their %.4f quantile, want the lower end of the p99's interval", q)
	}
	if len(sampled.CriticalPath.Slowest) != len(whole.CriticalPath.Slowest) || sampled.CriticalPath.Slowest[0].DurationMs != whole.CriticalPath.Slowest[0].DurationMs {
		t.Errorf("the slowest gaps differ from those walking every gap")
	}
}

// The stride doubles over the target, halves under a third of it, and
// stays between 1 and its bound; the p90-p95 stride moves only while the
// other is at its bound.
func TestTrackerStride(t *testing.T) {
	tr := NewTracker(Options{WalkTarget: 0.01})
	for range 10 {
		tr.adaptStride(0.02)
	}
	// Six doublings reach the bound; the p90-p95 stride takes the four
	// advances after.
	if tr.stride != maxStride || tr.stride2 != 16 {
		t.Fatalf("strides %d and %d after ten advances over the target, want %d and 16", tr.stride, tr.stride2, maxStride)
	}
	tr.adaptStride(0.005) // under the target, above a third: kept
	if tr.stride != maxStride || tr.stride2 != 16 {
		t.Errorf("strides %d and %d at half the target, want them kept", tr.stride, tr.stride2)
	}
	for range 4 {
		tr.adaptStride(0.001)
	}
	if tr.stride != maxStride || tr.stride2 != 1 {
		t.Errorf("strides %d and %d after four advances at a tenth of the target, want the p90-p95 one back to 1 first", tr.stride, tr.stride2)
	}
	for range 10 {
		tr.adaptStride(0.001)
	}
	if tr.stride != 1 || tr.strideMax != maxStride || tr.stride2Max != 16 {
		t.Errorf("stride %d (max %d, p90-exact max %d) after ten more advances at a tenth of the target, want 1 (max %d, 16)", tr.stride, tr.strideMax, tr.stride2Max, maxStride)
	}
}

// A band's p99 is every gap's, its shares the walked gaps': a gap the walk
// left out (no causes) would read as unexplained.
func TestBandLeavesOutUnwalkedGaps(t *testing.T) {
	var gs []Gap
	for i := range 200 {
		g := Gap{Index: 2, Start: int64(i) * 100 * ms, End: int64(i)*100*ms + 10*ms}
		g.Ns[critpath.ServerCompute] = 10 * ms
		if i >= 196 { // the slowest four: two walked (run-queue wait), two not
			g.End = g.Start + 50*ms
			if i%2 == 0 {
				g.Ns[critpath.CPURunqueue] = 40 * ms
			} else {
				g.Ns[critpath.ServerCompute] = 0
				g.Unwalked = true
			}
		}
		gs = append(gs, g)
	}
	var base critpath.Baseline
	base.ITL[critpath.ServerCompute] = 10 * ms
	b := Band(slices.Values(gs), base, false)
	if b == nil || b.Gaps != 2 || b.Unwalked != 2 || b.FromMs != 50 || b.Top != "cpu_runqueue" || b.ExcessShares["unexplained"] != 0 {
		t.Fatalf("band %+v: want the two walked gaps of the slowest four (two unwalked), all cpu_runqueue, nothing unexplained", b)
	}
}

// With a recorded run as the baseline (attach --baseline DIR), the live
// p99 band's excess is what it adds over that run's own p99 band, as
// run --baseline compares its band: compute that was as long in the
// baseline's tail is not the contention's.
func TestTrackerBandAgainstBaselineBand(t *testing.T) {
	var base critpath.Baseline
	base.ITL[critpath.ServerCompute] = 1 * ms // the baseline's normal gap: 1 ms of compute
	// Its p99 band: 2 ms of compute a gap (steps that carried more).
	band := &result.CriticalBand{Gaps: 10, FromMs: 2, TotalsMs: map[string]float64{"server_compute": 20}}
	shares := func(b *result.CriticalBand) map[string]float64 {
		tr := NewTracker(Options{Baseline: &base, BaselineName: "run quiet", BaselineBand: b})
		s := &server{t: tr, now: 1e9, lastOut: 1e9 - 8*ms, conns: 2, period: 10 * ms, runq: 15 * ms}
		for c := range s.conns {
			tr.Record(collectors.Span{Kind: collectors.SpanRequest, Start: s.now - ms, End: s.now - ms, LocalPort: 8000,
				Port: uint16(40000 + c), Bytes: 400})
		}
		for range 300 {
			s.step(true)
		}
		tr.Advance(s.now)
		v := tr.Interval(s.now, 3)
		tr.Finish()
		cp := tr.Result(s.now, nil).CriticalPath
		if cp.ITLP99 == nil || v.ITLP99 == nil {
			t.Fatalf("no band: session %+v, interval %+v", cp.ITLP99, v.ITLP99)
		}
		if b != nil && (cp.ITLP99.ExcessOver == "" || v.ITLP99.ExcessOver == "") {
			t.Errorf("the bands do not say what their excess is over: %q, %q", cp.ITLP99.ExcessOver, v.ITLP99.ExcessOver)
		}
		if math.Abs(cp.ITLP99.ExcessShares["server_compute"]-v.ITLP99.ExcessShares["server_compute"]) > 0.01 {
			t.Errorf("session and interval differ: %v, %v", cp.ITLP99.ExcessShares, v.ITLP99.ExcessShares)
		}
		return cp.ITLP99.ExcessShares
	}
	if sh := shares(nil); sh["server_compute"] < 0.03 {
		t.Errorf("against the normal gap: server_compute %.3f of the excess, want the 1 ms the band's compute has over it (%v)", sh["server_compute"], sh)
	}
	// (The simulated server also sleeps on a timer between steps, which
	// the baseline's band did not have.)
	if sh := shares(band); sh["server_compute"] != 0 || TopOf(sh) != "cpu_runqueue" {
		t.Errorf("against the baseline's band: shares %v, want no server_compute and cpu_runqueue on top", sh)
	}
}

// A reader's span is queued without waiting for a walk (which holds the
// tracker's lock); past maxQueued spans waiting, the reader takes them
// itself, and none is lost.
func TestRecordQueuesBesideTheWalk(t *testing.T) {
	tr := NewTracker(Options{})
	tr.mu.Lock() // a walk under way
	queued := make(chan struct{})
	go func() {
		for i := range maxQueued - 1 {
			tr.Record(collectors.Span{Kind: collectors.SpanRunqueue, Start: int64(i) * 10, End: int64(i)*10 + 5, Tid: 7, Tgid: 7})
		}
		close(queued)
	}()
	select {
	case <-queued:
	case <-time.After(30 * time.Second):
		t.Fatal("Record waited for the walk's lock")
	}
	tr.mu.Unlock()
	for i := maxQueued - 1; i < 3*maxQueued; i++ {
		tr.Record(collectors.Span{Kind: collectors.SpanRunqueue, Start: int64(i) * 10, End: int64(i)*10 + 5, Tid: 7, Tgid: 7})
	}
	tr.inMu.Lock()
	waiting := len(tr.in)
	tr.inMu.Unlock()
	if waiting >= maxQueued {
		t.Errorf("%d spans waiting, the bound is %d", waiting, maxQueued)
	}
	tr.Finish()
	if st := tr.feed.Stats; st.Spans+st.Dropped != 3*maxQueued {
		t.Errorf("%d spans taken and %d dropped for the history's bound, want %d in all", st.Spans, st.Dropped, 3*maxQueued)
	}
	if c := tr.cost(1); c.Records != 3*maxQueued || c.TakeSeconds <= 0 {
		t.Errorf("cost %+v: want %d records and the batches' time", c, 3*maxQueued)
	}
}

// An interval's p99 band is its own gaps': after a slow phase, a quiet
// interval's slowest gaps lie under the session's p99, and they are still
// walked whole while the walk samples the rest (its band's shares would
// otherwise be of no walked gap: "unexplained").
func TestIntervalBandWalkedWhole(t *testing.T) {
	tr := NewTracker(Options{WalkTarget: 0.0025})
	var fake int64
	tr.clock = func() int64 { fake += 1e6; return fake }
	tr.spend = tr.clock
	s := &server{t: tr, now: 1e9, lastOut: 1e9 - 8*ms, conns: 4, period: 10 * ms, runq: 15 * ms, jitter: 5}
	s.requests()
	var quiet []IntervalView
	for sec := range 60 {
		for range 100 {
			s.step(sec < 30 && s.now%(100*ms) < 50*ms) // slow first, then quiet
			if s.now > int64(sec+1)*1e9+1e9 {
				break
			}
		}
		tr.Advance(s.now)
		if v := tr.Interval(s.now, 1); sec >= 40 {
			quiet = append(quiet, v)
		}
	}
	tr.Finish()
	if sm := tr.Result(0, nil).Live.Sampling; sm == nil || sm.Out == 0 {
		t.Fatalf("sampling %+v: want gaps left out of the walk", sm)
	}
	for _, v := range quiet {
		if v.ITLP99 == nil || v.ITLP99.Gaps == 0 || v.ITLP99.Unwalked > 0 {
			t.Errorf("interval at %.0f s: band %+v: want its slowest gaps walked whole", v.AtS, v.ITLP99)
		}
	}
}
