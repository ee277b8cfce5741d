package pipeline

import (
	"fmt"
	"iter"
	"slices"

	"github.com/bpfbench/bpfbench/result"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/correlate/critpath"
)

// The attribution a user reads is the critical path's: every interval's
// excess over the baseline's normal gap, split over the causes along its
// critical path (critpath.Gap.Excess), summed per band, request, second
// of the timeline and phase. The union of overlapping activity stays in
// result.json as "activity", never as a cause.

// critParts are the gaps' excess over base, in the critical path's causes.
func critParts(gaps iter.Seq[critGap], base critpath.Baseline) iter.Seq[correlate.Parts] {
	return func(yield func(correlate.Parts) bool) {
		ex := make([]int64, critpath.NumCauses)
		for g := range gaps {
			x := g.excess(base)
			copy(ex, x.Ns[:])
			if !yield(correlate.Parts{Request: int(g.request), Index: int(g.index), Duration: g.duration(), Excess: ex}) {
				return
			}
		}
	}
}

// critSummary is result.json's attribution from the critical path.
func critSummary(gaps iter.Seq[critGap], base critpath.Baseline, percentiles []float64) *correlate.Summary {
	s := correlate.SummarizeParts(critParts(gaps, base), critpath.CauseNames(), percentiles)
	s.Model = correlate.ModelCriticalPath
	s.BaselineITLMs, s.BaselineTTFTMs = ms(sumNs(base.ITL)), ms(sumNs(base.TTFT))
	return &s
}

func sumNs(ns [critpath.NumCauses]int64) int64 {
	var t int64
	for _, v := range ns {
		t += v
	}
	return t
}

// attribute sets doc's attribution, its timeline's causes and its phases'
// causes from the critical path's gaps against base (doc.CriticalPath
// must be built: its phases give each phase's top cause).
func attribute(doc *result.Document, gaps iter.Seq[critGap], phases []critPhase, base critpath.Baseline, runStart int64, percentiles []float64) {
	if len(percentiles) == 0 {
		percentiles = []float64{50, 90, 99}
	}
	doc.Attribution = critSummary(gaps, base, percentiles)

	if n := len(doc.Timeline); n > 0 {
		causeNs := make([][critpath.NumCauses]int64, n)
		for g := range gaps {
			k := min(max(int((g.end-runStart)/1e9), 0), n-1)
			x := g.excess(base)
			for c, v := range x.Ns {
				causeNs[k][c] += v
			}
		}
		for i := range doc.Timeline {
			m := map[string]float64{}
			for c, v := range causeNs[i] {
				if v > 0 {
					m[critpath.Cause(c).String()] = ms(v)
				}
			}
			doc.Timeline[i].CausesMs = m
		}
	}

	var cps []result.CriticalPhase
	if doc.CriticalPath != nil {
		cps = doc.CriticalPath.Phases
	}
	for i := range doc.Phases {
		p := &doc.Phases[i]
		if i >= len(phases) || phases[i].name != p.Name {
			continue
		}
		gs := slices.Values(inPhase(gaps, phases[i]))
		var sum [critpath.NumCauses]int64
		n := 0
		for g := range gs {
			n++
			x := g.excess(base)
			for c, v := range x.Ns {
				sum[c] += v
			}
		}
		p.AttributedMsPerInterval = correlate.Breakdown{}
		for c, v := range sum {
			if n > 0 {
				p.AttributedMsPerInterval[critpath.Cause(c).String()] = ms(v) / float64(n)
			}
		}
		s := correlate.SummarizeParts(critParts(gs, base), critpath.CauseNames(), []float64{99})
		p.ITLP99, p.ITLAll, p.TTFT = s.ITL["p99"], s.ITL["all"], s.TTFT
		p.TopCause, p.TopShare, p.TopCauseBasis = "", 0, ""
		if i >= len(cps) || cps[i].Name != p.Name {
			continue
		}
		cp := cps[i]
		switch {
		case i > 0:
			p.TopCause, p.TopShare = cp.TailTop, cp.TailAddedShares[cp.TailTop]
			p.TopCauseBasis = fmt.Sprintf("largest addition to the slowest 10%% of gaps over %s", cps[0].Name)
		case cp.ITLP99 != nil && cp.ITLP99.ExcessMs > 0:
			p.TopCause, p.TopShare = cp.ITLP99.Top, cp.ITLP99.ExcessShares[cp.ITLP99.Top]
			p.TopCauseBasis = "slowest 1% of gaps"
		}
	}
}

// RebuildAttribution rebuilds a recorded run's attribution, timeline
// causes and phase causes from its gaps file (report DIR re-rendering a
// run written before the critical path became the attribution, or with
// another --baseline): doc is changed in place. It is an error when the
// run has no critical path or no gaps file.
func RebuildAttribution(doc *result.Document, dir string) error {
	cp := doc.CriticalPath
	if cp == nil || cp.Gaps == 0 {
		return fmt.Errorf("%s has no critical path: its attribution cannot be rebuilt", dir)
	}
	h, gaps, err := readGaps(dir)
	if err != nil {
		return err
	}
	var phases []critPhase
	for _, p := range h.Phases {
		phases = append(phases, critPhase{name: p.Name, from: p.FromNs, to: p.ToNs})
	}
	base := critpath.Baseline{TTFT: nsOf(cp.NormalTTFTMs), ITL: nsOf(cp.NormalITLMs)}
	var ps []float64
	if a := doc.Activity; a != nil {
		ps = bandPercentiles(a)
	}
	attribute(doc, slices.Values(gaps), phases, base, h.RunStartNs, ps)
	return nil
}

// bandPercentiles are the percentiles of a summary's ITL bands.
func bandPercentiles(s *correlate.Summary) []float64 {
	var out []float64
	for k := range s.ITLBands {
		var p float64
		if _, err := fmt.Sscanf(k, "p%g", &p); err == nil {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
