package pipeline

import (
	"cmp"
	"slices"
	"sort"

	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/live"
)

// The prefill rule. An engine that batches computes a request's prefill
// in a step with the other requests' decodes, so a decode gap in which
// another request's prefill ran is longer, and the walk rightly calls its
// extra time server_compute: the server computed another request's
// prompt. Where that prefill lands is set by when its request reached
// the engine. Requests that arrive together are prefilled in one step
// (measured on llama-server `-t 2 -np 2` with two streams: their first
// tokens 0.1-0.3 ms apart in a quiet run, decode gaps after the first at
// their normal compute); a neighbour on the CPU that delays one
// request's arrival by a few milliseconds (the server's HTTP thread
// waiting for a CPU) moves its prefill into the next step, that is into
// the other request's first decode gap (first tokens 15-26 ms apart; the
// decode gap's compute 6.8 -> 8.5 ms a gap, the gaps after it unchanged),
// and those gaps become the p99 band. So, after the batch rule, a decode
// gap (index 1 on) in which another request's first token arrived gives
// its server_compute above normal to what delayed those requests to
// their first token: their first gaps' excess over the normal first gap,
// the server's causes only (live.ServerReason), server_compute among them (a
// prefill slowed by a slower model keeps the compute it moved), and
// client for how much later than normal the load generator started them
// (a client short of CPU sends late and in bunches: lateness, batch.go). A run
// whose requests arrive at random has prefills in its decode gaps in
// its baseline too, their requests' first gaps are mostly compute, and
// little moves.
//
// Like the batch rule it sees the load generator's requests only (the
// live view does not apply it), moves time between causes within a gap
// (its total and unexplained time stay), and gaps.jsonl.gz holds the gaps
// after it.

// prefillRule applies the prefill rule to gs in place, against the normal
// gap base.
func prefillRule(gs []critGap, base critpath.Baseline, late lateness) batchMoved {
	var moved batchMoved
	type first struct {
		at int64
		i  int
	}
	var firsts []first
	for i, g := range gs {
		if g.index == 0 && !g.noArrival {
			firsts = append(firsts, first{g.end, i})
		}
	}
	if len(firsts) == 0 {
		return moved
	}
	slices.SortFunc(firsts, func(a, b first) int { return cmp.Compare(a.at, b.at) })
	normalFirst := base.For(critpath.Read{Index: 0})
	for i := range gs {
		g := &gs[i]
		if g.index == 0 {
			continue
		}
		over := g.ns[critpath.ServerCompute] - base.For(critpath.Read{Index: int(g.index)})[critpath.ServerCompute]
		if over <= 0 {
			continue
		}
		var w [critpath.NumCauses]int64
		j := sort.Search(len(firsts), func(j int) bool { return firsts[j].at > g.start })
		for ; j < len(firsts) && firsts[j].at <= g.end; j++ {
			q := &gs[firsts[j].i]
			if q.request == g.request {
				continue
			}
			for c := range w {
				if live.ServerReason(critpath.Cause(c)) {
					w[c] += max(q.ns[c]-normalFirst[c], 0)
				}
			}
			w[critpath.Client] += max(late.excess(q.request), 0)
		}
		if given := give(g, over, w); given > 0 {
			moved.ns += given
			moved.gaps++
		}
	}
	return moved
}
