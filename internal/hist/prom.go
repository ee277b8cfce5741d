package hist

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// The daemon exports each kernel log2 histogram as one Prometheus
// histogram carrying two forms of the same counts:
//
//   - classic buckets, chosen per metric (Classic): a few upper bounds at
//     powers of two of nanoseconds over the range that matters for that
//     metric, folded from the kernel's slots. They are exact: each bound is
//     a slot boundary. The text and OpenMetrics expositions carry only
//     these (le = 2^e ns in seconds, then +Inf).
//   - a native histogram of schema 0 (Native): one bucket per kernel slot,
//     sent only to a scrape that negotiates protobuf. Prometheus with
//     native histograms on stores it as one series; without, it reads the
//     classic buckets of the same message.
//
// Schema 0 buckets have their boundaries at powers of two of the unit,
// seconds; the kernel's slots have theirs at powers of two of
// nanoseconds, 2^i ns = 2^(i-29.897) s. The two grids are offset by the
// constant factor 2^30/10^9 = 1.0737 and cannot coincide (log2(10^9) is
// irrational), so the mapping is exact in counts, sum and zero count, and
// slot i is placed whole in native bucket i-30, the one holding 86% of the
// slot's width: (2^(i-31), 2^(i-30)] s = (0.466·2^i, 0.931·2^i] ns for the
// slot's [0.5·2^i, 2^i) ns. A value in the slot's top 7% (0.931·2^i to
// 2^i ns) is thus counted one native bucket low, and a quantile read from
// the native histogram is that of the classic one divided by 1.0737 (7%
// low), within the factor-2 width of a schema-0 bucket. A value exactly at
// a power of two of ns, 2^j ns, is in slot j+1 (the kernel's slots are
// closed below), reported in native bucket j-29 = (0.931·2^j, 1.863·2^j]
// ns, which holds it; in the classic buckets it is counted above
// le = 2^j ns, not at it (an error of 1 ns in 2^j).
// Slot 0 (a value of 0 ns) is the native zero bucket, with threshold 0.

// NativeSchema is the schema of the native histograms: bucket boundaries
// at powers of two.
const NativeSchema = 0

// nativeOffset maps kernel slot i (i >= 1) to native bucket i - nativeOffset.
const nativeOffset = 30

// NativeIndex is the schema-0 bucket a kernel slot's count is placed in
// (slot >= 1; slot 0 is the zero bucket). See the comment above.
func NativeIndex(slot int) int { return slot - nativeOffset }

// Classic is the classic buckets of a metric: upper bounds 2^e ns for
// e = From, From+Step, ... up to To (exponents of slot boundaries, so
// that folding the slots is exact), then +Inf.
type Classic struct{ From, To, Step int }

// Exponents lists the exponents of the upper bounds.
func (c Classic) Exponents() []int {
	step := max(c.Step, 1)
	var out []int
	for e := c.From; e <= c.To; e += step {
		out = append(out, e)
	}
	return out
}

// Bounds lists the upper bounds in seconds (without +Inf).
func (c Classic) Bounds() []float64 {
	var out []float64
	for _, e := range c.Exponents() {
		out = append(out, UpperBoundSeconds(e))
	}
	return out
}

// total is the sum of the slots: the count the buckets agree with (the
// kernel's count is read apart from them and may differ by an update
// that raced the read).
func (h Log2) total() uint64 {
	var n uint64
	for _, c := range h.Slots {
		n += c
	}
	return n
}

// Fold returns the cumulative counts at c's bounds (seconds): the bound
// 2^e ns counts the values of slots 0..e, those below 2^e ns. A bound
// beyond the last slot, which is open, is left out.
func (h Log2) Fold(c Classic) map[float64]uint64 {
	out := map[float64]uint64{}
	var cum uint64
	next := 0
	for _, e := range c.Exponents() {
		if e < 0 || e >= len(h.Slots)-1 {
			continue
		}
		for ; next <= e; next++ {
			cum += h.Slots[next]
		}
		out[UpperBoundSeconds(e)] = cum
	}
	return out
}

