package critpath

import (
	"cmp"
	"slices"
	"sort"
)

// Timed waits and polling threads (DESIGN.md, "Timed waits and polling
// threads").
//
// A thread on the critical path that sleeps until a timer (a condition
// variable's or a futex's timeout, epoll_wait's, a polling loop's usleep),
// an outside task, a network receive of another connection, or a wakeup
// that was not recorded, leaves no edge to the thread whose work it waited
// for. The engine's threads that produce the tokens may meanwhile have
// been running, or runnable behind a busy neighbour: a sender polling
// with a timeout finds the token there when its timer fires, and the wait
// was the producer's, not the server's sleep.
//
// So such a sleep is covered with the states of the server's other target
// threads over its interval (every target thread but the sleeper and the
// threads already on the walk's path, which are waiting for it): per
// sub-interval the state of highest rank below gives the step, and what
// no thread's state claims (the whole server asleep) keeps the sleep's own
// cause (server_sleep, or unexplained for an unknown waker).
//
// The ranks, the first that holds at an instant wins (ties: the lowest
// tid):
//  0. server_stopped: a thread stopped (a stop signal, a tracer, a
//     freezer): whatever the sleeper waited for, the stopped thread could
//     not do it;
//  1. gpu_sync: a thread inside a blocking CUDA call (running or asleep):
//     a device step is in flight and the server waits for its end; the
//     probed calls are the synchronising ones, so this is seldom an
//     unrelated thread;
//  2. cpu_runqueue behind a task outside the targets, the holder named: a
//     thread that wanted to run and could not;
//  3. io_block: a thread in D;
//  4. server_compute: a thread running (as far as its history says: the
//     tail rule is not applied to the other threads, see claimsOf);
//  5. cpu_runqueue, holder unknown (a run-queue wait with no holder
//     recorded);
//  6. server_compute: a thread runnable behind another target thread (the
//     server's own work held the CPU).
//
// Waits beat progress: a running thread shows that work was done, a
// waiting one that work the server needed was held up, and a pool of
// threads meeting at a barrier (ggml's, an OpenMP team) goes only as fast
// as its preempted member (the sibling rule of running steps says the
// same within a process). CPU waits come before D because D is broad (any
// thread's file write or page fault) and a decode step is CPU or GPU work.
// A wait for a CPU whose holder is unknown is no evidence of an outside
// task while a thread of the server runs: on a server with fewer CPUs than
// threads the holder is most often the server itself (a runtime's threads
// woken behind its engine's), so it comes after running.
const (
	rankStopped int32 = iota
	rankGPU
	rankRunqOutside
	rankIO
	rankCompute
	rankRunqUnknown
	rankBehindTarget
	numRanks
)

// NoteMeanwhile marks a step taken from another thread's state while the
// critical-path thread slept with no wakeup edge to follow.
const NoteMeanwhile = "no wakeup edge: the server's other threads meanwhile"

// claim is a stretch of another thread's state that would explain a
// sleep with no edge, its step Engine.claimSteps[i].
type claim struct {
	start, end int64
	tid        uint32
	i          int32
}

// span is a stretch of time.
type span struct{ start, end int64 }

// painted is a stretch of a sleep given to a claim (i) or left to the
// sleep's own cause (i < 0).
type painted struct {
	start, end int64
	i          int
}

// meanwhile emits st, a sleep of h with no wakeup edge to follow (its
// Cause the sleep's own: server_sleep, unexplained for an unknown waker),
// with the stretches the server's other threads explain replaced by their
// states (see the ranks above). The cost is a binary search in each
// target thread's segments that overlap the sleep (up to scanThreadsUpTo
// threads) or a pass over what overlaps it in the active index
// (activeClaims), a sort of the claims found, and one of the stretches
// painted.
func (e *Engine) meanwhile(h *history, st Step) {
	e.findClaims(h, st)
	steps := e.claimSteps
	if len(steps) == 0 {
		e.emit(st)
		return
	}
	e.stats.NoEdgeSleeps++
	for _, p := range e.paintClaims(st) {
		s := st
		if p.i >= 0 {
			s = steps[p.i]
		}
		s.Start, s.End = p.start, p.end
		e.emit(s)
	}
}

