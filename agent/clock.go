package agent

import (
	"github.com/bpfbench/bpfbench/result"
	"math"
	"slices"
	"time"
)

// Sample is one round trip of the clock exchange: T0 and T1 the local
// clock before the request and after the answer, Agent the agent's clock
// read in between (all CLOCK_MONOTONIC ns).
type Sample struct {
	T0, Agent, T1 int64
}

// RTT is the sample's round trip.
func (s Sample) RTT() int64 { return s.T1 - s.T0 }

// ClockEstimate maps the agent's clock onto the local one:
// local = agent - OffsetNs, within ±BoundNs.
type ClockEstimate = result.ClockEstimate

// usedSamples is the share of the fastest round trips an estimate joins:
// slow ones (a preempted client, a queued request) only widen nothing, but
// a clock that moved during the exchange would make their intervals
// disagree, and the fastest are the ones to trust.
const usedSamples = 0.25

// Estimate is the NTP-style estimate from round trips. Each sample says
// the agent read its clock at some local instant in [T0, T1], so the
// offset lies in [Agent-T1, Agent-T0]; the estimate is the intersection of
// those intervals over the fastest quarter of the samples (never wider
// than the fastest one's: RTT_min/2), widened by the clocks' read
// granularity. When the intervals do not intersect (the clock stepped
// during the exchange) the fastest sample alone is used.
func Estimate(samples []Sample, granularityNs int64) (ClockEstimate, bool) {
	if len(samples) == 0 {
		return ClockEstimate{}, false
	}
	s := slices.Clone(samples)
	slices.SortFunc(s, func(a, b Sample) int { return int(min(max(a.RTT()-b.RTT(), math.MinInt32), math.MaxInt32)) })
	n := max(1, int(float64(len(s))*usedSamples))
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	used := 0
	for _, x := range s[:n] {
		a, b := x.Agent-x.T1, x.Agent-x.T0
		nlo, nhi := max(lo, a), min(hi, b)
		if nlo > nhi {
			break
		}
		lo, hi = nlo, nhi
		used++
	}
	best := s[0]
	return ClockEstimate{
		AtNs:     best.T0 + best.RTT()/2,
		OffsetNs: lo + (hi-lo)/2,
		BoundNs:  (hi-lo+1)/2 + granularityNs,
		RTTMinNs: best.RTT(),
		Samples:  len(s),
		Used:     used,
	}, true
}

// ClockReport is what a run records of one agent's clock: every estimate
// taken during the session, the last one, the drift between the first and
// the last, and the bound every mapped timestamp is within.
type ClockReport = result.AgentClock

// Report joins the estimates of a session. A span is mapped with the
// estimate in force when it arrived, at most interval old: its error is
// within the widest estimate's bound plus the drift over interval.
func Report(agent string, est []ClockEstimate, interval time.Duration) ClockReport {
	r := ClockReport{Agent: agent, Estimates: est}
	if len(est) == 0 {
		return r
	}
	last := est[len(est)-1]
	r.OffsetNs = last.OffsetNs
	for _, e := range est {
		r.BoundNs = max(r.BoundNs, e.BoundNs)
	}
	if first := est[0]; len(est) > 1 && last.AtNs > first.AtNs {
		r.DriftPPM = float64(last.OffsetNs-first.OffsetNs) / float64(last.AtNs-first.AtNs) * 1e6
		r.BoundNs += int64(math.Ceil(math.Abs(r.DriftPPM) * 1e-6 * float64(interval)))
	}
	return r
}
