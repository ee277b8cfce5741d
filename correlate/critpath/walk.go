package critpath

import (
	"cmp"
	"slices"
	"sort"
	"strconv"
)

// Step is one part of a gap's critical path.
type Step struct {
	Start, End int64
	// Thread is the thread whose state this is (zero for the client, the
	// network and holes with no thread).
	Thread Thread
	State  State
	Cause  Cause
	// Depth is the number of wakeup edges followed to reach Thread (0: the
	// sending thread).
	Depth int
	// Other is the task that held the CPU (runnable) or woke the sleep.
	Other Thread
	// Wake is what ended the sleep (sleeps only).
	Wake WakeKind
	// Port is the connection a network receive woke the sleep for, when
	// known (Wake WakeNetRx).
	Port uint16
	// Note is the CUDA call (gpu_sync), or why the walk stopped here.
	Note string
}

// Duration is End-Start.
func (s Step) Duration() int64 { return s.End - s.Start }

// Detail names who is to blame beyond the cause: the CPU's holder
// ("stress-ng[4242]"), the waker ("woken by kworker/u8:3[57]",
// "woken by softirq-block"), the CUDA call, or the note.
func (s Step) Detail() string {
	var d string
	switch {
	case s.State == Runnable && (s.Cause == CPURunqueue || s.Other != (Thread{})):
		d = "holder unknown"
		if s.Other != (Thread{}) {
			d = s.Other.String()
		}
	case s.State == Stopped:
		switch {
		case s.Wake == WakeThread:
			d = "resumed by " + s.Other.String()
		case s.End > s.Start:
			d = "resumed by " + s.Wake.String()
		}
	case s.State == Sleep && s.Cause != GPUSync:
		switch s.Wake {
		case WakeThread:
			d = "woken by " + s.Other.String()
		default:
			d = "woken by " + s.Wake.String()
		}
		if s.Port != 0 {
			d += " port " + strconv.Itoa(int(s.Port))
		}
	}
	if s.Note != "" {
		if d != "" {
			return d + " (" + s.Note + ")"
		}
		return s.Note
	}
	return d
}

// Notes of steps.
const (
	NoteNoEvents     = "no events"            // a hole in a thread's history
	NoteNoThread     = "no events for thread" // the thread has no history at all
	NoteNoSender     = "no sending thread"    // no send and no target thread had run
	NoteNoArrival    = "no arrival seen: network and client"
	NoteDepthLimit   = "depth limit"
	NoteCycle        = "cycle"
	NoteWakerUnknown = "waker unknown"
	NoteOtherConn    = "another connection"
	NoteHeld         = "connection held back: " // + the hold's kind
	NoteHop          = "upstream chunk in flight"
	NoteReaderPaused = "the reader paused: receive backpressure"
	NoteClientWaited = "the load generator waited for a CPU"
	NoteSiblingWait  = "a thread of the same process waited for a CPU"
	// NoteSiblingCrowded: the sibling waited behind the process's own
	// threads while fewer of them ran than it has CPUs (siblingWaits).
	NoteSiblingCrowded = "a thread of the same process waited behind its own while other tasks held its other CPUs"
	NoteBehindTarget   = "waited for a CPU held by the server's own thread"
	NoteOwed           = "the server's own thread held the CPU, repaid the time this outsider took"
	NoteIRQBlock       = "block interrupts on its CPU"
	NoteIRQNet         = "network interrupts on its CPU"
	NoteSteal          = "its vCPU stolen by the hypervisor"
	NoteBlockWorker    = "the block layer's worker held its CPU"
	// NoteFolded*: a running stretch's share of the short intervals off
	// its CPU that the scheduler collector folded (Folded).
	NoteFoldedSleep = "short naps inside its running stretch (folded: the waker not recorded)"
	NoteFoldedWait  = "short waits for a CPU inside its running stretch (folded: the holder not recorded)"
	NoteFoldedIO    = "short D waits inside its running stretch (folded)"
)

// Gap is a token gap's critical path.
type Gap struct {
	Read
	// Sent and Arrived are s(k) and r(k) as used, clamped into the gap
	// (Start <= Sent <= Arrived <= End); with no send or arrival seen
	// they fall back as Flush documents.
	Sent, Arrived int64
	// NoSend, NoArrival: no send (arrival) was matched; Guessed: the
	// server time was walked on the thread that last ran.
	NoSend, NoArrival, Guessed bool
	// Steps cover [Start, End] in order, without gaps or overlaps.
	Steps []Step
	// Ns is each cause's time; it sums to the gap's duration.
	Ns [NumCauses]int64
}

// gap builds r's critical path. The matching rule: r(k) is the latest
// arrival on r.Port at or before c(k) = r.End; s(k) the latest send on
// the port at or before r(k); for a token after the first, whose previous
// token was the port's last gap, the first arrival (send) after that
// gap's within those bounds. Both are clamped into the gap: a chunk
// that arrived before c(k-1) waited in the socket the whole gap. With no
// arrival, r(k) = c(k) and the send-to-read time is net_backpressure
// ("no arrival seen"); with no send, s(k) = r(k) and the server time is
// walked on the target thread that last ran before it (Guessed), or is
// unexplained when none had.
func (e *Engine) gap(r Read) Gap {
	g := Gap{Read: r}
	e.steps = e.steps[:0]
	e.port = r.Port
	a, c := r.Start, r.End
	// A later token of the request on the port whose previous token was
	// the port's last gap: its chunk is the first arrival (send) after
	// that gap's, as the stream is in order; a chunk that waited in the
	// client's socket, or behind a lost segment, is not mistaken for the
	// later chunk that arrived (was sent) last.
	prev, seq := e.last[r.Port]
	seq = seq && r.Index > 0 && prev.request == r.Request && prev.index == r.Index-1
	matched := lastChunk{request: r.Request, index: r.Index, send: minNs, arrival: minNs}
	rk, limit := c, c
	if r.AtSend {
		// The live view's gap ends at the server's send: the chunk is the
		// send at c(k), and nothing of it is the network's or a client's;
		// or the chunk was sent at SentAt and held by the connection.
		seq = false
		if r.SentAt > 0 && r.SentAt < c {
			limit = r.SentAt
		}
	} else {
		rk, limit = e.matchArrival(&r, seq, prev.arrival, &g, &matched)
	}
	sk, tid, haveSender := e.matchSend(&r, seq, prev.send, limit, rk, &matched)
	e.last[r.Port] = matched
	if !haveSender {
		tid, haveSender = e.guessSender(&g, sk)
	}
	if g.NoArrival {
		e.stats.NoArrival++
	}
	g.Sent, g.Arrived = sk, rk
	e.serverSteps(a, sk, tid, haveSender)
	e.overlayHolds(a, sk)
	e.deliverySteps(&r, &g, sk, rk)
	g.Steps = e.steps
	for _, s := range g.Steps {
		g.Ns[s.Cause] += s.End - s.Start
	}
	return g
}

