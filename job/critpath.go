package job

import (
	"bufio"
	"cmp"
	"container/heap"
	"encoding/json"
	"iter"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/loadgen"
)

// The critical path of `bpfbench run`, beside the correlation: the same
// spans and token intervals feed a critpath.Engine under the runStream's
// lock, with the same watermark and floor, so its history is bounded the
// same way. Each flushed gap leaves a compact record (its causes' times)
// for the baseline and the bands, and the slowest keep their whole path.
const (
	// critSlowest is how many of the slowest gaps keep their path.
	critSlowest = 10
	// critMaxSteps bounds the steps of a gap written to result.json.
	critMaxSteps = 64
)

// critRule is result.json's critical_path.rule.
const critRule = "each token gap [c(k-1), c(k)] walked back from the client's read: [r(k), c(k)] client " +
	"(the chunk in its socket), [s(k), r(k)] net_backpressure (sent, not yet arrived), and before the send " +
	"the sending thread's states (running server_compute or gpu_sync in a blocking CUDA call, runnable " +
	"cpu_runqueue behind the CPU's holder, D io_block, asleep: what woke it, following a target waker up " +
	"to 4 edges); time no event covers is unexplained. The excess is the gap over the baseline's normal " +
	"gap (each cause's median), split over the causes above their normal time."

// critGap is a flushed gap, compactly.
type critGap struct {
	request, index int32
	start, end     int64
	noArrival      bool
	ns             [critpath.NumCauses]int64
	// steal is the part of ns[CPURunqueue] the hypervisor held (steps
	// held by critpath.Hypervisor): a cause no injection makes.
	steal int64
}

func (g *critGap) duration() int64 { return g.end - g.start }

// stealOf is the time of g's steps held by the hypervisor.
func stealOf(g critpath.Gap) int64 {
	var ns int64
	for _, s := range g.Steps {
		if s.Other == critpath.Hypervisor {
			ns += s.Duration()
		}
	}
	return ns
}

func (g *critGap) excess(base critpath.Baseline) critpath.Excess {
	return critpath.Gap{Read: critpath.Read{Index: int(g.index), Start: g.start, End: g.end}, Ns: g.ns}.Excess(base)
}

// critInlineRx bounds how long a send's stamp may follow its own arrival
// (the sendmsg that delivered it in line).
const critInlineRx = int64(2e6)

// critPort is a client port's last send and arrival, as the spans came.
type critPort struct {
	send, arrival int64
	bytes         uint64 // the last arrival's
}

// critStream feeds the engine; every method runs under the runStream's
// lock.
type critStream struct {
	ports map[uint16]critPort
	eng   *critpath.Engine
	sw    critpath.Switches
	runq  map[uint32]collectors.Span // a run-queue span waiting for its off-CPU span
	segs  []critpath.Segment
	gaps  gapLog
	agg   critpath.Aggregate
	slow  critHeap
	stats report.CriticalStats
	// held is the engine's history at the last tick plus what was added
	// since (Retained walks every thread and port: once a tick).
	held, maxHeld int
	// tgids are the followed processes seen (the server's).
	tgids map[uint32]bool
	// base is the normal gap critResult compared the gaps with.
	base critpath.Baseline
	// dump, when set (BPFBENCH_CRITPATH_DUMP), receives every gap's path.
	dump     *json.Encoder
	dumpFile *os.File
	dumpW    *bufio.Writer
}

// critDumpEnv names a file that receives every gap's critical path as
// JSON lines (a developer's view of the walk; the run's result.json keeps
// only the slowest gaps' paths).
const critDumpEnv = "BPFBENCH_CRITPATH_DUMP"

