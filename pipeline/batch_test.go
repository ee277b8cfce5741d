package pipeline

import (
	"math"
	"testing"

	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/live"
	"github.com/bpfbench/bpfbench/result"
)

// batchGaps is requests requests of gaps gaps each, all in flight
// together from at, every gap of gap ns: rq in cpu_runqueue, the rest
// server_compute.
func batchGaps(first int32, requests, gaps int, at, gap, rq int64) []critGap {
	var out []critGap
	for r := range requests {
		t := at
		for i := range gaps {
			g := critGap{request: first + int32(r), index: int32(i), start: t, end: t + gap}
			g.ns[critpath.CPURunqueue] = rq
			g.ns[critpath.ServerCompute] = gap - rq
			out = append(out, g)
			t += gap
		}
	}
	return out
}

func TestBatchRule(t *testing.T) {
	ms := int64(1e6)
	base := critpath.Baseline{}
	base.ITL[critpath.ServerCompute] = 2 * ms
	base.TTFT[critpath.ServerCompute] = 2 * ms
	// The baseline: one request at a time, 2 ms steps.
	quiet := batchGaps(0, 1, 10, 0, 2*ms, 0)
	if n0 := normalInFlight(quiet); n0 != 1 {
		t.Fatalf("normal in flight %v, want 1", n0)
	}
	t.Run("contention grew the batch", func(t *testing.T) {
		// Four requests in flight, each gap 12 ms: 4 ms waiting for the
		// CPU, 8 ms computing (4 streams' tokens at 2 ms each).
		gs := batchGaps(10, 4, 10, 100*ms, 12*ms, 4*ms)
		moved := batchRule(gs, base, 1, 1, lateness{})
		if moved.gaps == 0 {
			t.Fatal("nothing moved")
		}
		// The batch part: min(8-2, 8×(1-1/4)) = 6 ms, all of it to
		// cpu_runqueue (the other requests' only excess), once any
		// other request's gap had ended.
		for _, g := range gs {
			if g.ns[critpath.CPURunqueue]+g.ns[critpath.ServerCompute] != 12*ms {
				t.Fatalf("gap %d/%d: its total changed: %v", g.request, g.index, g.ns)
			}
			if g.start == 100*ms {
				continue // no other request's gap had ended
			}
			if g.ns[critpath.ServerCompute] != 2*ms {
				t.Errorf("gap %d/%d: server_compute %d ns, want the normal 2 ms", g.request, g.index, g.ns[critpath.ServerCompute])
			}
		}
	})
	t.Run("a slower model keeps its compute", func(t *testing.T) {
		// Four requests in flight, each gap 10 ms, all computing: the
		// model's step grew (the batch part is 7.5 ms of the 8 above
		// normal, the other 0.5 ms the only reason they linger).
		gs := batchGaps(20, 4, 10, 100*ms, 10*ms, 0)
		before := gs[len(gs)-1].ns
		batchRule(gs, base, 1, 1, lateness{})
		if got := gs[len(gs)-1].ns; got != before {
			t.Errorf("a compute-bound slowdown changed: %v, want %v", got, before)
		}
	})
	t.Run("a cause that only varies around normal is no reason", func(t *testing.T) {
		// A slower model (10 ms steps, four in flight) whose gaps wait
		// for a CPU 0 or 2 ms, 1 ms being normal: no net excess of
		// cpu_runqueue kept the others in flight, so nothing moves to it.
		b := base
		b.ITL[critpath.CPURunqueue] = ms
		b.TTFT[critpath.CPURunqueue] = ms
		gs := batchGaps(40, 4, 10, 100*ms, 10*ms, 0)
		for i := range gs {
			if gs[i].index%2 == 1 {
				gs[i].ns[critpath.CPURunqueue] = 2 * ms
			}
			gs[i].ns[critpath.ServerCompute] = 10 * ms
		}
		if moved := batchRule(gs, b, 1, 1, lateness{}); moved.ns != 0 {
			t.Errorf("moved %+v to a cause whose excess nets to nothing", moved)
		}
	})
	t.Run("no more in flight than normal", func(t *testing.T) {
		gs := batchGaps(30, 1, 10, 100*ms, 12*ms, 4*ms)
		if moved := batchRule(gs, base, 1, 1, lateness{}); moved.gaps != 0 {
			t.Errorf("moved %+v with one request in flight", moved)
		}
	})
	t.Run("no baseline number", func(t *testing.T) {
		gs := batchGaps(40, 4, 10, 100*ms, 12*ms, 4*ms)
		if moved := batchRule(gs, base, 0, 1, lateness{}); moved.gaps != 0 {
			t.Errorf("moved %+v without a normal number in flight", moved)
		}
	})
	t.Run("a gap in progress", func(t *testing.T) {
		// Request 50 waits 100 ms for a CPU after its first token (its
		// second gap) while request 51's steps, one more stream than
		// normal, compute 4 ms instead of 2.
		gs := batchGaps(51, 1, 12, 100*ms, 4*ms, 0)
		long := []critGap{{request: 50, index: 0, start: 98 * ms, end: 100 * ms}, {request: 50, index: 1, start: 100 * ms, end: 200 * ms}}
		long[0].ns[critpath.ServerCompute] = 2 * ms
		long[1].ns[critpath.CPURunqueue] = 100 * ms
		gs = append(long, gs...)
		batchRule(gs, base, 1, 1, lateness{})
		for _, g := range gs[2:] {
			if g.index == 0 {
				continue
			}
			if g.ns[critpath.CPURunqueue] == 0 || g.ns[critpath.ServerCompute] != 2*ms {
				t.Errorf("gap %d/%d during the wait: %v, want its 2 ms beyond normal on cpu_runqueue", g.request, g.index, g.ns)
			}
		}
	})
	t.Run("a slow reader is its own connection's", func(t *testing.T) {
		// The same with request 50 stalled by its reader
		// (net_backpressure): the other request's bigger steps stay
		// server_compute.
		gs := batchGaps(51, 1, 12, 100*ms, 4*ms, 0)
		stall := []critGap{{request: 50, index: 0, start: 98 * ms, end: 100 * ms}, {request: 50, index: 1, start: 100 * ms, end: 200 * ms}}
		stall[0].ns[critpath.ServerCompute] = 2 * ms
		stall[1].ns[critpath.NetBackpressure] = 100 * ms
		gs = append(stall, gs...)
		if moved := batchRule(gs, base, 1, 1, lateness{}); moved.gaps != 0 {
			t.Errorf("moved %+v to another connection's slow reader", moved)
		}
	})
}

