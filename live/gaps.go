package live

import (
	"cmp"
	"fmt"
	"iter"
	"slices"
	"strconv"

	"github.com/bpfbench/bpfbench/result"

	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/correlate/critpath/feed"
)

// Gap is a walked gap, compactly: what the baseline and the bands need.
type Gap struct {
	Request, Index int32
	Start, End     int64
	NoArrival      bool
	// Unwalked: the walk left the gap out (its sample or its budget): it
	// has a duration and no causes.
	Unwalked bool
	Ns       [critpath.NumCauses]int64
	// Steal is the part of Ns[CPURunqueue] the hypervisor held (steps held
	// by critpath.Hypervisor).
	Steal int64
}

// CompactOf is g compactly.
func CompactOf(g critpath.Gap) Gap {
	return Gap{Request: int32(g.Request), Index: int32(g.Index), Start: g.Start, End: g.End,
		NoArrival: g.NoArrival, Ns: g.Ns, Steal: StealOf(g)}
}

// Duration is End-Start.
func (g Gap) Duration() int64 { return g.End - g.Start }

// Excess is g's excess over base.
func (g Gap) Excess(base critpath.Baseline) critpath.Excess {
	return critpath.Gap{Read: critpath.Read{Index: int(g.Index), Start: g.Start, End: g.End}, Ns: g.Ns}.Excess(base)
}

// StealOf is the time of g's steps held by the hypervisor.
func StealOf(g critpath.Gap) int64 {
	var ns int64
	for _, s := range g.Steps {
		if s.Other == critpath.Hypervisor {
			ns += s.Duration()
		}
	}
	return ns
}

// Ms is ns in milliseconds.
func Ms(ns int64) float64 { return float64(ns) / 1e6 }

// CausesMs is each cause's time by name, ms.
func CausesMs(ns [critpath.NumCauses]int64) map[string]float64 {
	out := make(map[string]float64, len(ns))
	for k, v := range ns {
		out[critpath.Cause(k).String()] = Ms(v)
	}
	return out
}

// Quantile of sorted xs, nearest rank below.
func Quantile(xs []int64, q float64) int64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[int(q*float64(len(xs)-1))]
}

// BaselineOf is the normal gap of gs: each cause's median over the first
// tokens' gaps (TTFT) and over the later ones (ITL).
func BaselineOf(gs iter.Seq[Gap]) critpath.Baseline {
	// Cause by cause, one column at a time: the gaps are not copied whole
	// (critpath.NormalOf takes every gap's parts at once).
	var b critpath.Baseline
	var ttft, itl []int64
	for c := range critpath.NumCauses {
		ttft, itl = ttft[:0], itl[:0]
		for g := range gs {
			if g.Index == 0 {
				ttft = append(ttft, g.Ns[c])
			} else {
				itl = append(itl, g.Ns[c])
			}
		}
		b.TTFT[c], b.ITL[c] = critpath.Median(ttft), critpath.Median(itl)
	}
	return b
}

// Band is the slowest 1% of the first tokens' gaps (ttft) or of the later
// gaps: the gaps at least as long as their p99 (every gap's), with each
// cause's share of their excess over base. A gap the walk left out
// (Unwalked) sets the p99 and has no causes to share: the band's gaps,
// totals and shares are the walked ones' (Unwalked counts the others).
func Band(gs iter.Seq[Gap], base critpath.Baseline, ttft bool) *result.CriticalBand {
	var durs []int64
	for g := range gs {
		if (g.Index == 0) == ttft {
			durs = append(durs, g.Duration())
		}
	}
	if len(durs) == 0 {
		return nil
	}
	slices.Sort(durs)
	from := Quantile(durs, 0.99)
	b := &result.CriticalBand{FromMs: Ms(from), ExcessShares: map[string]float64{}}
	var tot, exc [critpath.NumCauses]int64
	var excess int64
	for g := range gs {
		if (g.Index == 0) != ttft || g.Duration() < from {
			continue
		}
		if g.Unwalked {
			b.Unwalked++
			continue
		}
		b.Gaps++
		x := g.Excess(base)
		excess += x.ExcessNs
		for k := range tot {
			tot[k] += g.Ns[k]
			exc[k] += x.Ns[k]
		}
	}
	b.TotalsMs, b.ExcessMs = CausesMs(tot), Ms(excess)
	for k, v := range exc {
		s := 0.0
		if excess > 0 {
			s = float64(v) / float64(excess)
		}
		b.ExcessShares[critpath.Cause(k).String()] = s
	}
	b.Top = TopOf(b.ExcessShares)
	return b
}

// TopOf is the cause with the largest share ("unexplained" when none has
// any; ties: the first cause).
func TopOf(m map[string]float64) string {
	best, bv := critpath.Unexplained.String(), 0.0
	for _, name := range critpath.CauseNames() {
		if v := m[name]; v > bv {
			best, bv = name, v
		}
	}
	return best
}

// MaxSteps bounds the steps of a gap CriticalGap writes.
const MaxSteps = 64

