// Package dataset makes the prompts of a load run: the random, jsonl,
// sharegpt, rag and multiturn datasets, traces and length files, and the
// descriptor (Info) a run's manifest keeps of them.
package dataset

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// Dataset names.
const (
	Random    = "random"
	JSONL     = "jsonl"
	ShareGPT  = "sharegpt"
	RAG       = "rag"       // long-context requests: shared prefix, passages, question (dataset_rag.go)
	Multiturn = "multiturn" // chat conversations replaying their history (dataset_multiturn.go)
)

// Config chooses the prompts.
//
// Token counts: bpfbench carries no tokenizer. The random dataset builds
// prompts of exactly InputLen words drawn from a vocabulary of single-token
// English words; for files, a prompt's length is the "input_len" field when
// present, else its number of whitespace-separated words (llmsim counts
// tokens the same way, so runs against it are exact). The rag and
// synthetic multiturn datasets build their texts as the random dataset
// does.
type Config struct {
	Name       string  // random (default), jsonl, sharegpt, rag or multiturn
	Path       string  // file for jsonl and sharegpt (and multiturn: ShareGPT conversations)
	InputLen   int     // random, synthetic multiturn: mean input length in tokens
	OutputLen  int     // random: mean output length; files: default when a record has none
	RangeRatio float64 // random: lengths uniform in [len*(1-r), len*(1+r)], as vLLM's --random-range-ratio
	// ShareGPTOutputLen overrides the output length of ShareGPT records (vLLM's --sharegpt-output-len).
	ShareGPTOutputLen int
	// InputLenFile draws the input lengths of the random and rag datasets
	// from a file (see Lengths): one integer a line, or a len,count CSV.
	InputLenFile string
	RAG          RAGConfig
	Multiturn    MultiturnConfig
}

// Synthetic reports whether the dataset's prompts are generated words, for
// which the output length is asked with ignore_eos.
func (cfg Config) Synthetic() bool {
	switch cfg.Name {
	case Random, "", RAG:
		return true
	case Multiturn:
		return cfg.Path == ""
	}
	return false
}

// Check reports a dataset configuration that cannot run on endpoint.
func (cfg Config) Check(endpoint string) error {
	switch cfg.Name {
	case Random, "", JSONL, ShareGPT:
	case RAG:
		if err := cfg.RAG.validate(); err != nil {
			return err
		}
	case Multiturn:
		if endpoint != transport.EndpointChat {
			return errors.New("the multiturn dataset sends chat conversations: pass --endpoint chat")
		}
		if r := cfg.Multiturn.ReplyMode(); r != RepliesServer && r != RepliesRecorded {
			return fmt.Errorf("multiturn replies %q: use server or recorded", r)
		}
		if t := cfg.Multiturn.Turns; t.Max != 0 && (t.Min < 1 || t.Max < t.Min) {
			return fmt.Errorf("turns %d-%d: want 1 <= MIN <= MAX", t.Min, t.Max)
		}
		if cfg.Multiturn.ThinkTime < 0 {
			return errors.New("--think-time must not be negative")
		}
	default:
		return fmt.Errorf("unknown dataset %q: use random, jsonl, sharegpt, rag or multiturn", cfg.Name)
	}
	if cfg.InputLenFile != "" && cfg.Name != Random && cfg.Name != "" && cfg.Name != RAG {
		return fmt.Errorf("--input-len-file applies to the random and rag datasets, not %s", cfg.Name)
	}
	return nil
}

var vocabulary = strings.Fields(`the of and to in is was for on are with as at be by this have from or one had
not but what all were when we there can an your which their said if do will each about how up out them then she
many some so these would other into has more her two like him see time could no make than first been its who now
people my made over did down only way find use may water long little very after words called just where most know
get through back much before go good new write our used me man too any day same right look think also around
another came come work three word must because does part even place well such here take why things help put years
different away again off went old number great tell men say small every found still between name should home big
give air line set own under read last never us left end along while might next sound below saw something thought
both few those always looked show large often together asked house world going want school important until form food
keep children feet land side without boy once animals life enough took sometimes four head above kind began almost
live page got earth need far hand high year mother light parts country father let night following picture being study`)

// Word returns the i-th vocabulary word, for synthetic prompts and outputs.
func Word(i int) string { return vocabulary[i%len(vocabulary)] }

// RandomPrompt returns n random vocabulary words separated by spaces.
func RandomPrompt(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n * 6)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocabulary[rng.IntN(len(vocabulary))])
	}
	return b.String()
}

// CountTokens estimates the tokens of s as its whitespace-separated words.
func CountTokens(s string) int { return len(strings.Fields(s)) }

