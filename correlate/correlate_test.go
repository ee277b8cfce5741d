package correlate

import (
	"math"
	"math/rand/v2"
	"testing"
)

const ms = int64(1e6)

func TestUnionCountsOverlapOnce(t *testing.T) {
	e := NewEngine(Baseline{})
	// Two threads waiting for a CPU at once, and a third later.
	e.AddActivity(Activity{Cause: CPURunqueue, Start: 10 * ms, End: 20 * ms, Tid: 1})
	e.AddActivity(Activity{Cause: CPURunqueue, Start: 15 * ms, End: 25 * ms, Tid: 2})
	e.AddActivity(Activity{Cause: CPURunqueue, Start: 40 * ms, End: 45 * ms, Tid: 3})
	e.AddActivity(Activity{Cause: CPURunqueue, Start: 0, End: 200 * ms, Tid: 4}) // long, arrives late
	if got := e.union(CPURunqueue, 0, 100*ms, 0); got != 100*ms {
		t.Errorf("union with a covering span = %d, want %d", got, 100*ms)
	}
	e2 := NewEngine(Baseline{})
	for _, a := range []Activity{
		{Cause: CPURunqueue, Start: 15 * ms, End: 25 * ms},
		{Cause: CPURunqueue, Start: 10 * ms, End: 20 * ms},
		{Cause: CPURunqueue, Start: 40 * ms, End: 45 * ms},
	} {
		e2.AddActivity(a)
	}
	if got := e2.union(CPURunqueue, 12*ms, 42*ms, 0); got != 13*ms+2*ms {
		t.Errorf("union = %v ms, want 15", float64(got)/1e6)
	}
}

func TestAttributionSplitsExcess(t *testing.T) {
	base := Baseline{ITLNs: 20 * ms, TTFTNs: 100 * ms}
	e := NewEngine(base)
	// A 50 ms gap: 30 ms excess. CPU wait 20 ms, IO 10 ms (5 overlapping CPU).
	e.AddActivity(Activity{Cause: CPURunqueue, Start: 10 * ms, End: 30 * ms})
	e.AddActivity(Activity{Cause: IOBlock, Start: 25 * ms, End: 35 * ms})
	// Network trouble on another request's connection must not count.
	e.AddActivity(Activity{Cause: NetBackpressure, Start: 0, End: 60 * ms, Port: 5001})
	e.AddInterval(Interval{Request: 1, Index: 3, Start: 0, End: 50 * ms, Port: 5000})
	bl := e.Advance(60 * ms)
	if len(bl) != 1 {
		t.Fatalf("%d blames", len(bl))
	}
	b := bl[0]
	if b.ExcessNs != 30*ms || b.Active[CPURunqueue] != 20*ms || b.Active[IOBlock] != 10*ms || b.Active[NetBackpressure] != 0 {
		t.Fatalf("blame %+v", b)
	}
	sh := b.Shares()
	if math.Abs(sh[CPURunqueue]-20.0/30) > 1e-6 || math.Abs(sh[IOBlock]-10.0/30) > 1e-6 || sh[Unexplained] > 1e-6 {
		t.Errorf("shares %v", sh)
	}
	// Less activity than excess leaves the rest unexplained.
	e.AddActivity(Activity{Cause: GPUSync, Start: 100 * ms, End: 110 * ms})
	e.AddInterval(Interval{Request: 2, Index: 1, Start: 100 * ms, End: 160 * ms})
	b = e.Flush()[0]
	sh = b.Shares()
	if b.ExcessNs != 40*ms || math.Abs(sh[GPUSync]-0.25) > 1e-6 || math.Abs(sh[Unexplained]-0.75) > 1e-6 {
		t.Errorf("gpu 10 of 40 ms excess: shares %v", sh)
	}
	var sum float64
	for _, v := range sh {
		sum += v
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Errorf("shares sum to %v", sum)
	}
}

func TestBaselineActivityIsSubtracted(t *testing.T) {
	// Normally 10% of a gap is run-queue wait; a slow gap with the same
	// 10% must not be blamed on the CPU.
	base := Baseline{ITLNs: 20 * ms, Rate: [NumCauses]float64{CPURunqueue: 0.1}}
	e := NewEngine(base)
	e.AddActivity(Activity{Cause: CPURunqueue, Start: 0, End: 2 * ms})
	e.AddActivity(Activity{Cause: IOBlock, Start: 20 * ms, End: 40 * ms})
	e.AddInterval(Interval{Request: 0, Index: 1, Start: 0, End: 40 * ms})
	sh := e.Flush()[0].Shares()
	if sh[CPURunqueue] != 0 || sh[IOBlock] != 1 {
		t.Errorf("shares %v, want all io_block", sh)
	}
}

