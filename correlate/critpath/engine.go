package critpath

import (
	"cmp"
	"slices"
	"sort"
	"strings"

	"github.com/bpfbench/bpfbench/result/cause"
)

// Options tune an Engine; the zero value takes the defaults.
type Options struct {
	// MaxDepth is how many wakeup edges the walk follows from the sending
	// thread (default 4); a sleep beyond it is server_sleep, "depth limit".
	MaxDepth int
	// Keep is how much history behind the watermark is kept for reads not
	// added yet (default 30 s): a gap starting earlier than that finds
	// part of its history forgotten (unexplained, counted in
	// Stats.BeforeHorizon). SetFloor narrows it when the caller knows
	// where the open gaps start.
	Keep int64
	// Margin is kept before the oldest open gap (default 100 ms).
	Margin int64
	// Classify gives the cause of a sleep ended by a task outside the
	// target (default DefaultClassify).
	Classify func(waker Thread) Cause
	// Held gives the cause of a run-queue wait behind a task outside the
	// targets (default DefaultHeld).
	Held func(holder Thread) Cause
	// CPUs says how many CPUs the process tgid may run on (its affinity:
	// its cpuset); 0, or CPUs nil: not known, and the sibling rule takes
	// every wait behind the targets' own threads as their work.
	CPUs func(tgid uint32) int

	// scanThreads: the timed-wait rule searches every thread's history,
	// as before the active index (the index's reference, in tests);
	// indexAlways: it reads the index however few the threads (tests).
	scanThreads, indexAlways bool
}

// DefaultHeld: a wait for a CPU held by the block layer's kernel worker
// is io_block, the disk's work on the server's CPU (as block interrupts
// inside a running stretch are); any other holder's is cpu_runqueue.
func DefaultHeld(h Thread) Cause {
	if BlockWorker(h.Comm) {
		return IOBlock
	}
	return CPURunqueue
}

// BlockWorker reports whether comm names a kernel thread that does the
// block layer's work on a CPU (cause.BlockWorker).
func BlockWorker(comm string) bool { return cause.BlockWorker(comm) }

// DefaultClassify: a kernel thread of the block layer, a file system's
// journal or memory reclaim (kworker, kblockd, jbd2, nvme, scsi_, dm-,
// loop, kswapd) ended an IO wait: io_block; any other task (a lock or a
// pipe released by another process): server_sleep.
func DefaultClassify(w Thread) Cause {
	for _, p := range []string{"kworker", "kblockd", "jbd2", "nvme", "scsi_", "dm-", "dm_", "loop", "kswapd", "blkcg"} {
		if strings.HasPrefix(w.Comm, p) {
			return IOBlock
		}
	}
	return ServerSleep
}

// Stats count what the engine saw, rejected, forgot and guessed.
type Stats struct {
	Events    uint64 // events added
	Malformed uint64 // rejected: end before start, unknown state
	// Late: events at or before a watermark already flushed; gaps flushed
	// before they came did not see them.
	Late uint64
	// Dropped: events older than the history horizon, forgotten at once.
	Dropped uint64
	// Pruned: history items forgotten as the horizon moved.
	Pruned uint64
	Gaps   uint64 // gaps flushed
	// BeforeHorizon: reads starting before the history horizon when added.
	BeforeHorizon uint64
	// NoArrival: gaps with no arrival on their port up to the read (the
	// send-to-read time is network, "no arrival seen"); NoSend: no send on
	// the port before the arrival (or the read); Guessed: of those, gaps
	// whose server time was walked on the thread that last ran (see
	// Engine.Flush); NoThread: none had run.
	NoArrival, NoSend, Guessed, NoThread uint64
	DepthLimited                         uint64 // sleeps not followed past Options.MaxDepth
	Hops                                 uint64 // net-rx sleeps followed to another target thread's send
	Cycles                               uint64 // sleeps not followed: the waker already on the path
	DataEdges                            uint64 // walks that followed data to its writer (Data)
	SiblingWaits                         uint64 // running steps given to a sibling thread's wait for a CPU
	BehindTarget                         uint64 // run-queue waits behind a target thread: the server's own work
	Owed                                 uint64 // of those, the parts repaying an outside holder's time: cpu_runqueue
	Interrupts                           uint64 // running steps that gave a part to block or network interrupts
	Steals                               uint64 // running steps that gave a part to the hypervisor's steal
	Stopped                              uint64 // steps of a thread stopped (a stop signal, a tracer, a freezer)
	// NoEdgeSleeps: sleeps with no wakeup edge to follow (a timer, an
	// outside task, an unknown waker) covered, in part at least, by the
	// states of the server's other threads meanwhile (timedwait.go); so
	// too the folded naps of a thread on the path (Engine.folded) and of
	// a holder (Engine.heldByTarget).
	NoEdgeSleeps uint64
	// Folded: running steps that gave a part to the short naps and waits
	// folded inside their segment (Folded).
	Folded uint64
}

