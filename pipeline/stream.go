package pipeline

import (
	"container/heap"
	"math"
	"sync"
	"time"

	"github.com/bpfbench/bpfbench/result"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/internal/clock"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/enginemetrics"
)

// The streaming correlation of `bpfbench run`. Spans are joined with the
// token intervals while the run goes, so memory does not grow with its
// length:
//
//   - every span goes to the correlation engine (as a cause's activity) and
//     to a 100 ms bucket of the trace;
//   - a request's intervals are added when the load generator hands the
//     request over; every tick the intervals that end before the
//     watermark (now minus the collectors' delivery lag) are measured
//     (each cause's active time in them) into a compact log;
//   - spans and buckets are forgotten once no interval still to come can
//     overlap them: the floor is the earliest start of a request not
//     finished yet, known from the load generator's schedule;
//   - the baseline (the run's medians) and the attribution are computed
//     from the log at the end, exactly as from all the spans at once.
const (
	// streamLag is how far behind the clock the watermark runs: the
	// readers drain their ring buffers every ~100 ms and spans reach the
	// recorder when they end, so a span ending before the watermark has
	// arrived. A span longer than this that covers an interval's end
	// arrives after the interval was measured: it is counted as late
	// (logged), and that interval does not count it.
	streamLag = 2 * time.Second
	// streamTick is how often intervals are measured and buckets flushed.
	streamTick = 100 * time.Millisecond
	// streamWindow bounds how long spans are held for a request that has
	// not finished: a request running longer gets its early intervals
	// measured against what is left.
	streamWindow = 30 * time.Second
	// defaultMaxHeld bounds the spans held at once; beyond, new spans are
	// dropped and counted.
	defaultMaxHeld = 2 << 20
)

// schedule knows, from the requests the load generator has finished, the
// earliest time at which a request still to finish can have started.
type schedule struct {
	floor0 int64 // before the load began: every measured request starts after
	// offsets are the fixed send offsets when they may be out of order
	// (a trace, requests with offsets), and suffixMin[i] the least offset
	// from i on; nil when send times grow with the index (arrivals).
	offsets, suffixMin []int64
	runStart           int64 // the load's start, from a finished request's schedule
	next               int   // lowest index not finished
	done               map[int]int64
	last               int64 // ScheduledNs of request next-1
}

// newSchedule starts a schedule of sends at offs, the fixed send offsets
// of the requests when they may be out of order (nil: send times grow with
// the index); floor0 is the clock before the load began.
func newSchedule(offs []int64, floor0 int64) *schedule {
	s := &schedule{floor0: floor0, done: map[int]int64{}, runStart: math.MinInt64}
	if offs != nil {
		s.offsets = offs
		s.suffixMin = make([]int64, len(offs)+1)
		s.suffixMin[len(offs)] = math.MaxInt64
		for i := len(offs) - 1; i >= 0; i-- {
			s.suffixMin[i] = min(offs[i], s.suffixMin[i+1])
		}
	}
	return s
}

func (s *schedule) finish(r *loadgen.Record) {
	if r.Index < s.next {
		return
	}
	if s.offsets != nil && s.runStart == math.MinInt64 && r.Index < len(s.offsets) {
		s.runStart = r.ScheduledNs - s.offsets[r.Index]
	}
	s.done[r.Index] = r.ScheduledNs
	for {
		at, ok := s.done[s.next]
		if !ok {
			break
		}
		delete(s.done, s.next)
		s.last = at
		s.next++
	}
}

// floor is a lower bound of the start of every request not finished.
func (s *schedule) floor() int64 {
	if s.offsets != nil {
		if s.runStart == math.MinInt64 {
			return s.floor0
		}
		if s.next >= len(s.offsets) {
			return math.MaxInt64
		}
		return s.runStart + s.suffixMin[s.next]
	}
	if s.next == 0 {
		return s.floor0
	}
	return max(s.last, s.floor0)
}

// runStream is the recorder of a run: it correlates as spans and
// requests arrive, and lays the trace out as it goes (trace.go).
type runStream struct {
	mu      sync.Mutex
	eng     *correlate.Engine
	log     correlate.Log
	sched   *schedule
	spans   uint64
	dropped uint64
	maxHeld int
	lag     int64
	window  int64
	tr      *traceStream
	crit    *critStream    // the critical path (critpath.go)
	gw      *gatewayStream // the hops through a gateway (gateway.go); nil: none
	now     func() int64   // the clock (CLOCK_MONOTONIC ns)

	// What the recorders hand over waits in q (spool.go) until replayed:
	// every tick while live, after the load while deferred.
	q        spool
	replayMu sync.Mutex
	deferred bool  // spooling while the load runs
	spoolMax int64 // the spool's bound in bytes while deferred
	liveAt   int64 // the clock when the spool passed its bound (0: never)

	stop chan struct{}
	done chan struct{}
}

func newRunStream(maxSpans int, offsets []int64, tr *traceStream) *runStream {
	max := maxSpans
	if max == 0 {
		max = defaultMaxHeld
	}
	s := &runStream{
		eng:     correlate.NewEngine(correlate.Baseline{}),
		sched:   newSchedule(offsets, clock.Now()),
		maxHeld: max,
		lag:     int64(streamLag),
		window:  int64(streamWindow),
		tr:      tr,
		now:     clock.Now,
	}
	s.eng.SetFloor(s.sched.floor0)
	s.crit = newCritStream(max, s.sched.floor0)
	if tr != nil {
		tr.crit = s.crit
	}
	return s
}

