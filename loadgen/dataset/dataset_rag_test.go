package dataset

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/loadgen/transport"
)

func ragConfig(mod func(*Config)) Config {
	cfg := Config{Name: RAG, OutputLen: 64, RAG: DefaultRAG()}
	cfg.RAG.PrefixLen = 64
	cfg.RAG.PassageLen = 32
	cfg.RAG.QuestionLen = 8
	if mod != nil {
		mod(&cfg)
	}
	return cfg
}

func prompts(reqs []transport.Request) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = r.Prompt
	}
	return out
}

// Every request's token count is its number of vocabulary words, as for the
// random dataset.
func checkCounts(t *testing.T, reqs []transport.Request) {
	t.Helper()
	for i, r := range reqs {
		if got := CountTokens(r.Prompt); got != r.PromptLen {
			t.Fatalf("request %d: PromptLen %d, prompt of %d words", i, r.PromptLen, got)
		}
	}
}

func TestRAGDeterministic(t *testing.T) {
	cfg := ragConfig(nil)
	a, err := Load(cfg, 50, 7)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Load(cfg, 50, 7)
	c, _ := Load(cfg, 50, 8)
	if !slices.Equal(prompts(a), prompts(b)) || HashRequests(a) != HashRequests(b) {
		t.Error("the same seed gave different prompts or hashes")
	}
	if slices.Equal(prompts(a), prompts(c)) || HashRequests(a) == HashRequests(c) {
		t.Error("different seeds gave the same prompts or hash")
	}
	checkCounts(t, a)
}

func TestRAGSharedPrefixes(t *testing.T) {
	const n, plen = 200, 64
	cfg := ragConfig(func(c *Config) { c.RAG.Shared = 0.3; c.RAG.Prefixes = 3 })
	reqs, err := Load(cfg, n, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, reqs)
	byPrefix := map[string]int{}
	for _, r := range reqs {
		byPrefix[strings.Join(strings.Fields(r.Prompt)[:plen], " ")]++
	}
	var shared []int
	unique := 0
	for _, c := range byPrefix {
		if c > 1 {
			shared = append(shared, c)
		} else {
			unique++
		}
	}
	slices.Sort(shared)
	// Exactly round(0.3*200) = 60 requests share, 20 on each prefix; the
	// other 140 carry one of their own.
	if !slices.Equal(shared, []int{20, 20, 20}) || unique != 140 {
		t.Errorf("shared prefixes %v, %d unique: want [20 20 20] and 140", shared, unique)
	}
	// Everything after the prefix differs between requests.
	seen := map[string]bool{}
	for _, r := range reqs {
		rest := strings.Join(strings.Fields(r.Prompt)[plen:], " ")
		if seen[rest] {
			t.Fatal("two requests share passages and question")
		}
		seen[rest] = true
	}
}

// Passage lengths are lognormal with the mean and sigma asked: with one
// passage, each request's passage is its length less prefix and question.
func TestRAGPassageLengths(t *testing.T) {
	const n = 2000
	cfg := ragConfig(func(c *Config) { c.RAG.Passages = 1; c.RAG.PassageLen = 256; c.RAG.PassageSigma = 0.5 })
	reqs, err := Load(cfg, n, 3)
	if err != nil {
		t.Fatal(err)
	}
	var sum, sumLog, sumLog2 float64
	for _, r := range reqs {
		l := float64(r.PromptLen - 64 - 8)
		sum += l
		sumLog += math.Log(l)
		sumLog2 += math.Log(l) * math.Log(l)
	}
	mean := sum / n
	sd := math.Sqrt(sumLog2/n - (sumLog/n)*(sumLog/n))
	t.Logf("passage lengths: mean %.2f, sigma of the log %.4f", mean, sd)
	// Standard errors: mean 256*0.533/sqrt(2000) = 3.1, sigma 0.5/sqrt(4000) = 0.008.
	if math.Abs(mean-256) > 4*3.1 || math.Abs(sd-0.5) > 4*0.008 {
		t.Errorf("passage lengths: mean %.1f (want 256), sigma of the log %.3f (want 0.5)", mean, sd)
	}
	// Sigma 0: every passage has the mean length.
	cfg.RAG.PassageSigma = 0
	reqs, _ = Load(cfg, 20, 3)
	for _, r := range reqs {
		if r.PromptLen != 64+256+8 {
			t.Fatalf("sigma 0: prompt of %d tokens, want %d", r.PromptLen, 64+256+8)
		}
	}
}