type history struct {
	th Thread
	// proc is the tgid it is indexed under in Engine.procs (0: none).
	proc uint32
	segs []Segment // sorted by Start
	// segBase is the array segs was last allocated as (roomFor).
	segBase []Segment
	cuda    []CUDACall // sorted by Start
	// maxCuda is the longest CUDA call held.
	maxCuda int64
	// hint is from's last answer (searchNear).
	hint int
}

// hintSteps is how far from its last answer searchNear looks before it
// falls back to a binary search.
const hintSteps = 8

// searchNear is sort.Search(n, f), f false then true over [0, n): the
// first index where f holds. It looks within hintSteps of *hint, its last
// answer, first (the walk asks of nearby times in turn), and keeps the
// answer there.
func searchNear(n int, hint *int, f func(int) bool) int {
	i := min(max(*hint, 0), n)
	for range hintSteps {
		switch {
		case i < n && !f(i):
			i++
		case i > 0 && f(i-1):
			i--
		default:
			*hint = i
			return i
		}
	}
	i = sort.Search(n, f)
	*hint = i
	return i
}

// from returns the index of h's last segment that starts at or before x,
// 0 when none does: where a walk over the segments that overlap x starts.
func (h *history) from(x int64) int {
	s := h.segs
	return max(searchNear(len(s), &h.hint, func(j int) bool { return s[j].Start > x })-1, 0)
}

// Engine builds each gap's critical path as events arrive. Events may be
// added in any order as long as each comes before the Flush whose
// watermark passes its time (a segment's End, a CUDA call's End, a send's
// or an arrival's Time, a read's End); later ones are counted Late. Memory
// is bounded by the history of the open gaps (see Options.Keep, SetFloor),
// and each event costs O(log n) to add, each gap O(log n) per step.
type Engine struct {
	opt Options
	// skip, when set, is asked before each read is walked: true takes
	// the read as handled (its caller's own account) and walks nothing.
	skip    func(Read) bool
	threads map[uint32]*history
	// lastHist is thread's last answer: a switch-in's segments come
	// one after another, of one thread (a map lookup each was a tenth of
	// the live view's intake).
	lastHist *history
	// procs are the target threads of each process (tgid), for the
	// sibling rule of running steps; procRunq their Runnable segments
	// with holders, by Start, so that the rule looks at one list.
	procs    map[uint32][]uint32
	procRunq map[uint32]*runqIndex
	// active is every target thread's segments but its sleeps, by Start,
	// and withCUDA the threads with CUDA calls held (whose sleeps may be
	// inside one): the timed-wait rule takes its claims from these rather
	// than from every thread's history (timedwait.go).
	active   activeIndex
	withCUDA map[uint32]bool
	sends    map[uint16][]Send // by Time
	// allSends are every port's sends by Time, for the hops: a sleep
	// woken by a network receive follows the latest send of another
	// target thread on a connection that is no client's (a gateway woken
	// by the engine's chunk).
	allSends []Send
	// allSendsBase is the array allSends was last allocated as (roomFor).
	allSendsBase []Send
	arrivals     map[uint16][]Arrival // by Time
	holds        map[uint16][]Hold    // by Start
	maxHold      int64                // the longest hold held
	data         map[uint32][]Data    // by the reader's process, by Read
	// clientWaits are the load generator's run-queue waits, by Start.
	clientWaits   []ClientWait
	maxClientWait int64
	// last is each port's last walked gap: the next token's chunk is the
	// next send and the next arrival after that gap's (a byte stream is
	// in order).
	last    map[uint16]lastChunk
	pending []Read
	flushed int64 // the last watermark flushed
	horizon int64 // history before it is forgotten
	floor   int64
	stats   Stats

	// the walk's scratch
	steps   []Step
	overlay []Step
	// sibWaits and cuts are scratch space of siblingWaits and emitCut's callers.
	sibWaits, crowd []siblingWait
	cuts            []Step
	ups, downs      []int64 // crowded's
	crowdParts      []span  // siblingWaits' crowded stretches
	// claims (by rank), claimSteps, free, free2 and painted are meanwhile's;
	// histList the threads' histories by tid (nil: to rebuild).
	claims      [numRanks][]claim
	claimSteps  []Step
	histList    []*history
	free, free2 []span
	painted     []painted
	path        []uint32
	port        uint16
}

