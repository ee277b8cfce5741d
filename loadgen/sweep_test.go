package loadgen

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/tools/llmsim/sim"
)

func TestParseSLOs(t *testing.T) {
	s, err := ParseSLOs("p99_ttft_ms<=200, p99_itl_ms<50,request_goodput>=1")
	if err != nil || len(s) != 3 || s[0].Op != "<=" || s[1].Op != "<" || s[1].Value != 50 || s[2].Op != ">=" {
		t.Fatalf("%+v %v", s, err)
	}
	if !s[0].Met(200) || s[1].Met(50) {
		t.Error("Met")
	}
	for _, bad := range []string{"", "p99_ttft_ms=3", "p99_ttft_ms<=x"} {
		if _, err := ParseSLOs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestSweepFindsKneeStably(t *testing.T) {
	url := startSim(t, func(c *sim.Config) {
		c.MaxNumSeqs = 4
		c.PrefillBase = 2 * time.Millisecond
		c.PrefillPerToken = 0
		c.DecodeStep = 4 * time.Millisecond
	})
	slos, _ := ParseSLOs("p90_ttft_ms<=60")
	run := func() *SweepResult {
		load := DefaultConfig()
		load.Target = url
		load.Dataset.InputLen = 16
		load.Dataset.OutputLen = 8
		load.Seed = 3
		res, err := Sweep(context.Background(), SweepConfig{Load: load, SLOs: slos, RequestsPerStep: 60, Step: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range res.Steps {
			t.Logf("step %d %s rate %.1f pass %v early %v %v", s.N, s.Phase, s.Rate, s.Pass, s.StoppedEarly, s.Values)
		}
		return res
	}
	a := run()
	b := run()
	t.Logf("capacity %.1f/%.1f req/s, answers %.2f and %.2f (steps %.2f/%.2f)", a.Capacity, b.Capacity, a.Answer, b.Answer, a.StepSize, b.StepSize)
	for _, r := range []*SweepResult{a, b} {
		if r.Best == nil || r.Answer <= 0 {
			t.Fatalf("no rate met the SLO")
		}
		failed := false
		for _, s := range r.Steps {
			if s.Phase == "search" && !s.Pass && s.Rate > r.Answer {
				failed = true
			}
		}
		if !failed {
			t.Errorf("no step above the answer failed the SLO: the knee was not found")
		}
	}
	if d := math.Abs(a.Answer - b.Answer); d > math.Max(a.StepSize, b.StepSize)*1.0001 {
		t.Errorf("answers %.2f and %.2f differ by more than one step (%.2f)", a.Answer, b.Answer, math.Max(a.StepSize, b.StepSize))
	}
}
