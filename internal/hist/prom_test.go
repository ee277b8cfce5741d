package hist

import (
	"maps"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// slotOf is the kernel's hist_slot (bpf/include/bpfbench.h).
func slotOf(v uint64) int {
	if v == 0 {
		return 0
	}
	return min(int(math.Floor(math.Log2(float64(v))))+1, 39)
}

// nativeIndexOf is the schema-0 bucket Prometheus gives a value in
// seconds: k with 2^(k-1) < v <= 2^k.
func nativeIndexOf(sec float64) int {
	frac, exp := math.Frexp(sec) // sec = frac * 2^exp, frac in [0.5, 1)
	if frac == 0.5 {
		return exp - 1
	}
	return exp
}

// record adds v (ns) to h as the kernel does.
func record(h *Log2, v uint64) {
	if h.Slots == nil {
		h.Slots = make([]uint64, 40)
	}
	h.Slots[slotOf(v)]++
	h.Count++
	h.SumNs += v
}

func TestClassicFoldIsExactAtItsBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var h Log2
	var vals []uint64
	for range 20000 {
		v := uint64(math.Exp(r.Float64() * 30)) // 1 ns to ~10 s, log-uniform
		if r.IntN(50) == 0 {
			v = 1 << r.IntN(36) // exactly at a power of two
		}
		if r.IntN(200) == 0 {
			v = 0
		}
		vals = append(vals, v)
		record(&h, v)
	}
	c := Classic{From: 10, To: 30, Step: 2}
	got := h.Fold(c)
	if len(got) != 11 {
		t.Fatalf("%d bounds, want 11 (2^10..2^30 ns every 2nd power)", len(got))
	}
	for _, e := range c.Exponents() {
		// Bound 2^e ns counts the values below 2^e ns: a value exactly at
		// 2^e is in the kernel's slot e+1, above it.
		var want uint64
		for _, v := range vals {
			if v < 1<<e {
				want++
			}
		}
		if b := UpperBoundSeconds(e); got[b] != want {
			t.Errorf("le=%g (2^%d ns): %d, want %d", b, e, got[b], want)
		}
	}
	// A bound past the open last slot is left out.
	if n := len(h.Fold(Classic{From: 36, To: 40, Step: 1})); n != 3 {
		t.Errorf("bounds 2^36..2^40 ns gave %d buckets, want 3 (2^36..2^38; slot 39 is open)", n)
	}
}

func TestNativeMapping(t *testing.T) {
	// Slot i covers [2^(i-1), 2^i) ns; native bucket i-30 is
	// (2^(i-31), 2^(i-30)] s. Check the values the comment names.
	for _, tc := range []struct {
		ns   uint64
		slot int
		// inNative: whether Prometheus would put the value (in seconds)
		// in the bucket its slot is mapped to.
		inNative bool
	}{
		{1, 1, true},               // 1 ns in (0.931, 1.863] ns
		{1 << 20, 21, true},        // a power of two of ns, at the slot's lower end
		{1_000_000_000, 30, true},  // 1 s: slot [0.537, 1.074) s, native (0.5, 1] s
		{1_050_000_000, 30, false}, // 1.05 s: in the slot's top 7%, native (1, 2] s
		{(1 << 30) - 1, 30, false}, // the slot's last ns
		{1_000_000_001, 30, false}, // just above the native bound 2^0 s = 0.9313·2^30 ns
	} {
		s := slotOf(tc.ns)
		if s != tc.slot {
			t.Fatalf("%d ns: slot %d, want %d", tc.ns, s, tc.slot)
		}
		k := NativeIndex(s)
		if in := nativeIndexOf(float64(tc.ns)/1e9) == k; in != tc.inNative {
			t.Errorf("%d ns: in native bucket %d = %v, want %v (Prometheus' bucket %d)", tc.ns, k, in, tc.inNative, nativeIndexOf(float64(tc.ns)/1e9))
		}
	}
	// Over log-uniform values, the share placed one bucket low is the top
	// 1 - log2(2^30/1e9) = 10.3% of each slot's log width, never more than
	// one bucket off, and never high.
	r := rand.New(rand.NewPCG(5, 6))
	low := 0
	const n = 100000
	for range n {
		v := uint64(math.Exp2(1 + r.Float64()*35))
		d := nativeIndexOf(float64(v)/1e9) - NativeIndex(slotOf(v))
		switch d {
		case 0:
		case 1:
			low++
		default:
			t.Fatalf("%d ns: native bucket off by %d", v, d)
		}
	}
	if share := float64(low) / n; math.Abs(share-0.103) > 0.01 {
		t.Errorf("%.3f of values one bucket low, want about 0.103", share)
	}
}