// lastChunk is the send and arrival a port's last gap matched.
type lastChunk struct {
	request, index int
	send, arrival  int64 // minNs: none matched
}

const (
	maxNs = int64(^uint64(0) >> 1)
	minNs = -maxNs - 1
)

// New returns an engine.
func New(opt Options) *Engine {
	if opt.MaxDepth <= 0 {
		opt.MaxDepth = 4
	}
	if opt.Keep <= 0 {
		opt.Keep = 30e9
	}
	if opt.Margin <= 0 {
		opt.Margin = 100e6
	}
	if opt.Classify == nil {
		opt.Classify = DefaultClassify
	}
	if opt.Held == nil {
		opt.Held = DefaultHeld
	}
	return &Engine{
		opt:      opt,
		threads:  map[uint32]*history{},
		procs:    map[uint32][]uint32{},
		procRunq: map[uint32]*runqIndex{},
		withCUDA: map[uint32]bool{},
		sends:    map[uint16][]Send{},
		arrivals: map[uint16][]Arrival{},
		holds:    map[uint16][]Hold{},
		data:     map[uint32][]Data{},
		last:     map[uint16]lastChunk{},
		flushed:  minNs,
		horizon:  minNs,
		floor:    maxNs,
	}
}

// Stats returns the counters.
func (e *Engine) Stats() Stats { return e.stats }

// SetFloor promises that every read added from now on starts at or after
// ns, so that history before it (less the margin) can be forgotten even
// within Options.Keep.
func (e *Engine) SetFloor(ns int64) { e.floor = ns }

// SetSkip sets what FlushFunc asks before it walks a read: a read for
// which skip returns true is not walked and not handed to FlushFunc's fn
// (skip took it). nil walks every read.
func (e *Engine) SetSkip(skip func(Read) bool) { e.skip = skip }

// insert puts x, whose key is k, into s sorted by key, cheaply when it
// comes in order.
func insert[T any](s []T, x T, k int64, key func(*T) int64) []T {
	i := len(s)
	if i > 0 && key(&s[i-1]) > k {
		// Most come a few places out of order (a run-queue wait ends
		// after the segments that started later): look back a few first.
		for i--; i > 0 && len(s)-i < insertProbe && key(&s[i-1]) > k; i-- {
		}
		if i > 0 && key(&s[i-1]) > k {
			i = sort.Search(i, func(j int) bool { return key(&s[j]) > k })
		}
	}
	s = append(s, x)
	if i < len(s)-1 {
		copy(s[i+1:], s[i:])
		s[i] = x
	}
	return s
}

// insertProbe: insert looks back this many places before it searches.
const insertProbe = 8