// matchArrival finds r's chunk among the port's arrivals: r(k) clamped
// into the gap, and the arrival time that bounds the send (c(k) with
// none, when it marks g NoArrival). With seq, the chunk is the first
// arrival after prevArrival, the previous token's.
func (e *Engine) matchArrival(r *Read, seq bool, prevArrival int64, g *Gap, matched *lastChunk) (rk, limit int64) {
	a, c := r.Start, r.End
	arr := e.arrivals[r.Port]
	if len(arr) == 0 {
		g.NoArrival = true
		return c, c
	}
	i := sort.Search(len(arr), func(j int) bool { return arr[j].Time > c })
	if seq && prevArrival != minNs {
		if j := sort.Search(i, func(j int) bool { return arr[j].Time > prevArrival }); j < i {
			i = fragmentsEnd(j, i, func(k int) int64 { return arr[k].Time }) + 1
		}
	}
	if i == 0 {
		g.NoArrival = true
		return c, c
	}
	limit = arr[i-1].Time
	matched.arrival = limit
	return min(max(limit, a), c), limit
}

// matchSend finds r's chunk among the port's sends at or before limit:
// s(k) clamped into [r.Start, rk] (rk with none) and the sending thread.
// With seq, the chunk is the first send after prevSend, the previous
// token's. A live-view chunk written before the gap began waited for the
// connection the whole gap.
func (e *Engine) matchSend(r *Read, seq bool, prevSend, limit, rk int64, matched *lastChunk) (sk int64, tid uint32, haveSender bool) {
	a := r.Start
	sk = rk
	if snd := e.sends[r.Port]; len(snd) > 0 {
		i := sort.Search(len(snd), func(j int) bool { return snd[j].Time > limit })
		if seq && prevSend != minNs {
			if j := sort.Search(i, func(j int) bool { return snd[j].Time > prevSend }); j < i {
				i = fragmentsEnd(j, i, func(k int) int64 { return snd[k].Time }) + 1
			}
		}
		if i > 0 {
			sk = min(max(snd[i-1].Time, a), rk)
			tid, haveSender = snd[i-1].Tid, true
			matched.send = snd[i-1].Time
		}
	}
	if r.AtSend && r.SentAt > 0 && r.SentAt <= a {
		// Written before the gap began: the whole gap it waited for
		// the connection.
		sk, haveSender = a, true
	}
	return sk, tid, haveSender
}

// guessSender marks g NoSend and picks the target thread that last ran
// before sk to walk the server time on (Guessed), counting either way.
func (e *Engine) guessSender(g *Gap, sk int64) (uint32, bool) {
	g.NoSend = true
	e.stats.NoSend++
	tid, ok := e.lastRan(sk)
	if ok {
		g.Guessed = true
		e.stats.Guessed++
	} else {
		e.stats.NoThread++
	}
	return tid, ok
}

// serverSteps emits the server's part of a gap, [a, sk]: the walk back
// from tid's send, or unexplained with no thread to walk.
func (e *Engine) serverSteps(a, sk int64, tid uint32, haveSender bool) {
	if sk <= a {
		return
	}
	if haveSender {
		e.path = e.path[:0]
		e.walk(tid, a, sk, 0)
	} else {
		e.emit(Step{Start: a, End: sk, Cause: Unexplained, Note: NoteNoSender})
	}
}

// deliverySteps emits the chunk's way to the reader after its send: in
// flight from sk to its arrival rk, then in the client's socket to r.End.
func (e *Engine) deliverySteps(r *Read, g *Gap, sk, rk int64) {
	c := r.End
	if rk > sk {
		st := Step{Start: sk, End: rk, Cause: NetBackpressure}
		if g.NoArrival {
			st.Note = NoteNoArrival
		}
		e.inFlight(st)
	}
	if c > rk {
		// The chunk in the client's socket: the reader's own pause is
		// backpressure from the reader; the rest is the load generator's
		// read delay.
		lo, hi := max(rk, r.PauseStart), min(c, r.PauseEnd)
		if hi > lo {
			e.emit(Step{Start: rk, End: lo, Cause: Client})
			e.emit(Step{Start: lo, End: hi, Cause: NetBackpressure, Port: r.Port, Note: NoteReaderPaused})
			e.emit(Step{Start: hi, End: c, Cause: Client})
		} else {
			e.emit(Step{Start: rk, End: c, Cause: Client})
		}
	}
}

// fragmentGap is the longest pause between the sends (arrivals) of one
// chunk: a server that writes a chunk in pieces (HTTP chunked framing,
// then the data) sends them back to back, and tokens are a step apart.
const fragmentGap = int64(1_000_000)

// fragmentsEnd is, from index j below n, the last index of the run of
// times (at(k)) each within fragmentGap of the one before: the chunk's
// last piece, so that one chunk's pieces are not taken for the next
// tokens' chunks.
func fragmentsEnd(j, n int, at func(int) int64) int {
	for j+1 < n && at(j+1)-at(j) < fragmentGap {
		j++
	}
	return j
}

