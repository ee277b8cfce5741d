package live

import (
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"

	"github.com/bpfbench/bpfbench/result"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/correlate/critpath/feed"
	"github.com/bpfbench/bpfbench/internal/affinity"
	"github.com/bpfbench/bpfbench/internal/hist"
)

// Rule is the live view's critical_path.rule.
const Rule = "each gap between two writes of a response stream [s(k-1), s(k)] (the first from the request's last " +
	"byte in) walked back from the server's send s(k): the sending thread's states (running server_compute or " +
	"gpu_sync in a blocking CUDA call, runnable cpu_runqueue behind the CPU's holder, D io_block, asleep: what " +
	"woke it, following a target waker up to 4 edges, a connection held back net_backpressure); time no event " +
	"covers is unexplained. The excess is the gap over the baseline's normal gap (each cause's median), split " +
	"over the causes above their normal time."

// Options tune a Tracker; the zero value takes the defaults.
type Options struct {
	// Baseline, when set, is the normal gap (a recorded run's, `--baseline
	// DIR`) instead of the server's own quiet window; BaselineName names it.
	Baseline     *critpath.Baseline
	BaselineName string
	// BaselineBand, with Baseline, is that run's own p99 gap band: the
	// live p99 bands' excess is then what they add over it (MatchBand,
	// as run --baseline compares its band), not over the normal gap,
	// which would count what is slow in the baseline's tail too.
	BaselineBand *result.CriticalBand
	// MaxHeld bounds the spans of history held (default 1Mi).
	MaxHeld int
	// Lag is how long after a span's time the gaps it may end are walked
	// (default 2 s: the collectors' readers drain every 100 ms).
	Lag int64
	// MaxLag bounds how far the watermark waits for the scheduler's
	// reader (default 10 s).
	MaxLag int64
	// Keep is the engine's history behind the watermark (default 10 s): a
	// gap longer than it has its start unexplained (counted).
	Keep int64
	// Slowest is how many of the slowest gaps keep their path (default 10).
	Slowest int
	// Intervals bounds the intervals a Result lists (default 720).
	Intervals int
	// ThreadClock: Advance is called from a goroutine locked to its OS
	// thread (runtime.LockOSThread), so that the walk's cost is read on
	// the thread's CPU clock instead of the wall clock.
	ThreadClock bool
	// Recorder, when set, keeps every walked gap of its window, and the
	// paths of those slower than the session's p90 (the daemon's flight
	// recorder of incidents).
	Recorder *Recorder
	// WalkBudget bounds the walk's time, a fraction of one CPU (0: no
	// bound; attach and the daemon give DefaultWalkBudget), as a bucket
	// that fills at that rate up to 10 s's worth: once the walk has emptied
	// it, the gaps below the running p90 of their kind are not walked
	// (counted as unwalked; their durations are kept) until it fills
	// again. A server whose gaps cost more to walk than the live view can
	// spend (thousands of connections, thousands of threads) keeps its
	// slowest tenth walked, and its cause totals cover the walked gaps,
	// up to a ceiling: a second bucket that fills at ceilingFactor times
	// the budget (10 s's worth) and every walk empties; while it is empty
	// the slowest gaps are left out too (counted apart,
	// Summary.UnwalkedSlowGaps), so that no server makes the walk take
	// more than ceilingFactor times its budget, and a burst.
	// Advance must then be called in real time.
	WalkBudget float64
	// WalkTarget is the fraction of one CPU the walk aims at (0: every
	// gap walked; attach and the daemon give DefaultWalkTarget): while an
	// advance's walk costs more, the gaps below the running p90 of their
	// kind are walked as a uniform sample of 1 in a stride (doubled, up to
	// 64, at each advance over the target; halved at each under a third
	// of it), each one walked standing for the stride; once that stride
	// is at its bound, the gaps between the p90 and the lower end of the
	// running p99's 95% interval (exactQuantile) are sampled too, with a
	// stride of their own. The gaps from that quantile up are walked
	// whole (the p99 bands and the slowest gaps stay exact); the totals of
	// the causes, gaps and neighbours become estimates with a 95% bound
	// (Summary.Sampling).
	WalkTarget float64
}

// DefaultMaxHeld is the default bound of the spans of history held: about
// 150 MB (a held span is a segment, a send or a CUDA call of the engine,
// up to ~140 bytes, and the active index's copy of a segment).
const DefaultMaxHeld = 1 << 20

// DefaultWalkBudget is attach's and the daemon's walk budget: 5% of a CPU.
const DefaultWalkBudget = 0.05

// DefaultWalkTarget is attach's and the daemon's walk target, per target
// process: 0.25% of a CPU (the live view's budget is 0.5% a saturated
// engine, its intake of spans included).
const DefaultWalkTarget = 0.0025

// maxStride bounds the sample's stride (Options.WalkTarget).
const maxStride = 64

// walkBurst is how much time's worth of the walk's budget it keeps (10 s:
// at 5%, 500 ms of walking), so that a burst is not shed.
const walkBurst = 10e9

// ceilingFactor is the walk's ceiling over its budget (WalkBudget): the
// gaps at or above the p90 are walked within it (overCeiling).
const ceilingFactor = 4

// finishBudget bounds the walk of Finish's gaps below the p90 (the
// session's end: a stopped command must not walk for minutes).
const finishBudget = int64(1e9)

// bandSample bounds the gaps of each kind (first byte, later) kept for the
// session's p99 bands: a uniform sample past it.
const bandSample = 16384

