package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/tools/llmsim/sim"
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
		if got := NormalizedEntropy(tc.lps); math.Abs(got-tc.want) > 1e-6 {
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
const (
	completionsLogprobsChunk = `{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" Paris","logprobs":{"text_offset":[0],"token_logprobs":[-0.3],"tokens":[" Paris"],"top_logprobs":[{" Paris":-0.3," Lyon":-2.1," the":-2.5}]},"finish_reason":null,"stop_reason":null}]}`
	chatRoleChunk            = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`
	chatLogprobsChunk        = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":{"content":[{"token":"Hi","logprob":-0.5,"bytes":[72,105],"top_logprobs":[{"token":"Hello","logprob":-1.2,"bytes":[72]},{"token":"Hi","logprob":-0.5,"bytes":[72,105]}]}],"refusal":null},"finish_reason":null}]}`
)

func TestParseFirstTokenLogprobs(t *testing.T) {
	for _, tc := range []struct {
		name, chunk string
		want        []float32
	}{
		{"completions", completionsLogprobsChunk, []float32{-0.3, -2.1, -2.5}},
		{"chat", chatLogprobsChunk, []float32{-0.5, -1.2}},
		{"chat role chunk", chatRoleChunk, nil},
		{"completions without", benchChunk, nil},
		{"chat without top", `{"choices":[{"delta":{"content":"a"},"logprobs":{"content":[{"token":"a","logprob":-1,"top_logprobs":[]}]}}]}`, nil},
		{"completions null top", `{"choices":[{"text":"a","logprobs":{"tokens":["a"],"token_logprobs":[-1],"top_logprobs":null}}]}`, nil},
		{"not JSON", `{"choices":[{"top_logprobs":`, nil},
	} {
		got := parseFirstTokenLogprobs([]byte(tc.chunk))
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The stream keeps the first token's logprobs, after a role-only chunk.
func TestStreamFirstTokenLogprobs(t *testing.T) {
	later := strings.Replace(chatLogprobsChunk, `"logprob":-1.2`, `"logprob":-0.5`, 1)
	body := "data: " + chatRoleChunk + "\n\ndata: " + chatLogprobsChunk + "\n\ndata: " + later + "\n\ndata: [DONE]\n\n"
	var rec Record
	var s streamState
	s.reset(&rec, true)
	s.feed([]byte(body), 1)
	s.complete()
	if !rec.Success || rec.FirstToken == nil {
		t.Fatalf("success %v, first token %+v: %s", rec.Success, rec.FirstToken, rec.Error)
	}
	if fmt.Sprint(rec.FirstToken.Top) != "[-0.5 -1.2]" || math.Abs(rec.FirstToken.Entropy-NormalizedEntropy([]float32{-0.5, -1.2})) > 1e-12 {
		t.Errorf("first token %+v", rec.FirstToken)
	}
	b, _ := json.Marshal(&rec)
	if !bytes.Contains(b, []byte(`"first_token_logprobs":{"top":[-0.5,-1.2],"entropy":`)) {
		t.Errorf("record JSON: %s", b)
	}
}

func TestLogprobsBodyAndFlag(t *testing.T) {
	extra := map[string]any{"seed": 3}
	c := Config{Endpoint: EndpointCompletions, Logprobs: 5, ExtraBody: extra}
	if got := fmt.Sprint(c.logprobsBody()); got != "map[logprobs:5 seed:3]" {
		t.Errorf("completions: %s", got)
	}
	c.Endpoint = EndpointChat
	if got := fmt.Sprint(c.logprobsBody()); got != "map[logprobs:true seed:3 top_logprobs:5]" {
		t.Errorf("chat: %s", got)
	}
	if len(extra) != 1 {
		t.Errorf("ExtraBody changed: %v", extra)
	}
	c.Logprobs = 0
	if got := c.logprobsBody(); fmt.Sprint(got) != "map[seed:3]" {
		t.Errorf("off: %v", got)
	}
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
	for _, endpoint := range []string{EndpointCompletions, EndpointChat} {
		for pi, prof := range driftProfiles {
			url := startSim(t, func(c *sim.Config) {
				c.DecodeStep = time.Millisecond
				c.PrefillBase = 0
				c.PrefillPerToken = 0
				c.Logprobs = prof
			})
			cfg := DefaultConfig()
			cfg.Target, cfg.Endpoint, cfg.Requests, cfg.Logprobs = url, endpoint, reqs, 5
			cfg.MaxConcurrency = 16
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
	url := startSim(t, func(c *sim.Config) { c.DecodeStep = time.Millisecond })
	cfg := DefaultConfig()
	cfg.Target, cfg.Requests = url, driftRequests(4)
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