// CriticalGap is a gap as result.json lists it: its longest steps, at
// most MaxSteps, in time order; origin is the clock's zero of StartS,
// name gives a thread's comm when the engine has none.
func CriticalGap(g critpath.Gap, base critpath.Baseline, origin int64, name func(uint32) string) result.CriticalGap {
	out := result.CriticalGap{Request: g.Request, Index: g.Index, Port: g.Port,
		StartS: float64(g.Start-origin) / 1e9, DurationMs: Ms(g.Duration()), ExcessMs: Ms(g.Excess(base).ExcessNs),
		SentMs: Ms(g.Sent - g.Start), ArrivedMs: Ms(g.Arrived - g.Start),
		NoSend: g.NoSend, NoArrival: g.NoArrival, Guessed: g.Guessed, CausesMs: CausesMs(g.Ns)}
	steps := g.Steps
	if len(steps) > MaxSteps {
		idx := make([]int, len(steps))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(steps[b].Duration(), steps[a].Duration()) })
		idx = idx[:MaxSteps]
		slices.Sort(idx)
		kept := make([]critpath.Step, len(idx))
		for i, j := range idx {
			kept[i] = steps[j]
		}
		out.StepsOmitted = len(steps) - len(kept)
		steps = kept
	}
	for _, s := range steps {
		st := result.CriticalStep{StartMs: Ms(s.Start - g.Start), DurationMs: Ms(s.Duration()), State: s.State.String(),
			Cause: s.Cause.String(), Detail: s.Detail(), Depth: s.Depth}
		if s.Thread.Tid != 0 {
			st.Tid = s.Thread.Tid
			st.Thread = ThreadLabel(s.Thread, name)
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

// ThreadLabel is "comm[tid]", the comm from name when the engine has none.
func ThreadLabel(t critpath.Thread, name func(uint32) string) string {
	comm := t.Comm
	if comm == "" && name != nil {
		comm = name(t.Tid)
	}
	if comm == "" {
		comm = "thread"
	}
	return comm + "[" + strconv.FormatUint(uint64(t.Tid), 10) + "]"
}

// StatsOf fills a result's critical-path counters from a feed.Feed's and its
// engine's.
func StatsOf(dst *result.CriticalStats, f feed.FeedStats, st critpath.Stats) {
	dst.ClientSpans, dst.Spans, dst.Dropped, dst.Segments = f.ClientSpans, f.Spans, f.Dropped, f.Segments
	dst.CUDACalls, dst.Sends, dst.InlineSends, dst.Arrivals = f.CUDACalls, f.Sends, f.InlineSends, f.Arrivals
	dst.Holds, dst.DataEdges = f.Holds, f.DataEdges
	dst.Events, dst.Malformed, dst.Late = st.Events, st.Malformed, st.Late
	dst.BeforeHorizon, dst.Pruned = st.BeforeHorizon, st.Pruned+st.Dropped
	dst.NoArrival, dst.NoSend, dst.Guessed, dst.NoThread = st.NoArrival, st.NoSend, st.Guessed, st.NoThread
	dst.DepthLimited, dst.Cycles, dst.Hops = st.DepthLimited, st.Cycles, st.Hops
	dst.DataEdgesFollowed = st.DataEdges
	dst.SiblingWaits, dst.Interrupts, dst.NoEdgeSleeps = st.SiblingWaits, st.Interrupts, st.NoEdgeSleeps
	dst.Steals, dst.Stopped, dst.BehindTarget, dst.Owed = st.Steals, st.Stopped, st.BehindTarget, st.Owed
	dst.Folded = st.Folded
}

// NeighboursOf are the processes that held a critical-path thread's CPU,
// most time first, at most n of each kind: those outside the followed
// processes (targets), and the followed ones (the server's own threads
// waiting for each other: self-contention, not a neighbour).
func NeighboursOf(agg *critpath.Aggregate, targets map[uint32]bool, n int) (noisy, self []result.NoisyNeighbour) {
	noisy = []result.NoisyNeighbour{}
	for _, nb := range agg.Neighbours() {
		pid := nb.Process.Tgid
		if pid == 0 {
			pid = nb.Process.Tid
		}
		share := 0.0
		if agg.GapNs > 0 {
			share = float64(nb.Ns) / float64(agg.GapNs)
		}
		x := result.NoisyNeighbour{Process: nb.Process.String(), Pid: pid,
			Comm: nb.Process.Comm, Ms: Ms(nb.Ns), Share: share, Gaps: nb.Gaps, Target: targets[pid]}
		switch {
		case x.Target && len(self) < n:
			self = append(self, x)
		case !x.Target && len(noisy) < n:
			noisy = append(noisy, x)
		}
	}
	return noisy, self
}

// MatchBand compares a run's p99 gap band with the baseline run's own p99
// band (validate's rule for a phase's tail, tailMean): each cause's time
// per gap in b above its time per gap in the baseline's band is what the
// run added to the tail, and b's excess and shares become those (the
// excess over the baseline's normal gap would count what is slow in the
// baseline's tail too: decode steps that carry another request's
// prefill, long with or without contention). Nothing changes when the
// baseline has no band, or the run's band added nothing.
func MatchBand(b, base *result.CriticalBand, name string) {
	if b == nil || base == nil || b.Gaps == 0 || base.Gaps == 0 {
		return
	}
	added := map[string]float64{}
	var sum float64
	for _, c := range critpath.CauseNames() {
		if c == critpath.Unexplained.String() {
			continue
		}
		if v := b.TotalsMs[c]/float64(b.Gaps) - base.TotalsMs[c]/float64(base.Gaps); v > 0 {
			added[c] = v
			sum += v
		}
	}
	if sum <= 0 {
		return
	}
	b.ExcessShares = map[string]float64{}
	for _, c := range critpath.CauseNames() {
		b.ExcessShares[c] = added[c] / sum
	}
	b.ExcessMs = sum * float64(b.Gaps)
	b.Top = TopOf(b.ExcessShares)
	b.ExcessOver = fmt.Sprintf("the p99 band of %s (%d gaps from %.3g ms)", name, base.Gaps, base.FromMs)
}
