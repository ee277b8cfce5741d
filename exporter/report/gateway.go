package report

import (
	"fmt"
	"strings"
)

// gatewayLines are the terminal's and the page's "Gateway" lines.
func (d doc) gatewayLines() []string {
	g := d.Gateway
	if g == nil {
		return nil
	}
	out := []string{fmt.Sprintf("gateway pid %v (%s): %d of %d requests matched to an engine connection, %d of %d chunks timed on every leg",
		g.Pids, g.Comm, g.Requests, g.Requests+g.RequestsUnmatched, g.Chunks, g.ChunksSeen)}
	for _, h := range g.Hops {
		l := fmt.Sprintf("%s: mean %s, p50 %s, p99 %s per chunk", h.Name, fmtMs(h.MeanMs), fmtMs(h.P50Ms), fmtMs(h.P99Ms))
		if h.Name == "gateway → client" && g.InlineGatewaySends > 0 {
			l += fmt.Sprintf(" (%d chunks sent inline with their arrival: below resolution)", g.InlineGatewaySends)
		}
		out = append(out, l)
	}
	b := fmt.Sprintf("%.2f engine sends per gateway send, %.1f client arrivals per request", g.EngineSendsPerGatewaySend, g.ArrivalsPerRequest)
	if g.Buffering {
		b += ": the gateway sends in bursts (buffering)"
	}
	out = append(out, b)
	t := g.Throughput
	l := fmt.Sprintf("throughput at the gateway %.2f req/s, %.1f tok/s", t.GatewayRequestsPerS, t.GatewayTokensPerS)
	switch t.EngineSource {
	case "server_metrics":
		l += fmt.Sprintf("; at the engine (its /metrics) %.1f tok/s", t.EngineTokensPerS)
		if t.EngineRequestsPerS > 0 {
			l += fmt.Sprintf(", %.2f req/s", t.EngineRequestsPerS)
		}
	default:
		l += fmt.Sprintf("; at the engine (its sends) %.1f sends/s", t.EngineSendsPerS)
	}
	out = append(out, l)
	for _, bp := range g.Backpressure {
		var kinds []string
		for k, n := range bp.Kinds {
			kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
		}
		out = append(out, fmt.Sprintf("backpressure on the %s connections: %s (%s), requests %v", bp.Connection, fmtMs(bp.Ms), strings.Join(kinds, ", "), bp.Requests))
	}
	return out
}