// Record takes a span from a section's reader.
func (s *runStream) Record(sp collectors.Span) {
	s.q.pushSpan(&sp)
}

// deferUntilFinish makes the stream spool what it is handed until finish,
// or until the spool holds maxBytes (then it correlates live).
func (s *runStream) deferUntilFinish(maxBytes int64) {
	s.deferred, s.spoolMax = maxBytes > 0, maxBytes
}

// record correlates a span (under s.mu).
func (s *runStream) record(sp collectors.Span) {
	s.crit.record(sp)
	if s.gw != nil {
		s.gw.record(sp)
	}
	if sp.Client || sp.Kind > collectors.SpanTCP {
		return // the critical path's alone (sends, arrivals, forks, the load generator's)
	}
	if s.eng.Retained()+s.tr.held >= s.maxHeld {
		s.dropped++
		return
	}
	s.spans++
	if a, ok := activityOf(sp); ok {
		s.eng.AddActivity(a)
	}
	s.tr.add(sp)
}

// setGateway starts keeping what the gateway section needs.
func (s *runStream) setGateway(g *gatewayStream) {
	s.mu.Lock()
	s.gw = g
	s.mu.Unlock()
}

// gatewayReport is the gateway section, once the stream is finished.
func (s *runStream) gatewayReport(res *loadgen.Result, comm string, via []int, sm *enginemetrics.Result) *result.Gateway {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gw == nil {
		return nil
	}
	return s.gw.report(res, comm, via, sm)
}

// AddRecord takes a request the load generator has finished.
func (s *runStream) AddRecord(r *loadgen.Record) {
	if r.Warmup {
		return
	}
	s.q.pushRecord(r)
}

// addRecord correlates a finished request (under s.mu).
func (s *runStream) addRecord(r *loadgen.Record) {
	for _, iv := range intervalsOfRecord(nil, r) {
		s.eng.AddInterval(iv)
	}
	s.crit.addRecord(r)
	s.sched.finish(r)
}

func (s *runStream) measured(m correlate.Measurement) {
	s.log.Append(m)
	s.tr.measured(m)
}

// replay correlates what the spool holds, in the order it came, each
// tick advancing the watermark to where it was at that tick.
func (s *runStream) replay() {
	s.replayMu.Lock()
	defer s.replayMu.Unlock()
	cs, strs, recs := s.q.take()
	s.mu.Lock()
	for k, c := range cs {
		// Each chunk is let go once replayed: a long spool's memory
		// falls as the replay goes instead of after it.
		cs[k] = nil
		for i := range c {
			switch e := &c[i]; e.kind() {
			case spoolSpan:
				s.record(e.sp.span(strs))
			case spoolRecord:
				s.addRecord(recs[e.t])
			case spoolTick:
				s.advanceAt(e.t, false)
			}
		}
		if k < 4 {
			s.q.recycle(c)
		}
	}
	s.mu.Unlock()
}

// advance replays the spool, then measures what the watermark has passed
// and flushes the trace buckets no interval to come can need; final
// measures everything.
func (s *runStream) advance(final bool) {
	s.replay()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceAt(s.now(), final)
}

// advanceAt advances the watermark to its place at the clock's now (under
// s.mu).
func (s *runStream) advanceAt(now int64, final bool) {
	wm := now - s.lag
	floor := max(min(s.sched.floor(), wm), wm-s.window)
	if final {
		wm, floor = math.MaxInt64, math.MaxInt64
	}
	s.eng.SetFloor(floor)
	h := s.eng.Measure(wm, s.measured)
	s.crit.advance(wm, floor)
	s.tr.write(s.tr.detach(h, final))
}

// tick is one beat of the stream's clock: live, it advances; deferred, it
// is spooled for the replay, unless the spool passed its bound.
func (s *runStream) tick() {
	now := s.now()
	n := s.q.pushTick(now)
	if s.deferred && n*spoolEntryBytes > s.spoolMax {
		s.deferred, s.liveAt = false, now
	}
	if !s.deferred {
		s.replay()
	}
}

// start ticks until finish.
func (s *runStream) start() {
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTicker(streamTick)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.tick()
			}
		}
	}()
}

// finish stops ticking and measures every interval left.
func (s *runStream) finish() {
	if s.stop != nil {
		close(s.stop)
		<-s.done
		s.stop = nil
	}
	s.advance(true)
}

// late is the number of spans dropped over the bound of spans held, or
// arrived after intervals they may overlap were measured.
func (s *runStream) late() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped + s.eng.Late()
}

// heap of the slowest gaps, for the trace's detail.
type gapHeap []*gapDetail

func (h gapHeap) Len() int           { return len(h) }
func (h gapHeap) Less(i, j int) bool { return h[i].m.Duration() < h[j].m.Duration() }
func (h gapHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *gapHeap) Push(x any)        { *h = append(*h, x.(*gapDetail)) }
func (h *gapHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

var _ heap.Interface = (*gapHeap)(nil)
