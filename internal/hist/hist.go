// Package hist holds the latency histograms of bpfbench: a log-linear
// histogram for exact-enough quantiles of discrete events in userspace, and
// the log2 histograms the eBPF programs aggregate in the kernel.
package hist

import (
	"math"
	"math/bits"
)

// subBits is the number of linear sub-buckets per power of two (2^6 = 64),
// which bounds the relative error of a quantile to 1/64 (about 1.6%).
const subBits = 6

const (
	subCount = 1 << subBits
	// Values are uint64 ns; exponents 0..(64-subBits) each get subCount buckets.
	numBuckets = (64 - subBits + 1) * subCount
)

// LogLinear is a bounded-memory histogram of non-negative integer values
// (nanoseconds) with relative error under 1.6%, exact count, sum and max.
// The zero value is ready to use. It is not safe for concurrent use.
type LogLinear struct {
	counts []uint64
	count  uint64
	sum    float64
	min    uint64
	max    uint64
}

func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	e := bits.Len64(v) - subBits // >= 1
	sub := int(v>>uint(e-1)) & (subCount - 1)
	return e*subCount + sub
}

// lowerBound is the smallest value in bucket b; upper is lowerBound(b+1).
func lowerBound(b int) uint64 {
	if b < subCount {
		return uint64(b)
	}
	e := b / subCount
	sub := uint64(b % subCount)
	return (subCount + sub) << uint(e-1)
}

// Add records one value.
func (h *LogLinear) Add(v uint64) {
	if h.counts == nil {
		h.counts = make([]uint64, numBuckets)
	}
	h.counts[bucketOf(v)]++
	if h.count == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.count++
	h.sum += float64(v)
}

// AddN records n values of v (n values summarised by their mean).
func (h *LogLinear) AddN(v, n uint64) {
	if n == 0 {
		return
	}
	if h.counts == nil {
		h.counts = make([]uint64, numBuckets)
	}
	h.counts[bucketOf(v)] += n
	if h.count == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.count += n
	h.sum += float64(v) * float64(n)
}

// Merge adds every value of o to h.
func (h *LogLinear) Merge(o *LogLinear) {
	if o.count == 0 {
		return
	}
	if h.counts == nil {
		h.counts = make([]uint64, numBuckets)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.count == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.count += o.count
	h.sum += o.sum
}

// Count is the number of values recorded.
func (h *LogLinear) Count() uint64 { return h.count }

// Sum is the sum of the values recorded.
func (h *LogLinear) Sum() float64 { return h.sum }

// Max is the largest value recorded (exact).
func (h *LogLinear) Max() uint64 { return h.max }

// Min is the smallest value recorded (exact).
func (h *LogLinear) Min() uint64 { return h.min }

// Quantile returns the q-quantile (0 <= q <= 1), interpolated inside its
// bucket and clamped to the exact min and max. It returns 0 when empty.
func (h *LogLinear) Quantile(q float64) float64 {
	if h.count == 0 {
		return 0
	}
	if q <= 0 {
		return float64(h.min)
	}
	if q >= 1 {
		return float64(h.max)
	}
	rank := q * float64(h.count)
	var seen float64
	for b, c := range h.counts {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			lo := float64(lowerBound(b))
			hi := float64(lowerBound(b + 1))
			v := lo + (hi-lo)*(rank-seen)/float64(c)
			return math.Min(math.Max(v, float64(h.min)), float64(h.max))
		}
		seen += float64(c)
	}
	return float64(h.max)
}

// Reset forgets every value, keeping the allocated buckets.
func (h *LogLinear) Reset() {
	clear(h.counts)
	h.count, h.sum, h.min, h.max = 0, 0, 0, 0
}

// Log2 is a kernel log2 histogram: Slots[0] counts zeros and Slots[i]
// counts values v with 2^(i-1) <= v < 2^i (ns); the last slot is open.
type Log2 struct {
	Slots []uint64
	Count uint64
	SumNs uint64
}

// Add sums o into h (per-CPU copies, or several targets).
func (h *Log2) Add(o Log2) {
	if len(h.Slots) < len(o.Slots) {
		h.Slots = append(h.Slots, make([]uint64, len(o.Slots)-len(h.Slots))...)
	}
	for i, c := range o.Slots {
		h.Slots[i] += c
	}
	h.Count += o.Count
	h.SumNs += o.SumNs
}

// UpperBoundSeconds is the exclusive upper bound of slot i in seconds.
func UpperBoundSeconds(i int) float64 { return math.Ldexp(1, i) / 1e9 }

// Quantile estimates the q-quantile in ns by interpolating inside a slot.
func (h Log2) Quantile(q float64) float64 {
	var total uint64
	for _, c := range h.Slots {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var seen float64
	for i, c := range h.Slots {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			if i == 0 {
				return 0
			}
			lo := math.Ldexp(1, i-1)
			hi := math.Ldexp(1, i)
			return lo + (hi-lo)*(rank-seen)/float64(c)
		}
		seen += float64(c)
	}
	return math.Ldexp(1, len(h.Slots)-1)
}
