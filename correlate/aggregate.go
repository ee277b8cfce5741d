package correlate

import (
	"iter"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/bpfbench/bpfbench/result"
)

// Breakdown is the share of excess latency per cause name (including
// "unexplained"), summing to 1 when there was excess (result.Breakdown,
// the type on the wire).
type Breakdown = result.Breakdown

// Band aggregates intervals whose duration lies in a percentile band.
type Band = result.Band

// RequestBlame is one request's attribution.
type RequestBlame = result.RequestBlame

// Summary is the `attribution` object of a run's result (result.Summary).
type Summary = result.Summary

// The models of a Summary.
const (
	ModelCriticalPath = result.ModelCriticalPath
	ModelActivity     = result.ModelActivity
)

// Parts is one interval's excess split over a model's causes, for
// SummarizeParts: Excess[i] is the time given to the i-th of its names.
type Parts struct {
	Request, Index int
	// Duration is the interval's length, ns.
	Duration int64
	Excess   []int64
}

// shares is att over its sum, by name.
func shares(names []string, att []int64) Breakdown {
	var total int64
	for _, v := range att {
		total += v
	}
	out := Breakdown{}
	for i, n := range names {
		if total > 0 {
			out[n] = float64(att[i]) / float64(total)
		} else {
			out[n] = 0
		}
	}
	return out
}

// Top is the cause with the largest share of a breakdown, whichever
// model's causes it holds ("unexplained" when it outweighs every cause, or
// when there is no excess); a tie goes to the name first in order.
func Top(b Breakdown) string {
	names := make([]string, 0, len(b))
	for n := range b {
		names = append(names, n)
	}
	sort.Strings(names)
	return topOf(names, b)
}

// topOf is the cause of names (not unexplained, unless nothing else) with
// the largest share of b.
func topOf(names []string, b Breakdown) string {
	best, bestV := "unexplained", 0.0
	for _, n := range names {
		if n != "unexplained" && b[n] > bestV {
			best, bestV = n, b[n]
		}
	}
	if b["unexplained"] > bestV {
		return "unexplained"
	}
	return best
}

func addAtt(dst, src []int64) {
	for i := range dst {
		dst[i] += src[i]
	}
}

// percentileOf returns the p-th percentile (0..100) of sorted values,
// interpolating linearly as numpy does.
func percentileOf(sorted []int64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	r := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(r))
	hi := int(math.Ceil(r))
	f := r - float64(lo)
	return float64(sorted[lo])*(1-f) + float64(sorted[hi])*f
}

// Summarize aggregates blames per request, for all TTFTs, and per ITL
// percentile band (percentiles ascending, e.g. 50, 90, 99).
func Summarize(blames []Blame, base Baseline, percentiles []float64) Summary {
	return SummarizeSeq(slices.Values(blames), base, percentiles)
}

// SummarizeSeq is Summarize over blames that can be read twice (a Log's
// Blames): it holds one duration per gap and one aggregate per request,
// not the blames.
func SummarizeSeq(blames iter.Seq[Blame], base Baseline, percentiles []float64) Summary {
	parts := func(yield func(Parts) bool) {
		var p Parts
		for b := range blames {
			p.Request, p.Index, p.Duration, p.Excess = b.Request, b.Index, b.Duration(), b.AttributedNs[:]
			if !yield(p) {
				return
			}
		}
	}
	s := SummarizeParts(parts, causeNames[:], percentiles)
	s.Model = ModelActivity
	s.BaselineITLMs, s.BaselineTTFTMs = float64(base.ITLNs)/1e6, float64(base.TTFTNs)/1e6
	s.BaselineRates = Breakdown{}
	for c := Cause(0); c < NumCauses; c++ {
		s.BaselineRates[c.String()] = base.Rate[c]
	}
	return s
}

// SummarizeParts aggregates intervals' excess, split over the causes
// names (one of them "unexplained"), per request, for all TTFTs, and per
// ITL percentile band (percentiles ascending, e.g. 50, 90, 99). The
// intervals are read twice; it holds one duration per gap and one
// aggregate per request. The caller sets Model and the baselines.
func SummarizeParts(intervals iter.Seq[Parts], names []string, percentiles []float64) Summary {
	s := Summary{ITL: map[string]Breakdown{}, ITLBands: map[string]Band{}}
	t := tallyParts(intervals, len(names))
	s.TTFT = shares(names, t.ttft)
	s.ITL["all"] = shares(names, t.itl)
	s.TopCause = topOf(names, shares(names, t.all))
	itlBands(&s, intervals, names, percentiles, t.itls)
	s.Requests = requestBlames(names, t.reqs)
	return s
}

