package hist

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestLogLinearQuantilesWithinError(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h LogLinear
	vals := make([]float64, 0, 100000)
	for range 100000 {
		v := uint64(r.ExpFloat64() * 1e6)
		h.Add(v)
		vals = append(vals, float64(v))
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := vals[int(q*float64(len(vals)))-1]
		got := h.Quantile(q)
		if math.Abs(got-want)/want > 0.02 {
			t.Errorf("q%.3f = %.0f, want %.0f (within 2%%)", q, got, want)
		}
	}
	if h.Max() != uint64(vals[len(vals)-1]) || h.Count() != 100000 {
		t.Errorf("max %d count %d", h.Max(), h.Count())
	}
}

func TestLogLinearBucketsRoundTrip(t *testing.T) {
	for _, v := range []uint64{0, 1, 63, 64, 65, 127, 128, 1000, 1 << 40, math.MaxUint64} {
		b := bucketOf(v)
		if lo := lowerBound(b); lo > v {
			t.Errorf("value %d: bucket %d lower bound %d above it", v, b, lo)
		}
		if b+1 < numBuckets {
			if hi := lowerBound(b + 1); hi <= v {
				t.Errorf("value %d: bucket %d upper bound %d not above it", v, b, hi)
			}
		}
	}
}

func TestLogLinearEmptyAndMerge(t *testing.T) {
	var a, b LogLinear
	if a.Quantile(0.5) != 0 {
		t.Fatal("empty quantile not 0")
	}
	a.Add(10)
	b.Add(1000)
	a.Merge(&b)
	if a.Count() != 2 || a.Max() != 1000 || a.Min() != 10 || a.Sum() != 1010 {
		t.Fatalf("merge: %+v", a)
	}
}

func TestLog2Buckets(t *testing.T) {
	h := Log2{Slots: make([]uint64, 4)}
	h.Add(Log2{Slots: []uint64{1, 2, 3, 4}, Count: 10, SumNs: 50})
	b := h.Fold(Classic{From: 0, To: 3, Step: 1})
	if b[UpperBoundSeconds(0)] != 1 || b[UpperBoundSeconds(2)] != 6 || len(b) != 3 {
		t.Fatalf("buckets %v", b)
	}
	if q := h.Quantile(0.05); q != 0 {
		t.Fatalf("q05 %v", q)
	}
}
