package otlp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	metricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/transport"
)

func records() (*loadgen.Config, []loadgen.Record) {
	cfg := loadgen.DefaultConfig()
	cfg.Target.URL = "http://127.0.0.1:8000"
	cfg.Target.Endpoint = transport.EndpointChat
	cfg.Target.Model = "m1"
	now := loadgen.Mono()
	ok := loadgen.Record{Index: 0, RequestID: "r0", PromptLen: 10, UsagePromptTokens: 11, MaxTokens: 3, StartNs: now, EndNs: now + 40e6,
		ChunkNs: []int64{now + 10e6, now + 20e6, now + 30e6}, LastNs: now + 30e6, OutputTokens: 3, LocalPort: 40000, Status: 200, Success: true, TokenSource: "usage",
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
		ResponseID: "chatcmpl-0", ResponseModel: "m1-2025", FinishReasons: []string{"length"}}
	long := ok
	long.RequestID = "r1"
	long.TraceID, long.SpanID = "", ""
	long.OutputTokens = 300
	long.ChunkNs = make([]int64, 300)
	for i := range long.ChunkNs {
		long.ChunkNs[i] = now + int64(i+1)*1e5 + int64(i%7)*1e4
	}
	bad := loadgen.Record{Index: 2, RequestID: "r2", StartNs: now, EndNs: now + 5e6, Status: 500, Failure: transport.FailHTTPStatus, Error: "HTTP 500"}
	cut := loadgen.Record{Index: 3, RequestID: "r3", PromptLen: 7, StartNs: now, EndNs: now + 7e6, ChunkNs: []int64{now + 2e6}, Status: 200, Failure: transport.FailCut, Error: "connection cut mid-stream"}
	warm := ok
	warm.RequestID, warm.Warmup = "warmup-0", true
	return &cfg, []loadgen.Record{ok, long, bad, cut, warm}
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
	if len(spans) != len(recs) {
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
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "m1",
		"gen_ai.usage.input_tokens": int64(11), "gen_ai.usage.output_tokens": int64(3), "gen_ai.request.stream": true,
		"gen_ai.response.id": "chatcmpl-0", "gen_ai.response.model": "m1-2025",
		"gen_ai.response.time_to_first_chunk": 0.01, "bpfbench.request.id": "r0",
		"network.local.port": int64(40000), "server.address": "127.0.0.1", "server.port": int64(8000),
		"http.response.status_code": int64(200),
	}
	for k, v := range want {
		if attrs[k] != v {
			t.Errorf("%s = %v, want %v", k, attrs[k], v)
		}
	}
	if fr, _ := attrs["gen_ai.response.finish_reasons"].([]string); len(fr) != 1 || fr[0] != "length" {
		t.Errorf("gen_ai.response.finish_reasons = %v", attrs["gen_ai.response.finish_reasons"])
	}
	// Not the conventions' names, or no longer: gone.
	for _, k := range []string{"gen_ai.system", "gen_ai.request.id", "gen_ai.server.time_to_first_token", "error.type"} {
		if v, ok := attrs[k]; ok {
			t.Errorf("%s = %v on a successful span", k, v)
		}
	}
	// The span is the request's: the trace context it was sent with.
	if s.SpanContext.TraceID().String() != recs[0].TraceID || s.SpanContext.SpanID().String() != recs[0].SpanID || s.Parent.IsValid() {
		t.Errorf("span %s/%s (parent %v), request sent with %s/%s", s.SpanContext.TraceID(), s.SpanContext.SpanID(), s.Parent, recs[0].TraceID, recs[0].SpanID)
	}
	if !spans[1].SpanContext.TraceID().IsValid() || spans[1].SpanContext.TraceID() == s.SpanContext.TraceID() {
		t.Errorf("a record without a trace context got trace id %s", spans[1].SpanContext.TraceID())
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
	for i, want := range map[int]string{2: "500", 3: "cut"} {
		var et string
		for _, a := range spans[i].Attributes {
			if a.Key == "error.type" {
				et = a.Value.AsString()
			}
		}
		if spans[i].Status.Code != codes.Error || et != want {
			t.Errorf("failed request %d: status %v, error.type %q, want %q", i, spans[i].Status, et, want)
		}
	}
}

// The GenAI client metrics count and sum exactly what the records hold.
func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	e := NewWithExporters(nil, reader, Options{})
	defer e.Shutdown(context.Background())
	cfg, recs := records()
	for i := range recs {
		e.Export(cfg, &recs[i])
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	type hist struct {
		count uint64
		sum   float64
		attrs attribute.Set
	}
	got := map[string][]hist{}
	units := map[string]string{}
	var bounds []float64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			units[m.Name] = m.Unit
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					got[m.Name] = append(got[m.Name], hist{dp.Count, dp.Sum, dp.Attributes})
					if m.Name == "gen_ai.client.operation.duration" {
						bounds = dp.Bounds
					}
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					got[m.Name] = append(got[m.Name], hist{dp.Count, float64(dp.Sum), dp.Attributes})
				}
			default:
				t.Errorf("%s: %T", m.Name, m.Data)
			}
		}
	}
	// What the records say, summed in the order they were exported
	// (the warm-up request is left out).
	ok, long, bad, cut := recs[0], recs[1], recs[2], recs[3]
	var tpoc float64
	var nTPOC uint64
	for _, r := range []loadgen.Record{ok, long} {
		for i := 1; i < len(r.ChunkNs); i++ {
			tpoc += float64(r.ChunkNs[i]-r.ChunkNs[i-1]) / 1e9
			nTPOC++
		}
	}
	sec := func(ns int64) float64 { return float64(ns) / 1e9 }
	cases := []struct {
		name, unit string
		filter     func(attribute.Set) bool
		count      uint64
		sum        float64
	}{
		{"gen_ai.client.operation.duration", "s", noError, 2, sec(ok.EndNs-ok.StartNs) + sec(long.EndNs-long.StartNs)},
		{"gen_ai.client.operation.duration", "s", errorType("500"), 1, sec(bad.EndNs - bad.StartNs)},
		{"gen_ai.client.operation.duration", "s", errorType("cut"), 1, sec(cut.EndNs - cut.StartNs)},
		{"gen_ai.client.token.usage", "{token}", tokenType("input"), 2, 22},
		{"gen_ai.client.token.usage", "{token}", tokenType("output"), 2, 303},
		{"gen_ai.client.operation.time_to_first_chunk", "s", noError, 2, sec(ok.TTFTNs()) + sec(long.TTFTNs())},
		{"gen_ai.client.operation.time_per_output_chunk", "s", noError, nTPOC, tpoc},
	}
	for i, c := range cases {
		var n uint64
		var sum float64
		for _, h := range got[c.name] {
			if c.filter(h.attrs) {
				n += h.count
				sum += h.sum
				for _, k := range []attribute.Key{"gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model", "gen_ai.response.model", "server.address", "server.port"} {
					if _, ok := h.attrs.Value(k); !ok && (k != "gen_ai.response.model" || noError(h.attrs)) {
						t.Errorf("%s: no %s in %v", c.name, k, h.attrs.ToSlice())
					}
				}
			}
		}
		if n != c.count || sum != c.sum || units[c.name] != c.unit {
			t.Errorf("%s (case %d): count %d sum %v unit %q, want %d %v %q", c.name, i, n, sum, units[c.name], c.count, c.sum, c.unit)
		}
	}
	if len(bounds) != 14 || bounds[0] != 0.01 || bounds[13] != 81.92 {
		t.Errorf("operation duration buckets %v", bounds)
	}
}