func (c *critStream) dumpGap(g critpath.Gap) {
	type step struct {
		Start, End int64
		Thread     string `json:",omitempty"`
		Tid        uint32 `json:",omitempty"`
		State      string
		Cause      string
		Depth      int    `json:",omitempty"`
		Detail     string `json:",omitempty"`
	}
	out := struct {
		Request, Index int
		Start, End     int64
		Sent, Arrived  int64
		Ns             map[string]float64
		Steps          []step
	}{Request: g.Request, Index: g.Index, Start: g.Start, End: g.End, Sent: g.Sent, Arrived: g.Arrived, Ns: causesMs(g.Ns)}
	for _, s := range g.Steps {
		out.Steps = append(out.Steps, step{Start: s.Start, End: s.End, Thread: s.Thread.String(), Tid: s.Thread.Tid,
			State: s.State.String(), Cause: s.Cause.String(), Depth: s.Depth, Detail: s.Detail()})
	}
	c.dump.Encode(out) //nolint:errcheck // a debugging aid: a full disk loses lines, not the run
}

func newCritStream(maxHeld int, floor int64) *critStream {
	c := &critStream{eng: critpath.New(critpath.Options{}), runq: map[uint32]collectors.Span{}, ports: map[uint16]critPort{}, maxHeld: maxHeld,
		tgids: map[uint32]bool{}}
	c.eng.SetFloor(floor)
	if p := os.Getenv(critDumpEnv); p != "" {
		// "%p" is this process's pid: one file per run when a test
		// runs several.
		p = strings.ReplaceAll(p, "%p", strconv.Itoa(os.Getpid()))
		if f, err := os.Create(p); err == nil {
			c.dumpW = bufio.NewWriterSize(f, 1<<16)
			c.dump, c.dumpFile = json.NewEncoder(c.dumpW), f
		}
	}
	return c
}