// lastRan is the target thread running at t or, failing that, the one
// whose Running segment ended last before t (ties: the lowest tid).
func (e *Engine) lastRan(t int64) (uint32, bool) {
	best, bestAt, found := uint32(0), minNs, false
	for tid, h := range e.threads {
		s := h.segs
		i := sort.Search(len(s), func(j int) bool { return s[j].Start >= t })
		at := minNs
		for j := i - 1; j >= 0; j-- {
			if s[j].State == Running {
				at = min(s[j].End, t)
				break
			}
			if j == len(s)-1 && s[j].State == Runnable && s[j].End <= t {
				at = t // running since (see walk's tail rule)
				break
			}
		}
		if at == minNs {
			continue
		}
		if !found || at > bestAt || (at == bestAt && tid < best) {
			best, bestAt, found = tid, at, true
		}
	}
	return best, found
}

// emit appends a step, merging it into the previous one when they are
// the same thread, state, cause and detail back to back.
func (e *Engine) emit(s Step) {
	if s.End <= s.Start {
		return
	}
	if n := len(e.steps); n > 0 {
		p := &e.steps[n-1]
		if p.End == s.Start && p.Thread == s.Thread && p.State == s.State && p.Cause == s.Cause &&
			p.Depth == s.Depth && p.Other == s.Other && p.Wake == s.Wake && p.Port == s.Port && p.Note == s.Note {
			p.End = s.End
			return
		}
	}
	e.steps = append(e.steps, s)
}

// walk covers [a, b] with thread tid's states, following wakeups.
func (e *Engine) walk(tid uint32, a, b int64, depth int) {
	h := e.threads[tid]
	if h == nil || len(h.segs) == 0 {
		th := Thread{Tid: tid}
		if h != nil {
			th = h.th
		}
		e.emit(Step{Start: a, End: b, Thread: th, Cause: Unexplained, Depth: depth, Note: NoteNoThread})
		return
	}
	e.path = append(e.path, tid)
	defer func() { e.path = e.path[:len(e.path)-1] }()
	if d, ok := e.dataEdge(h, a, b, depth); ok {
		// The data this thread's process read last before b came from
		// another target thread: before the write, the walk is the
		// writer's; from the write on, this thread's (the data waited
		// for its reader).
		e.stats.DataEdges++
		e.walk(d.Writer.Tid, a, d.Written, depth+1)
		a = d.Written
	}
	s := h.segs
	i := h.from(a)
	t := a
	for ; i < len(s) && t < b; i++ {
		sg := &s[i]
		if sg.End <= t {
			continue
		}
		if sg.Start >= b {
			break
		}
		if sg.Start > t {
			e.emit(Step{Start: t, End: sg.Start, Thread: h.th, Cause: Unexplained, Depth: depth, Note: NoteNoEvents})
			t = sg.Start
		}
		y := min(sg.End, b)
		e.piece(h, sg, t, y, depth)
		t = y
	}
	if t < b {
		last := &s[len(s)-1]
		if last.State == Runnable && last.End <= t {
			// The tail rule: a thread whose last segment is Runnable was
			// switched in at its end and has not been switched out yet
			// (its Running segment is delivered when it ends).
			e.running(h, nil, t, b, depth)
		} else {
			e.emit(Step{Start: t, End: b, Thread: h.th, Cause: Unexplained, Depth: depth, Note: NoteNoEvents})
		}
	}
}

// piece covers [x, y], inside segment sg of h.
func (e *Engine) piece(h *history, sg *Segment, x, y int64, depth int) {
	switch sg.State {
	case Running:
		e.running(h, sg, x, y, depth)
	case Runnable:
		e.runnable(h, sg, x, y, depth)
	case IOWait:
		e.emit(Step{Start: x, End: y, Thread: h.th, State: IOWait, Cause: IOBlock, Depth: depth})
	case Stopped:
		// Whatever it waited for, it could not go on: the stop is the
		// cause, and who resumed it is named, not walked.
		e.stats.Stopped++
		st := Step{Start: x, End: y, Thread: h.th, State: Stopped, Cause: ServerStopped, Depth: depth, Wake: sg.Wake.Kind}
		if sg.Wake.Kind == WakeThread {
			st.Other = sg.Wake.Waker
		}
		e.emit(st)
	case Sleep:
		e.cudaSplit(h, x, y, func(x, y int64, call string) {
			if call != "" {
				e.emit(Step{Start: x, End: y, Thread: h.th, State: Sleep, Cause: GPUSync, Depth: depth, Note: call})
				return
			}
			e.sleep(h, sg, x, y, depth)
		})
	}
}

// running: server_compute, or gpu_sync inside a blocking CUDA call (a
// spin-wait on the CPU), less the sibling rule's waits (siblingWaits) and
// the block and network interrupts that ran meanwhile (interrupts). sg is
// the Running segment [x, y] is in, nil when none has been delivered yet.
func (e *Engine) running(h *history, sg *Segment, x, y int64, depth int) {
	e.cudaSplit(h, x, y, func(x, y int64, call string) {
		st := Step{Start: x, End: y, Thread: h.th, State: Running, Cause: ServerCompute, Depth: depth}
		if call != "" {
			st.Cause, st.Note = GPUSync, call
			e.emit(st)
			return
		}
		var irq, off [3]Step
		if sg != nil {
			d := st.End - st.Start
			st, irq = e.interrupts(sg, st)
			st, off = e.folded(sg, st, d)
		}
		if st.End > st.Start {
			e.siblingWaits(h, st)
		}
		for i, s := range off {
			switch {
			case s.End <= s.Start:
			case i == 0:
				// A nap: a sleep with no wakeup edge (timedwait.go).
				e.meanwhile(h, s)
			default:
				e.emit(s)
			}
		}
		for _, s := range irq {
			if s.End > s.Start {
				e.emit(s)
			}
		}
	})
}

// foldedPart is a part d long of Running segment sg's share of ns of its
// folded time off the CPU (where in the segment it fell is not known), at
// most room.
func foldedPart(sg *Segment, ns, d, room int64) int64 {
	seg := sg.End - sg.Start
	if ns <= 0 || seg <= 0 || d <= 0 || room <= 0 {
		return 0
	}
	return min(int64(float64(min(ns, seg))*float64(d)/float64(seg)), room)
}

