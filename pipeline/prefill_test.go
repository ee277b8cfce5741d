package pipeline

import (
	"testing"

	"github.com/bpfbench/bpfbench/correlate/critpath"
)

// prefillGaps is two requests: request 1's first gap [0, 10 ms] and its
// decode gap [10, 10+d ms] with sc ms of server_compute, and request 2's
// first gap ending at end2 ms with first2 of each cause.
func prefillGaps(d, sc, end2 int64, first2 map[critpath.Cause]int64) []critGap {
	ms := int64(1e6)
	a0 := critGap{request: 1, index: 0, start: 0, end: 10 * ms}
	a0.ns[critpath.ServerCompute] = 10 * ms
	a1 := critGap{request: 1, index: 1, start: 10 * ms, end: (10 + d) * ms}
	a1.ns[critpath.ServerCompute] = sc * ms
	a1.ns[critpath.CPURunqueue] = (d - sc) * ms
	b0 := critGap{request: 2, index: 0, start: 0, end: end2 * ms}
	for c, v := range first2 {
		b0.ns[c] = v * ms
	}
	return []critGap{a0, a1, b0}
}

func TestPrefillRule(t *testing.T) {
	ms := int64(1e6)
	base := critpath.Baseline{}
	base.ITL[critpath.ServerCompute] = 6 * ms
	base.TTFT[critpath.ServerCompute] = 10 * ms
	t.Run("a delayed arrival moved a prefill into a decode gap", func(t *testing.T) {
		// Request 2 waited 12 ms for a CPU before its 12 ms prefill,
		// which ran in request 1's decode gap: 9 ms of compute there
		// against the normal 6, the 3 ms above it go where request 2's
		// first gap exceeded normal: 12 ms cpu_runqueue, 2 ms compute.
		gs := prefillGaps(20, 9, 29, map[critpath.Cause]int64{critpath.CPURunqueue: 12, critpath.ServerCompute: 12})
		moved := prefillRule(gs, base, lateness{})
		g := gs[1]
		// 3 ms × 12/14 to cpu_runqueue; the compute's share stays.
		want := int64(3 * float64(ms) * 12 / 14)
		if moved.gaps != 1 || moved.ns != want || g.ns[critpath.ServerCompute] != 9*ms-want || g.ns[critpath.CPURunqueue] != 11*ms+want {
			t.Errorf("moved %+v, gap %v: want %d ns from server_compute to cpu_runqueue", moved, g.ns, want)
		}
		if gs[0].ns[critpath.ServerCompute] != 10*ms || gs[2].ns[critpath.CPURunqueue] != 12*ms {
			t.Errorf("first gaps changed: %v %v", gs[0].ns, gs[2].ns)
		}
	})
	t.Run("a request the client sent late", func(t *testing.T) {
		// Request 2 came 19 ms late from the load generator (1 ms is
		// normal) and was prefilled at once, in request 1's decode gap:
		// what its first token waited for is the client's lateness.
		gs := prefillGaps(9, 9, 15, map[critpath.Cause]int64{critpath.ServerCompute: 10})
		late := lateness{of: map[int32]int64{1: ms, 2: 19 * ms}, normal: ms}
		moved := prefillRule(gs, base, late)
		if g := gs[1]; moved.ns != 3*ms || g.ns[critpath.Client] != 3*ms || g.ns[critpath.ServerCompute] != 6*ms {
			t.Errorf("moved %+v, gap %v: want its 3 ms above normal on client", moved, g.ns)
		}
	})
	t.Run("a prefill slowed by a slower model keeps its compute", func(t *testing.T) {
		gs := prefillGaps(9, 9, 15, map[critpath.Cause]int64{critpath.ServerCompute: 15})
		if moved := prefillRule(gs, base, lateness{}); moved.gaps != 0 || gs[1].ns[critpath.ServerCompute] != 9*ms {
			t.Errorf("moved %+v, gap %v: want nothing moved", moved, gs[1].ns)
		}
	})
	t.Run("a first token outside the gap", func(t *testing.T) {
		// Request 2's first token came with request 1's (prefilled in
		// one step): request 1's decode gap carries no prefill.
		gs := prefillGaps(20, 9, 10, map[critpath.Cause]int64{critpath.CPURunqueue: 12, critpath.ServerCompute: 12})
		if moved := prefillRule(gs, base, lateness{}); moved.gaps != 0 {
			t.Errorf("moved %+v: want nothing", moved)
		}
	})
	t.Run("the request's own first token", func(t *testing.T) {
		gs := prefillGaps(20, 9, 29, nil)
		gs[2].request = 1
		if moved := prefillRule(gs, base, lateness{}); moved.gaps != 0 {
			t.Errorf("moved %+v: want nothing", moved)
		}
	})
}
