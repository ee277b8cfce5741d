package dataset

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// RAGConfig shapes the rag dataset: long-context requests as a
// retrieval-augmented application sends them. Each request is a prefix (a
// system prompt and document), K retrieved passages and a question, in
// that order, words separated by single spaces (so a request's token count
// is exact in the same sense as the random dataset's: every word is one
// token of common tokenizers, and a shared prefix tokenizes identically in
// every request that carries it).
type RAGConfig struct {
	// PrefixLen is the prefix's length in tokens.
	PrefixLen int
	// Prefixes is the number of distinct shared prefixes (1 or more);
	// Shared the fraction of requests that carry one of them: exactly
	// round(Shared*n) requests, chosen with the seed, taking the prefixes in
	// turn. The other requests carry a prefix of their own, of the same
	// length, so that the fraction changes what a prefix cache can reuse
	// and nothing else.
	Prefixes int
	Shared   float64
	// Passages is K, the passages per request. Their lengths are lognormal
	// with mean PassageLen and shape PassageSigma (the sigma of the log),
	// rounded, at least 1; or drawn from PassageLenFile (see Lengths).
	Passages       int
	PassageLen     int
	PassageSigma   float64
	PassageLenFile string
	// QuestionLen is the length of the question that ends each request.
	QuestionLen int
}

// DefaultRAG is the rag dataset's shape by default: one 1024-token prefix
// shared by every request, 4 passages of 256 tokens on average and a
// 32-token question.
func DefaultRAG() RAGConfig {
	return RAGConfig{PrefixLen: 1024, Prefixes: 1, Shared: 1, Passages: 4, PassageLen: 256, PassageSigma: 0.5, QuestionLen: 32}
}

// withDefaults fills what cannot be zero.
func (r RAGConfig) withDefaults() RAGConfig {
	r.Prefixes = max(r.Prefixes, 1)
	r.PassageLen = max(r.PassageLen, 1)
	return r
}

func (r RAGConfig) validate() error {
	switch {
	case r.PrefixLen < 0 || r.Passages < 0 || r.QuestionLen < 0:
		return errors.New("rag dataset: lengths and the passage count must not be negative")
	case r.Shared < 0 || r.Shared > 1 || math.IsNaN(r.Shared):
		return fmt.Errorf("rag dataset: --rag-shared %v: want a fraction in [0, 1]", r.Shared)
	case r.PassageSigma < 0 || math.IsNaN(r.PassageSigma):
		return fmt.Errorf("rag dataset: --rag-passage-sigma %v: must not be negative", r.PassageSigma)
	}
	return nil
}

// loadRAG generates n rag requests from seed. With cfg.InputLenFile, each
// request's whole input length is taken from the file and the passages
// share what the prefix and the question leave, in proportion to their
// drawn lengths.
func loadRAG(cfg Config, n int, seed uint64) ([]transport.Request, error) {
	if n <= 0 {
		return nil, errors.New("rag dataset: the number of requests is unknown")
	}
	r := cfg.RAG.withDefaults()
	if err := r.validate(); err != nil {
		return nil, err
	}
	var totals, passageLens *Lengths
	var err error
	if cfg.InputLenFile != "" {
		if totals, err = ReadLengths(cfg.InputLenFile, seed); err != nil {
			return nil, fmt.Errorf("rag dataset: --input-len-file: %w", err)
		}
	}
	if r.PassageLenFile != "" {
		if passageLens, err = ReadLengths(r.PassageLenFile, seed^0x70617373); err != nil {
			return nil, fmt.Errorf("rag dataset: --rag-passage-len-file: %w", err)
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0x726167))
	prefixes := make([]string, r.Prefixes)
	for i := range prefixes {
		prefixes[i] = RandomPrompt(rng, r.PrefixLen)
	}
	prefixOf := make([]int, n) // the shared prefix of each request, -1 for its own
	for i := range prefixOf {
		prefixOf[i] = -1
	}
	for j, i := range rng.Perm(n)[:int(math.Round(r.Shared*float64(n)))] {
		prefixOf[i] = j % r.Prefixes
	}
	mu := math.Log(float64(r.PassageLen)) - r.PassageSigma*r.PassageSigma/2
	reqs := make([]transport.Request, n)
	lens := make([]int, r.Passages)
	for i := range reqs {
		prefix := ""
		if prefixOf[i] >= 0 {
			prefix = prefixes[prefixOf[i]]
		} else {
			prefix = RandomPrompt(rng, r.PrefixLen)
		}
		for k := range lens {
			if passageLens != nil {
				lens[k] = passageLens.At(i*r.Passages + k)
			} else {
				lens[k] = max(1, int(math.Round(math.Exp(mu+r.PassageSigma*rng.NormFloat64()))))
			}
		}
		question := r.QuestionLen
		if totals != nil {
			want := totals.At(i)
			rest := want - r.PrefixLen - r.QuestionLen
			if rest < 0 {
				return nil, fmt.Errorf("rag dataset: input length %d (request %d, from %s) is shorter than the prefix (%d) and the question (%d): lower --rag-prefix-len or --rag-question-len",
					want, i, cfg.InputLenFile, r.PrefixLen, r.QuestionLen)
			}
			if len(lens) == 0 {
				question += rest
			} else {
				apportion(lens, rest)
			}
		}
		parts := make([]string, 0, len(lens)+2)
		total := r.PrefixLen + question
		parts = append(parts, prefix)
		for _, l := range lens {
			parts = append(parts, RandomPrompt(rng, l))
			total += l
		}
		parts = append(parts, RandomPrompt(rng, question))
		reqs[i] = transport.Request{Prompt: joinNonEmpty(parts), PromptLen: total, OutputLen: sampleLen(rng, max(cfg.OutputLen, 1), cfg.RangeRatio), OffsetNs: -1}
	}
	return reqs, nil
}

// joinNonEmpty joins the non-empty parts with single spaces.
func joinNonEmpty(parts []string) string {
	var b strings.Builder
	for _, p := range parts {
		if p == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(p)
	}
	return b.String()
}

// apportion rescales the weights w in place to integers summing to total,
// by largest remainder (ties to the earlier index).
func apportion(w []int, total int) {
	sum := 0
	for _, x := range w {
		sum += x
	}
	if sum == 0 {
		for i := range w {
			w[i] = 1
		}
		sum = len(w)
	}
	type rem struct {
		i int
		r int64
	}
	rems := make([]rem, len(w))
	left := total
	for i, x := range w {
		q := int64(total) * int64(x)
		w[i] = int(q / int64(sum))
		rems[i] = rem{i, q % int64(sum)}
		left -= w[i]
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for k := 0; k < left; k++ {
		w[rems[k].i]++
	}
}