// folded takes from the end of st, the rest of a part of sg d long, that
// part's share of the time sg's thread was off its CPU in folded
// intervals: its naps, a sleep with no wakeup edge (server_sleep, covered
// with the server's other threads meanwhile); its waits for a CPU,
// cpu_runqueue with no holder known; its D, io_block. A thread that naps
// between short bursts of work (a runtime's monitor, a spin-then-sleep
// barrier, a polling loop) is not read as running throughout.
func (e *Engine) folded(sg *Segment, st Step, d int64) (Step, [3]Step) {
	var out [3]Step
	f, room := sg.Folded, st.End-st.Start
	if f == (Folded{}) || room <= 0 {
		return st, out
	}
	sl := foldedPart(sg, f.Sleep, d, room)
	rq := foldedPart(sg, f.Runq, d, room-sl)
	io := foldedPart(sg, f.IO, d, room-sl-rq)
	end := st.End
	st.End -= sl + rq + io
	out[0] = Step{Start: st.End, End: st.End + sl, Thread: st.Thread, State: Sleep, Cause: ServerSleep, Depth: st.Depth, Note: NoteFoldedSleep}
	out[1] = Step{Start: st.End + sl, End: st.End + sl + rq, Thread: st.Thread, State: Runnable, Cause: CPURunqueue, Depth: st.Depth, Note: NoteFoldedWait}
	out[2] = Step{Start: st.End + sl + rq, End: end, Thread: st.Thread, State: IOWait, Cause: IOBlock, Depth: st.Depth, Note: NoteFoldedIO}
	if sl+rq+io > 0 {
		e.stats.Folded++
	}
	return st, out
}

// interrupts takes from the end of st, a part of sg, its share of sg's
// interrupt and steal time (IRQTime: where in the segment they ran is not
// known), as io_block for block devices and net_backpressure for the
// network (the server lost that time to the disk or the link, on its own
// CPU), and as cpu_runqueue held by the hypervisor for steal (the thread
// waited for a physical CPU while the guest saw it running).
func (e *Engine) interrupts(sg *Segment, st Step) (Step, [3]Step) {
	var out [3]Step
	seg, d := sg.End-sg.Start, st.End-st.Start
	if sg.IRQ == (IRQTime{}) || seg <= 0 || d <= 0 {
		return st, out
	}
	share := func(ns int64) int64 {
		if ns <= 0 {
			return 0
		}
		return int64(float64(min(ns, seg)) * float64(d) / float64(seg))
	}
	blk, net, steal := share(sg.IRQ.Block), share(sg.IRQ.Net), share(sg.IRQ.Steal)
	net = min(net, d-blk)
	steal = min(steal, d-blk-net)
	end := st.End
	st.End -= blk + net + steal
	out[0] = Step{Start: st.End, End: st.End + blk, Thread: st.Thread, State: Running, Cause: IOBlock, Depth: st.Depth, Note: NoteIRQBlock}
	out[1] = Step{Start: st.End + blk, End: st.End + blk + net, Thread: st.Thread, State: Running, Cause: NetBackpressure, Depth: st.Depth, Note: NoteIRQNet}
	out[2] = Step{Start: st.End + blk + net, End: end, Thread: st.Thread, State: Running, Cause: CPURunqueue, Depth: st.Depth, Other: Hypervisor, Note: NoteSteal}
	if blk+net > 0 {
		e.stats.Interrupts++
	}
	if steal > 0 {
		e.stats.Steals++
	}
	return st, out
}

// siblingWait is a stretch a sibling thread waited for a CPU: behind a
// task outside the targets (holder), or behind the targets' own threads
// while fewer of them ran than the process has CPUs (note
// NoteSiblingCrowded, holder the outsider the process waited behind
// most nearby, when one is known).
type siblingWait struct {
	start, end int64
	thread     Thread // the sibling
	holder     Thread
	note       string
}

// siblingWaits emits st (server_compute of h) less the stretches during
// which another thread of h's process was runnable waiting for a CPU
// that others took: cpu_runqueue, the sibling's wait, its holder named.
// A process's threads are taken to work together: a thread pool meets at
// a barrier every step (ggml's, an OpenMP team), where the threads that
// ran spin until the preempted one gets its CPU back, so the step's time
// is the preempted thread's wait, not compute. A wait behind a task
// outside the targets is its holder's. A wait behind the targets' own
// threads is the process's own work while the targets ran on as many
// CPUs as the process may use (more busy threads than CPUs: the server
// contends with itself); while fewer ran (crowded), another of its CPUs
// ran an outsider, the sibling was left behind its own team on one CPU
// (two threads of a pool time-slice a CPU, each spinning for the other,
// while busy threads hold the rest) and the wait is the outsiders'.
func (e *Engine) siblingWaits(h *history, st Step) {
	sibs := e.procs[h.th.Tgid]
	if h.th.Tgid == 0 || len(sibs) < 2 {
		e.emit(st)
		return
	}
	ws := e.sibWaits[:0]
	var most int64
	var outsider Thread
	crowd := e.crowd[:0]
	if rq := e.procRunq[h.th.Tgid]; rq != nil {
		s := rq.segs
		i := searchNear(len(s), &rq.hintEnd, func(j int) bool { return s[j].Start >= st.End })
		j := searchNear(i, &rq.hintStart, func(j int) bool { return s[j].Start >= st.Start-rq.maxLen })
		for ; j < i; j++ {
			sg := &s[j]
			if sg.End <= st.Start {
				continue
			}
			t := sg.Start
			for _, ho := range sg.Holders {
				if ho.Ns <= 0 {
					continue
				}
				end := min(t+ho.Ns, sg.End)
				target := e.isTarget(ho.Thread)
				if !target && ho.Ns > most {
					most, outsider = ho.Ns, ho.Thread
				}
				if lo, hi := max(t, st.Start), min(end, st.End); hi > lo && sg.Thread.Tid != h.th.Tid {
					switch {
					case !target:
						ws = append(ws, siblingWait{lo, hi, sg.Thread, ho.Thread, NoteSiblingWait})
					case e.opt.CPUs != nil:
						crowd = append(crowd, siblingWait{lo, hi, sg.Thread, Thread{}, NoteSiblingCrowded})
					}
				}
				t = end
			}
		}
	}
	ncpu := 0
	if len(crowd) > 0 {
		ncpu = e.opt.CPUs(h.th.Tgid) // asked only when a sibling waited behind its own
	}
	if ncpu <= 1 {
		// Unknown, or one CPU: the holder itself ran during each wait,
		// so never fewer of the targets' threads ran than the CPUs.
		crowd = crowd[:0]
	} else if outsider.Tid == 0 {
		_, outsider = e.starvedBefore(h.th, st.Start, st.End)
	}
	ws = e.crowdedWaits(ws, crowd, ncpu, outsider)
	e.sibWaits, e.crowd = ws, crowd
	if len(ws) == 0 {
		e.emit(st)
		return
	}
	slices.SortFunc(ws, func(a, b siblingWait) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.thread.Tid, b.thread.Tid), cmp.Compare(a.end, b.end))
	})
	cuts := e.cuts[:0]
	for _, w := range ws {
		c := Step{Start: w.start, End: w.end, Thread: w.thread, State: Runnable, Cause: CPURunqueue, Depth: st.Depth, Other: w.holder, Note: w.note}
		if w.holder.Tid != 0 || w.holder.Comm != "" {
			e.held(&c)
		}
		cuts = append(cuts, c)
	}
	e.cuts = cuts
	e.stats.SiblingWaits += uint64(e.emitCut(st, cuts))
}