// Tracker is the live view of one server: it takes the session's spans
// (a collectors.Recorder; Options.Live sessions send the requests and
// closes), groups the server's writes into streams, walks each gap with
// critpath, and keeps the interval's and the session's figures in bounded
// memory. Safe for concurrent use.
type Tracker struct {
	mu  sync.Mutex
	opt Options
	// inMu guards the intake's queue (in) and its counters (records,
	// timed, recordNs, recordSq, clockNs, clockNext); take holds mu, then
	// inMu briefly. spare (under mu) is the batch taken last, kept for its
	// array.
	inMu      sync.Mutex
	in, spare []collectors.Span
	eng       *critpath.Engine
	feed      *feed.Feed
	streams   *Streams
	roll      *Rolling
	pre       prefills // the live prefill rule's first tokens (prefill.go)
	// gapBase is the normal gap the prefill rule judges one advance's
	// gaps by, taken at its first gap (gapBaseOK): once a gap, the
	// current window's before one closes sorted its sample every time
	// (BenchmarkTrackerWalk: 880 µs a gap against 10).
	gapBase   critpath.Baseline
	gapBaseOK bool
	reads     []critpath.Read
	origin    int64 // the first span's time

	// the session
	agg     critpath.Aggregate
	sample  [2]sample // first tokens, later gaps
	itl     hist.LogLinear
	ttfb    hist.LogLinear
	gapH    hist.Log2 // the daemon's histograms, cumulative
	ttfbH   hist.Log2
	slow    Slowest
	views   []IntervalView
	dropped int // intervals left out of views
	// conns are each client port's gaps (at most maxConnsKept; the rest
	// in other).
	conns map[uint16]*connBlame
	other connBlame
	// cost is the tracker's own time: the walk (on the advancing thread's
	// CPU clock when it has one of its own) and the spans' intake: their
	// queueing (recordNs: the timed sample's) and their taking (takeNs).
	walkNs, recordNs, takeNs int64
	records, timed           uint64
	recordSq                 float64 // the sum of the timed intakes' squares (ns²)
	// clockNs is the clock's own cost in a timed intake (clockCost),
	// taken out of each; it is read again once timed reaches clockNext.
	clockNs   int64
	clockNext uint64
	// schedAt is the latest end of a scheduler span taken: the walk waits
	// for the scheduler's reader (Advance).
	schedAt int64
	// The walk's budget (skip): walkAllow is what is left of it (ns of
	// walking; the advance under way started at walkFrom, on spend); thr
	// are the p90s of the first tokens' gaps and the later ones' at its
	// start; lastAdvance is when the previous advance started.
	walkFrom, walkAllow, lastAdvance int64
	// spentNs is the walk's spend since walkFrom at the last reading of
	// the clock, spentStale set once a walk ran after it (spent).
	spentNs    int64
	spentStale bool
	thr        [2]int64
	// thrExact are the quantiles exactQ (exactQuantile: the lower end of
	// the running p99's 95% interval) of each kind: the gaps at or above
	// them are walked (the p99 bands stay exact) within the ceiling
	// (ceilAllow: what is left of its bucket, overCeiling); between the
	// p90 and them the walk samples with stride2 once stride is at its
	// bound (WalkTarget).
	thrExact [2]int64
	exactQ   [2]float64
	// ivLast is the last interval's own exact quantile of the later
	// gaps (ivExact), for the next interval's first advance.
	ivLast    int64
	ceilAllow int64
	// unwalked gaps (skip) and their time; unwalkedSlow those of them at
	// or above the p90, left out over the ceiling.
	unwalked     uint64
	unwalkedNs   int64
	unwalkedSlow uint64
	// The sample below the p90 (Options.WalkTarget): 1 in stride walked
	// (strideMax the largest so far), weight the next walked gap's (set
	// by skip; 0 is 1); sampledOut the gaps left out of it and their
	// time, sampledIn those walked for it; estVar the Horvitz-Thompson
	// variance of each cause's total (the last: of the gaps' time).
	stride, strideMax, weight int
	stride2, stride2Max       int
	rng                       uint64
	sampledOut, sampledIn     uint64
	sampledOutNs              int64
	estVar                    [critpath.NumCauses + 1]float64
	// clock is the wall clock the budget fills by, spend the clock the
	// walk spends it by: the advancing thread's CPU clock with
	// ThreadClock (a thread that waits for a CPU spends nothing), else
	// the wall's (nanotime; a test's own).
	clock, spend func() int64

	iv interval
}

type interval struct {
	sample
	agg    critpath.Aggregate
	itl    hist.LogLinear
	ttfb   hist.LogLinear
	firsts int
}

// NewTracker returns a tracker.
func NewTracker(opt Options) *Tracker {
	if opt.MaxHeld <= 0 {
		opt.MaxHeld = DefaultMaxHeld
	}
	if opt.Lag <= 0 {
		opt.Lag = 2e9
	}
	if opt.Keep <= 0 {
		opt.Keep = 10e9
	}
	if opt.MaxLag <= 0 {
		opt.MaxLag = 10e9
	}
	if opt.Slowest <= 0 {
		opt.Slowest = 10
	}
	if opt.Intervals <= 0 {
		opt.Intervals = 720
	}
	eng := critpath.New(critpath.Options{Keep: opt.Keep, CPUs: new(affinity.Counter).CPUs})
	t := &Tracker{opt: opt, eng: eng, feed: feed.NewFeed(eng, opt.MaxHeld), streams: NewStreams(), roll: NewRolling(),
		slow: Slowest{N: opt.Slowest}, conns: map[uint16]*connBlame{},
		sample: [2]sample{{n: bandSample}, {n: bandSample}}, iv: interval{sample: sample{n: bandSample * 4}},
		gapH: hist.Log2{Slots: make([]uint64, 64)}, ttfbH: hist.Log2{Slots: make([]uint64, 64)}}
	t.clock, t.spend = nanotime, nanotime
	if opt.ThreadClock {
		t.spend = func() int64 {
			if ns, ok := threadCPU(); ok {
				return ns
			}
			return nanotime()
		}
	}
	t.stride, t.strideMax, t.stride2, t.stride2Max, t.rng = 1, 1, 1, 1, 0x9e3779b97f4a7c15
	if opt.WalkBudget > 0 || opt.WalkTarget > 0 {
		eng.SetSkip(t.skip)
	}
	return t
}

// Record takes a span of the session (collectors.Recorder): it is queued
// under a lock of its own that the walk never holds, so that a reader
// never waits for a walk, and the queue is taken in batches: by the reader
// every takeBatch spans while no walk holds the tracker (the batch still
// in its cache), else by the next advance; past maxQueued spans waiting,
// the reader takes them whatever the walk is doing.
func (t *Tracker) Record(sp collectors.Span) {
	t.inMu.Lock()
	t.records++
	if t.records%recordSample == 0 {
		t.queueTimed(sp)
	} else {
		t.in = append(t.in, sp)
	}
	n := len(t.in)
	t.inMu.Unlock()
	t.takeSome(n)
}

// queueTimed queues sp timed (under t.inMu): one span in recordSample
// is, and the queue's cost is estimated from them (Cost.RecordSeconds).
// A queueing takes tens of ns: it is timed on the monotonic clock (read
// without a system call), not the thread's CPU clock, whose system call
// each way cost ten times the queueing and left it cold (the estimate
// read 5× the profile's share). Wall time counts an interrupt or a
// preemption inside the few ns timed: an overestimate, rare at this size.
func (t *Tracker) queueTimed(sp collectors.Span) {
	if t.timed >= t.clockNext {
		t.clockNext = t.timed + clockEvery
		t.inMu.Unlock()
		c := clockCost()
		t.inMu.Lock()
		t.clockNs = c
	}
	c0 := nanotime()
	t.in = append(t.in, sp)
	// Over 1 ms: the thread was descheduled, not a queueing's time.
	if c1 := nanotime(); c1 >= c0 && c1-c0 < 1e6 {
		d := max(c1-c0-t.clockNs, 0)
		t.recordNs += d
		t.recordSq += float64(d) * float64(d)
		t.timed++
	}
}

