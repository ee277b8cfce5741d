package pipeline

import (
	"iter"
	"sort"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/metrics"
	"github.com/bpfbench/bpfbench/result"
)

// intervalsOf turns each successful measured request into its TTFT and
// inter-chunk intervals.
func intervalsOf(res *loadgen.Result) []correlate.Interval {
	var out []correlate.Interval
	for i := range res.Records {
		out = intervalsOfRecord(out, &res.Records[i])
	}
	return out
}

// intervalsOfRecord appends a successful request's TTFT and inter-chunk
// intervals to out.
func intervalsOfRecord(out []correlate.Interval, r *loadgen.Record) []correlate.Interval {
	if !r.Success || len(r.ChunkNs) == 0 {
		return out
	}
	port := uint16(r.LocalPort)
	out = append(out, correlate.Interval{Request: r.Index, Index: 0, Start: r.StartNs, End: r.ChunkNs[0], Port: port})
	for k := 1; k < len(r.ChunkNs); k++ {
		out = append(out, correlate.Interval{Request: r.Index, Index: k, Start: r.ChunkNs[k-1], End: r.ChunkNs[k], Port: port})
	}
	return out
}

// activitiesOf maps the sections' spans to causes (activityOf).
func activitiesOf(spans []collectors.Span) []correlate.Activity {
	out := make([]correlate.Activity, 0, len(spans))
	for _, s := range spans {
		if a, ok := activityOf(s); ok {
			out = append(out, a)
		}
	}
	return out
}

// activityOf maps a section's span to its cause: run-queue waits are
// cpu_runqueue; uninterruptible sleep and block requests are io_block;
// blocking CUDA calls are gpu_sync; blocking TCP episodes are
// net_backpressure on their connection's client port. Other spans (the
// load generator's own, sends, arrivals, forks) explain nothing.
func activityOf(s collectors.Span) (correlate.Activity, bool) {
	a := correlate.Activity{Start: s.Start, End: s.End, Tid: s.Tid}
	if s.Client {
		return a, false
	}
	switch s.Kind {
	case collectors.SpanRunqueue:
		a.Cause = correlate.CPURunqueue
	case collectors.SpanOffCPU:
		if !s.Blocking {
			return a, false
		}
		a.Cause = correlate.IOBlock
	case collectors.SpanBlockIO:
		a.Cause = correlate.IOBlock
	case collectors.SpanCUDA:
		if !s.Blocking {
			return a, false
		}
		a.Cause = correlate.GPUSync
	case collectors.SpanTCP:
		if !s.Blocking {
			return a, false
		}
		a.Cause = correlate.NetBackpressure
		a.Port = s.Port
	default:
		return a, false
	}
	return a, true
}

func percentile(xs []float64, p float64) float64 {
	sort.Float64s(xs)
	return metrics.Percentile(xs, p)
}

// Timeline buckets the run by second: throughput, latency and the excess
// attributed to each cause.
func Timeline(res *loadgen.Result, blames iter.Seq[correlate.Blame]) []result.TimelinePoint {
	if res.EndNs <= res.StartNs {
		return nil
	}
	n := int((res.EndNs-res.StartNs)/1e9) + 1
	pts := make([]result.TimelinePoint, n)
	itls := make([][]float64, n)
	ttfts := make([][]float64, n)
	tokens := make([]float64, n)
	bucket := func(ns int64) int {
		b := int((ns - res.StartNs) / 1e9)
		return min(max(b, 0), n-1)
	}
	for i := range res.Records {
		r := &res.Records[i]
		if !r.Success {
			continue
		}
		pts[bucket(r.EndNs)].CompletedRequests++
		for k, ns := range r.ChunkNs {
			tok := 1.0
			if r.ChunkTokens != nil && k < len(r.ChunkTokens) {
				tok = float64(r.ChunkTokens[k])
			}
			tokens[bucket(ns)] += tok
		}
	}
	for i := range pts {
		pts[i].T = float64(i)
		pts[i].CausesMs = map[string]float64{}
	}
	// Sums in integer ns: the same whatever order the blames come in.
	causeNs := make([][correlate.NumCauses + 1]int64, n)
	for b := range blames {
		k := bucket(b.End)
		if b.Index == 0 {
			ttfts[k] = append(ttfts[k], float64(b.Duration())/1e6)
		} else {
			itls[k] = append(itls[k], float64(b.Duration())/1e6)
		}
		for c, v := range b.AttributedNs {
			if v > 0 {
				causeNs[k][c] += v
			}
		}
	}
	for i := range pts {
		for c, name := range correlate.CauseNames() {
			if causeNs[i][c] > 0 {
				pts[i].CausesMs[name] = float64(causeNs[i][c]) / 1e6
			}
		}
		pts[i].OutputTokensPerSecond = tokens[i]
		pts[i].P50ITLMs = percentile(itls[i], 50)
		pts[i].P99ITLMs = percentile(itls[i], 99)
		pts[i].P50TTFTMs = percentile(ttfts[i], 50)
	}
	return pts
}

