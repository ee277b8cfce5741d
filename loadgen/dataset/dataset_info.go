package dataset

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"os"
	"strconv"

	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// What Info.SHA256 covers.
const (
	HashedPrompts = "prompts" // the generated requests, in order (see promptHash)
	HashedFile    = "file"    // the bytes of the dataset file
)

// Info describes a run's prompts for its manifest: the dataset, the
// seed, every parameter that shapes the prompts, and a content hash. Two
// runs with equal Info sent the same prompts in the same order.
type Info struct {
	Name string `json:"name"`
	Path string `json:"path,omitempty"`
	Seed uint64 `json:"seed"`
	// Params are the dataset's parameters as strings (input_len,
	// rag_prefix_len, turns, ...), and the sha256 of each auxiliary file
	// (input_len_file_sha256, ...).
	Params map[string]string `json:"params,omitempty"`
	// SHA256 is the hex sha256 of what Hashed names: the dataset file's
	// bytes (jsonl, sharegpt, a multiturn file, a trace), or the generated
	// prompts in order (random, rag, synthetic multiturn, Go API requests):
	// for each request its prompt's byte length as a little-endian uint64,
	// the prompt, and its output length as a little-endian uint64; for a
	// conversation, the same for each turn's user message, then the
	// recorded reply (empty when the server's replies are replayed).
	SHA256 string `json:"sha256"`
	Hashed string `json:"hashed"`
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func fileSHA256(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return sha256Hex(b)
}

// promptHash accumulates the hash of generated prompts.
type promptHash struct{ h hash.Hash }

func newPromptHash() promptHash { return promptHash{sha256.New()} }

func (p promptHash) str(s string) {
	p.num(len(s))
	p.h.Write([]byte(s))
}

func (p promptHash) num(n int) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(n))
	p.h.Write(b[:])
}

func (p promptHash) sum() string { return hex.EncodeToString(p.h.Sum(nil)) }

// HashRequests is the prompts hash of reqs (see Info.SHA256).
func HashRequests(reqs []transport.Request) string {
	p := newPromptHash()
	for i := range reqs {
		p.str(reqs[i].Prompt)
		p.num(reqs[i].OutputLen)
	}
	return p.sum()
}

// params returns what shapes the prompts of cfg's dataset.
func (cfg Config) params() map[string]string {
	m := map[string]string{}
	itoa := strconv.Itoa
	ftoa := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
	lengths := func() {
		if cfg.InputLenFile != "" {
			m["input_len_file"] = cfg.InputLenFile
			m["input_len_file_sha256"] = fileSHA256(cfg.InputLenFile)
		}
	}
	switch cfg.Name {
	case Random, "":
		m["output_len"] = itoa(cfg.OutputLen)
		m["range_ratio"] = ftoa(cfg.RangeRatio)
		if cfg.InputLenFile == "" {
			m["input_len"] = itoa(cfg.InputLen)
		}
		lengths()
	case JSONL:
		m["output_len"] = itoa(cfg.OutputLen)
	case ShareGPT:
		m["sharegpt_output_len"] = itoa(cfg.ShareGPTOutputLen)
	case RAG:
		r := cfg.RAG.withDefaults()
		m["output_len"] = itoa(cfg.OutputLen)
		m["range_ratio"] = ftoa(cfg.RangeRatio)
		m["rag_prefix_len"] = itoa(r.PrefixLen)
		m["rag_prefixes"] = itoa(r.Prefixes)
		m["rag_shared"] = ftoa(r.Shared)
		m["rag_passages"] = itoa(r.Passages)
		m["rag_question_len"] = itoa(r.QuestionLen)
		if r.PassageLenFile != "" {
			m["rag_passage_len_file"] = r.PassageLenFile
			m["rag_passage_len_file_sha256"] = fileSHA256(r.PassageLenFile)
		} else {
			m["rag_passage_len"] = itoa(r.PassageLen)
			m["rag_passage_sigma"] = ftoa(r.PassageSigma)
		}
		lengths()
	case Multiturn:
		mt := cfg.Multiturn
		m["turns"] = mt.Turns.String()
		m["think_time"] = mt.ThinkTime.String()
		m["replies"] = mt.ReplyMode()
		if cfg.Path == "" {
			m["input_len"] = itoa(cfg.InputLen)
			m["output_len"] = itoa(cfg.OutputLen)
			m["range_ratio"] = ftoa(cfg.RangeRatio)
		} else {
			m["sharegpt_output_len"] = itoa(cfg.ShareGPTOutputLen)
		}
	}
	return m
}

// DescribeRequests is the Info of requests sent as they are given (the Go
// API's loadgen.Config.Scenario.Requests).
func DescribeRequests(reqs []transport.Request, seed uint64) Info {
	return Info{Name: "requests", Seed: seed, SHA256: HashRequests(reqs), Hashed: HashedPrompts}
}

// traceInfo is the Info of a trace replayed (LoadTrace's arguments),
// without its hash.
func traceInfo(path, unit string, defOut int, seed uint64) Info {
	return Info{Name: "trace", Path: path, Seed: seed,
		Params: map[string]string{"trace_time_unit": unit, "output_len": strconv.Itoa(defOut)},
		Hashed: HashedFile}
}

// Describe is the Info of cfg's prompts drawn with seed: reqs are the
// requests Load returned or, for the multiturn dataset, convs the
// conversations LoadConversations returned.
func (cfg Config) Describe(seed uint64, reqs []transport.Request, convs []Conversation) Info {
	info := Info{Name: cfg.Name, Seed: seed, Params: cfg.params()}
	if info.Name == "" {
		info.Name = Random
	}
	switch {
	case cfg.Name == JSONL || cfg.Name == ShareGPT || (cfg.Name == Multiturn && cfg.Path != ""):
		info.Path = cfg.Path
		info.SHA256, info.Hashed = fileSHA256(cfg.Path), HashedFile
	case cfg.Name == Multiturn:
		info.SHA256, info.Hashed = HashConversations(convs), HashedPrompts
	default:
		info.SHA256, info.Hashed = HashRequests(reqs), HashedPrompts
	}
	return info
}