// crowdedWaits appends to ws the parts of the waits behind the targets'
// own threads (crowd) during which they were crowded, outsider named.
// The targets' running threads are counted once over every wait's
// stretch, not once a wait: a sibling of a busy engine waits behind its
// own many times in a step.
func (e *Engine) crowdedWaits(ws, crowd []siblingWait, ncpu int, outsider Thread) []siblingWait {
	if len(crowd) == 0 {
		return ws
	}
	lo, hi := crowd[0].start, crowd[0].end
	for _, c := range crowd[1:] {
		lo, hi = min(lo, c.start), max(hi, c.end)
	}
	parts := e.crowdParts[:0]
	e.crowded(lo, hi, ncpu, func(x, y int64) { parts = append(parts, span{x, y}) })
	e.crowdParts = parts
	for _, c := range crowd {
		i := sort.Search(len(parts), func(j int) bool { return parts[j].end > c.start })
		for ; i < len(parts) && parts[i].start < c.end; i++ {
			ws = append(ws, siblingWait{max(parts[i].start, c.start), min(parts[i].end, c.end), c.thread, outsider, c.note})
		}
	}
	return ws
}

// crowded calls fn with the parts of [x, y] during which fewer of the
// targets' threads ran than ncpu (adjacent parts joined).
func (e *Engine) crowded(x, y int64, ncpu int, fn func(x, y int64)) {
	ups, downs := e.ups[:0], e.downs[:0]
	if e.opt.scanThreads || (!e.opt.indexAlways && len(e.threads) <= scanThreadsUpTo) {
		// A few threads: each one's segments searched (the active index
		// reads every bucket from x less its longest entry).
		for _, o := range e.histories() {
			s := o.segs
			for i := sort.Search(len(s), func(j int) bool { return s[j].End > x }); i < len(s) && s[i].Start < y; i++ {
				if s[i].State == Running {
					ups, downs = append(ups, max(s[i].Start, x)), append(downs, min(s[i].End, y))
				}
			}
		}
	} else {
		e.active.each(x, y, func(s *activeSeg) {
			if s.State == Running {
				ups, downs = append(ups, max(s.Start, x)), append(downs, min(s.End, y))
			}
		})
	}
	e.ups, e.downs = ups, downs
	if len(ups) < ncpu { // never as many running at once
		fn(x, y)
		return
	}
	slices.Sort(ups)
	slices.Sort(downs)
	// Merge the two in time order, an end before a start at the same
	// time: n is how many ran just after t.
	n, from, open := 0, x, true // open: a part began at from
	for i, j := 0, 0; i < len(ups) || j < len(downs); {
		var t int64
		if j < len(downs) && (i == len(ups) || downs[j] <= ups[i]) {
			t, n = downs[j], n-1
			j++
		} else {
			t, n = ups[i], n+1
			i++
		}
		switch short := n < ncpu; {
		case short && !open:
			from, open = t, true
		case !short && open:
			if t > from {
				fn(from, t)
			}
			open = false
		}
	}
	if open && y > from {
		fn(from, y)
	}
}

// emitCut emits st with the stretches of cuts (sorted by Start; each
// clipped to st and to what the earlier ones left) replaced by those
// steps, and says how many of them it emitted.
func (e *Engine) emitCut(st Step, cuts []Step) int {
	t, n := st.Start, 0
	for _, c := range cuts {
		lo, hi := max(c.Start, t), min(c.End, st.End)
		if hi <= lo {
			continue
		}
		if lo > t {
			part := st
			part.Start, part.End = t, lo
			e.emit(part)
		}
		c.Start, c.End = lo, hi
		e.emit(c)
		n++
		t = hi
	}
	if t < st.End {
		part := st
		part.Start = t
		e.emit(part)
	}
	return n
}

// isTarget says whether th is one of the targets' threads (one with a
// history, or of a process that has some).
func (e *Engine) isTarget(th Thread) bool {
	if _, ok := e.threads[th.Tid]; ok {
		return true
	}
	_, ok := e.procs[th.Tgid]
	return th.Tgid != 0 && ok
}

