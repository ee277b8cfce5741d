package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/llmsim/sim"
	"github.com/bpfbench/bpfbench/llmsim/simtest"
	"github.com/bpfbench/bpfbench/loadgen/transport"
)

func TestNormalizedEntropy(t *testing.T) {
	ln := func(p ...float64) []float32 {
		out := make([]float32, len(p))
		for i, v := range p {
			out[i] = float32(math.Log(v))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		lps  []float32
		want float64
	}{
		{"uniform 5", ln(0.2, 0.2, 0.2, 0.2, 0.2), 1},
		{"uniform 20 of a larger vocabulary", []float32{-7, -7, -7, -7, -7, -7, -7, -7, -7, -7, -7, -7, -7, -7, -7, -7, -7, -7, -7, -7}, 1},
		{"one-hot", []float32{0, -9999, -9999, -9999}, 0},
		{"one value", []float32{-0.1}, 0},
		{"none", nil, 0},
		// Two candidates at 0.5 and 0.25 of the mass: renormalised 2/3, 1/3.
		{"truncated 2", ln(0.5, 0.25), -(2.0/3*math.Log(2.0/3) + 1.0/3*math.Log(1.0/3)) / math.Log(2)},
	} {
		if got := transport.NormalizedEntropy(tc.lps); math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	for h, want := range map[float64]string{0: "low", 0.3333: "low", 1.0 / 3: "mid", 0.6666: "mid", 2.0 / 3: "high", 1: "high"} {
		if got := EntropyCluster(h); got != want {
			t.Errorf("cluster of %v: %s, want %s", h, got, want)
		}
	}
}

// The formats of vLLM's and OpenAI's streams.
func TestLogprobsFlag(t *testing.T) {
	for arg, ok := range map[string]bool{"0": true, "2": true, "20": true, "1": false, "-1": false, "x": false} {
		cfg := DefaultConfig()
		fs := flag.NewFlagSet("load", flag.ContinueOnError)
		fs.SetOutput(&bytes.Buffer{})
		cfg.RegisterFlags(fs)
		err := fs.Parse([]string{"--logprobs", arg})
		if (err == nil) != ok {
			t.Errorf("--logprobs %s: %v", arg, err)
		}
	}
}

// DriftProfiles are two known distributions of llmsim's synthetic
// logprobs: mostly low-entropy prompts, and mostly high-entropy ones.
var driftProfiles = [2]sim.LogprobsProfile{{Low: 0.8, Mid: 0.08, High: 0.12}, {Low: 0.21, Mid: 0.2, High: 0.59}}

func driftRequests(n int) []Request {
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Prompt: fmt.Sprintf("question %d: what is the capital of country %d?", i, i*7), PromptLen: 12, OutputLen: 3}
	}
	return reqs
}

// Runs against llmsim with two known profiles recover each prompt's
// cluster, and the clusters' fractions, exactly.
func TestLLMSimPromptEntropy(t *testing.T) {
	reqs := driftRequests(120)
	for _, endpoint := range []string{transport.EndpointCompletions, transport.EndpointChat} {
		for pi, prof := range driftProfiles {
			url := simtest.Start(t, func(c *sim.Config) {
				c.DecodeStep = time.Millisecond
				c.PrefillBase = 0
				c.PrefillPerToken = 0
				c.Logprobs = prof
			})
			cfg := DefaultConfig()
			cfg.Target.URL, cfg.Target.Endpoint, cfg.Scenario.Requests, cfg.Target.Logprobs = url, endpoint, reqs, 5
			cfg.Scenario.MaxConcurrency = 16
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			counts := map[string]int{}
			for _, rec := range res.Records {
				if !rec.Success || rec.FirstToken == nil || len(rec.FirstToken.Top) != 5 {
					t.Fatalf("%s profile %d: request %d: success %v (%s), first token %+v", endpoint, pi, rec.Index, rec.Success, rec.Error, rec.FirstToken)
				}
				target, c := prof.TargetEntropy(reqs[rec.Index].Prompt)
				if math.Abs(rec.FirstToken.Entropy-target) > 1e-5 || EntropyCluster(rec.FirstToken.Entropy) != EntropyClusters[c] {
					t.Fatalf("%s profile %d: request %d: entropy %v (%s), want %v (%s)", endpoint, pi, rec.Index, rec.FirstToken.Entropy, EntropyCluster(rec.FirstToken.Entropy), target, EntropyClusters[c])
				}
				counts[EntropyClusters[c]]++
			}
			pe := res.PromptEntropy()
			if pe == nil || pe.K != 5 || pe.N != len(reqs) || pe.Missing != 0 || math.Abs(pe.MeanTopKMass-0.9) > 1e-5 {
				t.Fatalf("%s profile %d: summary %+v", endpoint, pi, pe)
			}
			for _, c := range EntropyClusters {
				if pe.Counts[c] != counts[c] || pe.Clusters[c] != float64(counts[c])/float64(len(reqs)) {
					t.Errorf("%s profile %d: %s %d (%.3f), want %d", endpoint, pi, c, pe.Counts[c], pe.Clusters[c], counts[c])
				}
			}
			t.Logf("%s profile %v: clusters %v, mean %.3f", endpoint, prof, pe.Counts, pe.Mean)
			var buf bytes.Buffer
			if err := res.WriteJSON(&buf); err != nil {
				t.Fatal(err)
			}
			var doc struct {
				PromptEntropy *PromptEntropy `json:"prompt_entropy"`
			}
			if err := json.Unmarshal(buf.Bytes(), &doc); err != nil || doc.PromptEntropy == nil || doc.PromptEntropy.Counts[EntropyHigh] != counts[EntropyHigh] {
				t.Fatalf("result JSON prompt_entropy: %v %+v", err, doc.PromptEntropy)
			}
		}
	}
}

// Without --logprobs the result has no prompt_entropy, and the requests
// ask for none.
func TestPromptEntropyOff(t *testing.T) {
	url := simtest.Start(t, func(c *sim.Config) { c.DecodeStep = time.Millisecond })
	cfg := DefaultConfig()
	cfg.Target.URL, cfg.Scenario.Requests = url, driftRequests(4)
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if pe := res.PromptEntropy(); pe != nil || res.Records[0].FirstToken != nil {
		t.Fatalf("summary %+v, record %+v", pe, res.Records[0].FirstToken)
	}
	if _, ok := res.JSON()["prompt_entropy"]; ok {
		t.Error("prompt_entropy in the result")
	}
}
