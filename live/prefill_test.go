package live

import (
	"testing"

	"github.com/bpfbench/bpfbench/correlate/critpath"
)

// A decode gap in which another stream's first token was written gives
// its server_compute above normal to what delayed that first token; a
// first token outside the gap, or the gap's own request's, moves
// nothing, and a first token slowed by compute keeps it.
func TestLivePrefillRule(t *testing.T) {
	var base critpath.Baseline
	base.ITL[critpath.ServerCompute] = 2 * ms
	base.TTFT[critpath.ServerCompute] = 5 * ms
	gap := func(req, index int, start, end int64, ns map[critpath.Cause]int64) critpath.Gap {
		g := critpath.Gap{Read: critpath.Read{Request: req, Index: index, Start: start * ms, End: end * ms}}
		for c, v := range ns {
			g.Ns[c] = v * ms
		}
		return g
	}
	decode := func(firsts ...critpath.Gap) critpath.Gap {
		var p prefills
		for _, f := range firsts {
			p.first(f, base)
		}
		g := gap(1, 3, 10, 20, map[critpath.Cause]int64{critpath.ServerCompute: 6, critpath.CPURunqueue: 4})
		p.decode(&g, base)
		return g
	}
	// Request 2's first token at 15 ms, 10 ms late behind a busy thread:
	// the 4 ms of compute above normal are the run queue's.
	late := gap(2, 1, 0, 15, map[critpath.Cause]int64{critpath.CPURunqueue: 10, critpath.ServerCompute: 5})
	if g := decode(late); g.Ns[critpath.ServerCompute] != 2*ms || g.Ns[critpath.CPURunqueue] != 8*ms {
		t.Errorf("a late first token inside the gap: %v, want 2 ms of compute and 8 of cpu_runqueue", g.Ns)
	}
	// Outside the gap, or the gap's own request: nothing moves.
	outside := gap(2, 1, 0, 25, map[critpath.Cause]int64{critpath.CPURunqueue: 10, critpath.ServerCompute: 5})
	own := gap(1, 1, 0, 15, map[critpath.Cause]int64{critpath.CPURunqueue: 10, critpath.ServerCompute: 5})
	if g := decode(outside, own); g.Ns[critpath.ServerCompute] != 6*ms {
		t.Errorf("first tokens outside the gap or its own: %v, want the 6 ms of compute kept", g.Ns)
	}
	// A first token slowed by its own compute (a slower model): compute
	// stays compute.
	slow := gap(2, 1, 0, 15, map[critpath.Cause]int64{critpath.ServerCompute: 9})
	if g := decode(slow); g.Ns[critpath.ServerCompute] != 6*ms {
		t.Errorf("a first token slowed by compute: %v, want the 6 ms of compute kept", g.Ns)
	}
}
