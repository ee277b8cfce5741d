package correlate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"testing"
	"time"
	"unsafe"
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

// randomTimeline makes spans of every cause (network ones on a few ports)
// and intervals of a few requests.
func randomTimeline(r *rand.Rand) ([]Activity, []Interval) {
	var acts []Activity
	for range 200 {
		st := r.Int64N(1000 * ms)
		acts = append(acts, Activity{Cause: Cause(r.IntN(int(NumCauses))), Start: st, End: st + r.Int64N(40*ms) + 1, Port: uint16(5000 + r.IntN(3))})
	}
	var ivs []Interval
	for req := range 3 {
		t := r.Int64N(100 * ms)
		for k := range 40 {
			d := r.Int64N(50*ms) + 1
			ivs = append(ivs, Interval{Request: req, Index: k, Start: t, End: t + d, Port: uint16(5000 + req)})
			t += d
		}
	}
	return acts, ivs
}

func blameAll(base Baseline, acts []Activity, ivs []Interval) []Blame {
	e := NewEngine(base)
	for _, a := range acts {
		e.AddActivity(a)
	}
	for _, iv := range ivs {
		e.AddInterval(iv)
	}
	bl := e.Flush()
	sort.Slice(bl, func(i, j int) bool {
		if bl[i].Request != bl[j].Request {
			return bl[i].Request < bl[j].Request
		}
		return bl[i].Index < bl[j].Index
	})
	return bl
}

// Properties on random timelines: shares sum to 1 whenever there is an
// excess (and are all 0 otherwise), a cause with no span overlapping an
// interval gets nothing, and shifting every timestamp changes nothing.
func TestAttributionProperties(t *testing.T) {
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, 99))
		acts, ivs := randomTimeline(r)
		base := Baseline{ITLNs: 15 * ms, TTFTNs: 20 * ms, Rate: [NumCauses]float64{r.Float64() * 0.2, 0, r.Float64() * 0.1, 0}}
		bl := blameAll(base, acts, ivs)
		for _, b := range bl {
			var sum float64
			sh := b.Shares()
			for _, v := range sh {
				if v < 0 || v > 1+1e-9 {
					t.Fatalf("seed %d: share %v out of [0,1]: %+v", seed, v, b)
				}
				sum += v
			}
			if b.ExcessNs > 0 && math.Abs(sum-1) > 1e-9 || b.ExcessNs == 0 && sum != 0 {
				t.Fatalf("seed %d: shares %v sum to %v with excess %d", seed, sh, sum, b.ExcessNs)
			}
			for c := Cause(0); c < NumCauses; c++ {
				overlap := false
				for _, a := range acts {
					if a.Cause == c && a.Start < b.End && a.End > b.Start && (c != NetBackpressure || a.Port == b.Port) {
						overlap = true
					}
				}
				if !overlap && (b.Active[c] != 0 || b.AttributedNs[c] != 0) {
					t.Fatalf("seed %d: %v has no span in %+v but got %d ns", seed, c, b.Interval, b.AttributedNs[c])
				}
			}
		}
		shift := r.Int64N(1e12) + 1
		for i := range acts {
			acts[i].Start += shift
			acts[i].End += shift
		}
		for i := range ivs {
			ivs[i].Start += shift
			ivs[i].End += shift
		}
		shifted := blameAll(base, acts, ivs)
		for i := range bl {
			if bl[i].AttributedNs != shifted[i].AttributedNs || bl[i].Active != shifted[i].Active {
				t.Fatalf("seed %d: shifting by %d ns changed %+v to %+v", seed, shift, bl[i], shifted[i])
			}
		}
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

// BenchmarkJoin streams n activity spans and n/8 token intervals through
// the engine in time order, as `bpfbench run` would at scale, and reports
// events joined per second and the bytes held per retained span: the cost
// must grow linearly with n (flat ns/event) with memory bounded by the
// window, not by n.
//
//	go test -run '^$' -bench Join -benchtime 1x ./correlate/
func BenchmarkJoin(b *testing.B) {
	for _, n := range []int{1e5, 1e6, 1e7} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			for range b.N {
				r := rand.New(rand.NewPCG(7, uint64(n)))
				e := NewEngine(Baseline{ITLNs: 10 * ms, TTFTNs: 50 * ms})
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				peak := newPeakHeap()
				now := int64(0)
				maxRetained, joined := 0, 0
				start := time.Now()
				for i := range n {
					st := now + r.Int64N(int64(ms))
					e.AddActivity(Activity{Cause: Cause(i % int(NumCauses)), Start: st, End: st + r.Int64N(3*ms) + 1, Port: uint16(i % 64)})
					if i%8 == 0 {
						e.AddInterval(Interval{Request: i % 64, Index: 1, Start: now - 10*ms, End: now, Port: uint16(i % 64)})
						joined += len(e.Advance(now - 3*ms))
					}
					maxRetained = max(maxRetained, e.Retained())
					if i%(1<<16) == 0 {
						peak.sample()
					}
					now += ms / 8
				}
				joined += len(e.Flush())
				el := time.Since(start)
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(n)/el.Seconds(), "events/s")
				b.ReportMetric(float64(el.Nanoseconds())/float64(n), "ns/event")
				b.ReportMetric(float64(maxRetained), "max-spans-held")
				b.ReportMetric(float64(unsafe.Sizeof(Activity{})), "bytes/span-held")
				b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(n), "alloc-bytes/event")
				b.ReportMetric(peak.mb(), "peak-heap-MB")
				if joined == 0 {
					b.Fatal("nothing joined")
				}
			}
		})
	}
}
