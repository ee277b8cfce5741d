package correlate

import (
	"encoding/binary"
	"iter"
	"sort"
)

// Log keeps a run's measurements compactly, in the order they were
// measured, so that a long run can forget its activity as it goes and be
// attributed at the end: each measurement is varint-encoded (deltas of
// the start times), about 20-30 bytes instead of the 72 of a Measurement
// or the 128 of a Blame. Blocks are allocated as the log grows; nothing
// is copied. The zero Log is empty and ready to use; it is not safe for
// concurrent use.
type Log struct {
	blocks    [][]byte
	n         int
	prevStart int64
}

const logBlock = 64 << 10

// maxEncoded bounds the size of one encoded measurement.
const maxEncoded = (5 + int(NumCauses)) * binary.MaxVarintLen64

// Append adds m to the log.
func (l *Log) Append(m Measurement) {
	if len(l.blocks) == 0 || cap(l.blocks[len(l.blocks)-1])-len(l.blocks[len(l.blocks)-1]) < maxEncoded {
		l.blocks = append(l.blocks, make([]byte, 0, logBlock))
	}
	b := l.blocks[len(l.blocks)-1]
	b = binary.AppendVarint(b, int64(m.Request))
	b = binary.AppendVarint(b, int64(m.Index))
	b = binary.AppendVarint(b, m.Start-l.prevStart)
	b = binary.AppendVarint(b, m.End-m.Start)
	b = binary.AppendUvarint(b, uint64(m.Port))
	for _, a := range m.Active {
		b = binary.AppendVarint(b, a)
	}
	l.blocks[len(l.blocks)-1] = b
	l.prevStart = m.Start
	l.n++
}

// Len is the number of measurements.
func (l *Log) Len() int { return l.n }

// Bytes is the memory the log holds.
func (l *Log) Bytes() int {
	n := 0
	for _, b := range l.blocks {
		n += cap(b)
	}
	return n
}

// All yields the measurements in the order they were appended.
func (l *Log) All() iter.Seq[Measurement] {
	return func(yield func(Measurement) bool) {
		var prev int64
		for _, b := range l.blocks {
			for len(b) > 0 {
				var m Measurement
				var v int64
				var k int
				next := func() int64 {
					v, k = binary.Varint(b)
					b = b[k:]
					return v
				}
				m.Request = int(next())
				m.Index = int(next())
				m.Start = prev + next()
				m.End = m.Start + next()
				p, k := binary.Uvarint(b)
				b = b[k:]
				m.Port = uint16(p)
				for c := range m.Active {
					m.Active[c] = next()
				}
				prev = m.Start
				if !yield(m) {
					return
				}
			}
		}
	}
}

// Blames yields the attribution of every measurement under base.
func (l *Log) Blames(base Baseline) iter.Seq[Blame] {
	return func(yield func(Blame) bool) {
		for m := range l.All() {
			if !yield(Attribute(m, base)) {
				return
			}
		}
	}
}

// Baseline estimates the baseline from the logged measurements exactly as
// EstimateBaseline does from the intervals and their activity.
func (l *Log) Baseline() Baseline { return baselineOf(l.All(), l.n) }

// BaselineOf derives a baseline from measured intervals: the median TTFT,
// the median gap, and each cause's median active fraction over the gaps.
// Medians keep a perturbation that touches fewer than half of the
// intervals out of the baseline. The measurements are read once per
// statistic, so memory is one number per interval whatever the run's
// length.
func BaselineOf(ms iter.Seq[Measurement]) Baseline { return baselineOf(ms, 0) }

// baselineOf is BaselineOf with room for n measurements.
func baselineOf(ms iter.Seq[Measurement], n int) Baseline {
	gaps := make([]int64, 0, n)
	var ttfts []int64
	for m := range ms {
		if m.Index == 0 {
			ttfts = append(ttfts, m.Duration())
		} else if m.Duration() > 0 {
			gaps = append(gaps, m.Duration())
		}
	}
	sort.Slice(ttfts, func(i, j int) bool { return ttfts[i] < ttfts[j] })
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	b := Baseline{TTFTNs: int64(percentileOf(ttfts, 50)), ITLNs: int64(percentileOf(gaps, 50))}
	n = len(gaps)
	ttfts, gaps = nil, nil
	if n == 0 {
		return b
	}
	r := make([]float64, 0, n)
	for c := Cause(0); c < NumCauses; c++ {
		r = r[:0]
		for m := range ms {
			if m.Index == 0 || m.Duration() <= 0 {
				continue
			}
			r = append(r, float64(m.Active[c])/float64(m.Duration()))
		}
		sort.Float64s(r)
		if n%2 == 1 {
			b.Rate[c] = r[n/2]
		} else {
			b.Rate[c] = (r[n/2-1] + r[n/2]) / 2
		}
	}
	return b
}