func noError(s attribute.Set) bool { _, ok := s.Value("error.type"); return !ok }

func errorType(v string) func(attribute.Set) bool {
	return func(s attribute.Set) bool { e, _ := s.Value("error.type"); return e.AsString() == v }
}

func tokenType(v string) func(attribute.Set) bool {
	return func(s attribute.Set) bool { e, _ := s.Value("gen_ai.token.type"); return e.AsString() == v }
}

// A server that traces sees our span as its parent: the traceparent it
// got names the span the request was exported as.
func TestTraceparentJoins(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Traceparent")] = true
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, "data: {\"id\":\"cmpl-%d\",\"model\":\"m\",\"choices\":[{\"text\":\"a\",\"finish_reason\":null}]}\n\n", i)
		}
		fmt.Fprint(w, "data: {\"id\":\"cmpl-3\",\"model\":\"m\",\"choices\":[{\"text\":\"\",\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	for _, netHTTP := range []bool{false, true} {
		mem := tracetest.NewInMemoryExporter()
		e := NewWithSpanExporter(mem, Options{})
		cfg := loadgen.DefaultConfig()
		cfg.Target.URL, cfg.Target.Model, cfg.Scenario.NumRequests, cfg.Target.NetHTTP = srv.URL, "m", 4, netHTTP
		cfg.Scenario.Dataset.OutputLen = 3
		cfg.Output.OnRecord = e.Hook(&cfg)
		res, err := loadgen.Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Metrics.Completed != 4 {
			t.Fatalf("net/http %v: %v", netHTTP, res.Failures())
		}
		if err := e.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		spans := mem.GetSpans()
		if len(spans) != 4 {
			t.Fatalf("net/http %v: %d spans", netHTTP, len(spans))
		}
		mu.Lock()
		for _, s := range spans {
			tp := "00-" + s.SpanContext.TraceID().String() + "-" + s.SpanContext.SpanID().String() + "-01"
			if !seen[tp] {
				t.Errorf("net/http %v: span %s was not the parent of any request the server saw (%v)", netHTTP, tp, seen)
			}
		}
		mu.Unlock()
		e.Shutdown(context.Background())
	}
}

