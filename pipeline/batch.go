package pipeline

import (
	"cmp"
	"math"
	"slices"
	"sort"

	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/live"
	"github.com/bpfbench/bpfbench/result"
)

// The batch rule. An engine computes the tokens of every request in
// flight in one step; a step that carries more streams than normal takes
// longer on an engine whose step costs time per token it carries (a
// compute-bound CPU model), and the walk rightly calls that time
// server_compute: the server computed other requests' tokens. But the
// batch is bigger only because those requests are still in flight, and
// at a steady request rate they are still in flight because their own
// gaps were slowed: by a neighbour on the CPU, a slow client, the disk.
// Or because they came together: a load generator short of CPU wakes
// late for its sends and sends several at once. So, after the walk, the
// part of a gap's server_compute excess that the bigger batch explains is
// given to what made the requests being decoded overlap, in proportion
// to how late each was started and the excess its gaps had so far:
//
//   - k is the number of the run's requests being decoded at the gap's
//     end (between their first token and their last: those waiting for
//     their first are in the engine's queue, not its batch), n0 the
//     normal number (the median over the baseline's gaps after the first
//     token);
//   - for a gap with k > n0 (the first token's too: its prefill shares
//     steps with the others), the batch part is at most its
//     server_compute above normal, and at most the share
//     1 - (n0/k)^e of its server_compute: what a step costs beyond n0
//     streams' tokens when its cost grows as k^e. e, the step's
//     elasticity to the batch, is measured on the baseline's gaps
//     (batchElasticity): 1 where a step's cost grows with every token it
//     carries (a CPU engine), near 0 where the batch is nearly free (a
//     memory-bound decode, llmsim's step). Assumed 1 before it was
//     measured, the rule gave a slower step's own time (llmsim's, 15 →
//     25 ms) to the other requests' small cpu_runqueue and io_block;
//   - the weights are, over the requests in flight (the gap's own too:
//     a request that came late or ran slow shares its steps with the
//     others as much as they share theirs with it), client for how much
//     later than normal the load generator started each (its own queue
//     time, not a wait for a slot under --max-concurrency; normal is the
//     baseline's median), and the excess each cause added to their gaps
//     so far, net (what a cause took below
//     normal in some gaps offsets what it added in others: a cause that
//     only varies around normal is no reason; its positive parts alone
//     gave llmsim's slower step 7-19% to cpu_runqueue), a gap in progress
//     pro-rated to this one's end: the server's causes only, server_compute counted
//     without its own batch part (a batch grown by a batch is not a
//     reason). The gaps' net_backpressure and client are left out: they
//     name what held a connection's reads back, and an engine streams
//     on while a reader stalls (its batch does not hold the stalled
//     request longer); a batch grown by slow readers stays
//     server_compute. A compute-bound slowdown (a slower model) keeps its
//     server_compute; contention that slowed the requests gets the steps
//     it filled.
//
// The rule uses only the load generator's requests: it does not see
// other clients' requests in flight (attach's live view does not apply
// it). It moves time between causes within a gap; a gap's total and its
// unexplained time stay. It is applied once, against the run's baseline:
// gaps.jsonl.gz holds the gaps after it.

// inFlightAt returns, for each gap, the number of requests of gs being
// decoded at its end: requests whose first token came at or before it
// and whose last token comes at or after it. A request that has not had
// its first token waits in the engine's queue or its prefill, not in the
// batch: an engine at its slot limit queues the rest, and its batch stays.
func inFlightAt(gs []critGap) []int {
	type span struct{ start, end int64 }
	spans := map[int32]*span{}
	for _, g := range gs {
		s := spans[g.request]
		if s == nil {
			s = &span{start: -1}
			spans[g.request] = s
		}
		if g.index == 0 {
			s.start = g.end
		}
		s.end = max(s.end, g.end)
	}
	starts := make([]int64, 0, len(spans))
	ends := make([]int64, 0, len(spans))
	for _, s := range spans {
		if s.start < 0 || s.end <= s.start {
			continue // no first token seen, or no token after it
		}
		starts = append(starts, s.start)
		ends = append(ends, s.end)
	}
	slices.Sort(starts)
	slices.Sort(ends)
	out := make([]int, len(gs))
	for i, g := range gs {
		t := g.end
		begun := sort.Search(len(starts), func(j int) bool { return starts[j] > t })
		over := sort.Search(len(ends), func(j int) bool { return ends[j] >= t })
		out[i] = begun - over
	}
	return out
}