// roomFor makes room for one more at the end of s, a history whose front
// prune cuts off as time passes (s = s[cut:]): base is the array s was
// last allocated as (base[:0]). Once the slots forgotten at base's front
// are half as many as s holds, s moves back to the front instead of into
// a larger array: a history pruned as fast as it grows then allocates
// nothing (a new array, its zeroing and the collector's scan of the old
// one were a third of the live view's intake). The slots left behind are
// cleared. A history that shrank to a quarter of its array (a burst
// passed) moves to one of twice its size instead.
func roomFor[T any](s, base []T) ([]T, []T) {
	if len(s) < cap(s) {
		return s, base
	}
	if front := cap(base) - cap(s); front > 0 && 2*front >= len(s) {
		if 4*len(s) < cap(base) {
			s = append(make([]T, 0, 2*len(s)+1), s...)
			return s, s[:0]
		}
		n := copy(base[:len(s)], s)
		clear(base[n : front+n])
		return base[:n], base
	}
	// Twice what it holds: the next move is then to the front.
	s = slices.Grow(s, len(s)+1)
	return s, s[:0]
}

func segStart(s *Segment) int64     { return s.Start }
func cudaStart(c *CUDACall) int64   { return c.Start }
func sendTime(s *Send) int64        { return s.Time }
func holdStart(h *Hold) int64       { return h.Start }
func dataRead(d *Data) int64        { return d.Read }
func waitStart(w *ClientWait) int64 { return w.Start }
func arrivalTime(a *Arrival) int64 {
	return a.Time
}

// admit counts an event with time t and says whether to keep it.
func (e *Engine) admit(t int64) bool {
	e.stats.Events++
	if t <= e.flushed {
		e.stats.Late++
	}
	if t < e.horizon {
		e.stats.Dropped++
		return false
	}
	return true
}

func (e *Engine) thread(tid uint32) *history {
	if e.lastHist != nil && e.lastHist.th.Tid == tid {
		return e.lastHist
	}
	h := e.threads[tid]
	if h == nil {
		h = &history{th: Thread{Tid: tid}}
		e.threads[tid] = h
		e.histList = nil // rebuilt by meanwhile
	}
	e.lastHist = h
	return h
}

// AddSegment adds a state segment of a target thread.
func (e *Engine) AddSegment(s Segment) {
	if s.End <= s.Start || s.State == None || s.State > Stopped {
		e.stats.Events++
		e.stats.Malformed++
		return
	}
	if !e.admit(s.End) {
		return
	}
	h := e.thread(s.Thread.Tid)
	if s.Thread.Comm != "" || s.Thread.Tgid != 0 {
		h.th = s.Thread
	}
	if h.th.Tgid != h.proc {
		e.unindex(h)
		if h.th.Tgid != 0 {
			e.procs[h.th.Tgid] = append(e.procs[h.th.Tgid], h.th.Tid)
			h.proc = h.th.Tgid
		}
	}
	h.segs, h.segBase = roomFor(h.segs, h.segBase)
	h.segs = insert(h.segs, s, s.Start, segStart)
	if s.State != Sleep && !s.mostlyOff() {
		a := s
		a.Thread = h.th
		e.active.add(a)
	}
	if s.State == Runnable && len(s.Holders) > 0 && h.th.Tgid != 0 {
		rq := e.procRunq[h.th.Tgid]
		if rq == nil {
			rq = &runqIndex{}
			e.procRunq[h.th.Tgid] = rq
		}
		s.Thread = h.th
		rq.add(s)
	}
}

// add inserts s by its Start.
func (rq *runqIndex) add(s Segment) {
	rq.segs, rq.base = roomFor(rq.segs, rq.base)
	rq.segs = insert(rq.segs, s, s.Start, segStart)
	rq.maxLen = max(rq.maxLen, s.End-s.Start)
}

