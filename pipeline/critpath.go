package pipeline

import (
	"bufio"
	"encoding/json"
	"iter"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/bpfbench/bpfbench/result"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/correlate/critpath/feed"
	"github.com/bpfbench/bpfbench/internal/affinity"
	"github.com/bpfbench/bpfbench/live"
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

func (g *critGap) excess(base critpath.Baseline) critpath.Excess { return g.compact().Excess(base) }

// compact is g as the live package's shared helpers take it.
func (g critGap) compact() live.Gap {
	return live.Gap{Request: g.request, Index: g.index, Start: g.start, End: g.end, NoArrival: g.noArrival, Ns: g.ns, Steal: g.steal}
}

// compacts is gs compactly.
func compacts(gs iter.Seq[critGap]) iter.Seq[live.Gap] {
	return func(yield func(live.Gap) bool) {
		for g := range gs {
			if !yield(g.compact()) {
				return
			}
		}
	}
}

// The shared helpers of the critical path's results (live/gaps.go).
var (
	ms          = live.Ms
	quantile    = live.Quantile
	causesMs    = live.CausesMs
	topOf       = live.TopOf
	stealOf     = live.StealOf
	criticalGap = live.CriticalGap
)

func baselineOf(gs iter.Seq[critGap]) critpath.Baseline { return live.BaselineOf(compacts(gs)) }

func band(gs iter.Seq[critGap], base critpath.Baseline, ttft bool) *result.CriticalBand {
	return live.Band(compacts(gs), base, ttft)
}

// critStream feeds the engine; every method runs under the runStream's
// lock.
type critStream struct {
	feed  *feed.Feed
	eng   *critpath.Engine
	gaps  gapLog
	agg   critpath.Aggregate
	slow  live.Slowest
	stats result.CriticalStats
	// base is the normal gap critResult compared the gaps with.
	base critpath.Baseline
	// late is how late the load generator itself started each request
	// against its schedule (loadgen.Record.LateNs), for the batch and
	// prefill rules.
	late map[int32]int64
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
	eng := critpath.New(critpath.Options{CPUs: new(affinity.Counter).CPUs})
	c := &critStream{eng: eng, feed: feed.NewFeed(eng, maxHeld), slow: live.Slowest{N: critSlowest}, late: map[int32]int64{}}
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
func (c *critStream) record(sp collectors.Span) { c.feed.Record(sp) }

// addRecord adds a finished request's token gaps.
func (c *critStream) addRecord(r *loadgen.Record) {
	if !r.Success || len(r.ChunkNs) == 0 {
		return
	}
	port := uint16(r.LocalPort)
	c.stats.Reads += uint64(len(r.ChunkNs))
	c.late[int32(r.Index)] = r.LateNs()
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
		c.slow.Add(g)
	})
	c.feed.Retained()
}

// slowest are the kept gaps, slowest first.
func (c *critStream) slowest() []critpath.Gap { return c.slow.Sorted() }

// critPhase is a phase's span of time.
type critPhase struct {
	name     string
	from, to int64
}

// moveBatched applies the batch rule (batch.go) and then the prefill
// rule (prefill.go) to gaps, once: the log then holds the gaps after
// them, and out their totals and what they moved.
func (c *critStream) moveBatched(gaps []critGap, base critpath.Baseline, n0 float64, el stepElasticity, late lateness, out *result.CriticalPath) {
	moved := batchRule(gaps, base, n0, el.E, late)
	pre := prefillRule(gaps, base, late)
	if moved.gaps == 0 && pre.gaps == 0 {
		return
	}
	var l gapLog
	var totals [critpath.NumCauses]int64
	for _, g := range gaps {
		l.add(g)
		for k, v := range g.ns {
			totals[k] += v
		}
	}
	c.gaps = l
	out.TotalsMs = causesMs(totals)
	out.Stats.BatchMovedMs, out.Stats.BatchGaps = ms(moved.ns), moved.gaps
	out.Stats.PrefillMovedMs, out.Stats.PrefillGaps = ms(pre.ns), pre.gaps
}

// critResult builds result.json's critical_path. The baseline is prior
// when given, else the first phase's gaps when there are phases, else
// the run's.
func (c *critStream) critResult(runStart int64, phases []critPhase, name func(tid uint32) string, prior *Prior) *result.CriticalPath {
	if c.dump != nil {
		c.dumpW.Flush()
		c.dumpFile.Close()
		c.dump = nil
	}
	live.StatsOf(&c.stats, c.feed.Stats, c.eng.Stats())

	out := &result.CriticalPath{Rule: critRule, Baseline: "run", Causes: critpath.CauseNames(), Stats: c.stats,
		Gaps: c.agg.Gaps, GapMs: ms(c.agg.GapNs), TotalsMs: causesMs(c.agg.Ns), UnexplainedFraction: c.agg.Fraction(critpath.Unexplained),
		NoisyNeighbours: []result.NoisyNeighbour{}, Slowest: []result.CriticalGap{}}
	var base critpath.Baseline
	var baseTail *tailMeans
	gaps := slices.Collect(c.gaps.all())
	var n0 float64 // the normal number of requests in flight
	var el stepElasticity
	late := lateness{of: c.late}
	switch {
	case prior != nil:
		out.Baseline, base, n0, el = prior.Name(), prior.Crit, prior.inFlight, prior.elasticity
		late.normal = prior.late
		if prior.haveTail {
			baseTail = &prior.tail
		}
	case len(phases) > 0:
		out.Baseline = phases[0].name
		first := inPhase(slices.Values(gaps), phases[0])
		base, n0, el = baselineOf(slices.Values(first)), normalInFlight(first), batchElasticity(first)
		late.normal = normalLate(first, c.late)
	default:
		base, n0, el = baselineOf(slices.Values(gaps)), normalInFlight(gaps), batchElasticity(gaps)
		late.normal = normalLate(gaps, c.late)
	}
	c.moveBatched(gaps, base, n0, el, late, out)
	out.Stats.NormalLateMs = ms(late.normal)
	out.Stats.NormalInFlight = n0
	if n0 > 0 {
		out.Stats.BatchElasticity, out.Stats.BatchElasticityMeasured = &el.E, el.Measured
	}

	// The server's own processes holding each other's CPUs are its
	// self-contention (more threads than CPUs), not a neighbour.
	out.NoisyNeighbours, out.SelfContention = live.NeighboursOf(&c.agg, c.feed.Tgids, 10)

	var delays []int64
	for g := range c.gaps.all() {
		if !g.noArrival {
			delays = append(delays, g.ns[critpath.Client])
		}
	}
	if len(delays) > 0 {
		slices.Sort(delays)
		out.ClientReadDelay = &result.Distribution{Count: len(delays), P50Ms: ms(quantile(delays, 0.5)),
			P99Ms: ms(quantile(delays, 0.99)), MaxMs: ms(delays[len(delays)-1])}
	}

	c.base = base
	for _, g := range c.slowest() {
		out.Slowest = append(out.Slowest, criticalGap(g, base, runStart, name))
	}
	rebase(out, c.gaps.all(), phases, base, baseTail)
	if prior != nil {
		live.MatchBand(out.ITLP99, prior.itlP99, prior.Name())
	}
	return out
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
