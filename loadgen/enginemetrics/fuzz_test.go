package enginemetrics

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bodies answers each scrape with the next body, as Prometheus text.
type bodies struct{ b [][]byte }

func (t *bodies) RoundTrip(r *http.Request) (*http.Response, error) {
	b := t.b[0]
	if len(t.b) > 1 {
		t.b = t.b[1:]
	}
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: http.Header{"Content-Type": {"text/plain; version=0.0.4"}},
		Body: io.NopCloser(bytes.NewReader(b)), Request: r}, nil
}

// FuzzScrape: two scrapes of a server's /metrics (the engine's first
// answer and a later one) are each a sample or a counted failure, never a
// panic; the engine named is one of the known ones; an unknown engine's
// raw series are bounded by MaxRaw and its samples hold only those.
func FuzzScrape(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.txt")
	for _, p := range files {
		if strings.HasSuffix(p, ".later.txt") {
			continue
		}
		first, err1 := os.ReadFile(p)
		later, err2 := os.ReadFile(strings.TrimSuffix(p, ".txt") + ".later.txt")
		if err1 != nil {
			continue
		}
		if err2 != nil {
			later = first
		}
		f.Add(first, later)
	}
	f.Add([]byte("this is { not prometheus text at all\n"), []byte(""))
	f.Add([]byte("vllm:num_requests_running 1\nvllm:num_requests_running 2\n"), []byte("vllm:num_requests_running NaN\n"))
	f.Add([]byte("# TYPE tgi_request_queue_duration histogram\ntgi_request_queue_duration_sum 5\ntgi_request_queue_duration_count 2\n"),
		[]byte("# TYPE tgi_request_queue_duration histogram\ntgi_request_queue_duration_sum 1\ntgi_request_queue_duration_count 9\n"))
	f.Add([]byte("a{x=\"1\"} 1\nb 2\n# TYPE c summary\nc_sum 1\nc_count 1\n"), []byte("a{x=\"1\"} -Inf\n"))
	f.Fuzz(func(t *testing.T, first, later []byte) {
		const maxRaw = 8
		s, err := New(Config{URL: "http://engine.invalid/metrics", MaxRaw: maxRaw,
			Client: &http.Client{Transport: &bodies{[][]byte{first, later}}},
			Now:    func() int64 { return 1 }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ok := 0
		for range 2 {
			if s.Scrape(context.Background()) == nil {
				ok++
			}
		}
		r := s.Result()
		if r.Scrapes != 2 || r.Failures != 2-ok || len(r.Samples) != ok {
			t.Fatalf("%d scrapes, %d failures, %d samples; %d succeeded", r.Scrapes, r.Failures, len(r.Samples), ok)
		}
		switch r.Engine {
		case EngineVLLM, EngineSGLang, EngineTGI, EngineLlamaCpp, EngineUnknown:
		default:
			t.Fatalf("engine %q", r.Engine)
		}
		if r.VocabularyMatched {
			return
		}
		if len(r.RawSeries) > maxRaw || r.RawDropped < 0 {
			t.Fatalf("%d raw series kept, %d dropped; at most %d", len(r.RawSeries), r.RawDropped, maxRaw)
		}
		kept := map[string]bool{}
		for _, k := range r.RawSeries {
			kept[k] = true
		}
		for _, smp := range r.Samples {
			for k := range smp.Values {
				if !kept[k] {
					t.Fatalf("sample holds %q, not a kept raw series", k)
				}
			}
		}
	})
}