// prune forgets the segments ending at or before hz, and says how many.
func (rq *runqIndex) prune(hz int64) int {
	// Those ending before the horizon, found among the ones that start
	// before it less the longest's length. The few of those still held
	// move up to just before the rest, which stays where it is (moving
	// the whole index to its array's front on every prune was most of
	// the live view's pruning).
	cut := sort.Search(len(rq.segs), func(j int) bool { return rq.segs[j].Start >= hz-rq.maxLen })
	w := cut
	var gone int64
	for j := cut - 1; j >= 0; j-- {
		if sg := &rq.segs[j]; sg.End > hz {
			w--
			rq.segs[w] = *sg
		} else {
			gone = max(gone, sg.End-sg.Start)
		}
	}
	if w == 0 {
		return 0
	}
	clear(rq.segs[:w])
	rq.segs = rq.segs[w:]
	// The longest is of those held: one long wait, gone, would otherwise
	// widen every later search back from a step (a host's stall of a
	// second once made each step of a live view scan a second of its
	// process's waits for good).
	if gone >= rq.maxLen {
		rq.maxLen = 0
		for i := range rq.segs {
			rq.maxLen = max(rq.maxLen, rq.segs[i].End-rq.segs[i].Start)
		}
	}
	return w
}

// runqIndex is a process's Runnable segments with holders, by Start.
type runqIndex struct {
	segs   []Segment
	base   []Segment // the array segs was last allocated as (roomFor)
	maxLen int64     // the longest held
	// hintEnd, hintStart: siblingWaits' last answers (searchNear).
	hintEnd, hintStart int
}

// unindex takes h out of its process's entry in procs.
func (e *Engine) unindex(h *history) {
	if h.proc == 0 {
		return
	}
	ts := e.procs[h.proc]
	for i, t := range ts {
		if t == h.th.Tid {
			ts = append(ts[:i], ts[i+1:]...)
			break
		}
	}
	if len(ts) == 0 {
		delete(e.procs, h.proc)
	} else {
		e.procs[h.proc] = ts
	}
	h.proc = 0
}

// AddCUDA adds a blocking CUDA call.
func (e *Engine) AddCUDA(c CUDACall) {
	if c.End <= c.Start {
		e.stats.Events++
		e.stats.Malformed++
		return
	}
	if !e.admit(c.End) {
		return
	}
	h := e.thread(c.Tid)
	h.cuda = insert(h.cuda, c, c.Start, cudaStart)
	e.withCUDA[c.Tid] = true
	h.maxCuda = max(h.maxCuda, c.End-c.Start)
}

// AddSend adds a server send.
func (e *Engine) AddSend(s Send) {
	if e.admit(s.Time) {
		e.sends[s.Port] = insert(e.sends[s.Port], s, s.Time, sendTime)
		e.allSends, e.allSendsBase = roomFor(e.allSends, e.allSendsBase)
		e.allSends = insert(e.allSends, s, s.Time, sendTime)
	}
}

// AddArrival adds an arrival at the client's socket.
func (e *Engine) AddArrival(a Arrival) {
	if e.admit(a.Time) {
		e.arrivals[a.Port] = insert(e.arrivals[a.Port], a, a.Time, arrivalTime)
	}
}

// AddHold adds a stretch during which a connection was held back.
func (e *Engine) AddHold(h Hold) {
	if h.End <= h.Start {
		e.stats.Events++
		e.stats.Malformed++
		return
	}
	if e.admit(h.End) {
		e.holds[h.Port] = insert(e.holds[h.Port], h, h.Start, holdStart)
		e.maxHold = max(e.maxHold, h.End-h.Start)
	}
}

// AddClientWait adds a run-queue wait of a load generator's thread.
func (e *Engine) AddClientWait(w ClientWait) {
	if w.End <= w.Start {
		e.stats.Events++
		e.stats.Malformed++
		return
	}
	if e.admit(w.End) {
		e.clientWaits = insert(e.clientWaits, w, w.Start, waitStart)
		e.maxClientWait = max(e.maxClientWait, w.End-w.Start)
	}
}

// AddData adds data passed between target threads.
func (e *Engine) AddData(d Data) {
	if d.Read < d.Written || d.Reader.Tid == 0 || d.Writer.Tid == 0 || d.Reader.Tid == d.Writer.Tid {
		e.stats.Events++
		e.stats.Malformed++
		return
	}
	if e.admit(d.Read) {
		k := d.Reader.Tgid
		if k == 0 {
			k = d.Reader.Tid
		}
		e.data[k] = insert(e.data[k], d, d.Read, dataRead)
	}
}

