package dataset

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Fuzz targets of the datasets' outside input: the dataset, trace and
// length files (the server's chunks and framing are loadgen/transport's).
// `make fuzz` runs each for a bounded time; `make test` runs their seeds.

// fuzzFile writes b into a file of the test's temporary directory.
func fuzzFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readSeed(f *testing.F, path string) {
	if b, err := os.ReadFile(path); err == nil {
		f.Add(b)
	}
}

// FuzzReadJSONL: a prompts file, or a trace (timestamps in s or ms), is
// read or refused with an error naming the file; every request read has a
// positive input and output length within bounds, and a trace's offsets
// start at 0 and are never negative.
func FuzzReadJSONL(f *testing.F) {
	for _, s := range []string{
		"{\"prompt\":\"hello there\",\"output_len\":16}\n{\"text\":\"x y z\",\"max_tokens\":4}\n# comment\n\n{\"input_len\":128,\"output_len\":32}\n",
		"{\"timestamp\":0,\"input_len\":10,\"output_len\":5}\n{\"timestamp\":0.5,\"prompt\":\"a b\",\"output_len\":5}\n{\"timestamp\":1250,\"input_len\":3}\n",
		"{\"prompt\":\"p\",\"input_len\":-3,\"output_len\":0}\n",
		"{\"input_len\":4000000000000000000}\n",
		"{\"timestamp\":1e300,\"input_len\":1}\n{\"timestamp\":-1e300,\"input_len\":1}\n",
		"{}\n",
		"[1,2]\n",
	} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, body []byte, mode uint8) {
		unit := []string{"", "s", "ms"}[mode%3]
		p := fuzzFile(t, "prompts.jsonl", body)
		reqs, _, err := readJSONL(p, 7, rand.New(rand.NewPCG(1, 2)), unit)
		if err != nil {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for i, r := range reqs {
			// A prompt of no words counts 0 tokens (the server's tokenizer
			// may count more); any other length is at least 1.
			if r.PromptLen < 1 && !(r.PromptLen == 0 && CountTokens(r.Prompt) == 0) || r.PromptLen > MaxPromptLen || r.OutputLen < 1 {
				t.Fatalf("request %d: prompt_len %d, output_len %d", i, r.PromptLen, r.OutputLen)
			}
			if unit == "" {
				if r.OffsetNs != -1 {
					t.Fatalf("request %d of a prompts file has offset %d", i, r.OffsetNs)
				}
				continue
			}
			// Offsets are from the first record's timestamp; later ones
			// may come out of order (loadgen's Plan.Offsets), never
			// before it.
			if i == 0 && r.OffsetNs != 0 || r.OffsetNs < 0 {
				t.Fatalf("request %d: offset %d", i, r.OffsetNs)
			}
		}
	})
}

// FuzzReadShareGPT: a ShareGPT file read as prompts (vLLM's filter) and as
// multiturn conversations, or refused with an error; what is read keeps
// the filter's bounds and the turn limit.
func FuzzReadShareGPT(f *testing.F) {
	readSeed(f, "testdata/multiturn_sharegpt.json")
	for _, s := range []string{
		`[{"conversations":[{"from":"human","value":"one two three four five"},{"from":"gpt","value":"six seven eight nine ten"}]}]`,
		`[{"conversation":[{"from":"system","value":"be brief"},{"from":"user","value":"a"},{"from":"assistant","value":"b"},{"from":"user","value":"c"},{"from":"model","value":""}]}]`,
		`[{"conversations":[{"from":"gpt","value":"x"}]},{},null]`,
		`{"conversations":[]}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p := fuzzFile(t, "sharegpt.json", body)
		reqs, err := readShareGPT(p, 0)
		if err == nil {
			for i, r := range reqs {
				if r.PromptLen != CountTokens(r.Prompt) || r.PromptLen < 4 || r.PromptLen > 1024 || r.OutputLen < 4 || r.PromptLen+r.OutputLen > 2048 {
					t.Fatalf("request %d: prompt_len %d (%d words), output_len %d", i, r.PromptLen, CountTokens(r.Prompt), r.OutputLen)
				}
			}
			fixed, err := readShareGPT(p, 9)
			if err != nil || len(fixed) < len(reqs) {
				t.Fatalf("with a fixed output length: %d requests (%v), %d without", len(fixed), err, len(reqs))
			}
		}
		const maxTurns = 2
		convs, cerr := readShareGPTConversations(p, maxTurns, 0)
		if (cerr == nil) != (err == nil) {
			t.Fatalf("prompts: %v; conversations: %v", err, cerr)
		}
		for i, c := range convs {
			if len(c.Turns) == 0 || len(c.Turns) > maxTurns {
				t.Fatalf("conversation %d: %d turns", i, len(c.Turns))
			}
			for _, turn := range c.Turns {
				if turn.OutputLen < 1 || turn.UserLen != CountTokens(turn.User) {
					t.Fatalf("conversation %d: turn %+v", i, turn)
				}
			}
		}
	})
}

// FuzzReadLengths: a length file (one length a line, or a len,count
// histogram) is read or refused with an error; the lengths it gives are
// positive and bounded, and an expanded histogram holds each length as
// many times as its count.
func FuzzReadLengths(f *testing.F) {
	readSeed(f, "testdata/input_lens.txt")
	readSeed(f, "testdata/input_lens_bad.txt")
	readSeed(f, "testdata/input_lens_hist.csv")
	for _, s := range []string{"len,count\n128,3\n512,1\n", "# lengths\n\n7\n 9 \n", "1,9223372036854775807\n2,1\n", "5,4194305\n", "10\n20,1\n", "x\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p := fuzzFile(t, "lens.txt", body)
		l, err := ReadLengths(p, 3)
		if err != nil {
			if !strings.Contains(err.Error(), "length file") && !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q names neither the length file nor its path", err)
			}
			return
		}
		if l.Len() > maxExpandedLengths {
			t.Fatalf("%d lengths expanded", l.Len())
		}
		for i := 0; i < 64; i++ {
			if n := l.At(i); n < 1 || n > MaxPromptLen {
				t.Fatalf("At(%d) = %d", i, n)
			}
		}
		// The lengths cycle.
		if n := l.Len(); n > 0 {
			for i := 0; i < min(n, 64); i++ {
				if l.At(i) != l.At(i+n) {
					t.Fatalf("At(%d) = %d, At(%d) = %d", i, l.At(i), i+n, l.At(i+n))
				}
			}
		}
	})
}