// findClaims fills e.claims and e.claimSteps with what the other target
// threads' states claim of st, a sleep of h: by searching each thread's
// history or, past scanThreadsUpTo threads, the active index.
func (e *Engine) findClaims(h *history, st Step) {
	e.histories()
	e.claimSteps = e.claimSteps[:0]
	for r := range e.claims {
		e.claims[r] = e.claims[r][:0]
	}
	if e.opt.scanThreads || (!e.opt.indexAlways && len(e.threads) <= scanThreadsUpTo) {
		for _, o := range e.histList {
			n := len(o.segs)
			if n == 0 || o.th.Tid == h.th.Tid || o.segs[0].Start >= st.End || o.segs[n-1].End <= st.Start || e.onPath(o.th.Tid) {
				continue
			}
			e.claimsOf(o, st.Start, st.End, st.Depth+1)
		}
	} else {
		e.activeClaims(h, st)
	}
}

// histories is every target thread's history by tid (histList, built
// again once a thread came or went).
func (e *Engine) histories() []*history {
	if e.histList == nil {
		for _, o := range e.threads {
			e.histList = append(e.histList, o)
		}
		slices.SortFunc(e.histList, func(a, b *history) int { return cmp.Compare(a.th.Tid, b.th.Tid) })
	}
	return e.histList
}

// paintClaims lays the claims over st, rank by rank, each thread's claims
// (disjoint, by start; the threads by tid) over what is still free, and
// returns the stretches painted, by start, what is left free the sleep's
// own. The slices are the engine's, reused from call to call.
func (e *Engine) paintClaims(st Step) []painted {
	for r := range e.claims {
		slices.SortFunc(e.claims[r], func(a, b claim) int { return cmp.Or(cmp.Compare(a.tid, b.tid), cmp.Compare(a.start, b.start)) })
	}
	free := append(e.free[:0], span{st.Start, st.End})
	next := e.free2[:0]
	out := e.painted[:0]
	for r := range e.claims {
		cl := e.claims[r]
		for lo := 0; lo < len(cl) && len(free) > 0; {
			hi := lo + 1
			for hi < len(cl) && cl[hi].tid == cl[lo].tid {
				hi++
			}
			next, out = paintRun(free, next[:0], out, cl[lo:hi])
			free, next = next, free
			lo = hi
		}
	}
	for _, f := range free {
		out = append(out, painted{f.start, f.end, -1})
	}
	e.free, e.free2, e.painted = free, next, out
	slices.SortFunc(out, func(a, b painted) int { return cmp.Compare(a.start, b.start) })
	return out
}

// paintRun paints one thread's claims (run, disjoint, by start) over the
// free stretches (disjoint, by start): it appends what they cover to out
// and what is still free to next. The stretches outside the run's span
// are copied whole: with thousands of threads a sleep's free stretches
// are many, and visiting each of them for every thread was most of a
// slow gap's walk.
func paintRun(free, next []span, out []painted, run []claim) ([]span, []painted) {
	if len(run) == 0 {
		return append(next, free...), out
	}
	from, to := run[0].start, run[0].end
	for _, c := range run[1:] {
		to = max(to, c.end)
	}
	i := sort.Search(len(free), func(k int) bool { return free[k].end > from })
	next = append(next, free[:i]...)
	j := 0
	for ; i < len(free) && free[i].start < to; i++ {
		f := free[i]
		for j < len(run) && run[j].end <= f.start {
			j++
		}
		p := f.start
		for k := j; k < len(run) && run[k].start < f.end; k++ {
			a, b := max(run[k].start, p), min(run[k].end, f.end)
			if b <= a {
				continue
			}
			if a > p {
				next = append(next, span{p, a})
			}
			out = append(out, painted{a, b, int(run[k].i)})
			p = b
		}
		if p < f.end {
			next = append(next, span{p, f.end})
		}
	}
	return append(next, free[i:]...), out
}

// scanThreadsUpTo is the most target threads whose histories the
// timed-wait rule searches one by one; past it, it reads the active index.
// Below it the search is cheaper (BenchmarkCritPath, 16 threads: 2.2-2.4
// µs a gap against 2.9-4.0 with the index); far above it, the index.
const scanThreadsUpTo = 64