func TestEngineMemoryIsBounded(t *testing.T) {
	e := NewEngine(Baseline{ITLNs: 10 * ms})
	r := rand.New(rand.NewPCG(1, 1))
	now := int64(0)
	maxRetained := 0
	for i := range 100000 {
		st := now + r.Int64N(int64(ms))
		e.AddActivity(Activity{Cause: Cause(r.IntN(int(NumCauses))), Start: st, End: st + r.Int64N(5*ms) + 1})
		if i%10 == 0 {
			e.AddInterval(Interval{Request: i, Index: 1, Start: now - 10*ms, End: now})
			e.Advance(now)
		}
		now += ms / 4
		maxRetained = max(maxRetained, e.Retained())
	}
	if maxRetained > 200 {
		t.Errorf("retained up to %d spans for a 10 ms window", maxRetained)
	}
}

func TestSummarizeBands(t *testing.T) {
	var blames []Blame
	base := Baseline{ITLNs: 10 * ms, TTFTNs: 50 * ms}
	e := NewEngine(base)
	// 100 gaps: 90 normal (10 ms), 10 slow (60 ms) whose excess is CPU wait.
	t0 := int64(0)
	for i := range 100 {
		d := 10 * ms
		if i%10 == 9 {
			d = 60 * ms
			e.AddActivity(Activity{Cause: CPURunqueue, Start: t0, End: t0 + 50*ms})
		}
		e.AddInterval(Interval{Request: i % 5, Index: 1 + i/5, Start: t0, End: t0 + d})
		t0 += d
	}
	for i := range 5 {
		e.AddInterval(Interval{Request: i, Index: 0, Start: 0, End: 80 * ms})
		e.AddActivity(Activity{Cause: IOBlock, Start: 0, End: 30 * ms})
	}
	blames = e.Flush()
	s := Summarize(blames, base, []float64{50, 90, 99})
	if s.ITL["p99"]["cpu_runqueue"] < 0.99 || s.ITL["all"]["cpu_runqueue"] < 0.99 || s.ITLBands["p99"].Intervals != 10 {
		t.Errorf("slow gaps not blamed on the CPU: %v", s.ITL)
	}
	if s.ITL["p50"]["unexplained"] != 0 || s.ITLBands["p50"].ExcessMs != 0 {
		t.Errorf("normal gaps have excess: %+v", s.ITLBands["p50"])
	}
	if math.Abs(s.TTFT["io_block"]-1) > 1e-6 || s.TopCause != "cpu_runqueue" || len(s.Requests) != 5 {
		t.Errorf("ttft %v top %s requests %d", s.TTFT, s.TopCause, len(s.Requests))
	}
}

func TestEstimateBaseline(t *testing.T) {
	var ivs []Interval
	var acts []Activity
	for i := range 11 {
		st := int64(i) * 20 * ms
		ivs = append(ivs, Interval{Index: 1 + i, Start: st, End: st + 20*ms})
		acts = append(acts, Activity{Cause: CPURunqueue, Start: st, End: st + 2*ms})
	}
	ivs = append(ivs, Interval{Index: 0, Start: 0, End: 70 * ms})
	b := EstimateBaseline(ivs, acts)
	if b.ITLNs != 20*ms || b.TTFTNs != 70*ms || math.Abs(b.Rate[CPURunqueue]-0.1) > 1e-9 {
		t.Errorf("baseline %+v", b)
	}
}

func BenchmarkEngine(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	e := NewEngine(Baseline{ITLNs: 10 * ms})
	now := int64(0)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		st := now + r.Int64N(int64(ms))
		e.AddActivity(Activity{Cause: Cause(i % int(NumCauses)), Start: st, End: st + r.Int64N(5*ms) + 1})
		if i%4 == 0 {
			e.AddInterval(Interval{Request: i, Index: 1, Start: now - 10*ms, End: now})
			e.Advance(now)
		}
		now += ms / 4
	}
}