// Requests the client started late share their steps because they came
// together: the batch is the client's.
func TestBatchRuleLateness(t *testing.T) {
	ms := int64(1e6)
	base := critpath.Baseline{}
	base.ITL[critpath.ServerCompute] = 2 * ms
	base.TTFT[critpath.ServerCompute] = 2 * ms
	// A load generator short of CPU sends request 60 45 ms late, with
	// request 61 on time (0.5 ms is its normal lateness): the two
	// share every step, 4 ms a gap for two streams' tokens. That
	// batch is the client's: request 60's steps carry 61 because 60
	// came late, and 61's carry 60 for the same reason.
	gs := batchGaps(60, 2, 10, 100*ms, 4*ms, 0)
	late := lateness{of: map[int32]int64{60: 45 * ms, 61: ms / 2}, normal: ms / 2}
	moved := batchRule(gs, base, 1, 1, late)
	if moved.gaps != uint64(len(gs)) {
		t.Errorf("moved %+v, want every one of the %d gaps", moved, len(gs))
	}
	for _, g := range gs {
		if g.ns[critpath.ServerCompute] != 2*ms || g.ns[critpath.Client] != 2*ms {
			t.Errorf("gap %d/%d: %v, want its 2 ms beyond normal on client", g.request, g.index, g.ns)
		}
	}
	// Both started as late as normal: no reason, nothing moves.
	gs = batchGaps(60, 2, 10, 100*ms, 4*ms, 0)
	late.of[60] = ms / 2
	if moved := batchRule(gs, base, 1, 1, late); moved.gaps != 0 {
		t.Errorf("moved %+v with every request started as late as normal", moved)
	}
}