// activeClaims appends the claims over st of the target threads but the
// sleeper h and the threads on the walk's path: from the active index
// (every thread's segments but its sleeps, active.go), what overlaps st,
// and from the histories of the threads with CUDA calls, whose sleeps
// may be inside one. Its cost is what overlaps the sleep, not a search
// per thread: a server of a thousand threads (one per connection) spent
// 81% of its walk searching the histories of threads that slept.
func (e *Engine) activeClaims(h *history, st Step) {
	depth := st.Depth + 1
	for tid := range e.withCUDA {
		o := e.threads[tid]
		if o == nil || tid == h.th.Tid || len(o.segs) == 0 || e.onPath(tid) {
			continue
		}
		e.claimsOf(o, st.Start, st.End, depth)
	}
	e.active.each(st.Start, st.End, func(a *activeSeg) {
		if a.Tid == h.th.Tid || e.withCUDA[a.Tid] || e.onPath(a.Tid) {
			return
		}
		if o := e.threads[a.Tid]; o != nil {
			sg := Segment{Thread: o.th, State: a.State, Start: a.Start, End: a.End, Holders: a.Holders}
			e.claimSeg(o, &sg, max(a.Start, st.Start), min(a.End, st.End), depth)
		}
	})
}

// claimsOf appends the claims of o's states over [x, y]. The tail rule
// (after a last Runnable the thread runs) is not applied: a thread's
// switch-out reaches the engine only with its next switch-in, so a thread
// asleep since it last ran (an idle connection's thread blocked in recv)
// ends its history with a Runnable too, and would claim its whole sleep
// as compute. The walk applies the rule to the thread it walks, which
// ran at the send.
func (e *Engine) claimsOf(o *history, x, y int64, depth int) {
	s := o.segs
	for i := o.from(x); i < len(s); i++ {
		sg := &s[i]
		if sg.End <= x {
			continue
		}
		if sg.Start >= y {
			break
		}
		e.claimSeg(o, sg, max(sg.Start, x), min(sg.End, y), depth)
	}
}

// claim adds s as a claim of rank r.
func (e *Engine) claim(r int32, s Step) {
	e.claims[r] = append(e.claims[r], claim{start: s.Start, end: s.End, tid: s.Thread.Tid, i: int32(len(e.claimSteps))})
	e.claimSteps = append(e.claimSteps, s)
}

// claimSeg appends the claims of [x, y], a part of o's segment sg.
func (e *Engine) claimSeg(o *history, sg *Segment, x, y int64, depth int) {
	if y <= x || (sg.State == Sleep && len(o.cuda) == 0) {
		return // asleep outside any CUDA call: no claim
	}
	if sg.mostlyOff() && len(o.cuda) == 0 {
		// Off its CPU for most of the stretch in folded naps and waits:
		// at an instant inside it, more likely not running.
		return
	}
	st := Step{Start: x, End: y, Thread: o.th, State: sg.State, Depth: depth, Note: NoteMeanwhile}
	switch sg.State {
	case Running, Sleep:
		e.cudaSplit(o, x, y, func(x, y int64, call string) {
			s := st
			s.Start, s.End = x, y
			switch {
			case call != "":
				s.Cause, s.Note = GPUSync, call
				e.claim(rankGPU, s)
			case sg.State == Running:
				s.Cause = ServerCompute
				e.claim(rankCompute, s)
			}
		})
	case IOWait:
		st.Cause = IOBlock
		e.claim(rankIO, st)
	case Stopped:
		st.Cause = ServerStopped
		e.claim(rankStopped, st)
	case Runnable:
		// The holders laid out from the segment's start, as runnable does.
		t := sg.Start
		for _, ho := range sg.Holders {
			if ho.Ns <= 0 {
				continue
			}
			end := min(t+ho.Ns, sg.End)
			if a, b := max(t, x), min(end, y); b > a {
				s := st
				s.Start, s.End, s.Other, s.Cause = a, b, ho.Thread, CPURunqueue
				r := rankRunqOutside
				if e.isTarget(ho.Thread) {
					s.Cause, r = ServerCompute, rankBehindTarget
				} else if e.held(&s); s.Cause == IOBlock {
					r = rankIO
				}
				e.claim(r, s)
			}
			t = end
			if t >= y {
				return
			}
		}
		if a := max(t, x); y > a {
			s := st
			s.Start, s.Cause = a, CPURunqueue
			e.claim(rankRunqUnknown, s)
		}
	}
}
