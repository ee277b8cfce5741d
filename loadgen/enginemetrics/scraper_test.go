package enginemetrics

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A scrape that fails is counted with its reason, and the scraper keeps
// going.
func TestScrapeFailures(t *testing.T) {
	good, err := os.ReadFile("testdata/llamacpp.txt")
	if err != nil {
		t.Fatal(err)
	}
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String() + "/metrics"
	l.Close()

	cases := []struct {
		name    string
		handler http.HandlerFunc
		url     string
		want    string
	}{
		{"garbage", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte("this is { not prometheus text at all\n"))
		}, "", "not Prometheus text"},
		{"html", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte("<html><body>hello</body></html>"))
		}, "", "not Prometheus text"},
		{"empty", func(w http.ResponseWriter, r *http.Request) {}, "", "no metrics"},
		{"404", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, "", "404 Not Found"},
		{"slow", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
			w.Write(good)
		}, "", "no answer within 200ms"},
		{"refused", nil, refused, "connection refused"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := c.url
			if c.handler != nil {
				srv := httptest.NewServer(c.handler)
				defer srv.Close()
				u = srv.URL + "/metrics"
			}
			s, err := New(Config{URL: u, Period: 250 * time.Millisecond, Timeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			err = s.Scrape(context.Background())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
			if d := time.Since(t0); d > time.Second {
				t.Errorf("a failed scrape took %v", d)
			}
			r := s.Result()
			if r.Scrapes != 1 || r.Failures != 1 || r.LastError != err.Error() || r.FirstError != err.Error() || len(r.Samples) != 0 {
				t.Errorf("result %+v", r)
			}
			if perr := Probe(context.Background(), u, 300*time.Millisecond); perr == nil {
				t.Errorf("Probe accepted it")
			}
		})
	}
}

// Run goes on through failures (a 404, a slow answer) and samples once
// the endpoint answers; it returns when its context ends, leaving no
// goroutine behind.
func TestRunThroughFailures(t *testing.T) {
	good, err := os.ReadFile("testdata/llamacpp.txt")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			http.NotFound(w, r)
		case 2:
			select {
			case <-time.After(3 * time.Second):
			case <-r.Context().Done():
			}
		default:
			w.Write(good)
		}
	}))
	defer srv.Close()
	before := runtime.NumGoroutine()
	s, err := New(Config{URL: srv.URL + "/metrics", Period: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1600*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	r := s.Result()
	if r.Failures != 2 || !strings.Contains(r.FirstError, "404") || !strings.Contains(r.LastError, "no answer within") {
		t.Errorf("failures %d, first %q, last %q", r.Failures, r.FirstError, r.LastError)
	}
	if len(r.Samples) < 3 || r.Engine != EngineLlamaCpp {
		t.Errorf("%d samples of %q after the failures", len(r.Samples), r.Engine)
	}
	for i := 1; i < len(r.Samples); i++ {
		if d := time.Duration(r.Samples[i].Ns - r.Samples[i-1].Ns); d < 150*time.Millisecond {
			t.Errorf("samples %d and %d %v apart with a 250 ms period", i-1, i, d)
		}
	}
	srv.Close()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before {
		t.Errorf("%d goroutines after Run, %d before", g, before)
	}
}

// A Run cancelled while a scrape is in flight returns at once.
func TestRunCancelInFlight(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer srv.Close()
	s, _ := New(Config{URL: srv.URL, Period: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	time.Sleep(100 * time.Millisecond)
	t0 := time.Now()
	cancel()
	<-done
	if d := time.Since(t0); d > 200*time.Millisecond {
		t.Errorf("Run took %v to return after cancel", d)
	}
}