// normalInFlight is the median number of requests being decoded at the
// end of gs's gaps after the first token (0: none).
func normalInFlight(gs []critGap) float64 {
	k := inFlightAt(gs)
	var xs []int64
	for i, g := range gs {
		if g.index > 0 {
			xs = append(xs, int64(k[i]))
		}
	}
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	m := len(xs) / 2
	if len(xs)%2 == 1 {
		return float64(xs[m])
	}
	return float64(xs[m-1]+xs[m]) / 2
}

// batchMoved is what the batch rule moved: ns out of server_compute, in
// how many gaps.
type batchMoved struct {
	ns   int64
	gaps uint64
}

// stepElasticity is the batch rule's measure of how a decode step's
// server_compute grows with the requests being decoded: as k^E. Measured
// false: too few gaps at too few batch sizes in the baseline, and E is 1
// (a step's cost grows with every token it carries).
type stepElasticity struct {
	E        float64
	Measured bool
}

// The baseline's batch sizes that batchElasticity reads: those with at
// least elasticityMinGaps gaps after the first token, at least two of
// them, the largest at least elasticitySpan times the smallest.
const (
	elasticityMinGaps = 20
	elasticitySpan    = 1.25
)

// batchElasticity measures, on a baseline's gaps gs, how server_compute
// a gap after the first token grows with k, the requests being decoded
// at its end: the slope of log(the median at each k) against log k,
// least squares weighted by the gaps at each k, within [0, 1]. A median
// per k, because a gap that carried another request's prefill both
// computes longer and ends with one more request in flight.
func batchElasticity(gs []critGap) stepElasticity {
	k := inFlightAt(gs)
	byK := map[int][]int64{}
	for i, g := range gs {
		if g.index > 0 && k[i] > 0 {
			byK[k[i]] = append(byK[k[i]], g.ns[critpath.ServerCompute])
		}
	}
	var xs, ys, ws []float64
	lo, hi := math.Inf(1), 0.0
	for kk, v := range byK {
		if len(v) < elasticityMinGaps {
			continue
		}
		slices.Sort(v)
		m := float64(v[len(v)/2])
		if m <= 0 {
			continue
		}
		xs, ys, ws = append(xs, math.Log(float64(kk))), append(ys, math.Log(m)), append(ws, float64(len(v)))
		lo, hi = min(lo, float64(kk)), max(hi, float64(kk))
	}
	if len(xs) < 2 || hi < elasticitySpan*lo {
		return stepElasticity{E: 1}
	}
	var sw, mx, my float64
	for i := range xs {
		sw += ws[i]
		mx += ws[i] * xs[i]
		my += ws[i] * ys[i]
	}
	mx, my = mx/sw, my/sw
	var sxy, sxx float64
	for i := range xs {
		sxy += ws[i] * (xs[i] - mx) * (ys[i] - my)
		sxx += ws[i] * (xs[i] - mx) * (xs[i] - mx)
	}
	return stepElasticity{E: min(max(sxy/sxx, 0), 1), Measured: true}
}

// batchRule applies the batch rule to gs in place (n0: the normal number
// in flight, 0 leaves gs as they are; e the step's elasticity to the
// batch).
func batchRule(gs []critGap, base critpath.Baseline, n0, e float64, late lateness) batchMoved {
	var moved batchMoved
	if n0 <= 0 || len(gs) == 0 {
		return moved
	}
	w := newBatchSweep(gs, base, n0, e)
	for _, i := range w.order {
		g := &gs[i]
		w.depart(g.end)
		own := w.cum[g.request]
		if own == nil {
			own = new([critpath.NumCauses]int64)
			own[critpath.Client] = late.excess(g.request)
			w.cum[g.request] = own
		}
		if b := w.batch[i]; b > 0 {
			if given := give(g, b, w.weights(g)); given > 0 {
				moved.ns += given
				moved.gaps++
			}
		}
		for c := range own {
			own[c] += w.over[i][c]
		}
		w.next[g.request]++
	}
	return moved
}

// give moves b ns of g's server_compute to the causes of w in proportion
// (w's server_compute part stays), and returns how much it moved.
func give(g *critGap, b int64, w [critpath.NumCauses]int64) int64 {
	var total int64
	for _, v := range w {
		total += max(v, 0)
	}
	if total <= 0 {
		return 0
	}
	given := int64(0)
	for c := range w {
		if critpath.Cause(c) == critpath.ServerCompute || w[c] <= 0 {
			continue
		}
		part := int64(float64(b) * float64(w[c]) / float64(total))
		g.ns[c] += part
		given += part
	}
	g.ns[critpath.ServerCompute] -= given
	return given
}