func TestMetricCarriesClassicAndNative(t *testing.T) {
	var h Log2
	for _, v := range []uint64{0, 0, 1, 3, 1 << 20, 1<<20 + 5, 3 << 20, 1 << 33} {
		record(&h, v)
	}
	h.Count++ // an update that raced the read: the count follows the slots
	desc := prometheus.NewDesc("x_seconds", "x", []string{"target"}, nil)
	var m dto.Metric
	if err := h.Metric(desc, Classic{From: 10, To: 30, Step: 4}, "host").Write(&m); err != nil {
		t.Fatal(err)
	}
	mh := m.GetHistogram()
	if mh.GetSampleCount() != 8 || mh.GetSampleSum() != float64(h.SumNs)/1e9 {
		t.Errorf("count %d sum %g, want 8 and %g", mh.GetSampleCount(), mh.GetSampleSum(), float64(h.SumNs)/1e9)
	}
	classic := map[float64]uint64{}
	for _, b := range mh.GetBucket() {
		classic[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	// 2^10, 2^14, ..., 2^30 ns: 0,0,1,3 below 2^10; 2^20 and 2^20+5 are in
	// slot 21, below 2^22; 3·2^20 below 2^22 too; 2^33 above 2^30.
	want := map[float64]uint64{}
	for _, e := range []int{10, 14, 18} {
		want[UpperBoundSeconds(e)] = 4
	}
	for _, e := range []int{22, 26, 30} {
		want[UpperBoundSeconds(e)] = 7
	}
	if !maps.Equal(classic, want) {
		t.Errorf("classic buckets %v, want %v", classic, want)
	}
	if mh.GetSchema() != 0 || mh.Schema == nil || mh.GetZeroThreshold() != 0 || mh.GetZeroCount() != 2 {
		t.Errorf("schema %v zero threshold %g zero count %d, want 0, 0, 2", mh.Schema, mh.GetZeroThreshold(), mh.GetZeroCount())
	}
	native := DecodeNative(mh.GetPositiveSpan(), mh.GetPositiveDelta())
	// 1 ns: slot 1; 3 ns: slot 2; 2^20, 2^20+5: slot 21; 3·2^20: slot 22; 2^33: slot 34.
	wantNative := map[int]uint64{NativeIndex(1): 1, NativeIndex(2): 1, NativeIndex(21): 2, NativeIndex(22): 1, NativeIndex(34): 1}
	if !maps.Equal(native, wantNative) {
		t.Errorf("native buckets %v, want %v", native, wantNative)
	}
	var sum uint64
	for _, c := range native {
		sum += c
	}
	if sum+mh.GetZeroCount() != mh.GetSampleCount() {
		t.Errorf("native buckets hold %d, count %d", sum+mh.GetZeroCount(), mh.GetSampleCount())
	}
}

func TestEncodeNativeRoundTrip(t *testing.T) {
	for _, b := range []map[int]uint64{
		{},
		{-29: 1},
		{-29: 1, -28: 5, -25: 2, -10: 7, -9: 1, 9: 3},
		{0: 4, 2: 1, 5: 9},
	} {
		spans, deltas := EncodeNative(b)
		if len(spans) == 0 {
			t.Fatalf("%v: no span", b)
		}
		var n uint32
		for _, s := range spans {
			n += s.GetLength()
		}
		if int(n) != len(deltas) {
			t.Errorf("%v: spans of %d buckets, %d deltas", b, n, len(deltas))
		}
		if got := DecodeNative(spans, deltas); !maps.Equal(got, b) {
			t.Errorf("round trip of %v gave %v", b, got)
		}
	}
	// Gaps of one or two buckets stay in the span; three start another.
	if spans, _ := EncodeNative(map[int]uint64{1: 1, 4: 1, 8: 1}); len(spans) != 2 {
		t.Errorf("%d spans for 1, 4, 8; want 2", len(spans))
	}
}