// cudaSplit cuts [x, y] at h's CUDA calls and hands each part to fn with
// the call's name ("" outside every call; nested calls: the outer one).
func (e *Engine) cudaSplit(h *history, x, y int64, fn func(x, y int64, call string)) {
	cs := h.cuda
	if len(cs) == 0 {
		fn(x, y, "")
		return
	}
	// A call covering x starts at most the longest call's length before.
	i := sort.Search(len(cs), func(j int) bool { return cs[j].Start >= y })
	j := sort.Search(i, func(j int) bool { return cs[j].Start >= x-h.maxCuda })
	t := x
	for ; j < i && t < y; j++ {
		c := &cs[j]
		if c.End <= t {
			continue
		}
		if c.Start > t {
			fn(t, c.Start, "")
			t = c.Start
		}
		end := min(c.End, y)
		name := c.Name
		if name == "" {
			name = "cuda"
		}
		fn(t, end, name)
		t = end
	}
	if t < y {
		fn(t, y, "")
	}
}

// held gives st, a run-queue wait behind st.Other (a task outside the
// targets), the cause Options.Held says: io_block behind the block
// layer's worker, noted.
func (e *Engine) held(st *Step) {
	if c := e.opt.Held(st.Other); c != st.Cause {
		st.Cause = c
		if st.Note == "" {
			st.Note = NoteBlockWorker
		} else {
			st.Note += "; " + NoteBlockWorker
		}
	}
}

// runnable lays the holders out from the segment's start in the order
// they ran (their Ns, cut at the segment's end; the rest has no holder)
// and emits the part of that layout inside [x, y].
func (e *Engine) runnable(h *history, sg *Segment, x, y int64, depth int) {
	ow := e.owedOf(sg)
	t := sg.Start
	for _, ho := range sg.Holders {
		if ho.Ns <= 0 {
			continue
		}
		end := min(t+ho.Ns, sg.End)
		if lo, hi := max(t, x), min(end, y); hi > lo {
			e.heldBy(h, ho.Thread, lo, hi, depth, ow)
		}
		t = end
		if t >= y {
			return
		}
	}
	if lo := max(t, x); y > lo {
		e.emit(Step{Start: lo, End: y, Thread: h.th, State: Runnable, Cause: CPURunqueue, Depth: depth})
	}
}

// owed is what a run-queue wait owes to outside holders: the fraction of
// its time behind the server's own threads that is the CPU time outside
// holders took during the same wait (at most 1), and the outside holder
// that took the most.
type owed struct {
	frac float64
	to   Thread
}

// owedOf is sg's owed. A fair scheduler gives every runnable task its
// share: where an outside task took CPU time during the wait, the
// server's own thread that holds the CPU next is being repaid that time,
// and the waiter waits behind the repayment because of the outsider
// (without it the woken waiter would have preempted its sibling, as it
// does on a quiet CPU). Up to the outsiders' time, the wait behind the
// server's own threads is theirs; the rest is the server contending with
// itself. The outsiders' time is theirs during the wait, and what each
// of the server's holders waited behind outsiders just before it got the
// CPU it holds (starvedBefore): a sibling that waited 10 ms behind two
// busy threads is repaid first when it gets its CPU back, and a writer
// woken meanwhile waits behind that repayment (llama-server -t 1: its
// HTTP thread, woken with a token, waited 3 ms behind the main thread's
// next step, which had just waited 10 ms behind the busy threads; the
// gap carried two steps and the next one none).
func (e *Engine) owedOf(sg *Segment) owed {
	var out, own, most int64
	var o owed
	var counted [4]uint32 // the target holders whose wait before was counted
	n := 0
	for _, ho := range sg.Holders {
		switch {
		case ho.Ns <= 0:
		case e.isTarget(ho.Thread):
			own += ho.Ns
			if slices.Contains(counted[:n], ho.Tid) || n == len(counted) {
				continue
			}
			counted[n] = ho.Tid
			n++
			before, to := e.starvedBefore(ho.Thread, sg.Start, sg.End)
			out += before
			if before > most && to.Tid != 0 {
				most, o.to = before, to
			}
		default:
			out += ho.Ns
			if ho.Ns > most {
				most, o.to = ho.Ns, ho.Thread
			}
		}
	}
	if own > 0 && out > 0 {
		o.frac = min(1, float64(out)/float64(own))
	}
	return o
}

// starvedBefore is how long target thread th, running within [x, y],
// waited for its CPU behind anything but the server's own threads just
// before that running began (its runnable segment ending where the
// running starts: holders outside the targets, and the time no holder is
// known, since the server's own threads' running is seen), before x,
// and the outside holder that took the most of it.
func (e *Engine) starvedBefore(th Thread, x, y int64) (ns int64, to Thread) {
	h := e.threads[th.Tid]
	if h == nil {
		return 0, to
	}
	s := h.segs
	i := sort.Search(len(s), func(j int) bool { return s[j].Start >= y })
	for i--; i > 0 && s[i].End > x && s[i].State != Running; i-- {
	}
	if i <= 0 || s[i].State != Running || s[i].End <= x || s[i-1].State != Runnable || s[i-1].End != s[i].Start {
		return 0, to
	}
	w := &s[i-1]
	d := w.End - w.Start
	if d <= 0 || w.Start >= x {
		return 0, to
	}
	ns = d
	var most int64
	for _, ho := range w.Holders {
		switch {
		case ho.Ns <= 0:
		case e.isTarget(ho.Thread):
			ns -= ho.Ns
		case ho.Ns > most:
			most, to = ho.Ns, ho.Thread
		}
	}
	// Only the part before x: within [x, y] the walk follows th's own
	// wait (heldByTarget), its outsiders named there.
	if w.End > x {
		ns = ns * (x - w.Start) / d
	}
	return max(ns, 0), to
}