// batchSweep is the state of batchRule's sweep of the gaps by their end.
type batchSweep struct {
	gs    []critGap
	over  [][critpath.NumCauses]int64 // each gap's excess (signed), its batch part out of server_compute's
	batch []int64                     // each gap's batch part
	order []int                       // the gaps by their end
	// byReq is each request's gaps by their start, next the first of
	// them not yet swept (its gap in progress).
	byReq map[int32][]int
	next  map[int32]int
	// leaves are the requests by their last gap's end; cum is the excess
	// so far of each request being decoded.
	leaves []batchLeave
	li     int
	cum    map[int32]*[critpath.NumCauses]int64
}

type batchLeave struct {
	at  int64
	req int32
}

func newBatchSweep(gs []critGap, base critpath.Baseline, n0, e float64) *batchSweep {
	w := &batchSweep{gs: gs, over: make([][critpath.NumCauses]int64, len(gs)), batch: make([]int64, len(gs)),
		byReq: map[int32][]int{}, next: map[int32]int{}, cum: map[int32]*[critpath.NumCauses]int64{}}
	k := inFlightAt(gs)
	last := map[int32]int64{}
	for i, g := range gs {
		n := base.For(critpath.Read{Index: int(g.index)})
		for c := range critpath.NumCauses {
			if live.ServerReason(c) {
				w.over[i][c] = g.ns[c] - n[c]
			}
		}
		if float64(k[i]) > n0 {
			comp := g.ns[critpath.ServerCompute]
			w.batch[i] = min(max(w.over[i][critpath.ServerCompute], 0), int64(float64(comp)*(1-math.Pow(n0/float64(k[i]), e))))
			w.over[i][critpath.ServerCompute] -= w.batch[i]
		}
		last[g.request] = max(last[g.request], g.end)
		w.byReq[g.request] = append(w.byReq[g.request], i)
	}
	for _, ix := range w.byReq {
		slices.SortStableFunc(ix, func(a, b int) int { return cmp.Compare(gs[a].start, gs[b].start) })
	}
	w.order = make([]int, len(gs))
	for i := range w.order {
		w.order[i] = i
	}
	slices.SortStableFunc(w.order, func(a, b int) int { return cmp.Compare(gs[a].end, gs[b].end) })
	for r, t := range last {
		w.leaves = append(w.leaves, batchLeave{t, r})
	}
	slices.SortFunc(w.leaves, func(a, b batchLeave) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.req, b.req)) })
	return w
}

// depart forgets the requests whose last gap ended before t.
func (w *batchSweep) depart(t int64) {
	for ; w.li < len(w.leaves) && w.leaves[w.li].at < t; w.li++ {
		delete(w.cum, w.leaves[w.li].req)
	}
}

// weights are what made the requests being decoded at g's end overlap:
// how late each was started and its gaps' excess so far (g's request's
// too: a request that came late or ran slow is why it shares its steps
// with the others as much as they are why they share its), and of each
// other one's gap in progress the part up to g's end (a stalled
// reader's long gap is why it is still there while it lasts).
func (w *batchSweep) weights(g *critGap) [critpath.NumCauses]int64 {
	var out [critpath.NumCauses]int64
	for r, c := range w.cum {
		for j := range out {
			out[j] += c[j]
		}
		if r == g.request {
			continue // its gap in progress is g
		}
		ix := w.byReq[r]
		if n := w.next[r]; n < len(ix) {
			p := &w.gs[ix[n]]
			if d := p.end - p.start; d > 0 && p.start < g.end {
				f := float64(min(g.end, p.end)-p.start) / float64(d)
				for j := range out {
					out[j] += int64(f * float64(w.over[ix[n]][j]))
				}
			}
		}
	}
	return out
}

// lateness is how late the load generator itself started each request
// against its schedule (loadgen.Record.LateNs, by request), and how late
// it normally did (the baseline's median).
type lateness struct {
	of     map[int32]int64
	normal int64
}

// excess is how much later than normal request r was started (signed,
// like every other cause's excess: 0 for a request not known).
func (l lateness) excess(r int32) int64 {
	v, ok := l.of[r]
	if !ok {
		return 0
	}
	return v - l.normal
}

// normalLate is the median lateness of the requests that have their
// first gap among gs.
func normalLate(gs []critGap, late map[int32]int64) int64 {
	var xs []int64
	for _, g := range gs {
		if v, ok := late[g.request]; ok && g.index == 0 {
			xs = append(xs, v)
		}
	}
	return critpath.Median(xs)
}

// medianLate is the median lateness of a run's measured requests.
func medianLate(recs []result.Request) int64 {
	var xs []int64
	for i := range recs {
		if r := &recs[i]; !r.Warmup && r.Success {
			xs = append(xs, r.LateNs())
		}
	}
	return critpath.Median(xs)
}