// Phases summarizes each phase of a scenario: the intervals ending inside
// it. A phase's top cause is the cause whose attributed excess per
// interval grew most over the first phase (the scenario's baseline): what
// the phase changed, not what every phase has (a busy machine's ordinary
// run-queue waits). The first phase's top cause is that of its slowest 1%.
func Phases(res *loadgen.Result, blames iter.Seq[correlate.Blame], base correlate.Baseline, marks *PhaseMarks) []result.Phase {
	ms := marks.spans(res.EndNs)
	var out []result.Phase
	var ref []float64
	for i, m := range ms {
		end := m.to
		m := phaseMark{name: m.name, ns: m.from}
		// The intervals ending in the phase, read again for its summary.
		sel := func(yield func(correlate.Blame) bool) {
			for b := range blames {
				if b.End >= m.ns && b.End < end && !yield(b) {
					return
				}
			}
		}
		var itls, ttfts []float64
		n := 0
		reqs := map[int]bool{}
		// Sums in integer ns: the same whatever order the blames come in.
		var sumNs [correlate.NumCauses + 1]int64
		perInterval := make([]float64, len(correlate.CauseNames()))
		for b := range sel {
			n++
			reqs[b.Request] = true
			if b.Index == 0 {
				ttfts = append(ttfts, float64(b.Duration())/1e6)
			} else {
				itls = append(itls, float64(b.Duration())/1e6)
			}
			for c, v := range b.AttributedNs {
				sumNs[c] += v
			}
		}
		att := correlate.Breakdown{}
		for c, name := range correlate.CauseNames() {
			perInterval[c] = float64(sumNs[c]) / 1e6
			if n > 0 {
				perInterval[c] /= float64(n)
			}
			att[name] = perInterval[c]
		}
		s := correlate.SummarizeSeq(sel, base, []float64{50, 99})
		p := result.Phase{
			Name: m.name, StartS: float64(m.ns-res.StartNs) / 1e9, EndS: float64(end-res.StartNs) / 1e9,
			Requests: len(reqs), P50ITLMs: percentile(itls, 50), P99ITLMs: percentile(itls, 99),
			P99TTFTMs: percentile(ttfts, 99), ITLP99: s.ITL["p99"], ITLAll: s.ITL["all"], TTFT: s.TTFT,
			AttributedMsPerInterval: att,
		}
		if i == 0 {
			ref = perInterval
			p.TopCause, p.TopCauseBasis = correlate.Top(s.ITL["p99"]), "slowest 1% of gaps"
		} else {
			best, bestV := "unexplained", 0.0
			for c := 0; c < int(correlate.NumCauses); c++ {
				if d := perInterval[c] - ref[c]; d > bestV {
					best, bestV = correlate.CauseNames()[c], d
				}
			}
			p.TopCause, p.TopCauseBasis = best, "largest increase over "+ms[0].name
		}
		out = append(out, p)
	}
	return out
}