// A run's p99 band against the baseline run's own: what it added per gap
// over that band, per cause; nothing when it added nothing.
func TestMatchBand(t *testing.T) {
	base := &result.CriticalBand{Gaps: 10, FromMs: 9, TotalsMs: map[string]float64{"server_compute": 100, "cpu_runqueue": 2}}
	b := &result.CriticalBand{Gaps: 5, FromMs: 21, TotalsMs: map[string]float64{"server_compute": 50, "cpu_runqueue": 55},
		ExcessMs: 60, ExcessShares: map[string]float64{"server_compute": 0.4, "cpu_runqueue": 0.6}, Top: "cpu_runqueue"}
	live.MatchBand(b, base, "run quiet")
	// server_compute 10 ms a gap in both; cpu_runqueue 11 against 0.2.
	if b.Top != "cpu_runqueue" || b.ExcessShares["cpu_runqueue"] != 1 || b.ExcessShares["server_compute"] != 0 {
		t.Errorf("shares %v top %s, want all of it cpu_runqueue", b.ExcessShares, b.Top)
	}
	if want := (11 - 0.2) * 5; b.ExcessMs < want-1e-9 || b.ExcessMs > want+1e-9 {
		t.Errorf("excess %v ms, want %v", b.ExcessMs, want)
	}
	if b.ExcessOver == "" {
		t.Error("the band does not say what it was compared with")
	}
	better := &result.CriticalBand{Gaps: 5, TotalsMs: map[string]float64{"server_compute": 40}, ExcessMs: 3, Top: "server_compute"}
	live.MatchBand(better, base, "run quiet")
	if better.ExcessMs != 3 || better.ExcessOver != "" {
		t.Errorf("a band that added nothing changed: %+v", better)
	}
}

// elasticGaps is a baseline of decode gaps at batch sizes 2 to 6 (each
// size's requests in flight together, 30 gaps each), each gap's
// server_compute c0·k^e: how a step's cost grows with the batch.
func elasticGaps(e float64) []critGap {
	ms := int64(1e6)
	var out []critGap
	at := int64(0)
	for k := 2; k <= 6; k++ {
		gap := int64(2 * float64(ms) * math.Pow(float64(k), e))
		gs := batchGaps(int32(100*k), k, 31, at, gap, 0)
		out = append(out, gs...)
		at += 40 * gap
	}
	return out
}

// The step's elasticity to the batch is read back from a baseline whose
// steps grow as k^e, and the batch rule moves by it: nothing where the
// batch is free, as before where a step's cost grows with every token.
func TestBatchElasticity(t *testing.T) {
	for _, e := range []float64{0, 0.3, 1} {
		el := batchElasticity(elasticGaps(e))
		if !el.Measured || math.Abs(el.E-e) > 0.02 {
			t.Errorf("steps growing as k^%v: elasticity %+v", e, el)
		}
	}
	// Steps that shrink with the batch, or grow faster than it: within
	// [0, 1].
	if el := batchElasticity(elasticGaps(-0.5)); el.E != 0 {
		t.Errorf("shrinking steps: %+v", el)
	}
	if el := batchElasticity(elasticGaps(2)); el.E != 1 {
		t.Errorf("steps growing as k²: %+v", el)
	}
	// One batch size only: not measured, 1 assumed.
	ms := int64(1e6)
	if el := batchElasticity(batchGaps(0, 4, 40, 0, 2*ms, 0)); el.Measured || el.E != 1 {
		t.Errorf("one batch size: %+v", el)
	}

	base := critpath.Baseline{}
	base.ITL[critpath.ServerCompute] = 2 * ms
	base.TTFT[critpath.ServerCompute] = 2 * ms
	// A slower step (the step's own work, 2 → 10 ms) kept four requests
	// in flight where one was normal; each gap also waited 1 ms for a CPU.
	for _, c := range []struct {
		e        float64
		moveSome bool
	}{{0, false}, {1, true}} {
		gs := batchGaps(10, 4, 10, 100*ms, 11*ms, 1*ms)
		moved := batchRule(gs, base, 1, c.e, lateness{})
		if (moved.ns > 0) != c.moveSome {
			t.Errorf("elasticity %v: moved %d ns in %d gaps", c.e, moved.ns, moved.gaps)
		}
	}
}
