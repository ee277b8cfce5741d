package pipeline

import (
	"testing"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/loadgen"
)

// Two requests through a gateway that sends every second engine chunk:
// each request is matched to its own upstream connection, every hop is
// timed from the sends and arrivals, and the bursts read as buffering.
func TestGatewayHops(t *testing.T) {
	const ms = int64(1e6)
	const engine, gw = 100, 200
	g := newGatewayStream(engine, []int{gw})
	g.record(collectors.Span{Kind: collectors.SpanOffCPU, Tid: 101, Tgid: engine})
	g.record(collectors.Span{Kind: collectors.SpanOffCPU, Tid: 201, Tgid: gw})
	res := &loadgen.Result{StartNs: 0, EndNs: 1000 * ms}
	for i, base := range []int64{0, 500 * ms} {
		pc, up := uint16(40000+i), uint16(50000+i)
		rec := loadgen.Record{Index: i, StartNs: base, EndNs: base + 100*ms, Success: true, LocalPort: int(pc)}
		for k := int64(1); k <= 4; k++ {
			se := base + 10*k*ms
			g.record(collectors.Span{Kind: collectors.SpanSend, Start: se, End: se, Tid: 101, Port: up, Bytes: 10})
			if k%2 == 0 {
				sg := se + 2*ms
				g.record(collectors.Span{Kind: collectors.SpanSend, Start: sg, End: sg, Tid: 201, Port: pc, Bytes: 20})
				g.record(collectors.Span{Kind: collectors.SpanArrival, Start: sg + ms, End: sg + ms, LocalPort: pc, Client: true, Bytes: 20})
				rec.ChunkNs = append(rec.ChunkNs, sg+4*ms)
			}
		}
		res.Records = append(res.Records, rec)
	}
	g.record(collectors.Span{Kind: collectors.SpanTCP, Start: 550 * ms, End: 560 * ms, Port: 50001, Blocking: true, Detail: "zero_window"})
	out := g.report(res, "nginx", []int{gw}, nil)
	if out.Requests != 2 || out.RequestsUnmatched != 0 || out.Chunks != 4 {
		t.Fatalf("requests %d unmatched %d chunks %d", out.Requests, out.RequestsUnmatched, out.Chunks)
	}
	for i, want := range []float64{2, 1, 3} {
		if h := out.Hops[i]; h.P50Ms != want || h.Count != 4 {
			t.Errorf("%s: %+v, want p50 %v ms", h.Name, h, want)
		}
	}
	if out.PerRequest[1].UpstreamPort != 50001 || out.EngineSendsPerGatewaySend != 2 || !out.Buffering {
		t.Errorf("per request %+v, ratio %v, buffering %v", out.PerRequest, out.EngineSendsPerGatewaySend, out.Buffering)
	}
	if len(out.Backpressure) != 1 || out.Backpressure[0].Connection != "upstream" || out.Backpressure[0].Requests[0] != 1 {
		t.Errorf("backpressure %+v", out.Backpressure)
	}
	if out.Throughput.EngineSource != "engine sends" || out.Throughput.GatewayRequestsPerS != 2 {
		t.Errorf("throughput %+v", out.Throughput)
	}
}
