package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/session"
)

// Fuzz targets of the session API's outside input: the span stream a
// client reads from an agent, the session request an agent reads from a
// client, and pod references. `make fuzz` runs each for a bounded time;
// `make test` runs their seeds.

// streamBody answers every request with the body.
type streamBody []byte

func (b streamBody) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: http.Header{"Content-Type": {"application/x-ndjson"}},
		Body: io.NopCloser(bytes.NewReader(b)), Request: r}, nil
}

// FuzzSpanStream: a client follows any span stream to its end: a
// complete session when the stream ends with the end heartbeat, else a
// *StreamError; the spans it delivers are the stream's spans up to that
// end, mapped onto the local clock.
func FuzzSpanStream(f *testing.F) {
	f.Add([]byte(`{"spans":[{"Kind":1,"Start":100,"End":200,"Tid":7}]}`+"\n"+`{"heartbeat":{"mono_ns":300,"lost":1,"dropped":2,"sent":1}}`+"\n"+`{"heartbeat":{"mono_ns":400,"sent":1,"end":true,"end_ns":350,"reason":"stopped"}}`+"\n"), int64(50))
	f.Add([]byte(`{"spans":[{"Kind":3,"Start":1,"End":2,"WakeTs":1,"Detail":"x"},{"Kind":2,"Start":5,"End":9}]}`+"\n"), int64(-7))
	f.Add([]byte(`{"heartbeat":{"end":true}}`+"\n"+`{"spans":[{"Start":1,"End":2}]}`+"\n"), int64(0))
	f.Add([]byte("{\"spans\":[]}\n\n{not json}\n"), int64(1))
	f.Add([]byte(`{"spans":null,"heartbeat":null}`), int64(1<<62))
	f.Fuzz(func(t *testing.T, body []byte, offset int64) {
		want, wantEnd := referenceStream(body)
		c := NewClient("agent.invalid:9464", ClientOptions{HTTP: &http.Client{Transport: streamBody(body)},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		s := &Session{c: c, spans: make(chan []collectors.Span, 64), done: make(chan struct{}), offset: offset}
		s.Info.ID = "f"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		go s.follow(ctx)
		var got []collectors.Span
		for batch := range s.Spans() {
			got = append(got, batch...)
		}
		<-s.Done()
		if ctx.Err() != nil {
			t.Fatal("the stream did not end")
		}
		err := s.Err()
		var se *StreamError
		switch {
		case wantEnd && err != nil:
			t.Fatalf("a stream with its end heartbeat failed: %v", err)
		case !wantEnd && !errors.As(err, &se):
			t.Fatalf("a stream without its end heartbeat: error %v, want a *StreamError", err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d spans delivered, the stream holds %d", len(got), len(want))
		}
		for i := range got {
			w := want[i]
			w.Start -= offset
			w.End -= offset
			if w.WakeTs != 0 {
				w.WakeTs -= offset
			}
			if got[i].Start != w.Start || got[i].End != w.End || got[i].WakeTs != w.WakeTs || got[i].Tid != w.Tid || got[i].Kind != w.Kind {
				t.Fatalf("span %d: %+v, want %+v", i, got[i], w)
			}
		}
	})
}

// referenceStream reads the stream's lines as the protocol defines them:
// the spans up to the end heartbeat or the first line that is not a Line.
func referenceStream(body []byte) ([]collectors.Span, bool) {
	var spans []collectors.Span
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var l Line
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			return spans, false
		}
		spans = append(spans, l.Spans...)
		if l.Heartbeat != nil && l.Heartbeat.End {
			return spans, true
		}
	}
	return spans, false
}

// failingSection is a required section that cannot be built: a session
// request that gets that far is answered 500 and leaves nothing running.
var failingSection = []session.SectionFactory{{Name: "refused", Required: true, New: func(collectors.Options) (collectors.Section, error) {
	return nil, errors.New("refused by the fuzz test")
}}}

// FuzzStartRequest: any body of POST /api/v1/sessions is answered with an
// error status and a JSON error naming the problem (the sections of this
// server cannot be built, so no session starts), never a panic, and
// leaves no session behind.
func FuzzStartRequest(f *testing.F) {
	for _, s := range []string{
		`{"pid":1}`,
		`{"pid":1,"tcp_port":8000,"cuda_libs":["/usr/lib/x86_64-linux-gnu/libcuda.so.1"]}`,
		`{"port":1}`,
		`{"cgroup":"/system.slice/none.service"}`,
		`{"pod":{"namespace":"llm","name":"vllm-0","container":"engine"}}`,
		`{"pod":{"namespace":"LLM","name":"x"}}`,
		`{"pid":1,"port":2}`,
		`{"pid":-5}`,
		`{"pid":1,"tcp_port":70000}`,
		`{"pid":1,"unknown":true}`,
		`{}`,
		`[`,
	} {
		f.Add([]byte(s))
	}
	srv, err := NewServer(failingSection, Limits{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	srv.SetPodResolver(func(ctx context.Context, ref PodRef) (int, PodRef, error) {
		return 0, ref, ErrPodNotFound
	})
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, PathSessions, bytes.NewReader(body)))
		if w.Code < 400 || w.Code > 599 {
			t.Fatalf("answered %d to %q", w.Code, body)
		}
		var e ErrorResponse
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" {
			t.Fatalf("answer %d %q is not a JSON error (%v)", w.Code, w.Body.Bytes(), err)
		}
		if n := srv.Active(); n != 0 {
			t.Fatalf("%d sessions left", n)
		}
	})
}

// FuzzParsePodRef: a pod reference that parses is valid and prints as it
// was written (less a trailing slash).
func FuzzParsePodRef(f *testing.F) {
	for _, s := range []string{"llm/vllm-0", "llm/vllm-0/engine", "a/b/c/d", "/x", "LLM/x", "ns/pod.name-1/c", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePodRef(s)
		if err != nil {
			if !strings.Contains(err.Error(), "pod ") {
				t.Fatalf("error %q does not say it is about the pod", err)
			}
			return
		}
		// NAMESPACE/POD/ is NAMESPACE/POD: an empty container is none.
		if p.Validate() != nil || p.String() != strings.TrimSuffix(s, "/") && p.String() != s {
			t.Fatalf("ParsePodRef(%q) = %+v, printed %q", s, p, p.String())
		}
	})
}