// AddRead adds a token gap; it is walked by the Flush whose watermark
// reaches its End.
func (e *Engine) AddRead(r Read) {
	if r.End < r.Start {
		e.stats.Events++
		e.stats.Malformed++
		return
	}
	e.stats.Events++
	if r.End <= e.flushed {
		e.stats.Late++
	}
	if r.Start < e.horizon {
		e.stats.BeforeHorizon++
	}
	e.pending = append(e.pending, r)
}

// Pending is the number of reads waiting for the watermark.
func (e *Engine) Pending() int { return len(e.pending) }

// Retained is the number of history items held (segments, CUDA calls,
// sends, counted twice as they are indexed twice, arrivals, holds).
func (e *Engine) Retained() int {
	n := 0
	for _, h := range e.threads {
		n += len(h.segs) + len(h.cuda)
	}
	for _, s := range e.sends {
		n += len(s)
	}
	for _, a := range e.arrivals {
		n += len(a)
	}
	for _, h := range e.holds {
		n += len(h)
	}
	for _, d := range e.data {
		n += len(d)
	}
	return n + len(e.allSends) + len(e.clientWaits)
}

// Flush walks every pending read that ends at or before watermark (every
// event with a time up to it has been added) and returns their gaps,
// ordered by End, Request, Index; then it forgets history older than the
// oldest pending read, SetFloor's floor and watermark-Options.Keep, less
// Options.Margin.
func (e *Engine) Flush(watermark int64) []Gap {
	var out []Gap
	e.FlushFunc(watermark, func(g Gap) {
		g.Steps = slices.Clone(g.Steps)
		out = append(out, g)
	})
	return out
}

// FlushFunc is Flush that hands each gap to fn in turn instead of
// returning them. The gap's Steps are the engine's own buffer, valid
// until fn returns: a caller that keeps a gap clones its Steps. A run
// walks tens of thousands of gaps of tens of steps each and keeps a few,
// so a copy of every gap's steps was a third of what a run allocated.
func (e *Engine) FlushFunc(watermark int64, fn func(Gap)) {
	keep := e.pending[:0]
	var ready []Read
	for _, r := range e.pending {
		if r.End <= watermark {
			ready = append(ready, r)
		} else {
			keep = append(keep, r)
		}
	}
	clear(e.pending[len(keep):])
	e.pending = keep
	slices.SortFunc(ready, func(a, b Read) int {
		return cmp.Or(cmp.Compare(a.End, b.End), cmp.Compare(a.Request, b.Request), cmp.Compare(a.Index, b.Index), cmp.Compare(a.Start, b.Start))
	})
	for _, r := range ready {
		if e.skip != nil && e.skip(r) {
			continue
		}
		fn(e.gap(r))
	}
	e.stats.Gaps += uint64(len(ready))
	e.flushed = max(e.flushed, watermark)
	h := min(e.floor, watermark)
	if e.floor == maxNs && watermark < maxNs-e.opt.Keep {
		// No floor promised: keep Options.Keep for reads still to come.
		// With one, the history before it goes (it held every run's
		// last 30 s of thread states: 50 MB on llmsim at 8 req/s).
		h = min(h, watermark-e.opt.Keep)
	}
	for _, r := range e.pending {
		h = min(h, r.Start)
	}
	if h > minNs+e.opt.Margin {
		h -= e.opt.Margin
	}
	if h > e.horizon {
		e.horizon = h
		e.prune()
	}
}

