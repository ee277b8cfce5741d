// Package feed is the span-to-critical-path adapter: it turns a session's
// spans into critpath.Engine's events (client reads and sends, switches,
// wakes), for the batch run (pipeline) and the live view (live) alike.
package feed

import (
	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/correlate/critpath"
)

// FeedStats count the spans a Feed took, by what they became.
type FeedStats struct {
	// ClientSpans: the load generator's own spans (its run-queue waits
	// become critpath.ClientWaits).
	ClientSpans uint64
	// Spans fed to the engine; Dropped over the bound of spans held.
	Spans, Dropped uint64
	Segments       uint64
	CUDACalls      uint64
	Sends          uint64
	// InlineSends: sends stamped after their own arrival (a receive run
	// inside the sendmsg, loopback or veth), moved back to it.
	InlineSends uint64
	Arrivals    uint64
	Holds       uint64
	DataEdges   uint64
}

// Feed turns a session's spans into a critpath.Engine's events: the
// scheduler's switch-ins into segments, blocking CUDA calls, the server's
// sends, the load generator's arrivals and run-queue waits, the TCP holds
// and the data edges. `bpfbench run` and the live view feed the one
// engine through it. It is not safe for concurrent use.
type Feed struct {
	Eng   *critpath.Engine
	Stats FeedStats
	// Held is the engine's history at the last Retained plus what was
	// added since; past MaxHeld spans are dropped (counted).
	Held, MaxHeld int
	// Tgids are the followed processes seen (the server's).
	Tgids map[uint32]bool

	ports map[uint16]feedPort
	sw    critpath.Switches
	// runq holds a run-queue span waiting for its off-CPU span, by tid.
	// A Span is stored out of line in a map (it is over 128 bytes): one
	// allocation an insert, so the entries are pointers, reused from
	// spare as the off-CPU spans take them.
	runq  map[uint32]*collectors.Span
	spare []*collectors.Span
	// next is the last run-queue span while hasNext, held apart until
	// its off-CPU span, which most often comes next (park).
	next    collectors.Span
	hasNext bool
	// lastTgid is the last process added to Tgids.
	lastTgid uint32
	segs     []critpath.Segment
}

// feedPort is a client port's last send and arrival, as the spans came.
type feedPort struct {
	send, arrival int64
	bytes         uint64 // the last arrival's
}

// inlineRx bounds how long a send's stamp may follow its own arrival (the
// sendmsg that delivered it in line).
const inlineRx = int64(2e6)

// NewFeed feeds eng, holding at most maxHeld spans of history.
func NewFeed(eng *critpath.Engine, maxHeld int) *Feed {
	return &Feed{Eng: eng, MaxHeld: maxHeld, Tgids: map[uint32]bool{}, ports: map[uint16]feedPort{},
		runq: map[uint32]*collectors.Span{}}
}

// Retained re-reads the engine's history size (it walks every thread and
// port: once a tick).
func (f *Feed) Retained() { f.Held = f.Eng.Retained() }

