package enginemetrics

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// serveFiles serves the fixtures in order, the last one again and again.
func serveFiles(t *testing.T, files ...string) *httptest.Server {
	t.Helper()
	var bodies [][]byte
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := min(int(n.Add(1))-1, len(bodies)-1)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Write(bodies[i])
	}))
	t.Cleanup(srv.Close)
	return srv
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }

func checkValues(t *testing.T, what string, got, want map[string]float64) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: %s missing (got %v)", what, k, got)
			continue
		}
		if !near(g, w) {
			t.Errorf("%s: %s = %v, want %v", what, k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected %s = %v", what, k, got[k])
		}
	}
}

// Each engine's names, from a /metrics text written from its sources
// (vLLM, SGLang, TGI) or recorded from the real server (llama.cpp, -np 2
// with 4 requests in flight), mapped to the vocabulary: a first scrape,
// then a later one for the values per interval.
func TestVocabularyPerEngine(t *testing.T) {
	cases := []struct {
		engine       string
		first, later map[string]float64
		overall      map[string]float64
		missing      []string // names the engine does not export
	}{
		{
			engine: EngineVLLM,
			first: map[string]float64{RequestsRunning: 8, RequestsWaiting: 3, KVCacheUsage: 0.42, Preemptions: 1,
				PromptTokens: 10000, GenerationTokens: 5000},
			// hits 2000→5000 of queries 10000→14000; queue 1.0 s/20 → 3.5 s/30.
			later: map[string]float64{RequestsRunning: 16, RequestsWaiting: 5, KVCacheUsage: 0.9, Preemptions: 4,
				PromptTokens: 14000, GenerationTokens: 5600, PrefixCacheHitRate: 0.75, QueueTimeMs: 250},
			overall: map[string]float64{RequestsRunning: 16, RequestsWaiting: 5, KVCacheUsage: 0.9, Preemptions: 3,
				PromptTokens: 4000, GenerationTokens: 600, PrefixCacheHitRate: 0.75, QueueTimeMs: 250},
		},
		{
			engine: EngineSGLang,
			first: map[string]float64{RequestsRunning: 12, RequestsWaiting: 4, KVCacheUsage: 0.37, Preemptions: 2,
				PrefixCacheHitRate: 0.25, PromptTokens: 51200, GenerationTokens: 25600},
			// queue 4.0 s/50 → 7.0 s/60.
			later: map[string]float64{RequestsRunning: 16, RequestsWaiting: 9, KVCacheUsage: 0.81, Preemptions: 3,
				PrefixCacheHitRate: 0.5, PromptTokens: 56320, GenerationTokens: 28160, QueueTimeMs: 300},
			overall: map[string]float64{RequestsRunning: 16, RequestsWaiting: 9, KVCacheUsage: 0.81, Preemptions: 1,
				PrefixCacheHitRate: 0.5, PromptTokens: 5120, GenerationTokens: 2560, QueueTimeMs: 300},
		},
		{
			engine: EngineTGI,
			first:  map[string]float64{RequestsRunning: 6, RequestsWaiting: 2, PromptTokens: 19000, GenerationTokens: 4864},
			// queue 0.76 s/38 → 2.76 s/48.
			later:   map[string]float64{RequestsRunning: 8, RequestsWaiting: 7, PromptTokens: 24000, GenerationTokens: 6144, QueueTimeMs: 200},
			overall: map[string]float64{RequestsRunning: 8, RequestsWaiting: 7, PromptTokens: 5000, GenerationTokens: 1280, QueueTimeMs: 200},
			missing: []string{KVCacheUsage, Preemptions, PrefixCacheHitRate},
		},
		{
			engine: EngineLlamaCpp,
			first:  map[string]float64{RequestsRunning: 2, RequestsWaiting: 2, PromptTokens: 40, GenerationTokens: 0},
			// No prompt processed between the two scrapes: no hit rate.
			later:   map[string]float64{RequestsRunning: 2, RequestsWaiting: 2, PromptTokens: 40, GenerationTokens: 0},
			overall: map[string]float64{RequestsRunning: 2, RequestsWaiting: 2, PromptTokens: 0, GenerationTokens: 0},
			missing: []string{KVCacheUsage, Preemptions, QueueTimeMs},
		},
	}
	for _, c := range cases {
		t.Run(c.engine, func(t *testing.T) {
			srv := serveFiles(t, c.engine+".txt", c.engine+".later.txt")
			s, err := New(Config{URL: srv.URL + "/metrics"})
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if err := s.Scrape(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			r := s.Result()
			if r.Engine != c.engine || !r.VocabularyMatched {
				t.Fatalf("engine %q matched %v, want %q matched", r.Engine, r.VocabularyMatched, c.engine)
			}
			if len(r.Samples) != 2 || r.Failures != 0 || len(r.RawSeries) != 0 {
				t.Fatalf("%d samples, %d failures, %d raw series", len(r.Samples), r.Failures, len(r.RawSeries))
			}
			if r.Samples[1].Ns <= r.Samples[0].Ns {
				t.Errorf("sample times %d, %d", r.Samples[0].Ns, r.Samples[1].Ns)
			}
			checkValues(t, "first", r.Samples[0].Values, c.first)
			checkValues(t, "later", r.Samples[1].Values, c.later)
			checkValues(t, "overall", r.Overall, c.overall)
			for _, m := range c.missing {
				if _, ok := r.Sources[m]; ok {
					t.Errorf("%s read from %s, which %s does not export", m, r.Sources[m], c.engine)
				}
			}
			for _, name := range []string{RequestsRunning, RequestsWaiting} {
				if r.Sources[name] == "" {
					t.Errorf("no source for %s: %v", name, r.Sources)
				}
			}
		})
	}
}

// vLLM before 0.9: the KV cache as gpu_cache_usage_perc, prefix hits as
// gpu_prefix_cache_*.
func TestVocabularyVLLMRenames(t *testing.T) {
	old := `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 0.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 10.0
# TYPE vllm:gpu_prefix_cache_queries_total counter
vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 100.0
`
	later := `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:gpu_cache_usage_perc{engine="1",model_name="m"} 0.3
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 30.0
# TYPE vllm:gpu_prefix_cache_queries_total counter
vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 200.0
`
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Write([]byte(old))
		} else {
			w.Write([]byte(later))
		}
	}))
	defer srv.Close()
	s, _ := New(Config{URL: srv.URL})
	for range 2 {
		if err := s.Scrape(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	r := s.Result()
	// Two engines (data parallel): counts add up, the KV usage is their mean.
	checkValues(t, "later", r.Samples[1].Values, map[string]float64{RequestsRunning: 6, RequestsWaiting: 1, KVCacheUsage: 0.4, PrefixCacheHitRate: 0.2})
	if r.Sources[KVCacheUsage] != "vllm:gpu_cache_usage_perc" {
		t.Errorf("KV source %q", r.Sources[KVCacheUsage])
	}
}

// An engine the vocabulary does not know keeps its gauges and counters,
// bounded, and says the vocabulary did not match.
func TestUnknownEngineKeepsRawSeries(t *testing.T) {
	srv := serveFiles(t, "unknown.txt")
	s, err := New(Config{URL: srv.URL, MaxRaw: 3})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Scrape(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	r := s.Result()
	if r.Engine != EngineUnknown || r.VocabularyMatched {
		t.Fatalf("engine %q matched %v", r.Engine, r.VocabularyMatched)
	}
	want := []string{"ollama_requests_in_flight", `ollama_tokens_total{model="llama3"}`, `ollama_tokens_total{model="qwen"}`}
	if len(r.RawSeries) != 3 || r.RawDropped != 1 {
		t.Fatalf("raw series %q, %d left out", r.RawSeries, r.RawDropped)
	}
	for i, k := range want {
		if r.RawSeries[i] != k {
			t.Errorf("raw series %d = %q, want %q", i, r.RawSeries[i], k)
		}
	}
	checkValues(t, "raw", r.Samples[1].Values, map[string]float64{want[0]: 3, want[1]: 1234, want[2]: 55})
	if r.Sources != nil || r.Overall != nil {
		t.Errorf("sources %v, overall %v for an unknown engine", r.Sources, r.Overall)
	}
}

func TestMetricsURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8000":                 "http://127.0.0.1:8000/metrics",
		"http://127.0.0.1:8000/v1":              "http://127.0.0.1:8000/metrics",
		"localhost:8080":                        "http://localhost:8080/metrics",
		"https://h.example/v1/chat/completions": "https://h.example/metrics",
		"grpc://10.0.0.5:8001":                  "http://10.0.0.5:8002/metrics",
		"grpc://[::1]:8001":                     "http://[::1]:8002/metrics",
	} {
		got, err := MetricsURL(in)
		if err != nil || got != want {
			t.Errorf("MetricsURL(%q) = %q, %v, want %q", in, got, err, want)
		}
	}
}

func TestConfigBounds(t *testing.T) {
	if _, err := New(Config{URL: "http://x/metrics", Period: 100 * time.Millisecond}); err == nil {
		t.Error("100 ms period accepted")
	}
	if _, err := New(Config{URL: "ftp://x/metrics"}); err == nil {
		t.Error("ftp URL accepted")
	}
	s, err := New(Config{URL: "http://x/metrics", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.Period != DefaultPeriod || s.cfg.Timeout >= s.cfg.Period {
		t.Errorf("period %v timeout %v", s.cfg.Period, s.cfg.Timeout)
	}
}