// takeSome, with n spans waiting, takes them on the reader's thread once
// takeBatch wait and no walk holds the lock (a batch taken while its
// spans are still in the cache), and whatever the walk is doing once
// maxQueued wait.
func (t *Tracker) takeSome(n int) {
	switch {
	case n >= maxQueued:
		t.takeNow()
	case n >= takeBatch && n%takeBatch == 0 && t.mu.TryLock():
		t.take(true)
		t.mu.Unlock()
	}
}

// takeBatch: the spans a reader takes at once when the walk is not
// running (54 KiB of them).
const takeBatch = 256

// maxQueued bounds the spans waiting for the next advance (216 bytes a
// span: 3.5 MiB, twice with the batch being taken; at 10,000 spans a
// second, 1.6 s of them).
const maxQueued = 1 << 14

// takeNow takes the queued spans on the caller's thread (a reader's,
// locked to its thread, or the benchmark's).
func (t *Tracker) takeNow() {
	t.mu.Lock()
	t.take(true)
	t.mu.Unlock()
}

// take passes the queued spans to the streams and the feed (under t.mu),
// timed whole: on the spend clock where the caller is the advancing thread
// or a reader (own: a thread of its own), else on the wall clock.
func (t *Tracker) take(own bool) {
	t.inMu.Lock()
	batch := t.in
	t.in, t.spare = t.spare[:0], nil
	t.inMu.Unlock()
	if len(batch) == 0 {
		t.spare = batch
		return
	}
	clock := nanotime
	if own {
		clock = t.spend
	}
	c0 := clock()
	for i := range batch {
		t.record(batch[i])
	}
	if d := clock() - c0; d >= 0 {
		t.takeNs += d
	}
	clear(batch)
	t.spare = batch[:0]
}

// recordSample: one span in it has its intake timed.
const recordSample = 64

// clockEvery: the clock's own cost is read again every clockEvery timed
// intakes.
const clockEvery = 1024

// clockCost is what two readings of the monotonic clock with nothing
// between them take, the median of clockReads pairs: a timed queueing
// holds one reading's end and the other's start, which are the clock's,
// not the queueing's.
func clockCost() int64 {
	var d [clockReads]int64
	n := 0
	for range clockReads {
		c0 := nanotime()
		c1 := nanotime()
		if c1 >= c0 && c1-c0 < 1e6 {
			d[n] = c1 - c0
			n++
		}
	}
	if n == 0 {
		return 0
	}
	slices.Sort(d[:n])
	return d[n/2]
}

// clockReads: the pairs of readings clockCost takes.
const clockReads = 31

func (t *Tracker) record(sp collectors.Span) {
	if t.origin == 0 && sp.End > 0 {
		t.origin = sp.End
	}
	if sp.Kind == collectors.SpanRunqueue || sp.Kind == collectors.SpanOffCPU {
		t.schedAt = max(t.schedAt, sp.End)
	}
	switch sp.Kind {
	case collectors.SpanRequest:
		if !sp.Client {
			t.streams.Request(sp)
		}
		return
	case collectors.SpanClose:
		t.streams.Close(sp)
		return
	case collectors.SpanSend:
		t.feed.Record(sp)
		if !sp.Client {
			t.reads = t.streams.Send(sp, t.reads[:0])
			for _, r := range t.reads {
				t.eng.AddRead(r)
			}
		}
		return
	case collectors.SpanTCP:
		t.feed.Record(sp)
		if sp.Detail == collectors.PeerWindowFull && !sp.Client {
			t.reads = t.streams.Release(sp, t.reads[:0])
			for _, r := range t.reads {
				t.eng.AddRead(r)
			}
		}
		return
	}
	t.feed.Record(sp)
}

// Advance walks the gaps that ended before now less the lag (now:
// CLOCK_MONOTONIC ns).
func (t *Tracker) Advance(now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.take(true)
	c0, own := threadCPU()
	own = own && t.opt.ThreadClock
	w0 := nanotime()
	// The watermark waits for the scheduler's reader, which a loaded host
	// starves first (attach runs at nice 19): a gap walked before its
	// thread's spans came would read as running (the tail rule). At most
	// MaxLag behind.
	wm := now - t.opt.Lag
	if t.schedAt > 0 {
		wm = max(min(wm, t.schedAt), now-t.opt.MaxLag)
	}
	t.advance(wm, now)
	if c1, ok := threadCPU(); own && ok && c1 >= c0 {
		t.walkNs += c1 - c0
	} else {
		t.walkNs += nanotime() - w0
	}
}

// Finish walks every gap left (the session ended).
func (t *Tracker) Finish() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.take(false)
	t.advance(math.MaxInt64, math.MaxInt64)
}

func (t *Tracker) advance(wm, now int64) {
	if now != math.MaxInt64 {
		t.eng.SetFloor(max(t.streams.Floor(wm, t.opt.Keep), wm-t.opt.Keep))
		t.streams.Expire(now)
	}
	// The budget is a bucket: it fills at WalkBudget of the time that
	// passes, up to walkBurst of it, and the walk empties it; a burst of
	// gaps is walked whole, a sustained excess is shed.
	wall := t.clock()
	t.walkFrom = t.spend()
	t.spentNs, t.spentStale = 0, false
	burst := int64(t.opt.WalkBudget * walkBurst)
	switch {
	case now == math.MaxInt64:
		t.walkAllow = max(t.walkAllow, finishBudget)
		t.ceilAllow = max(t.ceilAllow, finishBudget)
	case t.lastAdvance > 0:
		fill := t.opt.WalkBudget * float64(wall-t.lastAdvance)
		t.walkAllow = min(t.walkAllow+int64(fill), burst)
		t.ceilAllow = min(t.ceilAllow+int64(ceilingFactor*fill), ceilingFactor*burst)
	default:
		t.walkAllow, t.ceilAllow = burst, ceilingFactor*burst
	}
	elapsed := wall - t.lastAdvance
	if t.lastAdvance == 0 {
		elapsed = 0
	}
	t.lastAdvance = wall
	t.thr = [2]int64{int64(t.ttfb.Quantile(0.9)), int64(t.itl.Quantile(0.9))}
	t.exactQ = [2]float64{exactQuantile(t.ttfb.Count()), exactQuantile(t.itl.Count())}
	t.thrExact = [2]int64{int64(t.ttfb.Quantile(t.exactQ[0])), int64(t.itl.Quantile(t.exactQ[1]))}
	// An interval's p99 band (Interval) is its own gaps': a quiet interval
	// after a slow one has its slowest gaps under the session's quantile.
	// They are walked whole from the lower of the two (the interval's
	// own once it has gaps; before its first, the last interval's).
	if q := t.ivExact(); q > 0 {
		t.thrExact[1] = min(t.thrExact[1], q)
	} else if t.ivLast > 0 {
		t.thrExact[1] = min(t.thrExact[1], t.ivLast)
	}
	t.gapBaseOK = false
	t.eng.FlushFunc(wm, t.gap)
	t.pre.expire(wm - t.opt.Keep)
	spent := t.spend() - t.walkFrom
	if t.opt.WalkBudget > 0 {
		t.walkAllow -= spent
		t.ceilAllow -= spent
	}
	if t.opt.WalkTarget > 0 && now != math.MaxInt64 && elapsed > 0 {
		t.adaptStride(float64(spent) / float64(elapsed))
	}
	t.feed.Retained()
	if r := t.opt.Recorder; r != nil && now != math.MaxInt64 {
		// The slow gaps keep their path: those above the session's p90
		// (higher while the recorder's bytes are short).
		r.SetPathAbove(func(p float64) (int64, int64) { return int64(t.ttfb.Quantile(p)), int64(t.itl.Quantile(p)) })
		r.Expire(wm)
	}
}

