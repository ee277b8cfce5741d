package main

import (
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/live"
	"github.com/bpfbench/bpfbench/result"
)

// A live view that sampled the gaps below the p90 says so in attach's
// summary: the stride, what was left out and the totals' bound.
func TestAttachSaysTheWalkSampled(t *testing.T) {
	r := &live.Result{CriticalPath: &result.CriticalPath{Gaps: 9000},
		Live: live.Summary{Streams: 4, Gaps: 9000, Sampling: &live.Sampling{TargetCPU: 0.0025, Stride: 16, StrideMax: 32, StrideP90: 1, StrideP90Max: 4, ExactFrom: [2]float64{0.985, 0.988},
			Walked: 400, Out: 7200, OutMs: 72000, BoundsMs: map[string]float64{"server_compute": 310, "cpu_runqueue": 12, "gaps": 900}}}}
	var b strings.Builder
	writeLive(&b, r)
	want := "(estimated: below the p90 the gaps were walked 1 in 16 (up to 1 in 32), from the p90 to the p98.8 (the lower end of the running p99's 95% interval) 1 in 1 (up to 4), to keep the walk near 0.25% of a CPU; 7200 gaps, 72000 ms, left out, 400 walked for them; the cause totals are within ±310 ms of every gap's (95%)"
	if !strings.Contains(b.String(), want) {
		t.Errorf("attach's summary does not say the walk sampled:\n%s", b.String())
	}
}