func sampleLen(rng *rand.Rand, mean int, ratio float64) int {
	if ratio <= 0 {
		return max(mean, 1)
	}
	lo := int(math.Floor(float64(mean) * (1 - ratio)))
	hi := int(math.Ceil(float64(mean) * (1 + ratio)))
	lo = max(lo, 1)
	if hi < lo {
		hi = lo
	}
	return lo + rng.IntN(hi-lo+1)
}

// Load returns n requests (n > 0) or, with n == 0, every request of a
// file dataset. Short datasets are cycled. For the multiturn dataset it
// returns every turn's user message alone (LoadConversations gives the
// conversations).
func Load(cfg Config, n int, seed uint64) ([]transport.Request, error) {
	rng := rand.New(rand.NewPCG(seed, 0x64617461))
	var base []transport.Request
	switch cfg.Name {
	case Random, "":
		if n <= 0 {
			return nil, errors.New("random dataset: the number of requests is unknown")
		}
		in, out := max(cfg.InputLen, 1), max(cfg.OutputLen, 1)
		var lens *Lengths
		if cfg.InputLenFile != "" {
			var err error
			if lens, err = ReadLengths(cfg.InputLenFile, seed); err != nil {
				return nil, fmt.Errorf("random dataset: --input-len-file: %w", err)
			}
		}
		reqs := make([]transport.Request, n)
		for i := range reqs {
			var il int
			if lens != nil {
				il = lens.At(i)
			} else {
				il = sampleLen(rng, in, cfg.RangeRatio)
			}
			reqs[i] = transport.Request{Prompt: RandomPrompt(rng, il), PromptLen: il, OutputLen: sampleLen(rng, out, cfg.RangeRatio), OffsetNs: -1}
		}
		return reqs, nil
	case JSONL:
		var err error
		base, _, err = readJSONL(cfg.Path, cfg.OutputLen, rng, "")
		if err != nil {
			return nil, err
		}
	case ShareGPT:
		var err error
		base, err = readShareGPT(cfg.Path, cfg.ShareGPTOutputLen)
		if err != nil {
			return nil, err
		}
		rng.Shuffle(len(base), func(i, j int) { base[i], base[j] = base[j], base[i] })
	case RAG:
		return loadRAG(cfg, n, seed)
	case Multiturn:
		// Each turn's user message alone; Run sends them as conversations.
		convs, err := LoadConversations(cfg, n, seed)
		if err != nil {
			return nil, err
		}
		for _, c := range convs {
			for _, t := range c.Turns {
				base = append(base, transport.Request{Prompt: t.User, PromptLen: t.UserLen, OutputLen: t.OutputLen, OffsetNs: -1})
			}
		}
		return base, nil
	default:
		return nil, fmt.Errorf("unknown dataset %q: use random, jsonl, sharegpt, rag or multiturn", cfg.Name)
	}
	if len(base) == 0 {
		return nil, fmt.Errorf("dataset %s holds no usable prompt", cfg.Path)
	}
	if n <= 0 {
		return base, nil
	}
	reqs := make([]transport.Request, n)
	for i := range reqs {
		reqs[i] = base[i%len(base)]
	}
	return reqs, nil
}

// MaxPromptLen bounds an input length read from a prompts, trace or
// length file (4Mi tokens, about 25 MB of synthetic prompt): a larger one
// is a mistake in the file, and synthesizing it would exhaust memory.
const MaxPromptLen = 1 << 22

// jsonlRecord is one line of a prompts or trace file.
type jsonlRecord struct {
	Prompt    *string  `json:"prompt"`
	Text      *string  `json:"text"`
	InputLen  *int     `json:"input_len"`
	OutputLen *int     `json:"output_len"`
	MaxTokens *int     `json:"max_tokens"`
	Timestamp *float64 `json:"timestamp"`
}

// readJSONL reads a prompts file (one JSON object a line: "prompt" and/or
// "input_len", "output_len"); with unit set it is a trace and "timestamp"
// (in unit: s or ms) becomes each request's send offset.
func readJSONL(path string, defOut int, rng *rand.Rand, unit string) ([]transport.Request, bool, error) {
	return readJSONLHashed(path, defOut, rng, unit, nil)
}

