package daemon

import (
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/bpfbench/bpfbench/internal/hist"
)

// A slot's new owner starts at zero in the native buckets too: the
// baseline is taken bucket by bucket, and count, classic buckets and
// native buckets still agree.
func TestSubtractNativeHistogram(t *testing.T) {
	desc := prometheus.NewDesc("x_seconds", "x", []string{"target"}, nil)
	write := func(slots []uint64) *dto.Metric {
		t.Helper()
		h := hist.Log2{Slots: make([]uint64, 40)}
		copy(h.Slots, slots)
		for i, c := range slots {
			h.Count += c
			h.SumNs += c << i
		}
		var m dto.Metric
		if err := h.Metric(desc, hist.Classic{From: 10, To: 30, Step: 2}, "t").Write(&m); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	base := make([]uint64, 40)
	base[0], base[12], base[20] = 1, 5, 2
	now := make([]uint64, 40)
	now[0], now[12], now[20], now[21], now[30] = 3, 5, 7, 1, 4
	m, b := write(now), write(base)
	subtract(m, b)
	h := m.GetHistogram()
	got := hist.DecodeNative(h.GetPositiveSpan(), h.GetPositiveDelta())
	want := map[int]uint64{hist.NativeIndex(20): 5, hist.NativeIndex(21): 1, hist.NativeIndex(30): 4}
	if !maps.Equal(got, want) || h.GetZeroCount() != 2 {
		t.Errorf("native buckets %v zero %d, want %v zero 2", got, h.GetZeroCount(), want)
	}
	if h.GetSampleCount() != 12 {
		t.Errorf("count %d, want 12", h.GetSampleCount())
	}
	classic := map[float64]uint64{}
	for _, bk := range h.GetBucket() {
		classic[bk.GetUpperBound()] = bk.GetCumulativeCount()
	}
	// 2^20 ns counts slots 0..20 (2 + 0 + 5), 2^30 ns every slot up to 30.
	if classic[hist.UpperBoundSeconds(20)] != 7 || classic[hist.UpperBoundSeconds(30)] != 12 {
		t.Errorf("classic buckets %v, want 7 at 2^20 ns and 12 at 2^30 ns", classic)
	}
}
