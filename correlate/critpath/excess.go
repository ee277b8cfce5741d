package critpath

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/bits"
	"slices"
)

// Normal is a normal gap: each cause's time in it, ns.
type Normal [NumCauses]int64

// Total is the normal gap's length.
func (n Normal) Total() int64 {
	var t int64
	for _, v := range n {
		t += v
	}
	return t
}

// MarshalJSON writes the causes by name, so that a baseline saved by one
// version reads in another.
func (n Normal) MarshalJSON() ([]byte, error) {
	m := make(map[string]int64, NumCauses)
	for c, v := range n {
		m[Cause(c).String()] = v
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (n *Normal) UnmarshalJSON(b []byte) error {
	var m map[string]int64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*n = Normal{}
	for k, v := range m {
		c, ok := CauseByName(k)
		if !ok {
			return fmt.Errorf("reading a normal gap: unknown cause %q", k)
		}
		n[c] = v
	}
	return nil
}

// Baseline is what normal gaps look like: the TTFT and later gaps apart.
// It comes from the baseline phase, the run's own gaps, or another run
// (saved as JSON).
type Baseline struct {
	TTFT Normal `json:"ttft_ns"`
	ITL  Normal `json:"itl_ns"`
}

// For is the normal gap for r.
func (b Baseline) For(r Read) Normal {
	if r.Index == 0 {
		return b.TTFT
	}
	return b.ITL
}

// NormalOf is each cause's median time over gaps (ns: each gap's Ns).
// The medians are taken cause by cause, so a cause absent from most gaps
// is normally 0, and the normal total need not be the median gap.
func NormalOf(ns [][NumCauses]int64) Normal {
	var n Normal
	if len(ns) == 0 {
		return n
	}
	col := make([]int64, len(ns))
	for c := range NumCauses {
		for i, v := range ns {
			col[i] = v[c]
		}
		n[c] = Median(col)
	}
	return n
}

// Median is NormalOf's median of one cause's times: the middle value, or
// the mean of the middle two (0 for none). It sorts xs in place.
func Median(xs []int64) int64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	m := len(xs) / 2
	if len(xs)%2 == 1 {
		return xs[m]
	}
	return xs[m-1] + (xs[m]-xs[m-1])/2
}

// BaselineOf is the baseline of gaps: NormalOf their TTFTs and of the
// rest.
func BaselineOf(gaps []Gap) Baseline {
	var ttft, itl [][NumCauses]int64
	for _, g := range gaps {
		if g.Index == 0 {
			ttft = append(ttft, g.Ns)
		} else {
			itl = append(itl, g.Ns)
		}
	}
	return Baseline{TTFT: NormalOf(ttft), ITL: NormalOf(itl)}
}

// Excess is a gap's time above normal, split over the causes.
type Excess struct {
	NormalNs int64 // the normal gap's length
	ExcessNs int64 // max(0, the gap's length - NormalNs)
	// Ns sums to ExcessNs; Shares (Ns over ExcessNs, unrounded) sum to 1
	// when there is an excess and are all 0 otherwise.
	Ns     [NumCauses]int64
	Shares [NumCauses]float64
}

// Excess splits g's excess over base. Each cause's contribution is its
// time above its normal time, over[c] = max(0, Ns[c] - normal[c]); a
// cause below normal contributes 0 (its negative part is clamped, not
// netted against the others). The excess is split in proportion to the
// contributions: Shares[c] = over[c] / Σ over, Ns[c] = ExcessNs ×
// Shares[c] rounded down, the few ns left by rounding going one each to
// the largest remainders (ties: the lower cause). Since the parts sum to
// the gap, Σ over ≥ the gap - the normal total = ExcessNs, so there is
// always a contribution to split when there is an excess; when some
// cause is below normal, Σ over exceeds ExcessNs and the shares are
// renormalised to Σ over.
func (g Gap) Excess(base Baseline) Excess {
	n := base.For(g.Read)
	x := Excess{NormalNs: n.Total()}
	x.ExcessNs = max(0, g.Duration()-x.NormalNs)
	if x.ExcessNs == 0 {
		return x
	}
	var over [NumCauses]uint64
	var sum uint64
	for c := range NumCauses {
		if v := g.Ns[c] - n[c]; v > 0 {
			over[c] = uint64(v)
			sum += over[c]
		}
	}
	if sum == 0 { // a normal with negative parts: nothing to split by
		x.Ns[Unexplained], x.Shares[Unexplained] = x.ExcessNs, 1
		return x
	}
	var rem [NumCauses]uint64
	var given int64
	for c := range NumCauses {
		hi, lo := bits.Mul64(uint64(x.ExcessNs), over[c])
		q, r := bits.Div64(hi, lo, sum) // hi < sum: the quotient is at most ExcessNs
		x.Ns[c], rem[c] = int64(q), r
		given += int64(q)
		x.Shares[c] = float64(over[c]) / float64(sum)
	}
	for left := x.ExcessNs - given; left > 0; left-- {
		best := -1
		for c := range NumCauses {
			if over[c] > 0 && (best < 0 || rem[c] > rem[best]) {
				best = int(c)
			}
		}
		x.Ns[best]++
		rem[best] = 0
	}
	return x
}

// Neighbour is a process that held the CPU while a critical-path thread
// was runnable.
type Neighbour struct {
	Process Thread // Tgid and Comm (Tid: the first thread seen)
	Ns      int64  // runnable time on critical paths it caused
	Gaps    int    // gaps it delayed
}

// Aggregate sums gaps as they are flushed: each cause's time over the run
// and the noisy neighbours. Its memory is bounded by the holders seen.
type Aggregate struct {
	Gaps  int
	GapNs int64
	Ns    [NumCauses]int64
	procs map[procKey]*Neighbour
}

type procKey struct {
	pid  uint32
	comm string
}

// Add sums g.
func (a *Aggregate) Add(g Gap) { a.AddWeighted(g, 1) }

// AddWeighted sums g as w gaps: a gap walked as one of a uniform sample
// of 1 in w stands for w (the sums become estimates of every gap's, in
// the manner of Horvitz and Thompson).
func (a *Aggregate) AddWeighted(g Gap, w int) {
	a.Gaps += w
	a.GapNs += int64(w) * g.Duration()
	for c, v := range g.Ns {
		a.Ns[c] += int64(w) * v
	}
	var seen []*Neighbour
	for _, s := range g.Steps {
		held := s.Cause == CPURunqueue || (s.Cause == IOBlock && s.State == Runnable) // behind the block layer's worker
		if !held || s.Other == (Thread{}) {
			continue
		}
		pid := s.Other.Tgid
		if pid == 0 {
			pid = s.Other.Tid
		}
		k := procKey{pid, s.Other.Comm}
		if a.procs == nil {
			a.procs = map[procKey]*Neighbour{}
		}
		nb := a.procs[k]
		if nb == nil {
			nb = &Neighbour{Process: s.Other}
			a.procs[k] = nb
		}
		nb.Ns += int64(w) * s.Duration()
		if !slices.Contains(seen, nb) {
			seen = append(seen, nb)
			nb.Gaps += w
		}
	}
}

// Neighbours are the holders, most runnable time first (ties by name).
func (a *Aggregate) Neighbours() []Neighbour {
	out := make([]Neighbour, 0, len(a.procs))
	for _, nb := range a.procs {
		out = append(out, *nb)
	}
	slices.SortFunc(out, func(x, y Neighbour) int {
		return cmp.Or(cmp.Compare(y.Ns, x.Ns), cmp.Compare(x.Process.String(), y.Process.String()))
	})
	return out
}

// Fraction is cause c's share of all gap time.
func (a *Aggregate) Fraction(c Cause) float64 {
	if a.GapNs == 0 {
		return 0
	}
	return float64(a.Ns[c]) / float64(a.GapNs)
}