// heldBy covers [x, y], h runnable while holder ran on its CPU. A holder
// outside the targets is cpu_runqueue (or what Options.Held says). A
// holder of the targets is the server's own work: a server with more busy
// threads than CPUs contends with itself, as the sibling rule and the
// meanwhile ranks already say; heldByTarget follows that holder. The part
// the wait owes to outside holders (ow, owedOf) is theirs: cpu_runqueue,
// the outsider named, noted NoteOwed.
func (e *Engine) heldBy(h *history, holder Thread, x, y int64, depth int, ow owed) {
	if !e.isTarget(holder) {
		st := Step{Start: x, End: y, Thread: h.th, State: Runnable, Cause: CPURunqueue, Depth: depth, Other: holder}
		e.held(&st)
		e.emit(st)
		return
	}
	if ow.frac > 0 {
		m := x + int64(ow.frac*float64(y-x))
		if m > x {
			st := Step{Start: x, End: m, Thread: h.th, State: Runnable, Cause: CPURunqueue, Depth: depth, Other: ow.to, Note: NoteOwed}
			e.held(&st)
			e.emit(st)
			e.stats.Owed++
		}
		if x = m; x >= y {
			return
		}
	}
	e.stats.BehindTarget++
	oh := e.threads[holder.Tid]
	if oh == nil || len(oh.segs) == 0 || depth >= e.opt.MaxDepth {
		e.emit(Step{Start: x, End: y, Thread: h.th, State: Runnable, Cause: ServerCompute, Depth: depth, Other: holder, Note: NoteBehindTarget})
		return
	}
	e.heldByTarget(h, oh, x, y, depth)
}

// heldByTarget covers [x, y] of h's run-queue wait behind oh, a target
// thread, by oh's own states: where oh ran, its running (server_compute,
// gpu_sync in a blocking CUDA call that spins, its siblings' waits);
// where oh itself waited for a CPU, its holders. A holder is the task
// that preempted the thread or ran last before it got its CPU back, so
// over a long wait it is an approximation: where oh neither ran nor
// waited to run, it did not hold the CPU and the holder is unknown
// (cpu_runqueue, no holder named); so too its running segment's share of
// the naps and waits folded in it (a thread that naps, woken often,
// preempts the waiter and sleeps again: the CPU went to another task).
// Who took the CPU then is not recorded: that share is covered with the
// states of the server's other threads meanwhile (the timed-wait ranks:
// another of its threads running is the server's own work, one waiting
// behind an outsider the outsider's), cpu_runqueue with no holder where
// none explains it.
func (e *Engine) heldByTarget(h *history, oh *history, x, y int64, depth int) {
	unknown := func(a, b int64) {
		e.emit(Step{Start: a, End: b, Thread: h.th, State: Runnable, Cause: CPURunqueue, Depth: depth})
	}
	s := oh.segs
	t := x
	for i := oh.from(x); i < len(s) && t < y; i++ {
		sg := &s[i]
		if sg.End <= t {
			continue
		}
		if sg.Start >= y {
			break
		}
		lo, hi := max(t, sg.Start), min(sg.End, y)
		if lo > t {
			unknown(t, lo)
		}
		switch sg.State {
		case Running:
			if off := foldedPart(sg, sg.Folded.Total(), hi-lo, hi-lo); off > 0 {
				ran := *sg
				ran.Folded = Folded{}
				e.running(oh, &ran, lo, hi-off, depth+1)
				e.stats.Folded++
				e.path = append(e.path, oh.th.Tid)
				e.meanwhile(h, Step{Start: hi - off, End: hi, Thread: h.th, State: Runnable, Cause: CPURunqueue, Depth: depth})
				e.path = e.path[:len(e.path)-1]
				break
			}
			e.running(oh, sg, lo, hi, depth+1)
		case Runnable:
			e.runnable(oh, sg, lo, hi, depth+1)
		default:
			unknown(lo, hi)
		}
		t = hi
	}
	if t >= y {
		return
	}
	if last := &s[len(s)-1]; last.State == Runnable && last.End <= t {
		e.running(oh, nil, t, y, depth+1) // the tail rule, as walk applies it
		return
	}
	unknown(t, y)
}

// sleep classifies [x, y] of a sleep (outside CUDA calls) by its waker.
// A sleep with no wakeup edge to follow (a timer, an outside task that
// Classify gives server_sleep, a network receive of another connection,
// an unknown waker) is covered with the states of the server's other
// threads meanwhile, where they explain it (meanwhile, timedwait.go).
func (e *Engine) sleep(h *history, sg *Segment, x, y int64, depth int) {
	st := Step{Start: x, End: y, Thread: h.th, State: Sleep, Depth: depth, Wake: sg.Wake.Kind}
	switch sg.Wake.Kind {
	case WakeThread:
		w := sg.Wake.Waker
		st.Other = w
		if wh := e.threads[w.Tid]; wh != nil && len(wh.segs) > 0 {
			if st.Other.Comm == "" {
				st.Other = wh.th
			}
			switch {
			case e.onPath(w.Tid):
				e.stats.Cycles++
				st.Cause, st.Note = ServerSleep, NoteCycle
			case depth >= e.opt.MaxDepth:
				e.stats.DepthLimited++
				st.Cause, st.Note = ServerSleep, NoteDepthLimit
			default:
				e.walk(w.Tid, x, y, depth+1)
				return
			}
		} else {
			st.Cause = e.opt.Classify(w)
			if st.Cause == ServerSleep {
				e.meanwhile(h, st)
				return
			}
		}
	case WakeBlock, WakeHardIRQ:
		st.Cause = IOBlock
	case WakeNetRx:
		st.Port = sg.Wake.Port
		if sg.Wake.Port != 0 && sg.Wake.Port == e.port {
			st.Cause = NetBackpressure
		} else if snd, ok := e.hopSend(h, sg, y); ok && depth < e.opt.MaxDepth {
			// A hop: the chunk this thread woke for was another target
			// thread's send on an upstream connection. The walk follows
			// that thread up to its send, then the chunk in flight.
			e.stats.Hops++
			at := min(max(snd.Time, x), y)
			if at > x {
				e.walk(snd.Tid, x, at, depth+1)
			}
			e.emit(Step{Start: at, End: y, Cause: NetBackpressure, Depth: depth, Port: snd.Port, Note: NoteHop})
			return
		} else {
			st.Cause = ServerSleep
			if sg.Wake.Port != 0 {
				st.Note = NoteOtherConn
			}
			e.meanwhile(h, st)
			return
		}
	case WakeTimer, WakeSoftIRQTimer:
		st.Cause = ServerSleep
		e.meanwhile(h, st)
		return
	default:
		st.Cause, st.Note = Unexplained, NoteWakerUnknown
		e.meanwhile(h, st)
		return
	}
	e.emit(st)
}