// Record feeds a span; the kinds the engine does not take are ignored.
func (f *Feed) Record(sp collectors.Span) {
	if sp.Client && sp.Kind != collectors.SpanArrival {
		f.Stats.ClientSpans++
		if sp.Kind == collectors.SpanRunqueue && f.Held < f.MaxHeld {
			// The load generator's own waits for a CPU: a chunk in
			// flight meanwhile was held by the client.
			f.Held++
			w := critpath.ClientWait{Start: sp.Start, End: sp.End}
			if sp.HolderTid != 0 {
				w.Holder = critpath.Thread{Tid: sp.HolderTid, Tgid: sp.HolderTgid, Comm: sp.HolderComm}
			}
			f.Eng.AddClientWait(w)
		}
		return
	}
	switch sp.Kind {
	case collectors.SpanRunqueue, collectors.SpanOffCPU, collectors.SpanSend, collectors.SpanArrival, collectors.SpanData:
	case collectors.SpanCUDA, collectors.SpanTCP:
		if !sp.Blocking {
			return
		}
	default:
		return
	}
	if f.Held >= f.MaxHeld {
		f.Stats.Dropped++
		return
	}
	f.Stats.Spans++
	f.Held++
	if sp.Tgid != 0 && !sp.Client && sp.Tgid != f.lastTgid {
		f.Tgids[sp.Tgid] = true
		f.lastTgid = sp.Tgid
	}
	switch sp.Kind {
	case collectors.SpanRunqueue, collectors.SpanOffCPU:
		f.switchSpan(sp)
	case collectors.SpanCUDA:
		f.Stats.CUDACalls++
		f.Eng.AddCUDA(critpath.CUDACall{Tid: sp.Tid, Start: sp.Start, End: sp.End, Name: sp.Detail})
	case collectors.SpanSend:
		f.Stats.Sends++
		f.Eng.AddSend(critpath.Send{Time: f.sendTime(sp), Tid: sp.Tid, Port: sp.Port, Bytes: int64(sp.Bytes)})
	case collectors.SpanData:
		f.Stats.DataEdges++
		f.Eng.AddData(critpath.Data{Reader: critpath.Thread{Tid: sp.Tid, Tgid: sp.Tgid},
			Writer: critpath.Thread{Tid: sp.WakerTid, Tgid: sp.WakerTgid, Comm: sp.WakerComm}, Written: sp.Start, Read: sp.End})
	case collectors.SpanTCP:
		f.Stats.Holds++
		f.Eng.AddHold(critpath.Hold{Port: sp.Port, Start: sp.Start, End: sp.End, Kind: sp.Detail})
	case collectors.SpanArrival:
		f.Stats.Arrivals++
		p := f.ports[sp.LocalPort]
		p.arrival, p.bytes = max(p.arrival, sp.End), sp.Bytes
		f.ports[sp.LocalPort] = p
		f.Eng.AddArrival(critpath.Arrival{Time: sp.End, Port: sp.LocalPort, Bytes: int64(sp.Bytes)})
	}
}

// switchSpan takes a scheduler span: a switch-in's run-queue span and its
// off-CPU span, paired by thread.
func (f *Feed) switchSpan(sp collectors.Span) {
	switch sp.Kind {
	case collectors.SpanRunqueue:
		f.park()
		p := f.runq[sp.Tid]
		if p != nil {
			f.switchIn(*p, nil) // a switch-in with no off-CPU interval known
			*p = sp
			break
		}
		// The switch-in's off-CPU span comes next, most often: held
		// apart until then (no map insert and delete a switch-in).
		f.next, f.hasNext = sp, true
	case collectors.SpanOffCPU:
		if f.hasNext && f.next.Tid == sp.Tid {
			f.hasNext = false
			if f.next.End != sp.End {
				f.switchIn(f.next, nil)
				f.switchIn(sp, nil)
			} else {
				f.switchIn(sp, &f.next)
			}
			break
		}
		f.park()
		p := f.runq[sp.Tid]
		if p != nil {
			delete(f.runq, sp.Tid)
			f.spare = append(f.spare, p)
			if p.End != sp.End {
				f.switchIn(*p, nil)
				p = nil
			}
		}
		f.switchIn(sp, p)
	}
}

// park moves the run-queue span held apart (next) into runq: another
// span came between it and its off-CPU span.
func (f *Feed) park() {
	if !f.hasNext {
		return
	}
	f.hasNext = false
	sp := f.next
	p := f.runq[sp.Tid]
	if p != nil {
		f.switchIn(*p, nil)
	} else if n := len(f.spare); n > 0 {
		p = f.spare[n-1]
		f.spare = f.spare[:n-1]
		f.runq[sp.Tid] = p
	} else {
		p = new(collectors.Span)
		f.runq[sp.Tid] = p
	}
	*p = sp
}

// sendTime is when a send left. sock_send_length fires as sendmsg
// returns; over loopback or a veth the receive runs inside the send
// (net_rx on its bh_enable), so the chunk arrives before its send is
// stamped. An arrival of as many bytes, since the port's previous send and
// at most inlineRx before this one, was this send's: it left when it
// arrived.
func (f *Feed) sendTime(sp collectors.Span) int64 {
	t := sp.End
	p := f.ports[sp.Port]
	if p.arrival > p.send && p.arrival <= t && t-p.arrival <= inlineRx && p.bytes == sp.Bytes {
		t = p.arrival
		f.Stats.InlineSends++
	}
	p.send = sp.End
	f.ports[sp.Port] = p
	return t
}

