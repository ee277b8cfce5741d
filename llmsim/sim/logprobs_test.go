package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
)

// renormalizedEntropy is the load generator's definition, written again.
func renormalizedEntropy(lps []float64) float64 {
	sum := 0.0
	for _, lp := range lps {
		sum += math.Exp(lp)
	}
	h := 0.0
	for _, lp := range lps {
		p := math.Exp(lp) / sum
		h -= p * math.Log(p)
	}
	return h / math.Log(float64(len(lps)))
}

func TestLogprobsProfileParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want LogprobsProfile
		str  string
	}{
		{"low", LogprobsProfile{Low: 1}, "low"},
		{"high", LogprobsProfile{High: 1}, "high"},
		{"mixed", LogprobsProfile{1.0 / 3, 1.0 / 3, 1.0 / 3}, "mixed"},
		{"low=8,mid=1,high=1", LogprobsProfile{0.8, 0.1, 0.1}, "low=0.8,mid=0.1,high=0.1"},
		{"high=0.5,low=0.5", LogprobsProfile{Low: 0.5, High: 0.5}, "low=0.5,mid=0,high=0.5"},
	} {
		var p LogprobsProfile
		if err := p.Set(tc.in); err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if math.Abs(p.Low-tc.want.Low)+math.Abs(p.Mid-tc.want.Mid)+math.Abs(p.High-tc.want.High) > 1e-12 || p.String() != tc.str {
			t.Errorf("%q: %+v %q, want %+v %q", tc.in, p, p.String(), tc.want, tc.str)
		}
	}
	for _, bad := range []string{"medium", "low=x", "low=-1", "low=0,mid=0", "top=1"} {
		var p LogprobsProfile
		if err := p.Set(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// Every prompt's distribution has the entropy of its cluster's range, the
// same each time, and the clusters come in the profile's proportions.
func TestTopLogprobsEntropy(t *testing.T) {
	p := LogprobsProfile{0.2, 0.3, 0.5}
	var counts [3]int
	const n = 3000
	for i := range n {
		prompt := fmt.Sprintf("prompt %d", i)
		target, c := p.TargetEntropy(prompt)
		counts[c]++
		if r := clusterRange[c]; target < r[0] || target > r[1] {
			t.Fatalf("%s: target %v outside cluster %d %v", prompt, target, c, r)
		}
		for _, k := range []int{2, 5, 20} {
			lps := p.TopLogprobs(prompt, k)
			if len(lps) != k {
				t.Fatalf("%d values, want %d", len(lps), k)
			}
			mass := 0.0
			for j, lp := range lps {
				mass += math.Exp(lp)
				if j > 0 && lp > lps[j-1] {
					t.Fatalf("not highest first: %v", lps)
				}
			}
			if h := renormalizedEntropy(lps); math.Abs(h-target) > 1e-6 || math.Abs(mass-topMass) > 1e-9 {
				t.Fatalf("%s k=%d: entropy %v mass %v, want %v %v", prompt, k, h, mass, target, topMass)
			}
		}
	}
	for c, want := range []float64{0.2, 0.3, 0.5} {
		if got := float64(counts[c]) / n; math.Abs(got-want) > 0.04 {
			t.Errorf("cluster %d: %.3f of the prompts, want about %.2f", c, got, want)
		}
	}
}

// Both endpoints answer logprobs in OpenAI's formats; none when not asked.
func TestStreamLogprobs(t *testing.T) {
	_, url := start(t, func(c *Config) { c.Logprobs = LogprobsProfile{High: 1} })
	want := LogprobsProfile{High: 1}.TopLogprobs("hello there", 5)
	for _, tc := range []struct{ path, body string }{
		{"/v1/completions", `{"prompt":"hello there","max_tokens":3,"stream":true,"logprobs":5}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hello there"}],"max_tokens":3,"stream":true,"logprobs":true,"top_logprobs":5}`},
	} {
		status, _, data := post(t, url+tc.path, tc.body, nil)
		if status != http.StatusOK || len(data) < 3 {
			t.Fatalf("%s: status %d, %d chunks", tc.path, status, len(data))
		}
		var c struct {
			Choices []struct {
				Logprobs struct {
					TopLogprobs []map[string]float64 `json:"top_logprobs"`
					Content     []struct {
						Token       string `json:"token"`
						TopLogprobs []struct {
							Token   string  `json:"token"`
							Logprob float64 `json:"logprob"`
						} `json:"top_logprobs"`
					} `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data[0]), &c); err != nil {
			t.Fatalf("%s: %v: %s", tc.path, err, data[0])
		}
		var got []float64
		lp := c.Choices[0].Logprobs
		if strings.Contains(tc.path, "chat") {
			for _, e := range lp.Content[0].TopLogprobs {
				got = append(got, e.Logprob)
			}
		} else {
			for _, v := range lp.TopLogprobs[0] {
				got = append(got, v)
			}
		}
		if len(got) != 5 || math.Abs(renormalizedEntropy(got)-renormalizedEntropy(want)) > 1e-9 {
			t.Errorf("%s: %v, want %v", tc.path, got, want)
		}
	}
	_, _, data := post(t, url+"/v1/completions", `{"prompt":"hello","max_tokens":2,"stream":true}`, nil)
	if !strings.Contains(data[0], `"logprobs":null`) {
		t.Errorf("not asked, got %s", data[0])
	}
	status, _, _ := post(t, url+"/v1/completions", `{"prompt":"hello","max_tokens":2,"stream":true,"logprobs":21}`, nil)
	if status != http.StatusBadRequest {
		t.Errorf("21 logprobs: status %d, want 400", status)
	}
	status, _, data = post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"stream":true,"logprobs":true}`, nil)
	if status != http.StatusOK || !strings.Contains(data[0], `"top_logprobs":[]`) {
		t.Errorf("chat without top_logprobs: status %d, %s", status, data[0])
	}
}
