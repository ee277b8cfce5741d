package loadgen

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/llmsim/sim"
	"github.com/bpfbench/bpfbench/llmsim/simtest"
	"github.com/bpfbench/bpfbench/loadgen/dataset"
)

func gapStats(offsets []int64) (mean, cv float64) {
	n := len(offsets)
	gaps := make([]float64, n)
	prev := int64(0)
	for i, o := range offsets {
		gaps[i] = float64(o-prev) / 1e9
		prev = o
	}
	for _, g := range gaps {
		mean += g
	}
	mean /= float64(n)
	v := 0.0
	for _, g := range gaps {
		v += (g - mean) * (g - mean)
	}
	return mean, math.Sqrt(v/float64(n-1)) / mean
}

func TestArrivalStatistics(t *testing.T) {
	const n, rate = 20000, 50.0
	tests := []struct {
		name       string
		burstiness float64
		constant   bool
		cv         float64
	}{
		{"poisson", 1, false, 1},
		{"gamma bursty", 0.25, false, 2},
		{"gamma smooth", 4, false, 0.5},
		{"constant", 1, true, 0},
	}
	for _, tc := range tests {
		for seed := uint64(1); seed <= 3; seed++ {
			off := NewArrivals(rate, tc.burstiness, tc.constant, seed).Offsets(n)
			mean, cv := gapStats(off)
			// The standard error of the mean gap is cv/sqrt(n)/rate (< 1.5%
			// here); the rescaling to n/rate makes the mean exact anyway.
			if math.Abs(mean*rate-1) > 0.01 {
				t.Errorf("%s seed %d: mean gap %.5f s, want %.5f", tc.name, seed, mean, 1/rate)
			}
			if math.Abs(cv-tc.cv) > 0.06*math.Max(tc.cv, 1) {
				t.Errorf("%s seed %d: CV %.3f, want %.3f", tc.name, seed, cv, tc.cv)
			}
		}
	}
	if off := NewArrivals(math.Inf(1), 1, false, 1).Offsets(5); off[4] != 0 {
		t.Errorf("infinite rate: offsets %v", off)
	}
	// The online generator (duration mode) has the same statistics.
	a := NewArrivals(rate, 0.5, false, 9)
	var sum, ss float64
	for i := 0; i < n; i++ {
		g := a.Next()
		sum += g
		ss += g * g
	}
	mean := sum / n
	cv := math.Sqrt(ss/n-mean*mean) / mean
	if math.Abs(mean*rate-1) > 0.05 || math.Abs(cv-math.Sqrt2) > 0.1 {
		t.Errorf("online gamma(0.5): mean %.4f cv %.3f", mean, cv)
	}
}

func TestScheduleIsAbsolute(t *testing.T) {
	url := simtest.Start(t, nil)
	cfg := DefaultConfig()
	cfg.Target.URL = url
	cfg.Scenario.NumRequests = 20
	cfg.Scenario.Rate = 100
	cfg.Scenario.Constant = true
	cfg.Scenario.Dataset.OutputLen = 2
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res.Records {
		want := res.StartNs + int64(i+1)*int64(10*time.Millisecond)
		if d := r.ScheduledNs - want; d < -1000 || d > 1000 {
			t.Fatalf("request %d scheduled at +%d ns, want +%d", i, r.ScheduledNs-res.StartNs, want-res.StartNs)
		}
		if q := r.QueueNs(); q < 0 || q > int64(200*time.Millisecond) {
			t.Errorf("request %d: queue time %d ns", i, q)
		}
	}
}

func TestTraceReplayAndDatasets(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	os.WriteFile(trace, []byte(`{"timestamp": 1000, "input_len": 5, "output_len": 3}
{"timestamp": 1000.05, "input_len": 7, "output_len": 2}
{"timestamp": 1000.15, "prompt": "one two three", "output_len": 4}
`), 0o644)
	url := simtest.Start(t, func(c *sim.Config) { c.DecodeStep = time.Millisecond })
	cfg := DefaultConfig()
	cfg.Target.URL = url
	cfg.Scenario.TracePath = trace
	cfg.Scenario.NumRequests = 0
	cfg.Target.IgnoreEOS = true
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	wantOff := []int64{0, 50e6, 150e6}
	wantIn := []int{5, 7, 3}
	wantOut := []int{3, 2, 4}
	if len(res.Records) != 3 {
		t.Fatalf("%d records", len(res.Records))
	}
	for i, r := range res.Records {
		if d := r.ScheduledNs - res.StartNs - wantOff[i]; d < -1e6 || d > 1e6 {
			t.Errorf("record %d scheduled at +%d ns, want +%d", i, r.ScheduledNs-res.StartNs, wantOff[i])
		}
		if r.PromptLen != wantIn[i] || r.UsagePromptTokens != wantIn[i] || r.OutputTokens != wantOut[i] {
			t.Errorf("record %d: in %d (server %d) out %d", i, r.PromptLen, r.UsagePromptTokens, r.OutputTokens)
		}
	}

	prompts := filepath.Join(dir, "prompts.jsonl")
	os.WriteFile(prompts, []byte("{\"prompt\": \"a b c d\", \"output_len\": 9}\n\n{\"input_len\": 12}\n"), 0o644)
	reqs, err := dataset.Load(dataset.Config{Name: dataset.JSONL, Path: prompts, OutputLen: 5}, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if reqs[0].PromptLen != 4 || reqs[0].OutputLen != 9 || reqs[1].PromptLen != 12 || dataset.CountTokens(reqs[1].Prompt) != 12 || reqs[1].OutputLen != 5 || reqs[2].Prompt != reqs[0].Prompt {
		t.Errorf("jsonl: %+v", reqs)
	}
	sg := filepath.Join(dir, "sharegpt.json")
	os.WriteFile(sg, []byte(`[{"id":"1","conversations":[{"from":"human","value":"what is the answer to this"},{"from":"gpt","value":"it is forty two my friend"}]},
{"id":"2","conversations":[{"from":"human","value":"hi"}]},
{"id":"3","conversations":[{"from":"human","value":"a"},{"from":"gpt","value":"b"}]}]`), 0o644)
	reqs, err = dataset.Load(dataset.Config{Name: dataset.ShareGPT, Path: sg}, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 1 || reqs[0].PromptLen != 6 || reqs[0].OutputLen != 6 {
		t.Errorf("sharegpt: %+v", reqs)
	}
	reqs, err = dataset.Load(dataset.Config{Name: dataset.Random, InputLen: 100, OutputLen: 10, RangeRatio: 0.5}, 200, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if r.PromptLen < 50 || r.PromptLen > 150 || dataset.CountTokens(r.Prompt) != r.PromptLen || r.OutputLen < 5 || r.OutputLen > 15 {
			t.Fatalf("random: %d words for %d tokens, output %d", dataset.CountTokens(r.Prompt), r.PromptLen, r.OutputLen)
		}
	}
}