// switchIn turns a switch-in's spans into segments: off is its off-CPU
// span (or, alone, a run-queue span with no off-CPU interval known), rq
// the run-queue span of the same switch-in.
func (f *Feed) switchIn(off collectors.Span, rq *collectors.Span) {
	th := critpath.Thread{Tid: off.Tid, Tgid: off.Tgid}
	si := critpath.SwitchIn{Thread: th, Ts: off.End, OffCPU: off.End - off.Start, Left: critpath.Runnable,
		IRQ:    critpath.IRQTime{Block: off.IRQBlockNs, Net: off.IRQNetNs, Steal: off.StealNs},
		Folded: critpath.Folded{Sleep: off.FoldSleepNs, Runq: off.FoldRunqNs, IO: off.FoldIONs}}
	if rq != nil {
		si.IRQ.Block += rq.IRQBlockNs
		si.IRQ.Net += rq.IRQNetNs
		si.IRQ.Steal += rq.StealNs
		si.Folded.Sleep += rq.FoldSleepNs
		si.Folded.Runq += rq.FoldRunqNs
		si.Folded.IO += rq.FoldIONs
	}
	if off.HolderTid != 0 {
		si.Holder = critpath.Thread{Tid: off.HolderTid, Tgid: off.HolderTgid, Comm: off.HolderComm}
	}
	if off.Kind == collectors.SpanOffCPU {
		switch off.Detail {
		case "io_wait":
			si.Left = critpath.IOWait
		case "sleep":
			si.Left = critpath.Sleep
		case "stopped":
			si.Left = critpath.Stopped
		}
		switch {
		case rq != nil:
			si.Runq = rq.End - rq.Start
			if rq.HolderTid != 0 && si.Holder == (critpath.Thread{}) {
				si.Holder = critpath.Thread{Tid: rq.HolderTid, Tgid: rq.HolderTgid, Comm: rq.HolderComm}
			}
		case off.WakeTs > 0 && si.Left != critpath.Runnable:
			si.Runq = off.End - min(max(off.WakeTs, off.Start), off.End)
		}
		if si.Left != critpath.Runnable {
			si.Wake = WakeOf(off)
			// The holder the kernel records for a woken thread is the
			// task that ran on its CPU last before it got the CPU back:
			// the holder of its run-queue wait's end, none without one.
			if si.Runq <= 0 {
				si.Holder = critpath.Thread{}
			}
		}
	} else {
		si.Runq = si.OffCPU
	}
	f.segs = f.sw.Segments(si, f.segs[:0])
	for _, s := range f.segs {
		f.Stats.Segments++
		f.Eng.AddSegment(s)
	}
}

// WakeOf is the wakeup that ended an off-CPU span's sleep. A hard
// interrupt outside any device handler is a timer (hrtimers expire in hard
// interrupt context: nanosleep, poll and futex timeouts); a device
// handler's wakeup is its device's (a block completion, a network
// receive). When the collector could not tell (no interrupt time), a
// hard interrupt ending an interruptible sleep is taken for a timer, and
// one ending an IO wait does not matter, D being io_block.
func WakeOf(sp collectors.Span) critpath.Wake {
	switch sp.WakeCtx {
	case "task":
		return critpath.Wake{Kind: critpath.WakeThread, Waker: critpath.Thread{Tid: sp.WakerTid, Tgid: sp.WakerTgid, Comm: sp.WakerComm}}
	case "hardirq":
		if sp.Detail == "io_wait" {
			return critpath.Wake{Kind: critpath.WakeHardIRQ}
		}
		return critpath.Wake{Kind: critpath.WakeTimer}
	}
	return critpath.Wake{Kind: wakeKinds[sp.WakeCtx]} // WakeUnknown when not listed
}

// wakeKinds are the interrupt contexts of a wakeup (Span.WakeCtx) with a
// kind of their own.
var wakeKinds = map[string]critpath.WakeKind{
	"hardirq:timer":   critpath.WakeTimer,
	"hardirq:block":   critpath.WakeBlock,
	"hardirq:net":     critpath.WakeNetRx,
	"hardirq:device":  critpath.WakeHardIRQ,
	"softirq:net_rx":  critpath.WakeNetRx,
	"softirq:block":   critpath.WakeBlock,
	"softirq:timer":   critpath.WakeSoftIRQTimer,
	"softirq:hrtimer": critpath.WakeTimer,
}