// dataEdge is the data h's process read last in (a, b], when another
// target thread with a history, not on the walk's path, wrote it inside
// (a, b). Only the sending thread (depth 0) follows data: the chunk it
// sends came from what its process read last (a frontend's step frame
// from the engine); deeper in the walk, the latest data read (a new
// request handed to the engine) need not be what the thread waited for,
// and the wakeups say what was.
func (e *Engine) dataEdge(h *history, a, b int64, depth int) (Data, bool) {
	if depth > 0 || e.opt.MaxDepth < 1 {
		return Data{}, false
	}
	k := h.th.Tgid
	if k == 0 {
		k = h.th.Tid
	}
	ds := e.data[k]
	i := sort.Search(len(ds), func(j int) bool { return ds[j].Read > b })
	for j := i - 1; j >= 0 && j >= i-64; j-- {
		d := ds[j]
		if d.Read <= a {
			break
		}
		if d.Written <= a || d.Written >= b || e.onPath(d.Writer.Tid) {
			continue
		}
		if wh := e.threads[d.Writer.Tid]; wh == nil || len(wh.segs) == 0 {
			continue
		}
		if h.waitsIn(d.Read, b) {
			// The thread waited between the read and b (a send that
			// waited for the connection, a lock): the wait's own edge
			// says what held the chunk, not the data.
			return Data{}, false
		}
		return d, true
	}
	return Data{}, false
}

// waitsIn says whether h slept or waited in D for part of (x, y).
func (h *history) waitsIn(x, y int64) bool {
	s := h.segs
	i := sort.Search(len(s), func(j int) bool { return s[j].Start >= y })
	for j := i - 1; j >= 0; j-- {
		sg := &s[j]
		if sg.End <= x {
			break // disjoint and sorted: the earlier ones end before x too
		}
		if sg.State == Sleep || sg.State == IOWait {
			return true
		}
	}
	return false
}

// inFlight emits the chunk's time in flight, st, less the stretches the
// load generator's threads waited for a CPU: those are the client's (its
// socket's receive processing waits for the thread that owns it), with
// the holder named.
func (e *Engine) inFlight(st Step) {
	ws := e.clientWaits
	i := sort.Search(len(ws), func(j int) bool { return ws[j].Start >= st.End })
	j := sort.Search(i, func(j int) bool { return ws[j].Start >= st.Start-e.maxClientWait })
	cuts := e.cuts[:0]
	for _, w := range ws[j:i] {
		cuts = append(cuts, Step{Start: w.Start, End: w.End, State: Runnable, Cause: Client, Other: w.Holder, Note: NoteClientWaited})
	}
	e.cuts = cuts
	e.emitCut(st, cuts)
}

func (e *Engine) onPath(tid uint32) bool {
	for _, p := range e.path {
		if p == tid {
			return true
		}
	}
	return false
}

// overlayHolds gives net_backpressure the time in [a, b] (the server's
// part of the gap, walked already) during which the gap's connection was
// held back (Hold), where the walk found only the server's own work or
// sleep, or nothing: the chunk could not leave before the connection
// took it. Waits the walk found for a cause of their own (a CPU, a disk,
// a CUDA call) keep it.
func (e *Engine) overlayHolds(a, b int64) {
	hs := e.holds[e.port]
	if len(hs) == 0 || b <= a {
		return
	}
	i := sort.Search(len(hs), func(j int) bool { return hs[j].Start >= b })
	j := sort.Search(i, func(j int) bool { return hs[j].Start >= a-e.maxHold })
	// The union of the holds overlapping [a, b], clipped to it.
	var iv []Hold
	for ; j < i; j++ {
		h := hs[j]
		lo, hi := max(h.Start, a), min(h.End, b)
		if hi <= lo {
			continue
		}
		if n := len(iv); n > 0 && lo <= iv[n-1].End {
			iv[n-1].End = max(iv[n-1].End, hi)
			continue
		}
		iv = append(iv, Hold{Start: lo, End: hi, Kind: h.Kind})
	}
	if len(iv) == 0 {
		return
	}
	cuts := e.cuts[:0]
	for _, h := range iv {
		cuts = append(cuts, Step{Start: h.Start, End: h.End, Cause: NetBackpressure, Port: e.port, Note: NoteHeld + h.Kind})
	}
	e.cuts = cuts
	steps := e.steps
	e.steps = e.overlay[:0]
	for _, st := range steps {
		if st.Start >= b || st.End <= a || !(st.Cause == ServerCompute || st.Cause == ServerSleep || st.Cause == Unexplained) {
			e.emit(st)
			continue
		}
		e.emitCut(st, cuts)
	}
	e.overlay = steps[:0]
}

// hopLate is how long after the wakeup the send it came from may be
// stamped: sendmsg returns after the receive it ran in line (loopback,
// veth).
const hopLate = int64(200_000)

// hopSend is the send a network-receive wakeup at y of h's sleep sg came
// from, when it is another target thread's on a connection that is no
// client's (no arrival on its port): the latest such send stamped in
// [sg.Start, y+hopLate], looking back over at most 64 sends.
func (e *Engine) hopSend(h *history, sg *Segment, y int64) (Send, bool) {
	if y != sg.End {
		return Send{}, false // only the part of the sleep the wakeup ends
	}
	ss := e.allSends
	i := sort.Search(len(ss), func(j int) bool { return ss[j].Time > y+hopLate })
	for k := i - 1; k >= 0 && k >= i-64; k-- {
		s := ss[k]
		if s.Time < sg.Start {
			break
		}
		if s.Tid == h.th.Tid || s.Port == e.port || len(e.arrivals[s.Port]) > 0 || e.onPath(s.Tid) {
			continue
		}
		if th := e.threads[s.Tid]; th == nil || len(th.segs) == 0 {
			continue
		}
		return s, true
	}
	return Send{}, false
}