func TestInputLenFile(t *testing.T) {
	list := filepath.Join("testdata", "input_lens.txt")
	reqs, err := Load(Config{Name: Random, OutputLen: 8, InputLenFile: list}, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, reqs)
	var got []int
	for _, r := range reqs {
		got = append(got, r.PromptLen)
	}
	if want := []int{120, 340, 75, 2048, 120, 340, 75, 2048}; !slices.Equal(got, want) {
		t.Errorf("random with a list: lengths %v, want %v", got, want)
	}

	// A histogram: two rounds of its 8 lengths reproduce it twice exactly.
	hist := filepath.Join("testdata", "input_lens_hist.csv")
	reqs, err = Load(Config{Name: Random, OutputLen: 8, InputLenFile: hist}, 16, 1)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[int]int{}
	for _, r := range reqs {
		counts[r.PromptLen]++
	}
	if counts[64] != 10 || counts[256] != 4 || counts[1024] != 2 || len(counts) != 3 {
		t.Errorf("histogram lengths %v: want 64:10 256:4 1024:2", counts)
	}
	other, _ := Load(Config{Name: Random, OutputLen: 8, InputLenFile: hist}, 16, 2)
	if slices.Equal(prompts(reqs), prompts(other)) {
		t.Error("the histogram's order does not depend on the seed")
	}

	// rag: the whole input length is the file's; passages take the rest.
	cfg := ragConfig(func(c *Config) {
		c.InputLenFile = list
		c.RAG.PrefixLen = 50
		c.RAG.QuestionLen = 10
		c.RAG.Passages = 3
	})
	reqs, err = Load(cfg, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, reqs)
	for i, want := range []int{120, 340, 75, 2048} {
		if reqs[i].PromptLen != want {
			t.Errorf("rag request %d: %d tokens, want %d", i, reqs[i].PromptLen, want)
		}
	}
	cfg.RAG.PrefixLen = 100 // 75 < 100 + 10
	if _, err := Load(cfg, 4, 1); err == nil || !strings.Contains(err.Error(), "shorter than the prefix") {
		t.Errorf("an input length shorter than the prefix: %v", err)
	}
}

func TestInputLenFileErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.txt"), "missing.txt"},
		{filepath.Join("testdata", "input_lens_bad.txt"), `input_lens_bad.txt:2: "2x0"`},
		{write("neg.txt", "10\n-3\n"), "neg.txt:2"},
		{write("mixed.txt", "10\n20,3\n"), "mixes"},
		{write("badcount.csv", "len,count\n10,x\n"), "badcount.csv:2"},
		{write("zero.csv", "len,count\n10,0\n"), "every count is zero"},
		{write("empty.txt", "# nothing\n\n"), "holds no length"},
	} {
		for _, name := range []string{Random, RAG} {
			cfg := ragConfig(func(c *Config) { c.Name = name; c.InputLenFile = tc.path })
			_, err := Load(cfg, 4, 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--input-len-file") {
				t.Errorf("%s with %s: error %v, want one naming --input-len-file and %q", name, tc.path, err, tc.want)
			}
		}
	}
	if err := (Config{Name: JSONL, InputLenFile: "x"}).Check(transport.EndpointCompletions); err == nil {
		t.Error("--input-len-file with jsonl: no error")
	}
}

func TestDescribe(t *testing.T) {
	describe := func(cfg Config, seed uint64) Info {
		t.Helper()
		reqs, err := Load(cfg, 20, seed)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Describe(seed, reqs, nil)
	}
	cfg := ragConfig(nil)
	a, b, c := describe(cfg, 5), describe(cfg, 5), describe(cfg, 6)
	if a.SHA256 == "" || a.SHA256 != b.SHA256 || a.SHA256 == c.SHA256 || a.Hashed != HashedPrompts {
		t.Errorf("rag hashes: %s, %s (same seed), %s (another seed), hashed %q", a.SHA256, b.SHA256, c.SHA256, a.Hashed)
	}
	if a.Name != RAG || a.Seed != 5 || a.Params["rag_prefix_len"] != "64" || a.Params["rag_shared"] != "1" {
		t.Errorf("rag descriptor %+v", a)
	}
	reqs, _ := Load(cfg, 20, 5)
	if HashRequests(reqs) != a.SHA256 {
		t.Error("the descriptor's hash is not that of the prompts Load returns")
	}

	// A file dataset is hashed over the file's bytes.
	cfg = Config{Name: ShareGPT, Path: filepath.Join("testdata", "multiturn_sharegpt.json")}
	d := describe(cfg, 5)
	raw, _ := os.ReadFile(cfg.Path)
	sum := sha256.Sum256(raw)
	if d.SHA256 != hex.EncodeToString(sum[:]) || d.Hashed != HashedFile || d.Path != cfg.Path {
		t.Errorf("sharegpt descriptor %+v", d)
	}

	// An input length file's hash is a parameter.
	cfg = Config{Name: Random, OutputLen: 8, InputLenFile: filepath.Join("testdata", "input_lens.txt")}
	d = describe(cfg, 5)
	raw, _ = os.ReadFile(cfg.InputLenFile)
	sum = sha256.Sum256(raw)
	if d.Params["input_len_file_sha256"] != hex.EncodeToString(sum[:]) {
		t.Errorf("random with a length file: params %v", d.Params)
	}
}

func TestApportion(t *testing.T) {
	w := []int{1, 1, 1}
	apportion(w, 10)
	if !slices.Equal(w, []int{4, 3, 3}) {
		t.Errorf("apportion 10 over 1,1,1: %v", w)
	}
	w = []int{10, 30}
	apportion(w, 0)
	if !slices.Equal(w, []int{0, 0}) {
		t.Errorf("apportion 0: %v", w)
	}
}
