package loadgen

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/bpfbench/bpfbench/loadgen/metrics"

	"github.com/bpfbench/bpfbench/result"
)

// Prompt entropy (--logprobs K): the load generator asks for the top-K
// log-probabilities of every generated token (OpenAI's "logprobs") and keeps
// those of the first one, whose spread says how uncertain the model was
// about how to start answering the prompt. Its normalised entropy is
//
//	p_i = exp(lp_i) / Σ_j exp(lp_j)   (the top K renormalised)
//	H   = −Σ p_i ln p_i / ln n         (n: the values the server returned, K)
//
// in [0, 1]: 0 when one candidate takes all the top-K mass, 1 when the K are
// equally likely. Truncation bias: the mass outside the top K is dropped, so
// H measures the spread among the K best candidates, not the entropy over
// the vocabulary. It saturates at 1 for any distribution flatter than K
// equal candidates, and a long flat tail after one dominant token leaves it
// low; a larger K sees more of the tail. Figures of two runs are therefore
// comparable only for the same K (bpfbench diff says when they differ), and
// the summary reports the mean top-K mass (Σ exp(lp_i)) so the dropped tail
// is visible.
//
// Prompts are put in three clusters by fixed thresholds, so that runs and
// datasets are compared on the same scale (a k-means per run would move
// the boundaries with the data): low H < 1/3, mid 1/3 ≤ H < 2/3, high
// H ≥ 2/3.
const (
	EntropyLowBelow = 1.0 / 3 // H below it: a low-entropy prompt
	EntropyHighFrom = 2.0 / 3 // H from it: a high-entropy prompt
)

// Entropy clusters.
const (
	EntropyLow  = "low"
	EntropyMid  = "mid"
	EntropyHigh = "high"
)

// EntropyClusters are the clusters, low to high.
var EntropyClusters = []string{EntropyLow, EntropyMid, EntropyHigh}

// EntropyCluster is the cluster of a normalised entropy.
func EntropyCluster(h float64) string {
	switch {
	case h < EntropyLowBelow:
		return EntropyLow
	case h < EntropyHighFrom:
		return EntropyMid
	}
	return EntropyHigh
}

// logprobsFlag is --logprobs K: 0 (off) or at least 2.
type logprobsFlag struct{ p *int }

func (f logprobsFlag) String() string {
	if f.p == nil {
		return "0"
	}
	return strconv.Itoa(*f.p)
}

func (f logprobsFlag) Set(s string) error {
	k, err := strconv.Atoi(s)
	if err != nil || k < 0 || k == 1 {
		return fmt.Errorf("logprobs %q: want 0 (off) or a K of at least 2 (the entropy of one value is undefined)", s)
	}
	*f.p = k
	return nil
}

// PromptEntropy summarises the first-token entropy of a run's successful
// measured requests (the result's "prompt_entropy": result.Entropy).
type PromptEntropy = result.Entropy

// PromptEntropy summarises the run's prompt entropy; nil when --logprobs
// was off and no record carries log-probabilities.
func (r *Result) PromptEntropy() *PromptEntropy {
	pe := &PromptEntropy{K: r.Config.Target.Logprobs, Clusters: map[string]float64{}, Counts: map[string]int{}}
	pe.Thresholds.LowBelow, pe.Thresholds.HighFrom = EntropyLowBelow, EntropyHighFrom
	var hs []float64
	mass := 0.0
	for i := range r.Records {
		rec := &r.Records[i]
		if !rec.Success {
			continue
		}
		if rec.FirstToken == nil {
			pe.Missing++
			continue
		}
		h := rec.FirstToken.Entropy
		hs = append(hs, h)
		pe.Counts[EntropyCluster(h)]++
		for _, lp := range rec.FirstToken.Top {
			mass += math.Exp(float64(lp))
		}
	}
	if pe.K == 0 && len(hs) == 0 {
		return nil
	}
	pe.N = len(hs)
	if pe.N == 0 {
		return pe
	}
	sort.Float64s(hs)
	sum := 0.0
	for _, h := range hs {
		sum += h
	}
	pe.Mean = sum / float64(pe.N)
	pe.P50 = metrics.Percentile(hs, 50)
	pe.MeanTopKMass = mass / float64(pe.N)
	for _, c := range EntropyClusters {
		pe.Counts[c] += 0
		pe.Clusters[c] = float64(pe.Counts[c]) / float64(pe.N)
	}
	return pe
}
