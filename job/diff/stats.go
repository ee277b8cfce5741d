package diff

import (
	"errors"
	"math"
	"sort"
)

// MannWhitney is the result of a two-sided Mann-Whitney U test of A
// against B.
type MannWhitney struct {
	NA, NB int `json:"-"`
	// UA is A's U statistic (scipy.stats.mannwhitneyu's statistic for x=A);
	// UB = NA·NB − UA.
	UA float64 `json:"u_a"`
	UB float64 `json:"u_b"`
	// Z is the normal approximation's z, continuity-corrected, positive
	// when B tends to be the larger.
	Z float64 `json:"z"`
	// P is the two-sided p-value.
	P float64 `json:"p"`
	// PBGreater is the probability that a figure of B exceeds one of A
	// (ties counting half): UB/(NA·NB), 0.5 for no shift.
	PBGreater float64 `json:"p_b_greater"`
}

// errEmpty says a sample is empty.
var errEmpty = errors.New("a sample is empty")

// MannWhitneyU tests whether a and b come from the same distribution
// against a shift either way: U with ranks averaged over ties, the normal
// approximation with the tie correction of the variance and a continuity
// correction of 0.5, the p-value two-sided. It is
// scipy.stats.mannwhitneyu(a, b, method="asymptotic") (use_continuity
// and alternative="two-sided" by default). When every figure is the same,
// p is 1.
func MannWhitneyU(a, b []float64) (MannWhitney, error) {
	na, nb := len(a), len(b)
	r := MannWhitney{NA: na, NB: nb}
	if na == 0 || nb == 0 {
		return r, errEmpty
	}
	type obs struct {
		v   float64
		inA bool
	}
	all := make([]obs, 0, na+nb)
	for _, v := range a {
		all = append(all, obs{v: v, inA: true})
	}
	for _, v := range b {
		all = append(all, obs{v: v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v < all[j].v })
	n := float64(na + nb)
	var rankA, ties float64
	for i := 0; i < len(all); {
		j := i + 1
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		rank := float64(i+j+1) / 2 // ranks i+1..j averaged
		for k := i; k < j; k++ {
			if all[k].inA {
				rankA += rank
			}
		}
		t := float64(j - i)
		ties += t*t*t - t
		i = j
	}
	fa, fb := float64(na), float64(nb)
	r.UA = rankA - fa*(fa+1)/2
	r.UB = fa*fb - r.UA
	r.PBGreater = r.UB / (fa * fb)
	mu := fa * fb / 2
	sigma := math.Sqrt(fa * fb / 12 * ((n + 1) - ties/(n*(n-1))))
	if sigma == 0 || math.IsNaN(sigma) {
		r.P = 1
		return r, nil
	}
	d := math.Max(math.Abs(r.UB-mu)-0.5, 0)
	z := d / sigma
	r.P = math.Min(1, math.Erfc(z/math.Sqrt2))
	if r.UB < mu {
		z = -z
	}
	r.Z = z
	return r, nil
}

// quantile is the p-th quantile (0..1) of sorted, interpolated linearly
// as numpy's default does.
func quantile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	x := p * float64(len(sorted)-1)
	lo := int(math.Floor(x))
	hi := int(math.Ceil(x))
	return sorted[lo] + (sorted[hi]-sorted[lo])*(x-float64(lo))
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}