// readJSONLHashed is readJSONL writing the file's bytes to h as it reads
// them (h nil: not).
func readJSONLHashed(path string, defOut int, rng *rand.Rand, unit string, h hash.Hash) ([]transport.Request, bool, error) {
	if path == "" {
		return nil, false, errors.New("jsonl dataset: no file: pass --dataset-path")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, false, fmt.Errorf("opening dataset: %w", err)
	}
	defer f.Close()
	var in io.Reader = f
	if h != nil {
		in = io.TeeReader(f, h)
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var reqs []transport.Request
	var t0 float64
	line := 0
	for sc.Scan() {
		line++
		b := strings.TrimSpace(sc.Text())
		if b == "" || strings.HasPrefix(b, "#") {
			continue
		}
		var r jsonlRecord
		if err := json.Unmarshal([]byte(b), &r); err != nil {
			return nil, false, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		q := transport.Request{OffsetNs: -1, OutputLen: max(defOut, 1)}
		if r.InputLen != nil && *r.InputLen > MaxPromptLen {
			return nil, false, fmt.Errorf("%s:%d: input_len %d is over the %d tokens a prompt may have", path, line, *r.InputLen, MaxPromptLen)
		}
		prompt := r.Prompt
		if prompt == nil {
			prompt = r.Text
		}
		switch {
		case prompt != nil:
			q.Prompt = *prompt
			q.PromptLen = CountTokens(q.Prompt)
			if r.InputLen != nil {
				q.PromptLen = max(*r.InputLen, 1)
			}
		case r.InputLen != nil:
			q.PromptLen = max(*r.InputLen, 1)
			q.Prompt = RandomPrompt(rng, q.PromptLen)
		default:
			return nil, false, fmt.Errorf("%s:%d: a record needs \"prompt\" or \"input_len\"", path, line)
		}
		if r.OutputLen != nil {
			q.OutputLen = max(*r.OutputLen, 1)
		} else if r.MaxTokens != nil {
			q.OutputLen = max(*r.MaxTokens, 1)
		}
		if unit != "" {
			if r.Timestamp == nil {
				return nil, false, fmt.Errorf("%s:%d: a trace record needs \"timestamp\"", path, line)
			}
			ts := *r.Timestamp
			if len(reqs) == 0 {
				t0 = ts
			}
			mult := 1e9
			if unit == "ms" {
				mult = 1e6
			}
			q.OffsetNs = int64((ts - t0) * mult)
			if q.OffsetNs < 0 {
				// Offsets are from the first record's timestamp; later
				// records may come out of order (Plan.Offsets).
				return nil, false, fmt.Errorf("%s:%d: a timestamp before the first record's (%g): the first record starts the trace", path, line, t0)
			}
		}
		reqs = append(reqs, q)
	}
	if err := sc.Err(); err != nil {
		return nil, false, fmt.Errorf("reading %s: %w", path, err)
	}
	return reqs, true, nil
}

// LoadTrace reads a trace replay file: JSONL of {timestamp, input_len,
// output_len} or {timestamp, prompt, output_len}; timestamps are in unit
// ("s", the default, or "ms") and relative to the first record. It returns
// the trace's Info too, the file hashed as it reads: the file is
// read once.
func LoadTrace(path, unit string, defOut int, seed uint64) ([]transport.Request, Info, error) {
	if unit == "" {
		unit = "s"
	}
	if unit != "s" && unit != "ms" {
		return nil, Info{}, fmt.Errorf("trace time unit %q: use s or ms", unit)
	}
	h := sha256.New()
	reqs, _, err := readJSONLHashed(path, defOut, rand.New(rand.NewPCG(seed, 0x7472)), unit, h)
	if err != nil {
		return nil, Info{}, err
	}
	if len(reqs) == 0 {
		return nil, Info{}, fmt.Errorf("trace %s holds no record", path)
	}
	info := traceInfo(path, unit, defOut, seed)
	info.SHA256 = hex.EncodeToString(h.Sum(nil))
	return reqs, info, nil
}

type shareGPTEntry struct {
	Conversations []struct {
		From  string `json:"from"`
		Value string `json:"value"`
	} `json:"conversations"`
	Conversation []struct {
		From  string `json:"from"`
		Value string `json:"value"`
	} `json:"conversation"`
}

// readShareGPT reads a ShareGPT-format JSON array: the first turn is the
// prompt, the second the reference completion whose length becomes the
// output length. Like vLLM, too short (< 4 tokens) and too long (prompt >
// 1024 or prompt+output > 2048) pairs are skipped, unless the output length
// is fixed.
func readShareGPT(path string, fixedOut int) ([]transport.Request, error) {
	if path == "" {
		return nil, errors.New("sharegpt dataset: no file: pass --dataset-path")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("opening dataset: %w", err)
	}
	var entries []shareGPTEntry
	if err := json.Unmarshal(b, &entries); err != nil {
		return nil, fmt.Errorf("parsing ShareGPT JSON %s: %w", path, err)
	}
	var reqs []transport.Request
	for _, e := range entries {
		conv := e.Conversations
		if len(conv) == 0 {
			conv = e.Conversation
		}
		if len(conv) < 2 {
			continue
		}
		in := CountTokens(conv[0].Value)
		out := CountTokens(conv[1].Value)
		if fixedOut > 0 {
			out = fixedOut
		} else if in < 4 || out < 4 || in > 1024 || in+out > 2048 {
			continue
		}
		reqs = append(reqs, transport.Request{Prompt: conv[0].Value, PromptLen: in, OutputLen: out, OffsetNs: -1})
	}
	return reqs, nil
}