// prune forgets history ending before the horizon. It keeps each port's
// latest send and arrival and each thread's latest segment (the walk
// needs "the latest before", and a thread's last Runnable tells that it
// runs now) unless they are older than the horizon by Options.Keep too.
func (e *Engine) prune() {
	hz := e.horizon
	stale := hz - e.opt.Keep
	for tid, h := range e.threads {
		e.pruneThread(tid, h, hz, stale)
	}
	for tgid, rq := range e.procRunq {
		e.stats.Pruned += uint64(rq.prune(hz))
		if len(rq.segs) == 0 {
			delete(e.procRunq, tgid)
		}
	}
	e.active.prune(hz)
	if cut := sort.Search(len(e.allSends), func(j int) bool { return e.allSends[j].Time >= hz }); cut > 0 {
		clear(e.allSends[:cut])
		e.allSends = e.allSends[cut:]
	}
	e.prunePorts(hz, stale)
	if cut := sort.Search(len(e.clientWaits), func(j int) bool { return e.clientWaits[j].Start >= hz-e.maxClientWait }); cut > 0 {
		clear(e.clientWaits[:cut])
		e.clientWaits = e.clientWaits[cut:]
		e.stats.Pruned += uint64(cut)
	}
}

// pruneThread forgets h's segments and CUDA calls ending before hz,
// keeping its latest segment, and forgets the thread itself once all it
// holds is older than stale.
func (e *Engine) pruneThread(tid uint32, h *history, hz, stale int64) {
	if n := len(h.segs); n > 0 {
		cut := sort.Search(n, func(j int) bool { return h.segs[j].Start >= hz })
		if cut > 0 && h.segs[cut-1].End > hz {
			cut--
		}
		cut = min(cut, n-1)
		if cut > 0 {
			clear(h.segs[:cut])
			h.segs = h.segs[cut:]
			e.stats.Pruned += uint64(cut)
		}
	}
	if n := len(h.cuda); n > 0 {
		cut := sort.Search(n, func(j int) bool { return h.cuda[j].Start >= hz-h.maxCuda })
		if cut > 0 {
			clear(h.cuda[:cut])
			h.cuda = h.cuda[cut:]
			e.stats.Pruned += uint64(cut)
		}
		if len(h.cuda) == 0 {
			delete(e.withCUDA, tid)
		}
	}
	if (len(h.segs) == 0 || h.segs[len(h.segs)-1].End < stale) && (len(h.cuda) == 0 || h.cuda[len(h.cuda)-1].End < stale) {
		e.stats.Pruned += uint64(len(h.segs) + len(h.cuda))
		e.unindex(h)
		delete(e.threads, tid)
		if e.lastHist == h {
			e.lastHist = nil
		}
		delete(e.withCUDA, tid)
		e.histList = nil
	}
}

// prunePorts forgets each port's sends, arrivals, data reads and holds
// ending before hz, keeping the latest send, arrival and read unless
// older than stale.
func (e *Engine) prunePorts(hz, stale int64) {
	for p, s := range e.sends {
		e.sends[p] = pruneTimes(s, hz, stale, sendTime, &e.stats.Pruned)
		if len(e.sends[p]) == 0 {
			delete(e.sends, p)
		}
	}
	for p, a := range e.arrivals {
		e.arrivals[p] = pruneTimes(a, hz, stale, arrivalTime, &e.stats.Pruned)
		if len(e.arrivals[p]) == 0 {
			delete(e.arrivals, p)
		}
	}
	for p, d := range e.data {
		e.data[p] = pruneTimes(d, hz, stale, dataRead, &e.stats.Pruned)
		if len(e.data[p]) == 0 {
			delete(e.data, p)
		}
	}
	for p, hs := range e.holds {
		// Sorted by Start: a hold that starts before hz-maxHold ended
		// before hz.
		cut := sort.Search(len(hs), func(j int) bool { return hs[j].Start >= hz-e.maxHold })
		e.stats.Pruned += uint64(cut)
		if cut == len(hs) {
			delete(e.holds, p)
		} else if cut > 0 {
			clear(hs[:cut])
			e.holds[p] = hs[cut:]
		}
	}
}

func pruneTimes[T any](s []T, hz, stale int64, key func(*T) int64, pruned *uint64) []T {
	n := len(s)
	if n == 0 {
		return s
	}
	cut := sort.Search(n, func(j int) bool { return key(&s[j]) >= hz })
	if cut == n && key(&s[n-1]) >= stale {
		cut = n - 1 // keep the latest
	}
	*pruned += uint64(cut)
	if cut == n {
		return nil
	}
	return s[cut:]
}
