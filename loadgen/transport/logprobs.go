package transport

import (
	"bytes"
	"encoding/json"
	"math"
	"sort"

	"github.com/bpfbench/bpfbench/result"
)

// The first token's log-probabilities (--logprobs K): the request asks for
// the top-K log-probabilities of every generated token (OpenAI's
// "logprobs") and the stream keeps those of the first one in its Record;
// loadgen summarises them per run (its logprobs.go says how).

// TokenLogprobs are the top-K log-probabilities (natural log) of a
// request's first generated token, highest first, and their normalised
// entropy (NormalizedEntropy); result.Logprobs, the type on the wire.
type TokenLogprobs = result.Logprobs

// NormalizedEntropy is the entropy of the renormalised top-K distribution
// over ln of the number of values, in [0, 1]; 0 for fewer than two values.
func NormalizedEntropy(lps []float32) float64 {
	if len(lps) < 2 {
		return 0
	}
	m := math.Inf(-1)
	for _, lp := range lps {
		m = math.Max(m, float64(lp))
	}
	if math.IsInf(m, 0) || math.IsNaN(m) {
		return 0
	}
	sum := 0.0
	for _, lp := range lps {
		sum += math.Exp(float64(lp) - m)
	}
	h := 0.0
	for _, lp := range lps {
		p := math.Exp(float64(lp)-m) / sum
		if p > 0 {
			h -= p * math.Log(p)
		}
	}
	return min(max(h/math.Log(float64(len(lps))), 0), 1)
}

// logprobsChunk is the part of a stream chunk that carries the first
// choice's log-probabilities, in both endpoints' formats.
type logprobsChunk struct {
	Choices []struct {
		Logprobs *struct {
			// completions: one map token → logprob per token of the chunk.
			TopLogprobs []map[string]float64 `json:"top_logprobs"`
			// chat: one entry per token, each with its top candidates.
			Content []struct {
				TopLogprobs []struct {
					Logprob float64 `json:"logprob"`
				} `json:"top_logprobs"`
			} `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
}

var topLogprobsKey = []byte(`"top_logprobs"`)

// parseFirstTokenLogprobs reads the top log-probabilities of the first token
// of a chunk: choices[0].logprobs.top_logprobs[0] (completions: a map token
// → logprob) or choices[0].logprobs.content[0].top_logprobs (chat: a list of
// {token, logprob}), highest first; nil when the chunk carries none.
func parseFirstTokenLogprobs(data []byte) []float32 {
	if !bytes.Contains(data, topLogprobsKey) {
		return nil
	}
	var c logprobsChunk
	if json.Unmarshal(data, &c) != nil || len(c.Choices) == 0 || c.Choices[0].Logprobs == nil {
		return nil
	}
	lp := c.Choices[0].Logprobs
	var out []float32
	switch {
	case len(lp.TopLogprobs) > 0 && len(lp.TopLogprobs[0]) > 0:
		for _, v := range lp.TopLogprobs[0] {
			out = append(out, float32(v))
		}
	case len(lp.Content) > 0 && len(lp.Content[0].TopLogprobs) > 0:
		for _, t := range lp.Content[0].TopLogprobs {
			out = append(out, float32(t.Logprob))
		}
	default:
		return nil
	}
	sort.Slice(out, func(i, j int) bool { return out[i] > out[j] })
	return out
}

// scanFirstTokenLogprobs is the stream's hook, called for the first output
// chunks of a request until one carries log-probabilities: it keeps them and
// their entropy in rec.FirstToken.
func scanFirstTokenLogprobs(data []byte, rec *Record) {
	if top := parseFirstTokenLogprobs(data); top != nil {
		rec.FirstToken = &TokenLogprobs{Top: top, Entropy: NormalizedEntropy(top)}
	}
}

// logprobsBody is the extra body of the requests: ExtraBody, with the
// fields that ask for the top-K log-probabilities when Logprobs is set
// (completions: "logprobs": K; chat: "logprobs": true, "top_logprobs": K).
// ExtraBody is copied, never changed; its own fields win.
func (c *Options) logprobsBody() map[string]any {
	if c.Logprobs <= 0 || c.Protocol == ProtocolKServeGRPC {
		return c.ExtraBody
	}
	m := make(map[string]any, len(c.ExtraBody)+2)
	if c.Endpoint == EndpointChat {
		m["logprobs"] = true
		m["top_logprobs"] = c.Logprobs
	} else {
		m["logprobs"] = c.Logprobs
	}
	for k, v := range c.ExtraBody {
		m[k] = v
	}
	return m
}
