package run

import (
	"log/slog"
	"testing"

	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// A gRPC target's metrics are looked for on Triton's metrics port, not on
// the gRPC port (an HTTP/2-only listener that would refuse the scrape).
func TestServerMetricsURLOfGRPCTarget(t *testing.T) {
	for target, want := range map[string]string{
		"127.0.0.1:1":        "http://127.0.0.1:8002/metrics",
		"grpc://10.0.0.2:81": "http://10.0.0.2:8002/metrics",
	} {
		sm, err := NewServerMetrics(t.Context(), RunConfig{Load: loadgen.Config{Target: transport.Options{URL: target, Protocol: transport.ProtocolKServeGRPC}}}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if sm.url != want {
			t.Errorf("%s: server metrics at %q, want %q", target, sm.url, want)
		}
	}
}