// Both signals reach an OTLP/HTTP collector, from the options' endpoint
// or the environment's, and each can be turned off.
func TestOTLPHTTPReceiver(t *testing.T) {
	var mu sync.Mutex
	var spans, points int
	var svc string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var out proto.Message
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/v1/traces":
			var req collectorpb.ExportTraceServiceRequest
			if err := proto.Unmarshal(b, &req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			for _, rs := range req.ResourceSpans {
				for _, a := range rs.Resource.Attributes {
					if a.Key == "service.name" {
						svc = a.Value.GetStringValue()
					}
				}
				for _, ss := range rs.ScopeSpans {
					spans += len(ss.Spans)
				}
			}
			out = &collectorpb.ExportTraceServiceResponse{}
		case "/v1/metrics":
			var req metricspb.ExportMetricsServiceRequest
			if err := proto.Unmarshal(b, &req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			// Cumulative: every export (Flush, Shutdown) holds the count
			// so far.
			n := 0
			for _, rm := range req.ResourceMetrics {
				for _, sm := range rm.ScopeMetrics {
					for _, m := range sm.Metrics {
						if m.Name == "gen_ai.client.operation.duration" {
							for _, dp := range m.GetHistogram().GetDataPoints() {
								n += int(dp.Count)
							}
						}
					}
				}
			}
			points = n
			out = &metricspb.ExportMetricsServiceResponse{}
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		ob, err := proto.Marshal(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Write(ob)
	}))
	defer srv.Close()

	// The test owns the OTLP environment: whatever the caller's shell set
	// is put aside for its duration (t.Setenv restores it).
	clearOTELEnv(t)
	if (Options{}).Enabled() {
		t.Fatal("OTLP export enabled with every OTEL_ variable unset")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	for _, tc := range []struct {
		name          string
		opts          Options
		env           map[string]string
		spans, points int
	}{
		{"option", Options{Endpoint: srv.URL}, nil, 5, 4},
		{"option-traces-path", Options{Endpoint: srv.URL + "/v1/traces"}, nil, 5, 4},
		{"env", Options{}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL}, 5, 4},
		{"env-per-signal", Options{}, map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": srv.URL + "/v1/traces", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": srv.URL + "/v1/metrics"}, 5, 4},
		{"traces-only", Options{}, map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": srv.URL + "/v1/traces"}, 5, 0},
		{"metrics-off", Options{Endpoint: srv.URL}, map[string]string{"OTEL_METRICS_EXPORTER": "none"}, 5, 0},
		{"traces-off", Options{Endpoint: srv.URL}, map[string]string{"OTEL_TRACES_EXPORTER": "none"}, 0, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			mu.Lock()
			spans, points, svc = 0, 0, ""
			mu.Unlock()
			e, err := New(context.Background(), tc.opts)
			if err != nil || e == nil {
				t.Fatalf("New(%+v): %v", tc.opts, err)
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
				t.Errorf("Shutdown: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if spans != tc.spans || (spans > 0 && svc != "bpfbench-loadgen") || points != tc.points {
				t.Errorf("receiver got %d spans from service %q and %d operations, want %d spans and %d", spans, svc, points, tc.spans, tc.points)
			}
		})
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
