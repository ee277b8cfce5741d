package live

import (
	"math"
	"slices"
)

// sample is a uniform sample of at most n gaps (reservoir sampling): each
// gap added has the same chance to be in it.
type sample struct {
	n, seen int
	gaps    []Gap
	rng     uint64
}

func (s *sample) add(g Gap) {
	s.seen++
	if len(s.gaps) < s.n {
		s.gaps = append(s.gaps, g)
		return
	}
	if s.rng == 0 {
		s.rng = 0x9e3779b97f4a7c15
	}
	s.rng ^= s.rng << 13 // xorshift64
	s.rng ^= s.rng >> 7
	s.rng ^= s.rng << 17
	if i := int(s.rng % uint64(s.seen)); i < s.n {
		s.gaps[i] = g
	}
}

// sampled says whether gaps were left out.
func (s *sample) sampled() bool { return s.seen > len(s.gaps) }

func (s *sample) reset() { s.gaps, s.seen = s.gaps[:0], 0 }

// z95 is the normal quantile of a two-sided 95% interval.
const z95 = 1.96

// QuantileBounds is the 95% interval of the q-quantile of the population
// a uniform sample was drawn from, from the sample's order statistics:
// the number of sampled values below the true quantile is binomial (n, q),
// so the interval runs between the values of rank n·q ∓ 1.96·√(n·q·(1−q))
// (the normal approximation, clamped to the sample). sorted is the sample
// in ascending order.
func QuantileBounds(sorted []int64, q float64) (lo, hi int64) {
	n := float64(len(sorted))
	if n == 0 {
		return 0, 0
	}
	half := z95 * math.Sqrt(n*q*(1-q))
	l := int(math.Floor(n*q - half))
	h := int(math.Ceil(n*q + half))
	l = min(max(l, 0), len(sorted)-1)
	h = min(max(h, 0), len(sorted)-1)
	return sorted[l], sorted[h]
}

// bandBounds is the 95% interval, in ms, of the p99 that starts the band
// of the sampled gaps s (first tokens' when ttft, the later ones'
// otherwise); nil when s left no gap out (the band's p99 is exact).
func (s *sample) bandBounds(ttft bool) *[2]float64 {
	if !s.sampled() {
		return nil
	}
	var durs []int64
	for _, g := range s.gaps {
		if (g.Index == 0) == ttft {
			durs = append(durs, g.Duration())
		}
	}
	if len(durs) == 0 {
		return nil
	}
	slices.Sort(durs)
	lo, hi := QuantileBounds(durs, 0.99)
	return &[2]float64{Ms(lo), Ms(hi)}
}