// requestParts is one request's excess per cause: its TTFT's, its
// ITLs' summed, and its TTFT.
type requestParts struct {
	ttft, itl []int64
	ttftMs    float64
}

// partsTally is the first pass over the intervals: the excess per cause
// of the TTFTs, of the ITLs, of all, and of each request, and every ITL's
// duration.
type partsTally struct {
	reqs           map[int]*requestParts
	ttft, itl, all []int64
	itls           []int64
}

// tallyParts reads the intervals once, adding each one's excess (n
// causes) to its request's and to the run's.
func tallyParts(intervals iter.Seq[Parts], n int) *partsTally {
	t := &partsTally{reqs: map[int]*requestParts{}, ttft: make([]int64, n), itl: make([]int64, n), all: make([]int64, n)}
	for b := range intervals {
		r := t.reqs[b.Request]
		if r == nil {
			r = &requestParts{ttft: make([]int64, n), itl: make([]int64, n)}
			t.reqs[b.Request] = r
		}
		addAtt(t.all, b.Excess)
		if b.Index == 0 {
			addAtt(t.ttft, b.Excess)
			addAtt(r.ttft, b.Excess)
			r.ttftMs = float64(b.Duration) / 1e6
		} else {
			addAtt(t.itl, b.Excess)
			addAtt(r.itl, b.Excess)
			t.itls = append(t.itls, b.Duration)
		}
	}
	return t
}

// itlBands reads the intervals a second time and sets s's ITL shares and
// bands per percentile band, the bounds the percentiles of the ITL
// durations itls (sorted here).
func itlBands(s *Summary, intervals iter.Seq[Parts], names []string, percentiles []float64, itls []int64) {
	n := len(names)
	sort.Slice(itls, func(i, j int) bool { return itls[i] < itls[j] })
	ps := append([]float64(nil), percentiles...)
	sort.Float64s(ps)
	bounds := make([]float64, len(ps))
	for i, p := range ps {
		bounds[i] = percentileOf(itls, p)
	}
	bandAtt := make([][]int64, len(ps))
	for i := range bandAtt {
		bandAtt[i] = make([]int64, n)
	}
	bandN := make([]int, len(ps))
	for b := range intervals {
		if b.Index == 0 {
			continue
		}
		d := float64(b.Duration)
		for i := len(ps) - 1; i >= 0; i-- {
			if d >= bounds[i] {
				addAtt(bandAtt[i], b.Excess)
				bandN[i]++
				break
			}
		}
	}
	for i, p := range ps {
		name := "p" + strconv.FormatFloat(p, 'f', -1, 64)
		sh := shares(names, bandAtt[i])
		s.ITL[name] = sh
		var ex int64
		for _, v := range bandAtt[i] {
			ex += v
		}
		band := Band{FromMs: bounds[i] / 1e6, Intervals: bandN[i], ExcessMs: float64(ex) / 1e6, Shares: sh}
		if i+1 < len(ps) {
			band.ToMs = bounds[i+1] / 1e6
		}
		s.ITLBands[name] = band
	}
}

// requestBlames is each request's blame, by request id.
func requestBlames(names []string, reqs map[int]*requestParts) []RequestBlame {
	var out []RequestBlame
	ids := make([]int, 0, len(reqs))
	for id := range reqs {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		r := reqs[id]
		var ex, tot int64
		both := make([]int64, len(names))
		addAtt(both, r.ttft)
		addAtt(both, r.itl)
		for _, v := range r.itl {
			ex += v
		}
		for _, v := range both {
			tot += v
		}
		out = append(out, RequestBlame{
			Request: id, TTFTMs: r.ttftMs, TTFTShares: shares(names, r.ttft),
			ITLExcessMs: float64(ex) / 1e6, ITLShares: shares(names, r.itl),
			TopCause: topOf(names, shares(names, both)), TotalExcessMs: float64(tot) / 1e6,
		})
	}
	return out
}

// EstimateBaseline derives a baseline from a window of intervals and the
// activity during them: the median TTFT, the median gap, and each cause's
// median active fraction over the gaps (see BaselineOf).
func EstimateBaseline(ivs []Interval, acts []Activity) Baseline {
	e := NewEngine(Baseline{})
	for _, a := range acts {
		e.AddActivity(a)
	}
	ms := make([]Measurement, len(ivs))
	for i, iv := range ivs {
		ms[i] = Measurement{Interval: iv}
		if iv.Index != 0 && iv.Duration() > 0 {
			ms[i] = e.measure(iv)
		}
	}
	return BaselineOf(slices.Values(ms))
}
