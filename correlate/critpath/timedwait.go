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
// The ranks, the first that holds at an instant wins (ties: the claim
// that started first, then the lowest tid):
//  1. gpu_sync: a thread inside a blocking CUDA call (running or asleep):
//     a device step is in flight and the server waits for its end; the
//     probed calls are the synchronising ones, so this is seldom an
//     unrelated thread;
//  2. cpu_runqueue behind a task outside the targets, the holder named: a
//     thread that wanted to run and could not;
//  3. cpu_runqueue, holder unknown (a thread woken and waiting for a CPU:
//     the kernel names the holder of a preemption only);
//  4. io_block: a thread in D;
//  5. server_compute: a thread running (as far as its history says: the
//     tail rule is not applied to the other threads, see claimsOf);
//  6. server_compute: a thread runnable behind another target thread (the
//     server's own work held the CPU).
//
// Waits beat progress: a running thread shows that work was done, a
// waiting one that work the server needed was held up, and a pool of
// threads meeting at a barrier (ggml's, an OpenMP team) goes only as fast
// as its preempted member (the sibling rule of running steps says the
// same within a process). CPU waits come before D because D is broad (any
// thread's file write or page fault) and a decode step is CPU or GPU work.
const (
	rankGPU = iota
	rankRunqOutside
	rankRunqUnknown
	rankIO
	rankCompute
	rankBehindTarget
	numRanks
)

// NoteMeanwhile marks a step taken from another thread's state while the
// critical-path thread slept with no wakeup edge to follow.
const NoteMeanwhile = "no wakeup edge: the server's other threads meanwhile"

// claim is a stretch of another thread's state that would explain a
// sleep with no edge, and its rank.
type claim struct {
	rank int
	step Step
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
// states (see the ranks above). The cost is a binary search per target
// thread and a sort of the claims found in the sleep's interval.
func (e *Engine) meanwhile(h *history, st Step) {
	cl := e.claims[:0]
	for tid, o := range e.threads {
		if tid == h.th.Tid || len(o.segs) == 0 || e.onPath(tid) {
			continue
		}
		cl = e.claimsOf(o, st.Start, st.End, st.Depth+1, cl)
	}
	e.claims = cl
	if len(cl) == 0 {
		e.emit(st)
		return
	}
	e.stats.NoEdgeSleeps++
	slices.SortFunc(cl, func(a, b claim) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.step.Start, b.step.Start), cmp.Compare(a.step.Thread.Tid, b.step.Thread.Tid))
	})
	free := append(e.free[:0], span{st.Start, st.End})
	next := e.free2[:0]
	out := e.painted[:0]
	for lo := 0; lo < len(cl) && len(free) > 0; {
		hi := lo
		for hi < len(cl) && cl[hi].rank == cl[lo].rank {
			hi++
		}
		// The rank's coverage, made disjoint (the claim that starts
		// first keeps an overlap), then laid over what is still free.
		cov := e.cover[:0]
		t := minNs
		for i := lo; i < hi; i++ {
			c := &cl[i].step
			if s := max(c.Start, t); c.End > s {
				cov = append(cov, painted{s, c.End, i})
				t = c.End
			}
		}
		e.cover = cov
		next = next[:0]
		j := 0
		for _, f := range free {
			for j < len(cov) && cov[j].end <= f.start {
				j++
			}
			p := f.start
			for k := j; k < len(cov) && cov[k].start < f.end; k++ {
				a, b := max(cov[k].start, p), min(cov[k].end, f.end)
				if b <= a {
					continue
				}
				if a > p {
					next = append(next, span{p, a})
				}
				out = append(out, painted{a, b, cov[k].i})
				p = b
			}
			if p < f.end {
				next = append(next, span{p, f.end})
			}
		}
		free, next = next, free
		lo = hi
	}
	for _, f := range free {
		out = append(out, painted{f.start, f.end, -1})
	}
	e.free, e.free2, e.painted = free, next, out
	slices.SortFunc(out, func(a, b painted) int { return cmp.Compare(a.start, b.start) })
	for _, p := range out {
		s := st
		if p.i >= 0 {
			s = cl[p.i].step
		}
		s.Start, s.End = p.start, p.end
		e.emit(s)
	}
}

// claimsOf appends the claims of o's states over [x, y]. The tail rule
// (after a last Runnable the thread runs) is not applied: a thread's
// switch-out reaches the engine only with its next switch-in, so a thread
// asleep since it last ran (an idle connection's thread blocked in recv)
// ends its history with a Runnable too, and would claim its whole sleep
// as compute. The walk applies the rule to the thread it walks, which
// ran at the send.
func (e *Engine) claimsOf(o *history, x, y int64, depth int, cl []claim) []claim {
	s := o.segs
	i := sort.Search(len(s), func(j int) bool { return s[j].Start > x })
	if i > 0 {
		i--
	}
	for ; i < len(s); i++ {
		sg := &s[i]
		if sg.End <= x {
			continue
		}
		if sg.Start >= y {
			break
		}
		cl = e.claimSeg(o, sg, max(sg.Start, x), min(sg.End, y), depth, cl)
	}
	return cl
}

// claimSeg appends the claims of [x, y], a part of o's segment sg.
func (e *Engine) claimSeg(o *history, sg *Segment, x, y int64, depth int, cl []claim) []claim {
	if y <= x {
		return cl
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
				cl = append(cl, claim{rankGPU, s})
			case sg.State == Running:
				s.Cause = ServerCompute
				cl = append(cl, claim{rankCompute, s})
			}
		})
	case IOWait:
		st.Cause = IOBlock
		cl = append(cl, claim{rankIO, st})
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
				}
				cl = append(cl, claim{r, s})
			}
			t = end
			if t >= y {
				return cl
			}
		}
		if a := max(t, x); y > a {
			s := st
			s.Start, s.Cause = a, CPURunqueue
			cl = append(cl, claim{rankRunqUnknown, s})
		}
	}
	return cl
}