// record feeds a span.
func (c *critStream) record(sp collectors.Span) {
	if sp.Client && sp.Kind != collectors.SpanArrival {
		c.stats.ClientSpans++
		if sp.Kind == collectors.SpanRunqueue && c.held < c.maxHeld {
			// The load generator's own waits for a CPU: a chunk in
			// flight meanwhile was held by the client.
			c.held++
			w := critpath.ClientWait{Start: sp.Start, End: sp.End}
			if sp.HolderTid != 0 {
				w.Holder = critpath.Thread{Tid: sp.HolderTid, Tgid: sp.HolderTgid, Comm: sp.HolderComm}
			}
			c.eng.AddClientWait(w)
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
	if c.held >= c.maxHeld {
		c.stats.Dropped++
		return
	}
	c.stats.Spans++
	c.held++
	if sp.Tgid != 0 && !sp.Client {
		c.tgids[sp.Tgid] = true
	}
	switch sp.Kind {
	case collectors.SpanRunqueue:
		if p, ok := c.runq[sp.Tid]; ok {
			c.switchIn(p, nil) // a switch-in with no off-CPU interval known
		}
		c.runq[sp.Tid] = sp
	case collectors.SpanOffCPU:
		p, ok := c.runq[sp.Tid]
		if ok {
			delete(c.runq, sp.Tid)
			if p.End != sp.End {
				c.switchIn(p, nil)
				ok = false
			}
		}
		if ok {
			c.switchIn(sp, &p)
		} else {
			c.switchIn(sp, nil)
		}
	case collectors.SpanCUDA:
		c.stats.CUDACalls++
		c.eng.AddCUDA(critpath.CUDACall{Tid: sp.Tid, Start: sp.Start, End: sp.End, Name: sp.Detail})
	case collectors.SpanSend:
		c.stats.Sends++
		t := sp.End
		// sock_send_length fires as sendmsg returns; over loopback or a
		// veth the receive runs inside the send (net_rx on its
		// bh_enable), so the chunk arrives before its send is stamped. An
		// arrival of as many bytes, since the port's previous send and at
		// most critInlineRx before this one, was this send's: it left
		// when it arrived.
		p := c.ports[sp.Port]
		if p.arrival > p.send && p.arrival <= t && t-p.arrival <= critInlineRx && p.bytes == sp.Bytes {
			t = p.arrival
			c.stats.InlineSends++
		}
		p.send = sp.End
		c.setPort(sp.Port, p)
		c.eng.AddSend(critpath.Send{Time: t, Tid: sp.Tid, Port: sp.Port, Bytes: int64(sp.Bytes)})
	case collectors.SpanData:
		c.stats.DataEdges++
		c.eng.AddData(critpath.Data{Reader: critpath.Thread{Tid: sp.Tid, Tgid: sp.Tgid},
			Writer: critpath.Thread{Tid: sp.WakerTid, Tgid: sp.WakerTgid, Comm: sp.WakerComm}, Written: sp.Start, Read: sp.End})
	case collectors.SpanTCP:
		c.stats.Holds++
		c.eng.AddHold(critpath.Hold{Port: sp.Port, Start: sp.Start, End: sp.End, Kind: sp.Detail})
	case collectors.SpanArrival:
		c.stats.Arrivals++
		p := c.ports[sp.LocalPort]
		p.arrival, p.bytes = max(p.arrival, sp.End), sp.Bytes
		c.setPort(sp.LocalPort, p)
		c.eng.AddArrival(critpath.Arrival{Time: sp.End, Port: sp.LocalPort, Bytes: int64(sp.Bytes)})
	}
}

func (c *critStream) setPort(port uint16, p critPort) {
	c.ports[port] = p
}

// switchIn turns a switch-in's spans into segments: off is its off-CPU
// span (or, alone, a run-queue span with no off-CPU interval known), rq
// the run-queue span of the same switch-in.
func (c *critStream) switchIn(off collectors.Span, rq *collectors.Span) {
	th := critpath.Thread{Tid: off.Tid, Tgid: off.Tgid}
	si := critpath.SwitchIn{Thread: th, Ts: off.End, OffCPU: off.End - off.Start, Left: critpath.Runnable,
		IRQ: critpath.IRQTime{Block: off.IRQBlockNs, Net: off.IRQNetNs, Steal: off.StealNs}}
	if rq != nil {
		si.IRQ.Block += rq.IRQBlockNs
		si.IRQ.Net += rq.IRQNetNs
		si.IRQ.Steal += rq.StealNs
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
			si.Wake = wakeOf(off)
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
	c.segs = c.sw.Segments(si, c.segs[:0])
	for _, s := range c.segs {
		c.stats.Segments++
		c.eng.AddSegment(s)
	}
}

// wakeOf is the wakeup that ended an off-CPU span's sleep. A hard
// interrupt outside any device handler is a timer (hrtimers expire in hard
// interrupt context: nanosleep, poll and futex timeouts); a device
// handler's wakeup is its device's (a block completion, a network
// receive). When the collector could not tell (no interrupt time), a
// hard interrupt ending an interruptible sleep is taken for a timer, and
// one ending an IO wait does not matter, D being io_block.
func wakeOf(sp collectors.Span) critpath.Wake {
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

// addRecord adds a finished request's token gaps.
func (c *critStream) addRecord(r *loadgen.Record) {
	if !r.Success || len(r.ChunkNs) == 0 {
		return
	}
	port := uint16(r.LocalPort)
	c.stats.Reads += uint64(len(r.ChunkNs))
	var ps, pe int64
	if r.PausedNs != nil {
		ps, pe = r.PausedNs[0], r.PausedNs[1]
	}
	c.eng.AddRead(critpath.Read{Request: r.Index, Index: 0, Port: port, Start: r.StartNs, End: r.ChunkNs[0], PauseStart: ps, PauseEnd: pe})
	for k := 1; k < len(r.ChunkNs); k++ {
		c.eng.AddRead(critpath.Read{Request: r.Index, Index: k, Port: port, Start: r.ChunkNs[k-1], End: r.ChunkNs[k], PauseStart: ps, PauseEnd: pe})
	}
}

// advance walks the gaps the watermark has passed.
func (c *critStream) advance(wm, floor int64) {
	c.eng.SetFloor(floor)
	c.eng.FlushFunc(wm, func(g critpath.Gap) {
		if c.dump != nil {
			c.dumpGap(g)
		}
		c.gaps.add(critGap{request: int32(g.Request), index: int32(g.Index), start: g.Start, end: g.End,
			noArrival: g.NoArrival, ns: g.Ns, steal: stealOf(g)})
		c.agg.Add(g)
		if g.Index == 0 {
			return
		}
		if len(c.slow) == critSlowest && g.Duration() <= c.slow[0].Duration() {
			return
		}
		g.Steps = slices.Clone(g.Steps) // the engine's buffer until fn returns
		if len(c.slow) == critSlowest {
			c.slow[0] = g
			heap.Fix(&c.slow, 0)
		} else {
			heap.Push(&c.slow, g)
		}
	})
	c.held = c.eng.Retained()
}

// slowest are the kept gaps, slowest first.
func (c *critStream) slowest() []critpath.Gap {
	out := slices.Clone([]critpath.Gap(c.slow))
	slices.SortFunc(out, func(a, b critpath.Gap) int {
		return cmp.Or(cmp.Compare(b.Duration(), a.Duration()), cmp.Compare(a.Request, b.Request), cmp.Compare(a.Index, b.Index))
	})
	return out
}

type critHeap []critpath.Gap

func (h critHeap) Len() int           { return len(h) }
func (h critHeap) Less(i, j int) bool { return h[i].Duration() < h[j].Duration() }
func (h critHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *critHeap) Push(x any)        { *h = append(*h, x.(critpath.Gap)) }
func (h *critHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// critPhase is a phase's span of time.
type critPhase struct {
	name     string
	from, to int64
}

// critResult builds result.json's critical_path. The baseline is prior
// when given, else the first phase's gaps when there are phases, else
// the run's.
func (c *critStream) critResult(runStart int64, phases []critPhase, name func(tid uint32) string, prior *Prior) *report.CriticalPath {
	if c.dump != nil {
		c.dumpW.Flush()
		c.dumpFile.Close()
		c.dump = nil
	}
	st := c.eng.Stats()
	c.stats.Events, c.stats.Malformed, c.stats.Late = st.Events, st.Malformed, st.Late
	c.stats.BeforeHorizon, c.stats.Pruned = st.BeforeHorizon, st.Pruned+st.Dropped
	c.stats.NoArrival, c.stats.NoSend, c.stats.Guessed, c.stats.NoThread = st.NoArrival, st.NoSend, st.Guessed, st.NoThread
	c.stats.DepthLimited, c.stats.Cycles, c.stats.Hops = st.DepthLimited, st.Cycles, st.Hops
	c.stats.DataEdgesFollowed = st.DataEdges
	c.stats.SiblingWaits, c.stats.Interrupts, c.stats.NoEdgeSleeps = st.SiblingWaits, st.Interrupts, st.NoEdgeSleeps
	c.stats.Steals, c.stats.Stopped = st.Steals, st.Stopped

	out := &report.CriticalPath{Rule: critRule, Baseline: "run", Causes: critpath.CauseNames(), Stats: c.stats,
		Gaps: c.agg.Gaps, GapMs: ms(c.agg.GapNs), TotalsMs: causesMs(c.agg.Ns), UnexplainedFraction: c.agg.Fraction(critpath.Unexplained),
		NoisyNeighbours: []report.NoisyNeighbour{}, Slowest: []report.CriticalGap{}}
	var base critpath.Baseline
	var baseTail *tailMeans
	switch {
	case prior != nil:
		out.Baseline, base = prior.Name(), prior.Crit
		if prior.haveTail {
			baseTail = &prior.tail
		}
	case len(phases) > 0:
		out.Baseline = phases[0].name
		base = baselineOf(slices.Values(inPhase(c.gaps.all(), phases[0])))
	default:
		base = baselineOf(c.gaps.all())
	}

	// The server's own processes holding each other's CPUs are its
	// self-contention (more threads than CPUs), not a neighbour.
	for _, nb := range c.agg.Neighbours() {
		pid := nb.Process.Tgid
		if pid == 0 {
			pid = nb.Process.Tid
		}
		share := 0.0
		if c.agg.GapNs > 0 {
			share = float64(nb.Ns) / float64(c.agg.GapNs)
		}
		n := report.NoisyNeighbour{Process: nb.Process.String(), Pid: pid,
			Comm: nb.Process.Comm, Ms: ms(nb.Ns), Share: share, Gaps: nb.Gaps, Target: c.tgids[pid]}
		switch {
		case n.Target && len(out.SelfContention) < 10:
			out.SelfContention = append(out.SelfContention, n)
		case !n.Target && len(out.NoisyNeighbours) < 10:
			out.NoisyNeighbours = append(out.NoisyNeighbours, n)
		}
	}

	var delays []int64
	for g := range c.gaps.all() {
		if !g.noArrival {
			delays = append(delays, g.ns[critpath.Client])
		}
	}
	if len(delays) > 0 {
		slices.Sort(delays)
		out.ClientReadDelay = &report.Distribution{Count: len(delays), P50Ms: ms(quantile(delays, 0.5)),
			P99Ms: ms(quantile(delays, 0.99)), MaxMs: ms(delays[len(delays)-1])}
	}

	c.base = base
	for _, g := range c.slowest() {
		out.Slowest = append(out.Slowest, criticalGap(g, base, runStart, name))
	}
	rebase(out, c.gaps.all(), phases, base, baseTail)
	return out
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

func causesMs(ns [critpath.NumCauses]int64) map[string]float64 {
	out := make(map[string]float64, len(ns))
	for k, v := range ns {
		out[critpath.Cause(k).String()] = ms(v)
	}
	return out
}

// quantile of sorted xs, nearest rank below.
func quantile(xs []int64, q float64) int64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[int(q*float64(len(xs)-1))]
}

// inPhase is the gaps of phase p: those that lie wholly in it. A gap that
// straddles two phases has both phases' causes in it (a stream stalled by
// the net phase's shaping that drains when it ends, then waits for a
// starved client in the next phase), so it judges neither: judged by its
// end, the net phase's stalls were the next phase's net_backpressure;
// by its middle, the next phase's starved client was the net phase's.
func inPhase(gs iter.Seq[critGap], p critPhase) []critGap {
	var out []critGap
	for g := range gs {
		if g.start >= p.from && g.end < p.to {
			out = append(out, g)
		}
	}
	return out
}

func baselineOf(gs iter.Seq[critGap]) critpath.Baseline {
	// Cause by cause, one column at a time: a run's gaps are not copied
	// whole (critpath.NormalOf takes every gap's parts at once).
	var b critpath.Baseline
	var ttft, itl []int64
	for c := range critpath.NumCauses {
		ttft, itl = ttft[:0], itl[:0]
		for g := range gs {
			if g.index == 0 {
				ttft = append(ttft, g.ns[c])
			} else {
				itl = append(itl, g.ns[c])
			}
		}
		b.TTFT[c], b.ITL[c] = critpath.Median(ttft), critpath.Median(itl)
	}
	return b
}

// band is the slowest 1% of the TTFTs (ttft) or of the later gaps: the
// gaps at least as long as their p99.
func band(gs iter.Seq[critGap], base critpath.Baseline, ttft bool) *report.CriticalBand {
	var durs []int64
	for g := range gs {
		if (g.index == 0) == ttft {
			durs = append(durs, g.duration())
		}
	}
	if len(durs) == 0 {
		return nil
	}
	slices.Sort(durs)
	from := quantile(durs, 0.99)
	b := &report.CriticalBand{FromMs: ms(from), ExcessShares: map[string]float64{}}
	var tot, exc [critpath.NumCauses]int64
	var excess int64
	for g := range gs {
		if (g.index == 0) != ttft || g.duration() < from {
			continue
		}
		b.Gaps++
		x := g.excess(base)
		excess += x.ExcessNs
		for k := range tot {
			tot[k] += g.ns[k]
			exc[k] += x.Ns[k]
		}
	}
	b.TotalsMs, b.ExcessMs = causesMs(tot), ms(excess)
	for k, v := range exc {
		s := 0.0
		if excess > 0 {
			s = float64(v) / float64(excess)
		}
		b.ExcessShares[critpath.Cause(k).String()] = s
	}
	b.Top = topOf(b.ExcessShares)
	return b
}

// tailMeans are, over a set's slowest 10% of gaps after the first token,
// the mean excess per gap and cause (ns), and the mean time per gap the
// hypervisor held the server's vCPU (steal).
type tailMeans struct {
	ns    [critpath.NumCauses]float64
	steal float64
}

// unstolen is g without the hypervisor's steal: its cpu_runqueue held by
// the hypervisor taken out of the gap. What an injection added is judged
// on gaps as the server would have had them on a physical CPU: the
// hypervisor's steal comes and goes with the host's other guests, and a
// phase it struck would otherwise take its slowest gaps from the steal.
func (g critGap) unstolen() critGap {
	if d := min(max(g.steal, 0), g.ns[critpath.CPURunqueue]); d > 0 {
		g.ns[critpath.CPURunqueue] -= d
		g.end -= d
	}
	return g
}

// tailMean is tailMeans of gs (each gap without its steal, unstolen).
func tailMean(gs iter.Seq[critGap], base critpath.Baseline) tailMeans {
	var out tailMeans
	var durs []int64
	for g := range gs {
		if g.index > 0 {
			u := g.unstolen()
			durs = append(durs, u.duration())
		}
	}
	if len(durs) == 0 {
		return out
	}
	// The n longest: every gap longer than the n-th longest, then as many
	// as long as it as there is room for.
	slices.Sort(durs)
	n := max(len(durs)/10, 1)
	nth := durs[len(durs)-n]
	longer, _ := slices.BinarySearch(durs, nth+1) // the first longer than nth
	ties := n - (len(durs) - longer)              // the gaps as long as nth that fit
	for g0 := range gs {
		g := g0.unstolen()
		if g.index == 0 || g.duration() < nth {
			continue
		}
		if g.duration() == nth {
			if ties == 0 {
				continue
			}
			ties--
		}
		x := g.excess(base)
		for k, v := range x.Ns {
			out.ns[k] += float64(v) / float64(n)
		}
		out.steal += float64(g0.steal) / float64(n)
	}
	return out
}

// topOf is the cause with the largest share ("unexplained" when none has
// any; ties: the first cause).
func topOf(m map[string]float64) string {
	best, bv := critpath.Unexplained.String(), 0.0
	for _, name := range critpath.CauseNames() {
		if v := m[name]; v > bv {
			best, bv = name, v
		}
	}
	return best
}

// criticalGap is a gap as result.json lists it: its longest steps, at
// most critMaxSteps, in time order.
func criticalGap(g critpath.Gap, base critpath.Baseline, runStart int64, name func(uint32) string) report.CriticalGap {
	out := report.CriticalGap{Request: g.Request, Index: g.Index, Port: g.Port,
		StartS: float64(g.Start-runStart) / 1e9, DurationMs: ms(g.Duration()), ExcessMs: ms(g.Excess(base).ExcessNs),
		SentMs: ms(g.Sent - g.Start), ArrivedMs: ms(g.Arrived - g.Start),
		NoSend: g.NoSend, NoArrival: g.NoArrival, Guessed: g.Guessed, CausesMs: causesMs(g.Ns)}
	steps := g.Steps
	if len(steps) > critMaxSteps {
		idx := make([]int, len(steps))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(steps[b].Duration(), steps[a].Duration()) })
		idx = idx[:critMaxSteps]
		slices.Sort(idx)
		kept := make([]critpath.Step, len(idx))
		for i, j := range idx {
			kept[i] = steps[j]
		}
		out.StepsOmitted = len(steps) - len(kept)
		steps = kept
	}
	for _, s := range steps {
		st := report.CriticalStep{StartMs: ms(s.Start - g.Start), DurationMs: ms(s.Duration()), State: s.State.String(),
			Cause: s.Cause.String(), Detail: s.Detail(), Depth: s.Depth}
		if s.Thread.Tid != 0 {
			st.Tid = s.Thread.Tid
			st.Thread = threadLabel(s.Thread, name)
		}
		switch {
		case s.Cause == critpath.Client:
			st.Thread = "client"
		case s.Cause == critpath.NetBackpressure && s.Thread.Tid == 0:
			st.Thread = "network"
		}
		out.Steps = append(out.Steps, st)
	}
	return out
}

// threadLabel is "comm[tid]", the comm from /proc when the engine has none.
func threadLabel(t critpath.Thread, name func(uint32) string) string {
	comm := t.Comm
	if comm == "" && name != nil {
		comm = name(t.Tid)
	}
	if comm == "" {
		comm = "thread"
	}
	return comm + "[" + strconv.FormatUint(uint64(t.Tid), 10) + "]"
}
