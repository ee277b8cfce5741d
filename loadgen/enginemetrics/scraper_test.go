package enginemetrics

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/clock"
	"github.com/bpfbench/bpfbench/internal/testutil"
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
	// The server's own account of each request, on the scraper's clock
	// (CLOCK_MONOTONIC): when it came and when the server was done with it.
	var (
		mu       sync.Mutex
		arr, end []int64
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arr = append(arr, clock.Now())
		n := len(arr)
		mu.Unlock()
		defer func() {
			mu.Lock()
			end = append(end, clock.Now())
			mu.Unlock()
		}()
		switch n {
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
	const period = 250 * time.Millisecond
	s, err := New(Config{URL: srv.URL + "/metrics", Period: period})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1600*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	t0 := time.Now()
	go func() { s.Run(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	ran := time.Since(t0) // at least the life of Run's ticker
	srv.Close()           // every handler has returned
	r := s.Result()
	if r.Failures != 2 || !strings.Contains(r.FirstError, "404") || !strings.Contains(r.LastError, "no answer within") {
		t.Errorf("failures %d, first %q, last %q", r.Failures, r.FirstError, r.LastError)
	}
	if len(r.Samples) < 3 || r.Engine != EngineLlamaCpp {
		t.Errorf("%d samples of %q after the failures", len(r.Samples), r.Engine)
	}
	// Paced by the period: a ticker alive for at most ran ticks at most
	// ran/period times, so Run scraped at most 1+ran/period times, as the
	// server counted (a retry at once after a failure would be more).
	mu.Lock()
	defer mu.Unlock()
	most := 1 + int(ran/period)
	if len(arr) > most || r.Scrapes > most {
		t.Errorf("the server saw %d requests and the scraper counts %d scrapes in %v, more than %d at one per %v", len(arr), r.Scrapes, ran, most, period)
	}
	// Each sample is its own scrape's, the third request on: its time lies
	// after the server was done with the request before and before the
	// server saw the next one (the scrapes run one after the other).
	if len(r.Samples) > len(arr)-2 {
		t.Errorf("%d samples from %d answered requests", len(r.Samples), len(arr)-2)
	}
	for i, smp := range r.Samples {
		k := i + 2 // index of its request
		if k >= len(arr) {
			break
		}
		if smp.Ns < end[k-1] || (k+1 < len(arr) && smp.Ns > arr[k+1]) {
			next := "none"
			if k+1 < len(arr) {
				next = fmt.Sprint(arr[k+1])
			}
			t.Errorf("sample %d at %d ns, outside its scrape as the server saw it: after the request before ended at %d, before the next came at %s", i, smp.Ns, end[k-1], next)
		}
	}
	testutil.Until(2*time.Second, func() bool { return runtime.NumGoroutine() <= before })
	if g := runtime.NumGoroutine(); g > before {
		t.Errorf("%d goroutines after Run, %d before", g, before)
	}
}

// A Run cancelled while a scrape is in flight returns at once: it
// abandons the request (rather than waiting for the scrape's timeout) and
// returns before its next tick. The server stalls until the request is
// abandoned and measures for how long.
func TestRunCancelInFlight(t *testing.T) {
	arrived := make(chan struct{}, 1)
	stalled := make(chan time.Duration, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		arrived <- struct{}{}
		<-r.Context().Done()
		stalled <- time.Since(t0)
	}))
	defer srv.Close()
	const period = time.Second
	s, _ := New(Config{URL: srv.URL, Period: period})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	started := time.Now() // before Run made its ticker: its next tick comes after started+period
	go func() { s.Run(ctx); close(done) }()
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the scrape never reached the server")
	}
	t0 := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	returned := time.Now()
	var stall time.Duration
	select {
	case stall = <-stalled:
	case <-time.After(5 * time.Second):
		t.Fatal("the server's request was never abandoned")
	}
	if tick := started.Add(period); !returned.Before(tick) {
		t.Errorf("Run returned %v after cancel, at or after its next tick (%v after cancel): it waited for the tick", returned.Sub(t0), tick.Sub(t0))
	}
	r := s.Result()
	if r.Scrapes != 1 || r.Failures != 1 || !strings.Contains(r.LastError, context.Canceled.Error()) {
		t.Errorf("scrapes %d, failures %d, last error %q: want the one scrape abandoned by the cancel, not by its %v timeout", r.Scrapes, r.Failures, r.LastError, r.Timeout)
	}
	t.Logf("Run returned %v after cancel; the server stalled %v in all", returned.Sub(t0), stall)
}
