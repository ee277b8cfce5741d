package otlp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/bpfbench/bpfbench/loadgen"
)

func records() (*loadgen.Config, []loadgen.Record) {
	cfg := loadgen.DefaultConfig()
	cfg.Target = "http://127.0.0.1:8000"
	cfg.Endpoint = loadgen.EndpointChat
	cfg.Model = "m1"
	now := loadgen.Mono()
	ok := loadgen.Record{Index: 0, RequestID: "r0", PromptLen: 10, UsagePromptTokens: 11, MaxTokens: 3, StartNs: now, EndNs: now + 40e6,
		ChunkNs: []int64{now + 10e6, now + 20e6, now + 30e6}, LastNs: now + 30e6, OutputTokens: 3, LocalPort: 40000, Status: 200, Success: true, TokenSource: "usage"}
	long := ok
	long.RequestID = "r1"
	long.ChunkNs = make([]int64, 300)
	for i := range long.ChunkNs {
		long.ChunkNs[i] = now + int64(i+1)*1e5
	}
	bad := loadgen.Record{Index: 2, RequestID: "r2", StartNs: now, EndNs: now + 5e6, Status: 500, Failure: loadgen.FailHTTPStatus, Error: "HTTP 500"}
	return &cfg, []loadgen.Record{ok, long, bad}
}

func TestSpansInMemory(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	e := NewWithSpanExporter(mem, Options{MaxChunkEvents: 256})
	cfg, recs := records()
	for i := range recs {
		e.Export(cfg, &recs[i])
	}
	if err := e.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := mem.GetSpans()
	defer e.Shutdown(context.Background())
	if len(spans) != 3 {
		t.Fatalf("%d spans", len(spans))
	}
	s := spans[0]
	if s.Name != "chat m1" || s.EndTime.Sub(s.StartTime) != 40*time.Millisecond {
		t.Errorf("span %q lasting %v", s.Name, s.EndTime.Sub(s.StartTime))
	}
	attrs := map[string]any{}
	for _, a := range s.Attributes {
		attrs[string(a.Key)] = a.Value.AsInterface()
	}
	want := map[string]any{
		"gen_ai.operation.name": "chat", "gen_ai.request.model": "m1", "gen_ai.usage.input_tokens": int64(11),
		"gen_ai.usage.output_tokens": int64(3), "network.local.port": int64(40000), "server.port": int64(8000),
		"gen_ai.server.time_to_first_token": 0.01,
	}
	for k, v := range want {
		if attrs[k] != v {
			t.Errorf("%s = %v, want %v", k, attrs[k], v)
		}
	}
	if len(s.Events) != 3 || s.Events[1].Time.Sub(s.StartTime) != 20*time.Millisecond {
		t.Errorf("events %+v", s.Events)
	}
	// Past the limit: one compact attribute instead of events.
	l := spans[1]
	if len(l.Events) != 0 {
		t.Errorf("%d events on a 300-chunk span", len(l.Events))
	}
	found := false
	for _, a := range l.Attributes {
		if a.Key == "bpfbench.chunk_offsets_us" && len(a.Value.AsInt64Slice()) == 300 && a.Value.AsInt64Slice()[0] == 100 {
			found = true
		}
	}
	if !found {
		t.Error("no bpfbench.chunk_offsets_us")
	}
	if spans[2].Status.Code != codes.Error {
		t.Errorf("failed request status %v", spans[2].Status)
	}
}

func TestOTLPHTTPReceiver(t *testing.T) {
	var mu sync.Mutex
	var got []*collectorpb.ExportTraceServiceRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req collectorpb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, &req)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, err := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Write(out)
	}))
	defer srv.Close()

	// The test owns the OTLP environment: whatever the caller's shell set
	// is put aside for its duration (t.Setenv restores it).
	clearOTELEnv(t)
	if (Options{}).Enabled() {
		t.Fatal("OTLP export enabled with every OTEL_ variable unset")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	for _, o := range []Options{{Endpoint: srv.URL}, {}} {
		mu.Lock()
		got = nil
		mu.Unlock()
		e, err := New(context.Background(), o)
		if err != nil || e == nil {
			t.Fatalf("New(%+v): %v", o, err)
		}
		cfg, recs := records()
		hook := e.Hook(cfg)
		for i := range recs {
			hook(&recs[i])
		}
		if err := e.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := e.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown(%+v): %v", o, err)
		}
		mu.Lock()
		n := 0
		var svc string
		for _, r := range got {
			for _, rs := range r.ResourceSpans {
				for _, a := range rs.Resource.Attributes {
					if a.Key == "service.name" {
						svc = a.Value.GetStringValue()
					}
				}
				for _, ss := range rs.ScopeSpans {
					n += len(ss.Spans)
				}
			}
		}
		mu.Unlock()
		if n != 3 || svc != "bpfbench-loadgen" {
			t.Errorf("options %+v: receiver got %d spans from service %q", o, n, svc)
		}
	}
}

// clearOTELEnv unsets every OTEL_ variable for the rest of t.
func clearOTELEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "") // restored after t
			if err := os.Unsetenv(k); err != nil {
				t.Fatal(err)
			}
		}
	}
}