// ivExact is the interval's quantile from which its later gaps are
// walked whole (exactQuantile of its own, never under its p95: with its
// first few gaps that is near their slowest, where the p90 walked a
// tenth of every interval's first hundred), 0 before its first gap.
func (t *Tracker) ivExact() int64 {
	n := t.iv.itl.Count()
	if n == 0 {
		return 0
	}
	return int64(t.iv.itl.Quantile(max(exactQuantile(n), 0.95)))
}

// exactQuantile is the quantile from which the gaps of a kind are walked
// whole, n gaps of it seen: the lower end of the 95% interval of the p99
// (QuantileBounds' rank, n·0.99 − 1.96·√(n·0.99·0.01), over n), so that a
// gap at or above the p99 of every gap is walked unless the running p99
// is off by more than its interval; never under the p90 (few gaps seen:
// every gap above the p90 walked). With 1,000 gaps it is the p98.4, with
// 10,000 the p98.8: the gaps walked whole are about 1.2-1.6% of them, where
// the p95 walked 5% (the walk's floor on a saturated engine, over its
// target at any stride).
func exactQuantile(n uint64) float64 {
	if n == 0 {
		return 0.9
	}
	return max(0.99-z95*math.Sqrt(0.99*0.01/float64(n)), 0.9)
}

// adaptStride doubles the sample's stride when an advance's walk cost
// more than the target (rate: a fraction of a CPU), and halves it when it
// cost less than a third of it (under t.mu). The stride of the gaps
// between the p90 and the exact quantile (stride2) moves only while the other is at
// its bound: up after it, down before it.
func (t *Tracker) adaptStride(rate float64) {
	switch {
	case rate > t.opt.WalkTarget && t.stride < maxStride:
		t.stride *= 2
	case rate > t.opt.WalkTarget && t.stride2 < maxStride:
		t.stride2 *= 2
	case rate < t.opt.WalkTarget/3 && t.stride2 > 1:
		t.stride2 /= 2
	case rate < t.opt.WalkTarget/3 && t.stride > 1:
		t.stride /= 2
	}
	t.strideMax = max(t.strideMax, t.stride)
	t.stride2Max = max(t.stride2Max, t.stride2)
}

// SetWalkBudget changes the walk's budget (Options.WalkBudget) from the
// next advance on; 0 or less: no bound. A tracker built without a budget
// takes one here too.
func (t *Tracker) SetWalkBudget(f float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.opt.WalkBudget = f
	if f > 0 || t.opt.WalkTarget > 0 {
		t.eng.SetSkip(t.skip)
	} else {
		t.eng.SetSkip(nil)
	}
}