// Native returns the schema-0 native histogram of h: the zero bucket's
// count (slot 0) and each non-empty slot's count by native bucket index
// (NativeIndex).
func (h Log2) Native() (zero uint64, buckets map[int]uint64) {
	buckets = map[int]uint64{}
	for i, c := range h.Slots {
		switch {
		case i == 0:
			zero = c
		case c > 0:
			buckets[NativeIndex(i)] = c
		}
	}
	return zero, buckets
}

// Metric is h as a Prometheus histogram of desc with c's classic buckets
// and the native schema-0 buckets (see the comment at the top of this
// file). Its count is the sum of the slots, so that buckets and count
// agree; its sum is the kernel's, in seconds.
func (h Log2) Metric(desc *prometheus.Desc, c Classic, labels ...string) prometheus.Metric {
	n := h.total()
	classic := prometheus.MustNewConstHistogram(desc, n, float64(h.SumNs)/1e9, h.Fold(c), labels...)
	zero, buckets := h.Native()
	spans, deltas := EncodeNative(buckets)
	return nativeMetric{Metric: classic, zero: zero, spans: spans, deltas: deltas}
}

// nativeMetric adds the native buckets to a classic const histogram.
type nativeMetric struct {
	prometheus.Metric
	zero   uint64
	spans  []*dto.BucketSpan
	deltas []int64
}

func (m nativeMetric) Write(out *dto.Metric) error {
	if err := m.Metric.Write(out); err != nil {
		return err
	}
	h := out.Histogram
	h.Schema = proto.Int32(NativeSchema)
	h.ZeroThreshold = proto.Float64(0)
	h.ZeroCount = proto.Uint64(m.zero)
	h.PositiveSpan, h.PositiveDelta = m.spans, m.deltas
	return nil
}

// EncodeNative encodes bucket counts by index as native histogram spans
// and deltas. Gaps of up to two empty buckets are kept inside a span, as
// client_golang does. With no bucket it returns one empty span: a
// histogram with no observation is still marked as native.
func EncodeNative(buckets map[int]uint64) ([]*dto.BucketSpan, []int64) {
	if len(buckets) == 0 {
		return []*dto.BucketSpan{{Offset: proto.Int32(0), Length: proto.Uint32(0)}}, nil
	}
	lo, hi := math.MaxInt, math.MinInt
	for i := range buckets {
		lo, hi = min(lo, i), max(hi, i)
	}
	var (
		spans  []*dto.BucketSpan
		deltas []int64
		prev   int64
		next   int // the index after the last one encoded
	)
	for i := lo; i <= hi; i++ {
		c, ok := buckets[i]
		if !ok {
			continue
		}
		if gap := i - next; len(spans) == 0 || gap > 2 {
			spans = append(spans, &dto.BucketSpan{Offset: proto.Int32(int32(gap)), Length: proto.Uint32(0)})
		} else {
			for range gap {
				*spans[len(spans)-1].Length++
				deltas = append(deltas, -prev)
				prev = 0
			}
		}
		*spans[len(spans)-1].Length++
		deltas = append(deltas, int64(c)-prev)
		prev = int64(c)
		next = i + 1
	}
	return spans, deltas
}

// DecodeNative returns the bucket counts by index of native spans and
// deltas (empty buckets inside a span are left out).
func DecodeNative(spans []*dto.BucketSpan, deltas []int64) map[int]uint64 {
	out := map[int]uint64{}
	idx, d := 0, 0
	var c int64
	for _, s := range spans {
		idx += int(s.GetOffset())
		for range s.GetLength() {
			if d >= len(deltas) {
				return out
			}
			c += deltas[d]
			d++
			if c > 0 {
				out[idx] = uint64(c)
			}
			idx++
		}
	}
	return out
}
