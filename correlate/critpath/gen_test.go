package critpath

import (
	"cmp"
	"math/rand/v2"
	"slices"
)

// timeline is a synthetic run: target threads moving through states,
// waking each other (cycles included), preempted by neighbours, inside
// CUDA calls now and then, with holes of lost events; connections whose
// chunks are sent, arrive and are read, held back now and then; an
// upstream connection whose sends wake threads (hops).
type timeline struct {
	segs  []Segment
	cuda  []CUDACall
	sends []Send
	arrs  []Arrival
	holds []Hold
	reads []Read
}

// maxSpan bounds every segment, hole and CUDA call of a timeline.
const maxSpan = 20 * ms

func genTimeline(seed uint64, threads int, dur int64, ports int) *timeline {
	g := &gen{r: rand.New(rand.NewPCG(seed, 7)), tl: &timeline{}, dur: dur, ports: ports}
	for i := range threads {
		g.ths = append(g.ths, Thread{Tid: uint32(100 + i), Tgid: 100, Comm: "worker"})
	}
	g.outside = []Thread{stress, {Tid: 4244, Tgid: 4242, Comm: "stress-ng"}, kwork, {Tid: 777, Tgid: 777, Comm: "python3"}}
	for _, th := range g.ths {
		g.thread(th)
	}
	g.connections()
	return g.tl
}

// gen draws a timeline: each thread's segments, then the connections.
type gen struct {
	r            *rand.Rand
	tl           *timeline
	ths, outside []Thread
	dur          int64
	ports        int
}

// d is a duration in [1, max].
func (g *gen) d(max int64) int64 { return 1 + g.r.Int64N(max) }

// thread draws th's segments until dur.
func (g *gen) thread(th Thread) {
	r, tl := g.r, g.tl
	t := int64(0)
	st := Runnable
	cudaEnd := int64(0)
	for t < g.dur {
		s := Segment{Thread: th, State: st, Start: t}
		switch st {
		case Running:
			s.End = t + g.d(8*ms)
			if r.IntN(4) == 0 { // interrupts on its CPU meanwhile
				s.IRQ = IRQTime{Block: r.Int64N(s.End - t), Net: r.Int64N(ms)}
			}
			if r.IntN(6) == 0 && t >= cudaEnd {
				cs := t + r.Int64N(s.End-t)
				ce := cs + g.d(maxSpan)
				tl.cuda = append(tl.cuda, CUDACall{Tid: th.Tid, Start: cs, End: ce, Name: "cudaStreamSynchronize"})
				cudaEnd = ce
			}
		case Runnable:
			s.End = t + g.d(3*ms)
			for range r.IntN(3) {
				h := g.outside[r.IntN(len(g.outside))]
				if r.IntN(3) == 0 {
					h = g.ths[r.IntN(len(g.ths))]
				}
				s.Holders = append(s.Holders, Holder{h, g.d(2 * ms)})
			}
		case IOWait:
			s.End = t + g.d(5*ms)
		case Stopped:
			s.End = t + g.d(maxSpan)
			s.Wake = Wake{Kind: WakeThread, Waker: g.outside[r.IntN(len(g.outside))]}
		case Sleep:
			s.End = t + g.d(maxSpan)
			s.Wake = g.wake()
		}
		tl.segs = append(tl.segs, s)
		t = s.End
		// The next state; a hole (lost events) now and then, never
		// right after a Runnable (its end is the switch-in that starts
		// the Running segment), and always followed by a Runnable.
		switch st {
		case Runnable:
			st = Running
		case Running:
			st = []State{Runnable, Sleep, Sleep, IOWait, Runnable, Sleep, Sleep, IOWait, Stopped}[r.IntN(9)]
		default:
			st = Runnable
		}
		if st != Running && r.IntN(40) == 0 {
			t += g.d(maxSpan)
			st = Runnable
		}
	}
}

// wake draws the wakeup that ends a sleep.
func (g *gen) wake() Wake {
	r := g.r
	switch k := WakeKind(r.IntN(7)); k {
	case WakeThread:
		w := g.ths[r.IntN(len(g.ths))]
		if r.IntN(4) == 0 {
			w = g.outside[r.IntN(len(g.outside))]
		}
		return Wake{Kind: k, Waker: w}
	case WakeNetRx:
		w := Wake{Kind: k, Port: uint16(40000 + r.IntN(g.ports+1))}
		if r.IntN(3) == 0 {
			w.Port = 0 // unknown: an upstream hop, a hold or server_sleep
		}
		return w
	default:
		return Wake{Kind: k}
	}
}

// connections draws an upstream connection (a gateway's to its engine:
// sends, no arrivals), connections held back now and then, and each
// port's requests.
func (g *gen) connections() {
	r, tl, dur := g.r, g.tl, g.dur
	for t := r.Int64N(5 * ms); t < dur; t += g.d(5 * ms) {
		tl.sends = append(tl.sends, Send{Time: t, Tid: g.ths[r.IntN(len(g.ths))].Tid, Port: 50000, Bytes: 64})
	}
	for p := range g.ports {
		for range r.IntN(4) {
			a := r.Int64N(dur)
			tl.holds = append(tl.holds, Hold{Port: uint16(40000 + p), Start: a, End: a + g.d(maxSpan), Kind: "zero_window"})
		}
	}
	for p := range g.ports {
		g.port(p)
	}
}