// SetMaxHeld changes the bound of the spans of history held
// (Options.MaxHeld; 0 or less: the default): the daemon shares one bound
// over its live targets.
func (t *Tracker) SetMaxHeld(n int) {
	if n <= 0 {
		n = DefaultMaxHeld
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.opt.MaxHeld = n
	t.feed.MaxHeld = n
}

// skip says whether r is left unwalked (critpath's SetSkip, under t.mu):
// the walk has spent its budget and r is below the p90 of its kind so
// far. An unwalked gap counts in the distributions, the
// band samples (so that the bands' p99 is every gap's), the rolling
// baseline's durations (the normal gap's median and p99 are every gap's)
// and the flight recorder's window, not in the causes.
//
// Below the exact quantile (exactQuantile), with Options.WalkTarget, r is walked as one of a uniform
// sample of 1 in its stratum's stride (below the p90: stride; between the
// p90 and the exact quantile: stride2; the walked gap's weight: gap) or left out of
// it, counted as sampled out: the totals estimate it.
func (t *Tracker) skip(r critpath.Read) bool {
	if t.skipOne(r) {
		return true
	}
	t.spentStale = true // the walk of r spends
	return false
}

// spent is what the walk has spent since the advance started (under
// t.mu), read from the spend clock only when a walk ran since its last
// reading: a gap left out spends next to nothing, and a reading of the
// thread's CPU clock is a system call (with every gap asking, it was
// half of skip's time and a tenth of the flush's).
func (t *Tracker) spent() int64 {
	if t.spentStale {
		t.spentNs = t.spend() - t.walkFrom
		t.spentStale = false
	}
	return t.spentNs
}

func (t *Tracker) skipOne(r critpath.Read) bool {
	d := r.End - r.Start
	kind := kindOf(r.Index)
	t.weight = 1
	if t.thr[kind] <= 0 || d >= t.thr[kind] || d >= t.thrExact[kind] {
		// At or above the p90: walked (sampled between the p90 and the
		// exact quantile, which an interval's own may put under the
		// p90) unless the walk is past its ceiling.
		if t.overCeiling() {
			t.unwalk(r, kind)
			if d >= t.thr[kind] {
				t.unwalkedSlow++
			}
			return true
		}
		if t.thr[kind] <= 0 || d >= t.thrExact[kind] {
			return false
		}
	}
	stride := t.stride2
	if d < t.thr[kind] {
		if t.opt.WalkBudget > 0 && t.spent() >= t.walkAllow {
			t.unwalk(r, kind)
			return true
		}
		stride = t.stride
	}
	if stride <= 1 {
		return false
	}
	t.rng ^= t.rng << 13 // xorshift64
	t.rng ^= t.rng >> 7
	t.rng ^= t.rng << 17
	if t.rng%uint64(stride) != 0 {
		t.leaveOut(r, kind)
		t.sampledOut++
		t.sampledOutNs += d
		return true
	}
	t.weight = stride
	return false
}

// overCeiling says whether the walk has emptied its ceiling's bucket
// (under t.mu): overload (a server of thousands of threads, whose slowest
// tenth alone costs more than ceilingFactor times the budget), in which
// even the slowest gaps are left out until the bucket fills again.
func (t *Tracker) overCeiling() bool {
	return t.opt.WalkBudget > 0 && t.spent() >= t.ceilAllow
}

// unwalk leaves r out over the walk's budget or ceiling, counted as
// unwalked (under t.mu).
func (t *Tracker) unwalk(r critpath.Read, kind int) {
	t.leaveOut(r, kind)
	t.unwalked++
	t.unwalkedNs += r.End - r.Start
}

// leaveOut takes r unwalked: its duration, not its causes (under t.mu).
func (t *Tracker) leaveOut(r critpath.Read, kind int) {
	g := critpath.Gap{Read: r}
	c, _ := t.counted(g)
	c.Unwalked = true
	t.roll.AddUnwalked(c)
	t.sample[kind].add(c)
	t.iv.add(c)
	if t.opt.Recorder != nil {
		t.opt.Recorder.AddUnwalked(g)
	}
}

// counted counts g's duration in the distributions and histograms of its
// kind, walked or not (under t.mu), and returns its compact form and its
// kind: 0 for a first token's (the first write, Index 0, and the gap
// after it, compacted to Index 0; see gap), 1 for a later gap.
func (t *Tracker) counted(g critpath.Gap) (Gap, int) {
	c := CompactOf(g)
	d := uint64(max(c.Duration(), 0))
	switch g.Index {
	case 0:
		t.ttfb.Add(d)
		t.iv.ttfb.Add(d)
		t.iv.firsts++
		addLog2(&t.ttfbH, d)
		return c, 0
	case 1:
		c.Index = 0
		return c, 0
	}
	t.itl.Add(d)
	t.iv.itl.Add(d)
	addLog2(&t.gapH, d)
	return c, 1
}

// gap takes a walked gap (under t.mu).
//
// A response's first write (Index 0) and the gap after it (Index 1) are
// its first token's: a server that writes its headers before the prefill
// (llama-server, vLLM, llmsim) makes the first write the headers and the
// gap after it the prefill, which is no inter-token gap. Both count as the
// first token's (the TTFT band, compact Index 0); the gaps, their
// distribution, their baseline and their band are from the second token
// on (Index 2 and later). A server that writes no headers first loses one
// gap a stream to the first token's side.
//
// A gap walked as one of the sample below the p90 (skip) stands for its
// weight, the stride: it is summed that many times in the totals (the
// causes, the neighbours, the connections, the normal gap's per-cause
// medians), and the estimate's variance grows by its share.
func (t *Tracker) gap(g critpath.Gap) {
	w := max(t.weight, 1)
	t.weight = 1
	if !t.gapBaseOK && g.Index > 0 {
		t.gapBase, _ = t.baseline()
		t.gapBaseOK = true
	}
	switch {
	case g.Index == 1:
		t.pre.first(g, t.gapBase)
	case g.Index > 1:
		t.pre.decode(&g, t.gapBase)
	}
	c, kind := t.counted(g)
	if kind == 1 {
		t.slow.Add(g)
	}
	t.roll.AddWeighted(c, w)
	t.agg.AddWeighted(g, w)
	t.iv.agg.AddWeighted(g, w)
	if w > 1 {
		t.sampledIn++
		f := float64(w*w - w)
		for k, v := range g.Ns {
			t.estVar[k] += f * float64(v) * float64(v)
		}
		t.estVar[critpath.NumCauses] += f * float64(g.Duration()) * float64(g.Duration())
	}
	cb := t.conns[g.Port]
	if cb == nil {
		if len(t.conns) < maxConnsKept {
			cb = &connBlame{}
			t.conns[g.Port] = cb
		} else {
			cb = &t.other
		}
	}
	cb.gaps += w
	for k, v := range g.Ns {
		cb.ns[k] += int64(w) * v
	}
	t.sample[kind].add(c)
	t.iv.add(c)
	if t.opt.Recorder != nil {
		t.opt.Recorder.Add(g)
	}
}

// addLog2 counts ns in a kernel-style log2 histogram (hist.Log2).
func addLog2(h *hist.Log2, ns uint64) {
	i := min(bits.Len64(ns), len(h.Slots)-1)
	h.Slots[i]++
	h.Count++
	h.SumNs += ns
}

// baseline is the normal gap now and its name (under t.mu).
func (t *Tracker) baseline() (critpath.Baseline, string) {
	if t.opt.Baseline != nil {
		return *t.opt.Baseline, t.opt.BaselineName
	}
	b, from, ok := t.roll.Baseline()
	if !ok {
		return b, "none yet"
	}
	return b, fmt.Sprintf("quiet window at +%.0fs", float64(from-t.origin)/1e9)
}

// matchBand compares a live p99 band with the baseline run's own
// (Options.BaselineBand), when there is one.
func (t *Tracker) matchBand(b *result.CriticalBand) {
	if t.opt.Baseline != nil && t.opt.BaselineBand != nil {
		MatchBand(b, t.opt.BaselineBand, t.opt.BaselineName)
	}
}

// Normal is the live view's normal gap now: the rolling baseline's
// quietest full window (or the baseline given), with its gaps' median and
// p99 after the first token; not OK before a window closes (the incident
// rule judges against a full window only, never the one it is in).
type Normal struct {
	Base            critpath.Baseline
	Name            string
	MedianNs, P99Ns int64
	OK              bool
}

// Normal is the normal gap now.
func (t *Tracker) Normal() Normal {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.opt.Baseline != nil {
		return Normal{Base: *t.opt.Baseline, Name: t.opt.BaselineName, OK: true}
	}
	var n Normal
	st, ok := t.roll.quietPast()
	n.Base, n.Name = st.base, fmt.Sprintf("quiet window at +%.0fs", float64(st.start-t.origin)/1e9)
	n.MedianNs, n.P99Ns, n.OK = st.median, st.p99, ok
	return n
}

// Origin is the session's first span's time (0: none yet).
func (t *Tracker) Origin() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.take(false)
	return t.origin
}

// Targets are the server's processes the session follows (tgids).
func (t *Tracker) Targets() map[uint32]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.take(false)
	return maps.Clone(t.feed.Tgids)
}

