package diff

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/llmsim/sim"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/transport"
	"github.com/bpfbench/bpfbench/result"
)

// simRun runs the requests against an in-process llmsim answering prof's
// synthetic logprobs, and writes its result.json.
func simRun(t *testing.T, dir string, prof sim.LogprobsProfile, reqs []loadgen.Request, endpoint string, k int) string {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Work, cfg.EOSProb, cfg.BatchSlowdown = sim.WorkSleep, 0, 0
	cfg.DecodeStep, cfg.PrefillBase, cfg.PrefillPerToken = time.Millisecond, 0, 0
	cfg.Logprobs = prof
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer func() { ts.CloseClientConnections(); ts.Close(); s.Close() }()
	lc := loadgen.DefaultConfig()
	lc.Target.URL, lc.Target.Endpoint, lc.Scenario.Requests, lc.Target.Logprobs, lc.Scenario.MaxConcurrency = ts.URL, endpoint, reqs, k, 16
	res, err := loadgen.Run(context.Background(), lc)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "result.json")
	if err := res.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// expectedShares are the clusters' shares of the prompts under prof, from
// llmsim's own assignment.
func expectedShares(prof sim.LogprobsProfile, reqs []loadgen.Request) [3]float64 {
	var f [3]float64
	for _, r := range reqs {
		_, c := prof.TargetEntropy(r.Prompt)
		f[c] += 1 / float64(len(reqs))
	}
	return f
}

// Two llmsim runs with known distributions of the prompts' entropy: the
// diff recovers each cluster's share in both and warns of the drift with
// the right figures, in text and JSON.
func TestPromptEntropyDrift(t *testing.T) {
	reqs := make([]loadgen.Request, 150)
	for i := range reqs {
		reqs[i] = loadgen.Request{Prompt: fmt.Sprintf("prompt %d: summarise the report of quarter %d", i, i%4), PromptLen: 10, OutputLen: 2}
	}
	low := sim.LogprobsProfile{Low: 0.8, Mid: 0.08, High: 0.12}
	high := sim.LogprobsProfile{Low: 0.21, Mid: 0.2, High: 0.59}
	pa := simRun(t, t.TempDir(), low, reqs, transport.EndpointCompletions, 5)
	pb := simRun(t, t.TempDir(), high, reqs, transport.EndpointChat, 5)
	d := Compare(load(t, pa), load(t, pb))
	s := d.PromptEntropy
	if s == nil || s.NotMeasured != "" || len(s.Clusters) != 3 || s.A.N != len(reqs) || s.B.N != len(reqs) {
		t.Fatalf("prompt entropy %+v", s)
	}
	ea, eb := expectedShares(low, reqs), expectedShares(high, reqs)
	var warned int
	for i, c := range s.Clusters {
		if c.Cluster != entropyClusters[i] || math.Abs(c.A-ea[i]) > 1e-9 || math.Abs(c.B-eb[i]) > 1e-9 {
			t.Errorf("%s: %.4f → %.4f, want %.4f → %.4f", c.Cluster, c.A, c.B, ea[i], eb[i])
		}
		want := math.Abs(eb[i]-ea[i])*100 > DriftPoints
		if c.Drift != want {
			t.Errorf("%s: drift %v, want %v (%+.1f points)", c.Cluster, c.Drift, want, c.Points)
		}
		if want {
			warned++
			msg := fmt.Sprintf("%s-entropy prompts %.0f%% → %.0f%% (%+.0f points", c.Cluster, ea[i]*100, eb[i]*100, (eb[i]-ea[i])*100)
			if !strings.Contains(strings.Join(d.Warnings, "\n"), msg) {
				t.Errorf("no warning %q in %q", msg, d.Warnings)
			}
		}
	}
	if !s.Clusters[2].Drift || !s.Clusters[0].Drift || warned != len(d.Warnings) {
		t.Fatalf("expected drift in low and high, one warning each: %+v, warnings %q", s.Clusters, d.Warnings)
	}
	var buf bytes.Buffer
	if err := d.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Log("\n" + out)
	for _, want := range []string{"warning: prompt-distribution drift: high-entropy prompts", "prompt entropy, first token's top-K", "DRIFT", "drift in low, high"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q", want)
		}
	}
	buf.Reset()
	if err := d.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var j struct {
		PromptEntropy struct {
			Threshold float64        `json:"threshold_points"`
			Clusters  []ClusterShift `json:"clusters"`
			A         EntropyRun     `json:"a"`
		} `json:"prompt_entropy"`
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal(buf.Bytes(), &j); err != nil {
		t.Fatal(err)
	}
	if j.PromptEntropy.Threshold != DriftPoints || len(j.PromptEntropy.Clusters) != 3 || j.PromptEntropy.A.K != 5 || len(j.Warnings) != warned {
		t.Errorf("JSON: %s", buf.Bytes())
	}

	// The same profile twice, at another K: no drift, but a note that the
	// truncations differ.
	pc := simRun(t, t.TempDir(), low, reqs, transport.EndpointCompletions, 10)
	d = Compare(load(t, pa), load(t, pc))
	for _, c := range d.PromptEntropy.Clusters {
		if c.Drift || c.Points != 0 {
			t.Errorf("same profile: %+v", c)
		}
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "top 5 logprobs, B for the top 10") {
		t.Errorf("warnings %q", d.Warnings)
	}
}

// Runs without prompt entropy say so.
func TestPromptEntropyNotMeasured(t *testing.T) {
	dir := t.TempDir()
	pa := run{seed: 1, n: 20, ttftMs: 50, itlMs: 10}.write(t, filepath.Join(dir, "a"))
	pb := run{seed: 2, n: 20, ttftMs: 50, itlMs: 10}.write(t, filepath.Join(dir, "b"))
	d := Compare(load(t, pa), load(t, pb))
	if d.PromptEntropy == nil || d.PromptEntropy.NotMeasured != "not measured (neither run was made with --logprobs)" {
		t.Fatalf("%+v", d.PromptEntropy)
	}
	var buf bytes.Buffer
	_ = d.WriteText(&buf)
	if !strings.Contains(buf.String(), "prompt entropy: not measured (neither run was made with --logprobs)") {
		t.Errorf("text:\n%s", buf.String())
	}
	// One run with it, one that asked but got none.
	a, b := load(t, pa), load(t, pb)
	a.Doc.PromptEntropy = &result.Entropy{K: 5, N: 20, Mean: 0.5, P50: 0.5, Clusters: map[string]float64{"low": 0.5, "mid": 0, "high": 0.5}}
	b.Doc.PromptEntropy = &result.Entropy{K: 5, N: 0}
	d = Compare(a, b)
	if got := d.PromptEntropy.NotMeasured; got != "not measured in B (top-5 logprobs asked for, but no response carried them): no drift report" {
		t.Errorf("not measured: %q", got)
	}
	// A prompt_entropy that is not one is refused by the reader, naming it.
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"completed": 3, "prompt_entropy": [1]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := Load(bad); err == nil || !strings.Contains(err.Error(), "prompt_entropy") {
		t.Errorf("Load of an unreadable prompt_entropy = %v, %v; want an error naming it", r, err)
	}
}