// port draws the requests of port 40000+p, one after another.
func (g *gen) port(p int) {
	r, tl := g.r, g.tl
	port := uint16(40000 + p)
	noArrivals := p%7 == 6
	noSends := p%11 == 10
	c := r.Int64N(50 * ms)
	lastArr := int64(0)
	for req := 0; c < g.dur; req++ {
		tokens := 2 + r.IntN(30)
		for k := range tokens {
			s := c + r.Int64N(12*ms)
			if r.IntN(30) == 0 {
				s += r.Int64N(100 * ms)
			}
			a := max(s+r.Int64N(ms), lastArr)
			if r.IntN(30) == 0 {
				a += r.Int64N(30 * ms)
			}
			lastArr = a
			next := a + r.Int64N(ms/4)
			if r.IntN(30) == 0 {
				next += r.Int64N(40 * ms)
			}
			if !noSends {
				tl.sends = append(tl.sends, Send{Time: s, Tid: g.ths[r.IntN(len(g.ths))].Tid, Port: port, Bytes: 64})
			}
			if !noArrivals {
				tl.arrs = append(tl.arrs, Arrival{Time: a, Port: port, Bytes: 64})
			}
			tl.reads = append(tl.reads, Read{Request: p*100000 + req, Index: k, Port: port, Start: c, End: next})
			c = next
		}
		c += r.Int64N(5 * ms)
	}
}

// shift adds k to every time.
func (tl *timeline) shift(k int64) *timeline {
	out := &timeline{}
	for _, s := range tl.segs {
		s.Start += k
		s.End += k
		out.segs = append(out.segs, s)
	}
	for _, c := range tl.cuda {
		c.Start += k
		c.End += k
		out.cuda = append(out.cuda, c)
	}
	for _, s := range tl.sends {
		s.Time += k
		out.sends = append(out.sends, s)
	}
	for _, a := range tl.arrs {
		a.Time += k
		out.arrs = append(out.arrs, a)
	}
	for _, h := range tl.holds {
		h.Start += k
		h.End += k
		out.holds = append(out.holds, h)
	}
	for _, rd := range tl.reads {
		rd.Start += k
		rd.End += k
		out.reads = append(out.reads, rd)
	}
	return out
}

// event is one input of a timeline with the time it carries (the one a
// watermark is compared with).
type event struct {
	at   int64
	kind uint8
	i    int
}

func (tl *timeline) events() []event {
	var ev []event
	for i, s := range tl.segs {
		ev = append(ev, event{s.End, 0, i})
	}
	for i, c := range tl.cuda {
		ev = append(ev, event{c.End, 1, i})
	}
	for i, s := range tl.sends {
		ev = append(ev, event{s.Time, 2, i})
	}
	for i, a := range tl.arrs {
		ev = append(ev, event{a.Time, 3, i})
	}
	for i, rd := range tl.reads {
		ev = append(ev, event{rd.End, 4, i})
	}
	for i, h := range tl.holds {
		ev = append(ev, event{h.End, 5, i})
	}
	return ev
}

func (tl *timeline) add(e *Engine, ev event) {
	switch ev.kind {
	case 0:
		e.AddSegment(tl.segs[ev.i])
	case 1:
		e.AddCUDA(tl.cuda[ev.i])
	case 2:
		e.AddSend(tl.sends[ev.i])
	case 3:
		e.AddArrival(tl.arrs[ev.i])
	case 4:
		e.AddRead(tl.reads[ev.i])
	case 5:
		e.AddHold(tl.holds[ev.i])
	}
}

// batch adds everything, then flushes once.
func (tl *timeline) batch(opt Options) []Gap {
	gs, _ := tl.batchStats(opt)
	return gs
}

// batchStats is batch with the engine's counters.
func (tl *timeline) batchStats(opt Options) ([]Gap, Stats) {
	e := New(opt)
	for _, ev := range tl.events() {
		tl.add(e, ev)
	}
	return sortGaps(e.Flush(maxNs)), e.Stats()
}

// stream delivers each event up to lateness after its time, in the order
// that makes (seeded), and flushes every few events with a watermark that
// every event a flushed gap needs has passed: lateness, plus maxSpan for
// the segments that started before the gap ended and end after it.
func (tl *timeline) stream(opt Options, seed uint64, lateness int64) []Gap {
	r := rand.New(rand.NewPCG(seed, 3))
	ev := tl.events()
	type delivery struct {
		event
		d int64
	}
	ds := make([]delivery, len(ev))
	for i, x := range ev {
		ds[i] = delivery{x, x.at + r.Int64N(lateness+1)}
	}
	slices.SortStableFunc(ds, func(a, b delivery) int { return cmp.Compare(a.d, b.d) })
	e := New(opt)
	var out []Gap
	for i, x := range ds {
		tl.add(e, x.event)
		if i%37 == 0 {
			out = append(out, e.Flush(x.d-lateness-maxSpan)...)
		}
	}
	out = append(out, e.Flush(maxNs)...)
	if st := e.Stats(); st.Late != 0 || st.Dropped != 0 {
		panic("late or dropped events in a stream within lateness")
	}
	return sortGaps(out)
}

func sortGaps(gs []Gap) []Gap {
	slices.SortFunc(gs, func(a, b Gap) int {
		return cmp.Or(cmp.Compare(a.End, b.End), cmp.Compare(a.Request, b.Request), cmp.Compare(a.Index, b.Index))
	})
	return gs
}

func slicesSortStable(ev []event) {
	slices.SortStableFunc(ev, func(a, b event) int { return cmp.Compare(a.at, b.at) })
}

func sortBy[T any](s []T, key func(T) int64) {
	slices.SortStableFunc(s, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
}