// IntervalView is the live view of one interval.
type IntervalView struct {
	// AtS is the interval's end, seconds since the session's first span.
	AtS     float64 `json:"at_seconds"`
	Seconds float64 `json:"seconds"`
	// Streams writing within the last 10 s; Gaps and FirstBytes walked in
	// the interval.
	Streams    int     `json:"streams"`
	Gaps       int     `json:"gaps"`
	GapsPerSec float64 `json:"gaps_per_second"`
	FirstBytes int     `json:"first_bytes"`
	// ITL is the server-side gap between two writes, TTFB the first write
	// after a request's last byte.
	ITL  *result.Distribution `json:"itl,omitempty"`
	TTFB *result.Distribution `json:"ttfb,omitempty"`
	// ITLP99 is the interval's slowest 1% of gaps against the baseline.
	ITLP99 *result.CriticalBand `json:"itl_p99,omitempty"`
	// Sampled: the interval had more gaps than it keeps for its band
	// (65,536, a uniform sample); ITLP99BoundsMs is then the 95% interval
	// of the band's start (the p99 of every gap of the interval).
	Sampled        bool                    `json:"band_sampled,omitempty"`
	ITLP99BoundsMs *[2]float64             `json:"itl_p99_from_bounds_ms,omitempty"`
	Neighbours     []result.NoisyNeighbour `json:"noisy_neighbours"`
	Baseline       string                  `json:"baseline"`
}

// Interval ends the interval at now and returns its view.
func (t *Tracker) Interval(now int64, seconds float64) IntervalView {
	t.mu.Lock()
	defer t.mu.Unlock()
	base, name := t.baseline()
	iv := &t.iv
	v := IntervalView{AtS: float64(now-t.origin) / 1e9, Seconds: seconds, Streams: t.streams.Active(now),
		Gaps: int(iv.itl.Count()), FirstBytes: iv.firsts, ITL: distOf(&iv.itl), TTFB: distOf(&iv.ttfb),
		ITLP99: Band(slices.Values(iv.gaps), base, false), Sampled: iv.sampled(), ITLP99BoundsMs: iv.bandBounds(false), Baseline: name}
	t.matchBand(v.ITLP99)
	if t.origin == 0 {
		v.AtS = 0
	}
	if seconds > 0 {
		v.GapsPerSec = float64(v.Gaps) / seconds
	}
	v.Neighbours, _ = NeighboursOf(&iv.agg, t.feed.Tgids, 3)
	if len(t.views) >= t.opt.Intervals {
		t.views = slices.Delete(t.views, 0, 1)
		t.dropped++
	}
	t.views = append(t.views, v)
	if q := t.ivExact(); q > 0 {
		t.ivLast = q
	}
	iv.reset()
	iv.firsts = 0
	iv.agg = critpath.Aggregate{}
	iv.itl.Reset()
	iv.ttfb.Reset()
	return v
}

func distOf(h *hist.LogLinear) *result.Distribution {
	if h.Count() == 0 {
		return nil
	}
	return &result.Distribution{Count: int(h.Count()), P50Ms: h.Quantile(0.5) / 1e6, P99Ms: h.Quantile(0.99) / 1e6,
		MaxMs: float64(h.Max()) / 1e6}
}

// Line is the interval's line of `attach`.
func (v IntervalView) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "live     streams=%-3d gaps/s=%-7.1f", v.Streams, v.GapsPerSec)
	if v.ITL != nil {
		fmt.Fprintf(&b, " itl p50=%s p99=%s", msStr(v.ITL.P50Ms), msStr(v.ITL.P99Ms))
	}
	if v.TTFB != nil {
		fmt.Fprintf(&b, " ttfb p50=%s p99=%s", msStr(v.TTFB.P50Ms), msStr(v.TTFB.P99Ms))
	}
	if v.ITLP99 != nil && v.ITLP99.ExcessMs > 0 {
		fmt.Fprintf(&b, "  p99 gap's excess: %s", sharesStr(v.ITLP99.ExcessShares, 3))
	}
	if len(v.Neighbours) > 0 {
		fmt.Fprintf(&b, "  neighbours: %s %.0f%%", v.Neighbours[0].Label(), 100*v.Neighbours[0].Share)
	}
	if v.Sampled && v.ITLP99BoundsMs != nil {
		fmt.Fprintf(&b, "  (band sampled: p99 in %s-%s, 95%%)", msStr(v.ITLP99BoundsMs[0]), msStr(v.ITLP99BoundsMs[1]))
	}
	return b.String()
}

func msStr(ms float64) string {
	switch {
	case ms >= 100:
		return fmt.Sprintf("%.0fms", ms)
	case ms >= 1:
		return fmt.Sprintf("%.1fms", ms)
	}
	return fmt.Sprintf("%.0fµs", ms*1000)
}

// sharesStr is the n largest shares, "cpu_runqueue 72% server_compute 20%".
func sharesStr(m map[string]float64, n int) string {
	names := critpath.CauseNames()
	slices.SortStableFunc(names, func(a, b string) int {
		switch {
		case m[a] > m[b]:
			return -1
		case m[a] < m[b]:
			return 1
		}
		return 0
	})
	var parts []string
	for _, c := range names[:min(n, len(names))] {
		if m[c] >= 0.005 {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", c, 100*m[c]))
		}
	}
	return strings.Join(parts, " ")
}

// Summary is the live section of a result: what the grouping and the walk
// saw over the session.
type Summary struct {
	// OriginNs is the session's first span (CLOCK_MONOTONIC ns): the zero
	// of the intervals' at_seconds and of the slowest gaps' start_seconds.
	OriginNs int64 `json:"origin_ns"`
	// Streams: response streams seen (requests and streams begun before
	// the session); Active: writing within the last 10 s at the end.
	Streams int `json:"streams"`
	Active  int `json:"active"`
	// Gaps walked after the first write of a stream, FirstBytes first
	// writes after a request.
	Gaps       uint64 `json:"gaps"`
	FirstBytes uint64 `json:"first_bytes"`
	// UnwalkedGaps were left unwalked, the walk over its budget
	// (Options.WalkBudget): below the p90 of its kind so far (or, over
	// the ceiling, at or above it: UnwalkedSlowGaps), in the
	// distributions, the bands' samples and the counts, not in the causes
	// (critical_path's totals cover the walked gaps); UnwalkedMs their
	// time.
	UnwalkedGaps uint64  `json:"unwalked_gaps,omitempty"`
	UnwalkedMs   float64 `json:"unwalked_ms,omitempty"`
	// UnwalkedSlowGaps, of UnwalkedGaps, were at or above the p90: left
	// out with the walk at its ceiling, four times its budget (overload:
	// the p99 bands' causes then cover their walked gaps only).
	UnwalkedSlowGaps uint64 `json:"unwalked_slow_gaps,omitempty"`
	// Sampling is set when the walk sampled the gaps below the p90
	// (Options.WalkTarget): critical_path's totals are then estimates.
	Sampling *Sampling            `json:"sampling,omitempty"`
	ITL      *result.Distribution `json:"itl,omitempty"`
	TTFB     *result.Distribution `json:"ttfb,omitempty"`
	// Accuracy: the distributions are log-linear histograms (quantiles
	// within 1.6%); the p99 bands are of a uniform sample of at most
	// 16,384 gaps of each kind when BandSampled, and then ITLP99BoundsMs
	// and TTFTP99BoundsMs are the 95% intervals of the bands' starts (the
	// p99 of every gap of the session).
	Accuracy        string      `json:"accuracy"`
	BandSampled     bool        `json:"band_sampled"`
	ITLP99BoundsMs  *[2]float64 `json:"itl_p99_from_bounds_ms,omitempty"`
	TTFTP99BoundsMs *[2]float64 `json:"ttft_p99_from_bounds_ms,omitempty"`
	Grouping        StreamStats `json:"grouping"`
	// Connections are the connections with the most gap time (at most 20),
	// each cause's time on them.
	Connections []ConnBlame `json:"connections"`
	Cost        Cost        `json:"cost"`
	// Intervals are the interval views, oldest first (the last 720);
	// IntervalsDropped those left out before them.
	Intervals        []IntervalView `json:"intervals"`
	IntervalsDropped int            `json:"intervals_dropped,omitempty"`
}

