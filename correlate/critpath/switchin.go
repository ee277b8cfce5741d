package critpath

// SwitchIn is the scheduler collector's record of a target thread put
// back on a CPU (collectors/sched's switch-in record, in plain fields): at
// Ts it had been off the CPU OffCPU ns, the last Runq ns of them runnable,
// and it had left the CPU in state Left.
type SwitchIn struct {
	Thread Thread
	Ts     int64
	OffCPU int64
	Runq   int64
	// Left is the state it left the CPU in: Runnable (preempted), Sleep
	// (S), IOWait (D) or Stopped.
	Left State
	// Wake is what woke it (Left Sleep, IOWait or Stopped).
	Wake Wake
	// Holder is the task that took its CPU (preempted) or ran on it last
	// before it got the CPU back (woken); zero when unknown.
	Holder Thread
	// IRQ is the interrupt time on its CPU while it ran, from its previous
	// switch-in to this one's switch-out: its Running segment's.
	IRQ IRQTime
	// Folded is the time it was off its CPU in folded intervals inside
	// that Running segment.
	Folded Folded
}

// Switches turns each thread's switch-in records into segments: Running
// from its previous switch-in to the switch-out (Ts-OffCPU), then the
// off-CPU time: preempted, Runnable all along (held by Holder); asleep,
// Sleep or IOWait until the wakeup (Ts-Runq), then Runnable. A thread's
// first record yields no Running segment (its previous switch-in is not
// known). The zero value is ready to use.
type Switches struct {
	// lastIn is each thread's last switch-in, updated in place (one
	// lookup a switch-in).
	lastIn map[uint32]*int64
	// holders is a slab the segments' one-holder lists are cut from (a
	// list of its own was an allocation a switch-in); a slab is let go
	// when the last segment cut from it is.
	holders []Holder
}

// holderSlab is how many holders a slab holds.
const holderSlab = 256

// oneHolder is a list of h alone, cut from the slab with no room to grow
// into its neighbour.
func (w *Switches) oneHolder(h Holder) []Holder {
	if len(w.holders) == cap(w.holders) {
		w.holders = make([]Holder, 0, holderSlab)
	}
	i := len(w.holders)
	w.holders = append(w.holders, h)
	return w.holders[i : i+1 : i+1]
}

// Segments appends r's segments to out.
func (w *Switches) Segments(r SwitchIn, out []Segment) []Segment {
	if w.lastIn == nil {
		w.lastIn = map[uint32]*int64{}
	}
	out0 := r.Ts - max(r.OffCPU, 0)
	if prev := w.lastIn[r.Thread.Tid]; prev != nil {
		if out0 > *prev {
			out = append(out, Segment{Thread: r.Thread, State: Running, Start: *prev, End: out0, IRQ: r.IRQ, Folded: r.Folded})
		}
		*prev = r.Ts
	} else {
		ts := r.Ts
		w.lastIn[r.Thread.Tid] = &ts
	}
	if out0 == r.Ts {
		return out
	}
	holders := func(ns int64) []Holder {
		if r.Holder == (Thread{}) {
			return nil
		}
		return w.oneHolder(Holder{r.Holder, ns})
	}
	switch r.Left {
	case Sleep, IOWait, Stopped:
		woke := r.Ts - min(max(r.Runq, 0), r.OffCPU)
		if woke > out0 {
			s := Segment{Thread: r.Thread, State: r.Left, Start: out0, End: woke}
			if r.Left != IOWait {
				s.Wake = r.Wake
			}
			out = append(out, s)
		}
		if r.Ts > woke {
			out = append(out, Segment{Thread: r.Thread, State: Runnable, Start: woke, End: r.Ts, Holders: holders(r.Ts - woke)})
		}
	default:
		out = append(out, Segment{Thread: r.Thread, State: Runnable, Start: out0, End: r.Ts, Holders: holders(r.Ts - out0)})
	}
	return out
}

// Forget drops a thread that exited.
func (w *Switches) Forget(tid uint32) { delete(w.lastIn, tid) }
