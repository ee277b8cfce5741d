package prom

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Config.Routes are served beside /metrics, method patterns included.
func TestRoutesServedBesideMetrics(t *testing.T) {
	h, err := Handler(prometheus.NewRegistry(), Config{Name: "bpfbench", Routes: map[string]http.Handler{
		"GET /api/v1/clock": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("tick")) }),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, h, "/api/v1/clock"); code != http.StatusOK || body != "tick" {
		t.Fatalf("GET /api/v1/clock: %d %q", code, body)
	}
	if code, _ := get(t, h, "/metrics"); code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
}