// Sampling says how the walk sampled the gaps below the running p90 of
// their kind (Options.WalkTarget) and how far its estimates may be off.
type Sampling struct {
	Note string `json:"note"`
	// TargetCPU is the walk's target, a fraction of one CPU; Stride the
	// sample's stride at the end (1 in Stride walked), StrideMax the
	// largest it took.
	TargetCPU float64 `json:"walk_target_cpu"`
	Stride    int     `json:"stride"`
	StrideMax int     `json:"stride_max"`
	// StrideP90 and StrideP90Max are the stride of the gaps between the
	// p90 and the exact quantile of their kind (sampled once Stride is at
	// its bound and the walk still costs over its target).
	StrideP90    int `json:"stride_p90_exact"`
	StrideP90Max int `json:"stride_p90_exact_max"`
	// ExactFrom is the quantile of the first tokens' gaps and of the
	// later ones' from which they were walked whole at the end: the lower
	// end of the 95% interval of their running p99.
	ExactFrom [2]float64 `json:"exact_from_quantile"`
	// Walked: gaps walked as the sample, each standing for the stride it
	// was drawn at; Out: those left out of it, OutMs their time.
	Walked uint64  `json:"sampled_walked"`
	Out    uint64  `json:"sampled_out"`
	OutMs  float64 `json:"sampled_out_ms"`
	// BoundsMs is the 95% bound (± ms, 1.96 standard errors of the
	// Horvitz-Thompson estimate, its variance estimated from the sample)
	// of each cause's total in critical_path's totals_ms, and under
	// "gaps" of its gap_ms. A cause no walked gap of the sample showed
	// has a bound of 0: a rare cause of the short gaps can be missed.
	BoundsMs map[string]float64 `json:"totals_bound_ms"`
}

// sampling is the sample's account (nil: every gap below the p90 was
// walked; under t.mu).
func (t *Tracker) sampling() *Sampling {
	if t.sampledOut == 0 && t.strideMax <= 1 {
		return nil
	}
	s := &Sampling{Note: "below the running p90 of their kind, the gaps were walked as a uniform sample of 1 in the stride (between the p90 and exact_from_quantile, 1 in stride_p90_exact), each walked one standing for its stride: critical_path's totals, gap count, noisy neighbours and connections are estimates within totals_bound_ms (95%); the gaps from exact_from_quantile up (the lower end of the running p99's 95% interval), so the p99 bands, and the slowest gaps are walked whole (a band's gaps walked as the sample instead: its unwalked)",
		TargetCPU: t.opt.WalkTarget, Stride: t.stride, StrideMax: t.strideMax, StrideP90: t.stride2, StrideP90Max: t.stride2Max, ExactFrom: t.exactQ,
		Walked: t.sampledIn, Out: t.sampledOut,
		OutMs: Ms(t.sampledOutNs), BoundsMs: map[string]float64{}}
	for c, name := range critpath.CauseNames() {
		s.BoundsMs[name] = Ms(int64(z95 * math.Sqrt(t.estVar[c])))
	}
	s.BoundsMs["gaps"] = Ms(int64(z95 * math.Sqrt(t.estVar[critpath.NumCauses])))
	return s
}

// Result is what `attach --output json` adds: the critical path over the
// session, in the shape of `run`'s, and the live section.
type Result struct {
	CriticalPath *result.CriticalPath `json:"critical_path"`
	Live         Summary              `json:"live"`
}

// Result is the session's result so far (Finish first at the end); name
// gives a thread's comm where the engine has none.
func (t *Tracker) Result(now int64, name func(uint32) string) Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.take(false)
	base, bname := t.baseline()
	cp := &result.CriticalPath{Rule: Rule, Baseline: bname, Causes: critpath.CauseNames(),
		Gaps: t.agg.Gaps, GapMs: Ms(t.agg.GapNs), TotalsMs: CausesMs(t.agg.Ns),
		UnexplainedFraction: t.agg.Fraction(critpath.Unexplained),
		NormalITLMs:         CausesMs(base.ITL), NormalTTFTMs: CausesMs(base.TTFT),
		ITLP99:  Band(slices.Values(t.sample[1].gaps), base, false),
		TTFTP99: Band(slices.Values(t.sample[0].gaps), base, true),
		Slowest: []result.CriticalGap{}}
	t.matchBand(cp.ITLP99)
	cp.NoisyNeighbours, cp.SelfContention = NeighboursOf(&t.agg, t.feed.Tgids, 10)
	for _, g := range t.slow.Sorted() {
		cp.Slowest = append(cp.Slowest, CriticalGap(g, base, t.origin, name))
	}
	StatsOf(&cp.Stats, t.feed.Stats, t.eng.Stats())
	cp.Stats.PrefillMovedMs, cp.Stats.PrefillGaps = Ms(t.pre.moved), t.pre.gaps
	gs := t.streams.Stats
	cp.Stats.Reads = gs.Gaps + gs.FirstBytes
	return Result{CriticalPath: cp, Live: Summary{
		OriginNs: t.origin,
		Streams:  int(gs.Requests + gs.Unrequested), Active: t.streams.Active(now),
		Gaps: t.itl.Count(), FirstBytes: t.ttfb.Count(), ITL: distOf(&t.itl), TTFB: distOf(&t.ttfb),
		UnwalkedGaps: t.unwalked, UnwalkedMs: Ms(t.unwalkedNs), UnwalkedSlowGaps: t.unwalkedSlow, Sampling: t.sampling(),
		Accuracy:       "quantiles of log-linear histograms, within 1.6%; p99 bands of a uniform sample of at most 16384 gaps of each kind when band_sampled",
		BandSampled:    t.sample[0].sampled() || t.sample[1].sampled(),
		ITLP99BoundsMs: t.sample[1].bandBounds(false), TTFTP99BoundsMs: t.sample[0].bandBounds(true),
		Grouping: gs, Intervals: slices.Clone(t.views), IntervalsDropped: t.dropped,
		Connections: t.connections(20), Cost: t.cost(now),
	}}
}

