package prom

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// Every link of the landing page answers, with and without profiling.
func TestLandingPageHasNoDeadLinks(t *testing.T) {
	for _, pprof := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"}))
		h, err := Handler(reg, Config{Name: "bpfbench", Version: "test", Pprof: pprof})
		if err != nil {
			t.Fatal(err)
		}
		code, body := get(t, h, "/")
		if code != http.StatusOK {
			t.Fatalf("landing page: %d", code)
		}
		links := regexp.MustCompile(`href="([^"#]+)"`).FindAllStringSubmatch(body, -1)
		if len(links) < 3 {
			t.Fatalf("pprof=%v: %d links on the landing page:\n%s", pprof, len(links), body)
		}
		sawPprof := false
		for _, l := range links {
			href := l[1]
			if strings.HasPrefix(href, "http") {
				continue // off-site (pprof.me)
			}
			if strings.Contains(href, "debug/pprof") {
				sawPprof = true
				if strings.Contains(href, "profile") {
					continue // a 60 s CPU profile: its route is checked below
				}
			}
			if !strings.HasPrefix(href, "/") {
				href = "/" + href
			}
			if code, _ := get(t, h, href); code != http.StatusOK {
				t.Errorf("pprof=%v: landing page links %s, which answers %d", pprof, href, code)
			}
		}
		if sawPprof != pprof {
			t.Errorf("pprof=%v but the landing page links profiles: %v", pprof, sawPprof)
		}
		if code, _ := get(t, h, "/debug/pprof/"); (code == http.StatusOK) != pprof {
			t.Errorf("pprof=%v: /debug/pprof/ answers %d", pprof, code)
		}
	}
}

func TestHealthAndReadiness(t *testing.T) {
	var ready atomic.Bool
	h, err := Handler(prometheus.NewRegistry(), Config{Name: "bpfbench", Ready: func() error {
		if !ready.Load() {
			return errors.New("targets not resolved yet")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, h, "/-/healthy"); code != http.StatusOK || !strings.Contains(body, "Healthy") {
		t.Errorf("/-/healthy: %d %q", code, body)
	}
	if code, body := get(t, h, "/-/ready"); code != http.StatusServiceUnavailable || !strings.Contains(body, "targets not resolved yet") {
		t.Errorf("/-/ready before ready: %d %q", code, body)
	}
	ready.Store(true)
	if code, body := get(t, h, "/-/ready"); code != http.StatusOK || !strings.Contains(body, "Ready") {
		t.Errorf("/-/ready: %d %q", code, body)
	}
}

// Serve answers on its listener and returns nil when its context ends.
func TestServeStopsWithContext(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "served", Help: "x"}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, reg, Config{Name: "bpfbench"}) }()
	resp, err := http.Get("http://" + l.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "served 0") {
		t.Errorf("/metrics: %s", b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after cancel: %v", err)
	}
}

// A client's connection that has sent nothing (Go's transport parks a
// spare one unused) holds the graceful shutdown to its deadline: Serve
// then closes it and still returns nil.
func TestServeStopsWithAnIdleNewConnection(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, prometheus.NewRegistry(), Config{Name: "bpfbench"}) }()
	resp, err := http.Get("http://" + l.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c, err := net.Dial("tcp", l.Addr().String()) // connected, nothing sent
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve with a connection that sent nothing: %v, want nil", err)
	}
}
