package sim

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
)

// MaxLogprobs is the largest top-K llmsim answers (vLLM's default
// max_logprobs).
const MaxLogprobs = 20

// LogprobsProfile says how the synthetic first-token distributions of the
// prompts spread over the three entropy clusters: each prompt falls in one
// by the hash of its text (FNV-1a, then splitmix64's finaliser), with these
// probabilities, and gets a normalised entropy inside it (also from the
// hash), so that the same prompt always gets the same distribution. The clusters are the load
// generator's (low below 1/3, high from 2/3); the targets stay inside
// [0.05, 0.28], [0.40, 0.60] and [0.72, 0.95], away from the boundaries.
type LogprobsProfile struct {
	Low, Mid, High float64
}

// The targets' range per cluster.
var clusterRange = [3][2]float64{{0.05, 0.28}, {0.40, 0.60}, {0.72, 0.95}}

// String is the profile as --logprobs-profile takes it.
func (p LogprobsProfile) String() string {
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	switch {
	case near(p.Low, 1):
		return "low"
	case near(p.Mid, 1):
		return "mid"
	case near(p.High, 1):
		return "high"
	case near(p.Low, 1.0/3) && near(p.Mid, 1.0/3) && near(p.High, 1.0/3):
		return "mixed"
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return "low=" + f(p.Low) + ",mid=" + f(p.Mid) + ",high=" + f(p.High)
}

// Set parses low, mid, high (every prompt in that cluster), mixed (a third
// each) or low=F,mid=F,high=F (fractions, normalised to their sum).
func (p *LogprobsProfile) Set(s string) error {
	switch s {
	case "low":
		*p = LogprobsProfile{Low: 1}
		return nil
	case "mid":
		*p = LogprobsProfile{Mid: 1}
		return nil
	case "high":
		*p = LogprobsProfile{High: 1}
		return nil
	case "mixed", "":
		*p = LogprobsProfile{1, 1, 1}
		p.normalize()
		return nil
	}
	var q LogprobsProfile
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || f < 0 || math.IsInf(f, 0) {
			return fmt.Errorf("logprobs profile %q: use low, mid, high, mixed or low=F,mid=F,high=F with F ≥ 0", s)
		}
		switch k {
		case "low":
			q.Low = f
		case "mid":
			q.Mid = f
		case "high":
			q.High = f
		default:
			return fmt.Errorf("logprobs profile %q: unknown cluster %q (low, mid, high)", s, k)
		}
	}
	if q.Low+q.Mid+q.High <= 0 {
		return fmt.Errorf("logprobs profile %q: the fractions sum to 0", s)
	}
	q.normalize()
	*p = q
	return nil
}

func (p *LogprobsProfile) normalize() {
	t := p.Low + p.Mid + p.High
	p.Low, p.Mid, p.High = p.Low/t, p.Mid/t, p.High/t
}

// TargetEntropy is the normalised entropy the profile gives a prompt, and
// its cluster (0 low, 1 mid, 2 high).
func (p LogprobsProfile) TargetEntropy(prompt string) (float64, int) {
	h := fnv.New64a()
	h.Write([]byte(prompt))
	x := h.Sum64()
	// FNV's high bits barely move with a prompt's last bytes: splitmix64's
	// finaliser mixes them.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	u1 := float64(x>>40) / (1 << 24)       // the cluster
	u2 := float64(x&(1<<24-1)) / (1 << 24) // the place inside it
	c := 2
	switch {
	case u1 < p.Low:
		c = 0
	case u1 < p.Low+p.Mid:
		c = 1
	}
	r := clusterRange[c]
	return r[0] + u2*(r[1]-r[0]), c
}

// topMass is the share of the probability the synthetic top K carry: the
// rest is the vocabulary's tail, which the client's renormalisation drops.
const topMass = 0.9