// maxConnsKept bounds the connections whose gaps are summed apart.
const maxConnsKept = 4096

type connBlame struct {
	gaps int
	ns   [critpath.NumCauses]int64
}

// ConnBlame is one connection's gaps (by its client port): where a slow
// reader, or a client behind a slow link, shows as its own.
type ConnBlame struct {
	Port     uint16             `json:"port"`
	Gaps     int                `json:"gaps"`
	GapMs    float64            `json:"gap_ms"`
	CausesMs map[string]float64 `json:"causes_ms"`
	Top      string             `json:"top_cause"`
}

// Cost is the live view's own time.
type Cost struct {
	// WalkSeconds is the CPU time of the walks (the advancing thread's CPU
	// clock; wall time inside the walk where the caller did not lock a
	// thread for it), RecordSeconds the CPU time of taking Records spans:
	// their queueing on the readers' threads, estimated from a sample of
	// them (RecordsTimed), and their taking in batches, by a reader or at
	// an advance (TakeSeconds, each batch timed whole on its thread's CPU
	// clock where the tracker has ThreadClock).
	WalkSeconds   float64 `json:"walk_seconds"`
	RecordSeconds float64 `json:"record_seconds"`
	TakeSeconds   float64 `json:"take_seconds"`
	Records       uint64  `json:"records"`
	// RecordsTimed: the spans whose queueing was timed (one in 64, on
	// the monotonic clock, less its own cost, RecordClockNs), from which the queueing's
	// part of RecordSeconds is estimated (their mean times Records);
	// RecordSecondsError is RecordSeconds' relative 95% bound, 1.96
	// standard errors of that mean over the whole (0 when fewer than two
	// were timed: no bound).
	RecordsTimed       uint64  `json:"records_timed"`
	RecordSecondsError float64 `json:"record_seconds_error"`
	// RecordClockNs is the clock's own cost taken out of each timed
	// intake (the median of 31 empty readings, read again every 1,024
	// timed intakes; the latest).
	RecordClockNs int64 `json:"record_clock_ns"`
	// CPUFraction is both over the session's time, a fraction of one CPU.
	CPUFraction float64 `json:"cpu_fraction"`
}

// Totals are the cumulative figures the daemon exports.
type Totals struct {
	// Gap and FirstByte are histograms of the server-side gaps and of the
	// times to first byte.
	Gap, FirstByte hist.Log2
	// CauseNs is the critical-path time of every gap walked, per cause.
	CauseNs [critpath.NumCauses]int64
	Active  int
	// Dropped: spans over the bound of history; Late: spans that came
	// after their gaps were walked.
	Dropped, Late uint64
	// Unwalked: gaps the walk left out, over its budget (in Gap and
	// FirstByte, not in CauseNs); SampledOut: those left out of the
	// sample below the p90 (Options.WalkTarget; in Gap and FirstByte,
	// and CauseNs estimates them); UnwalkedSlow: of Unwalked, those at or
	// above the p90, over the walk's ceiling.
	Unwalked, SampledOut, UnwalkedSlow uint64
}

// Totals are the figures so far.
func (t *Tracker) Totals(now int64) Totals {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.take(false)
	out := Totals{Gap: cloneLog2(t.gapH), FirstByte: cloneLog2(t.ttfbH), CauseNs: t.agg.Ns,
		Active: t.streams.Active(now), Dropped: t.feed.Stats.Dropped, Late: t.eng.Stats().Late, Unwalked: t.unwalked, SampledOut: t.sampledOut, UnwalkedSlow: t.unwalkedSlow}
	return out
}

// Stores are the sizes of the tracker's bounded stores, each with its
// bound: the spans of history held for the walk (MaxHeld, Options.MaxHeld:
// a lag's and the open gaps' worth), the connections whose writes are
// grouped into streams (MaxStreams, idle ones expire) and those whose
// gaps are summed apart (MaxConns, the rest as one).
type Stores struct {
	Held, MaxHeld       int
	Streams, MaxStreams int
	Conns, MaxConns     int
}

// Stores are the stores' sizes now.
func (t *Tracker) Stores() Stores {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.take(false)
	return Stores{Held: t.feed.Held, MaxHeld: t.feed.MaxHeld, Streams: t.streams.Len(), MaxStreams: t.streams.MaxConns,
		Conns: len(t.conns), MaxConns: maxConnsKept}
}

func cloneLog2(h hist.Log2) hist.Log2 {
	h.Slots = slices.Clone(h.Slots)
	return h
}

// connections are the n connections with the most gap time (under t.mu).
func (t *Tracker) connections(n int) []ConnBlame {
	out := []ConnBlame{}
	for port, cb := range t.conns {
		var tot int64
		for _, v := range cb.ns {
			tot += v
		}
		m := CausesMs(cb.ns)
		out = append(out, ConnBlame{Port: port, Gaps: cb.gaps, GapMs: Ms(tot), CausesMs: m, Top: TopOf(m)})
	}
	slices.SortFunc(out, func(a, b ConnBlame) int {
		switch {
		case a.GapMs > b.GapMs:
			return -1
		case a.GapMs < b.GapMs:
			return 1
		}
		return int(a.Port) - int(b.Port)
	})
	return out[:min(n, len(out))]
}

// cost is the tracker's time so far (under t.mu).
func (t *Tracker) cost(now int64) Cost {
	t.inMu.Lock()
	records, timed, recordNs, recordSq, clockNs := t.records, t.timed, t.recordNs, t.recordSq, t.clockNs
	t.inMu.Unlock()
	c := Cost{WalkSeconds: float64(t.walkNs) / 1e9, Records: records, RecordsTimed: timed, RecordClockNs: clockNs,
		TakeSeconds: float64(t.takeNs) / 1e9}
	c.RecordSeconds = c.TakeSeconds
	if timed > 0 {
		mean := float64(recordNs) / float64(timed)
		queued := mean * float64(records) / 1e9
		c.RecordSeconds += queued
		if n := float64(timed); timed > 1 && mean > 0 && c.RecordSeconds > 0 {
			v := max(recordSq/n-mean*mean, 0) * n / (n - 1)
			c.RecordSecondsError = z95 * math.Sqrt(v/n) / mean * queued / c.RecordSeconds
		}
	}
	if d := now - t.origin; t.origin != 0 && d > 0 {
		c.CPUFraction = (c.WalkSeconds + c.RecordSeconds) * 1e9 / float64(d)
	}
	return c
}
