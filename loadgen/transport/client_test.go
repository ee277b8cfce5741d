package transport

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sync"
	"testing"
)

var traceparentRE = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`)

// sseServer answers every request with completionEvents' completions stream and
// keeps the traceparent header each request came with ("-" for none).
func sseServer(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tp := "-"
		if vs := r.Header.Values("Traceparent"); len(vs) > 0 {
			tp = vs[0]
			if len(vs) > 1 {
				tp = fmt.Sprintf("%d headers", len(vs))
			}
		}
		mu.Lock()
		seen = append(seen, tp)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range completionEvents(3, 5) {
			fmt.Fprintf(w, "data: %s\n\n", ev)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// Every request carries a traceparent of its own on both transports, and
// its Record keeps the ids and what the server said of the response.
func TestTraceparent(t *testing.T) {
	for _, netHTTP := range transports() {
		t.Run(transportName(netHTTP), func(t *testing.T) {
			srv, seen := sseServer(t)
			c, err := NewClient(Options{URL: srv.URL, Endpoint: EndpointCompletions, Model: "m", NetHTTP: netHTTP})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if (c.raw == nil) != netHTTP {
				t.Fatalf("raw transport %v for NetHTTP %v", c.raw != nil, netHTTP)
			}
			recs := make([]Record, 3)
			for i := range recs {
				c.Do(context.Background(), &Request{Prompt: "x", OutputLen: 3}, &recs[i])
			}
			got := seen()
			if len(got) != len(recs) {
				t.Fatalf("server saw %d requests", len(got))
			}
			ids := map[string]bool{}
			for i, rec := range recs {
				if !rec.Success {
					t.Fatalf("request %d: %s", i, rec.Error)
				}
				if !traceparentRE.MatchString(got[i]) || got[i] != traceparent(&rec) {
					t.Errorf("request %d: server saw traceparent %q, record has %q/%q", i, got[i], rec.TraceID, rec.SpanID)
				}
				if ids[rec.TraceID] || ids[rec.SpanID] {
					t.Errorf("request %d: ids %s/%s repeat", i, rec.TraceID, rec.SpanID)
				}
				ids[rec.TraceID], ids[rec.SpanID] = true, true
				if rec.ResponseID != "cmpl-x" || rec.ResponseModel != "tiny" || !slices.Equal(rec.FinishReasons, []string{"length"}) {
					t.Errorf("request %d: response %q, model %q, finish reasons %q", i, rec.ResponseID, rec.ResponseModel, rec.FinishReasons)
				}
			}
			// A trace context set by the caller is the one sent.
			rec := Record{TraceID: "0af7651916cd43dd8448eb211c80319c", SpanID: "b7ad6b7169203331"}
			c.Do(context.Background(), &Request{Prompt: "x", OutputLen: 3}, &rec)
			if g := seen(); g[len(g)-1] != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
				t.Errorf("caller's trace context: server saw %q", g[len(g)-1])
			}
		})
	}
}

// NoTraceparent, and a traceparent header of the user's (empty: none).
func TestTraceparentOff(t *testing.T) {
	for _, netHTTP := range transports() {
		for _, tc := range []struct {
			name string
			opts Options
			want string
		}{
			{"no-traceparent", Options{NoTraceparent: true}, "-"},
			{"empty-header", Options{Headers: http.Header{"Traceparent": {""}}}, "-"},
			{"own-header", Options{Headers: http.Header{"traceparent": {"00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"}}}, "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"},
		} {
			t.Run(transportName(netHTTP)+"/"+tc.name, func(t *testing.T) {
				srv, seen := sseServer(t)
				o := tc.opts
				o.URL, o.Endpoint, o.Model, o.NetHTTP = srv.URL, EndpointCompletions, "m", netHTTP
				c, err := NewClient(o)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				var rec Record
				c.Do(context.Background(), &Request{Prompt: "x", OutputLen: 3}, &rec)
				if !rec.Success {
					t.Fatal(rec.Error)
				}
				if g := seen(); len(g) != 1 || g[0] != tc.want {
					t.Errorf("server saw %q, want %q", g, tc.want)
				}
				if rec.TraceID != "" || rec.SpanID != "" {
					t.Errorf("record has trace context %q/%q that was not sent", rec.TraceID, rec.SpanID)
				}
			})
		}
	}
}

// The response's id and model come from the first chunk, the finish
// reasons from every choice that has one, escapes undone.
func TestScanMeta(t *testing.T) {
	var rec Record
	var s streamState
	s.reset(&rec, true)
	for _, ev := range []string{
		`{"id":"chatcmpl-\u0041b","object":"chat.completion.chunk","model":"org/m\/1","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`{"id":"other","model":"other","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null},{"index":1,"delta":{"content":"b"},"finish_reason":"stop"}]}`,
		`{"id":"other","model":"other","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`,
		`[DONE]`,
	} {
		s.feed([]byte("data: "+ev+"\n\n"), 1)
	}
	if rec.ResponseID != "chatcmpl-Ab" || rec.ResponseModel != "org/m/1" || !slices.Equal(rec.FinishReasons, []string{"stop", "length"}) {
		t.Errorf("response %q, model %q, finish reasons %q", rec.ResponseID, rec.ResponseModel, rec.FinishReasons)
	}
}