// TopLogprobs is the synthetic top-k distribution of a prompt's first
// token: k logprobs, highest first, p_i ∝ exp(−β i) scaled to topMass, with
// β chosen so that the renormalised distribution's entropy over ln k is
// the prompt's TargetEntropy.
func (p LogprobsProfile) TopLogprobs(prompt string, k int) []float64 {
	if k < 1 {
		return nil
	}
	target, _ := p.TargetEntropy(prompt)
	lps := make([]float64, k)
	if k == 1 {
		lps[0] = math.Log(topMass)
		return lps
	}
	// The entropy of the geometric distribution falls from 1 (β = 0) to 0
	// as β grows: bisect.
	lo, hi := 0.0, 64.0
	for range 100 {
		mid := (lo + hi) / 2
		if geometricEntropy(mid, k) > target {
			lo = mid
		} else {
			hi = mid
		}
	}
	beta := (lo + hi) / 2
	z := 0.0
	for i := range k {
		z += math.Exp(-beta * float64(i))
	}
	for i := range k {
		lps[i] = -beta*float64(i) - math.Log(z) + math.Log(topMass)
	}
	return lps
}

// geometricEntropy is the normalised entropy of p_i ∝ exp(−β i), i < k.
func geometricEntropy(beta float64, k int) float64 {
	z := 0.0
	for i := range k {
		z += math.Exp(-beta * float64(i))
	}
	h := 0.0
	for i := range k {
		p := math.Exp(-beta*float64(i)) / z
		if p > 0 {
			h -= p * math.Log(p)
		}
	}
	return h / math.Log(float64(k))
}

// requestLogprobs is the top-K a request asks for, or -1 when it asks for
// none: completions "logprobs": K; chat "logprobs": true with
// "top_logprobs": K (0 without it).
func requestLogprobs(req *apiRequest, chat bool) (int, error) {
	raw := strings.TrimSpace(string(req.Logprobs))
	if raw == "" || raw == "null" || raw == "false" {
		return -1, nil
	}
	k := 0
	switch {
	case chat && raw == "true":
		if req.TopLogprobs != nil {
			k = *req.TopLogprobs
		}
	case !chat:
		if err := json.Unmarshal(req.Logprobs, &k); err != nil {
			return 0, fmt.Errorf("logprobs %s: want an integer", raw)
		}
	default:
		return 0, fmt.Errorf("logprobs %s: want a boolean (and top_logprobs K)", raw)
	}
	if k < 0 || k > MaxLogprobs {
		return 0, fmt.Errorf("%d logprobs asked for: llmsim returns at most %d", k, MaxLogprobs)
	}
	return k, nil
}

// promptText is the text the profile hashes: the prompt string
// (completions; raw JSON for another shape), or the messages' contents
// joined by newlines (chat).
func promptText(req *apiRequest, chat bool) string {
	text := func(raw json.RawMessage) string {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		return string(raw)
	}
	if !chat {
		return text(req.Prompt)
	}
	parts := make([]string, len(req.Messages))
	for i, m := range req.Messages {
		parts[i] = text(m.Content)
	}
	return strings.Join(parts, "\n")
}

// appendLogprobs writes a token's "logprobs" object: the sampled token
// first (temperature 0 samples the most likely), alternatives after it.
// Every token of a stream repeats the prompt's first-token distribution.
// Only the sampled token is listed when top is 0 (lps holds one value then).
func appendLogprobs(b []byte, chat bool, tok string, lps []float64, top int) []byte {
	lps = lps[:max(top, 1)]
	alt := func(i int) string {
		if i == 0 {
			return tok
		}
		return " <alt" + strconv.Itoa(i) + ">"
	}
	num := func(b []byte, v float64) []byte { return strconv.AppendFloat(b, v, 'g', -1, 64) }
	if chat {
		b = append(b, `{"content":[{"token":`...)
		b = strconv.AppendQuote(b, tok)
		b = append(b, `,"logprob":`...)
		b = num(b, lps[0])
		b = append(b, `,"top_logprobs":[`...)
		for i, lp := range lps[:top] {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"token":`...)
			b = strconv.AppendQuote(b, alt(i))
			b = append(b, `,"logprob":`...)
			b = num(b, lp)
			b = append(b, '}')
		}
		return append(b, `]}],"refusal":null}`...)
	}
	b = append(b, `{"tokens":[`...)
	b = strconv.AppendQuote(b, tok)
	b = append(b, `],"token_logprobs":[`...)
	b = num(b, lps[0])
	if top == 0 {
		return append(b, `],"top_logprobs":null,"text_offset":[0]}`...)
	}
	b = append(b, `],"top_logprobs":[{`...)
	for i, lp := range lps {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, alt(i))
		b = append(b, ':')
		b = num(b, lp)
	}
	return append(b, `}],"text_offset":[0]}`...)
}
