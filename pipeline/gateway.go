package pipeline

import (
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/enginemetrics"
	"github.com/bpfbench/bpfbench/result"
)

// gatewayRule is how the gateway section matches chunks and connections
// across the hop, as result.json states it.
const gatewayRule = "a request's client connection is its local port within [start, end]; its engine-side connection is, " +
	"in request start order, the engine connection (the engine's sends to a port that is no client's) not busy with an " +
	"earlier request that carried the most bytes within the request's window (one upstream connection per request, or " +
	"keepalive: a connection is busy until its last send for the request it was given). Per chunk k: c = the client's read, " +
	"r = the latest arrival on the client port at or before c, s_g = the latest gateway send on it at or before r + 200µs " +
	"(sends over loopback are stamped after their own arrival), s_e = the latest engine send on the upstream connection " +
	"at or before s_g + 200µs. Hops: engine → gateway = s_g − s_e (the gateway's buffering included), " +
	"gateway → client = r − s_g, client = c − r, each floored at 0 (inline_gateway_sends: the chunks whose gateway send " +
	"was stamped after the client's arrival, loopback's inline receive: their gateway → client hop is below resolution)."

// gatewaySlack is how far after the later event a send may be stamped
// and still be the earlier event's (the send stamped as sendmsg returns,
// after its receive ran inline).
const gatewaySlack = 200_000

// maxGatewaySpans bounds the sends, arrivals and episodes kept for the
// gateway section; the rest are counted.
const maxGatewaySpans = 1 << 21

// gatewayStream keeps what the per-hop figures need: every send, client
// arrival and blocking TCP episode, and each thread's process. Its
// methods run under the runStream's lock.
type gatewayStream struct {
	via      map[uint32]bool
	engine   uint32
	tgid     map[uint32]uint32
	sends    []collectors.Span
	arrivals []collectors.Span
	episodes []collectors.Span
	dropped  uint64
}

func newGatewayStream(engine int, via []int) *gatewayStream {
	g := &gatewayStream{via: map[uint32]bool{}, engine: uint32(engine), tgid: map[uint32]uint32{}}
	for _, p := range via {
		g.via[uint32(p)] = true
	}
	return g
}

func (g *gatewayStream) record(sp collectors.Span) {
	switch sp.Kind {
	case collectors.SpanRunqueue, collectors.SpanOffCPU:
		if sp.Tgid != 0 && !sp.Client {
			g.tgid[sp.Tid] = sp.Tgid
		}
		return
	case collectors.SpanSend, collectors.SpanArrival:
	case collectors.SpanTCP:
		if !sp.Blocking {
			return
		}
	default:
		return
	}
	if len(g.sends)+len(g.arrivals)+len(g.episodes) >= maxGatewaySpans {
		g.dropped++
		return
	}
	switch sp.Kind {
	case collectors.SpanSend:
		g.sends = append(g.sends, sp)
	case collectors.SpanArrival:
		g.arrivals = append(g.arrivals, sp)
	default:
		g.episodes = append(g.episodes, sp)
	}
}

// processOf is the thread's process, from the scheduler's spans or /proc.
func (g *gatewayStream) processOf(tid uint32) uint32 {
	if p, ok := g.tgid[tid]; ok {
		return p
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(tid)) + "/status")
	if err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Tgid:"); ok {
				p, _ := strconv.Atoi(strings.TrimSpace(v))
				g.tgid[tid] = uint32(p)
				return uint32(p)
			}
		}
	}
	g.tgid[tid] = 0
	return 0
}

// ev is one send or arrival: its time and bytes.
type ev struct {
	t     int64
	bytes uint64
}

// byPort groups times per port, sorted.
type byPort map[uint16][]ev

func (b byPort) sort() {
	for _, es := range b {
		sort.Slice(es, func(i, j int) bool { return es[i].t < es[j].t })
	}
}

// in is the events of port within [from, to].
func (b byPort) in(port uint16, from, to int64) []ev {
	es := b[port]
	i := sort.Search(len(es), func(i int) bool { return es[i].t >= from })
	j := sort.Search(len(es), func(i int) bool { return es[i].t > to })
	return es[i:j]
}

// latest is the time of the latest event at or before t, or 0.
func latest(es []ev, t int64) int64 {
	i := sort.Search(len(es), func(i int) bool { return es[i].t > t })
	if i == 0 {
		return 0
	}
	return es[i-1].t
}

// report builds the gateway section from the load and what was kept.
func (g *gatewayStream) report(res *loadgen.Result, comm string, via []int, sm *enginemetrics.Result) *result.Gateway {
	out := &result.Gateway{Pids: via, Comm: comm, Rule: gatewayRule}
	recs, clientPorts := gatewayRecords(res)
	eng, gw, arr, engineSends := g.byPort(clientPorts)

	busy := map[uint16]int64{}
	var hops [3][]int64
	clientBP := &result.HopBackpressure{Connection: "client", Kinds: map[string]int{}}
	upBP := &result.HopBackpressure{Connection: "upstream", Kinds: map[string]int{}}
	for _, r := range recs {
		pc := uint16(r.LocalPort)
		from, to := r.StartNs, r.EndNs
		up, ok := eng.upstream(busy, from, to)
		if !ok {
			out.RequestsUnmatched++
			continue
		}
		es, gs, as := eng.in(up, from, to), gw.in(pc, from, to), arr.in(pc, from, to)
		busy[up] = es[len(es)-1].t
		out.Requests++
		gr := result.GatewayRequest{Index: r.Index, ClientPort: pc, UpstreamPort: up, EngineSends: len(es), GatewaySends: len(gs), ClientArrivals: len(as)}
		out.EngineSends += len(es)
		out.GatewaySends += len(gs)
		out.ClientArrivals += len(as)
		chunkHops(out, &hops, r.ChunkNs, es, gs, as)
		g.blocking(&gr, clientBP, upBP, from, to)
		if gr.ClientBlockMs > 0 {
			clientBP.Requests = append(clientBP.Requests, r.Index)
		}
		if gr.UpBlockMs > 0 {
			upBP.Requests = append(upBP.Requests, r.Index)
		}
		out.PerRequest = append(out.PerRequest, gr)
	}
	for i, name := range []string{"engine → gateway", "gateway → client", "client"} {
		out.Hops = append(out.Hops, hopOf(name, hops[i]))
	}
	if out.GatewaySends > 0 {
		out.EngineSendsPerGatewaySend = float64(out.EngineSends) / float64(out.GatewaySends)
	}
	if out.Requests > 0 {
		out.ArrivalsPerRequest = float64(out.ClientArrivals) / float64(out.Requests)
	}
	out.Buffering = out.EngineSendsPerGatewaySend >= result.BufferingRatio
	for _, bp := range []*result.HopBackpressure{clientBP, upBP} {
		if len(bp.Kinds) > 0 {
			out.Backpressure = append(out.Backpressure, *bp)
		}
	}
	out.Throughput = gatewayThroughput(res, sm, engineSends)
	return out
}

// gatewayRecords is the load's successful requests with chunks and a
// known client port, in start order, and every client port of the load.
func gatewayRecords(res *loadgen.Result) ([]*loadgen.Record, map[uint16]bool) {
	var recs []*loadgen.Record
	clientPorts := map[uint16]bool{}
	for i := range res.Records {
		r := &res.Records[i]
		if r.LocalPort == 0 {
			continue
		}
		clientPorts[uint16(r.LocalPort)] = true
		if r.Success && len(r.ChunkNs) > 0 {
			recs = append(recs, r)
		}
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].StartNs < recs[j].StartNs })
	return recs, clientPorts
}

// upstream is the engine connection of a request within [from, to]: the
// one not busy with an earlier request that carried the most bytes in
// the window (ties: the lowest port). False when none carried any.
func (b byPort) upstream(busy map[uint16]int64, from, to int64) (uint16, bool) {
	var up uint16
	var best uint64
	for port := range b {
		if t, ok := busy[port]; ok && t >= from {
			continue
		}
		var n uint64
		for _, e := range b.in(port, from, to) {
			n += e.bytes
		}
		if n > best || (n == best && n > 0 && port < up) {
			up, best = port, n
		}
	}
	return up, best > 0
}

// chunkHops matches each chunk the client read (at the times chunks) to
// its client arrival (as), gateway send (gs) and engine send (es), and
// appends its three hops to hops, counting the chunks in out.
func chunkHops(out *result.Gateway, hops *[3][]int64, chunks []int64, es, gs, as []ev) {
	for _, c := range chunks {
		out.ChunksSeen++
		rt := latest(as, c)
		if rt == 0 {
			continue
		}
		sg := latest(gs, rt+gatewaySlack)
		if sg == 0 {
			continue
		}
		se := latest(es, sg+gatewaySlack)
		if se == 0 {
			continue
		}
		out.Chunks++
		if sg > rt {
			out.InlineGatewaySends++
		}
		hops[0] = append(hops[0], max(0, sg-se))
		hops[1] = append(hops[1], max(0, rt-sg))
		hops[2] = append(hops[2], max(0, c-rt))
	}
}

// blocking adds the blocking TCP episodes within [from, to] on the
// request's client and upstream connections to gr and to each
// connection's backpressure.
func (g *gatewayStream) blocking(gr *result.GatewayRequest, clientBP, upBP *result.HopBackpressure, from, to int64) {
	for _, ep := range g.episodes {
		if ep.End < from || ep.Start > to {
			continue
		}
		d := float64(min(ep.End, to)-max(ep.Start, from)) / 1e6
		switch ep.Port {
		case gr.ClientPort:
			clientBP.Kinds[ep.Detail]++
			clientBP.Ms += d
			gr.ClientBlockMs += d
		case gr.UpstreamPort:
			upBP.Kinds[ep.Detail]++
			upBP.Ms += d
			gr.UpBlockMs += d
		}
	}
}

// gatewayThroughput is requests/s and tokens/s at the gateway (the load's)
// byPort groups the sends and arrivals by connection: the engine's sends
// to ports that are no client's (eng, engineSends of them), the gateway's
// sends to the clients (gw), and the arrivals at the clients (arr), each
// sorted by time.
func (g *gatewayStream) byPort(clientPorts map[uint16]bool) (eng, gw, arr byPort, engineSends int) {
	eng, gw, arr = byPort{}, byPort{}, byPort{}
	for _, s := range g.sends {
		p := g.processOf(s.Tid)
		e := ev{s.End, s.Bytes}
		switch {
		case clientPorts[s.Port] && (g.via[p] || p == 0):
			gw[s.Port] = append(gw[s.Port], e)
		case !clientPorts[s.Port] && !g.via[p] && (p == g.engine || p == 0):
			eng[s.Port] = append(eng[s.Port], e)
			engineSends++
		}
	}
	for _, a := range g.arrivals {
		if clientPorts[a.LocalPort] {
			arr[a.LocalPort] = append(arr[a.LocalPort], ev{a.End, a.Bytes})
		}
	}
	eng.sort()
	gw.sort()
	arr.sort()
	return eng, gw, arr, engineSends
}

// and at the engine (its /metrics' generation tokens, else its sends).
func gatewayThroughput(res *loadgen.Result, sm *enginemetrics.Result, engineSends int) result.Throughput {
	var t result.Throughput
	dur := float64(res.EndNs-res.StartNs) / 1e9
	if dur <= 0 {
		return t
	}
	var reqs, toks float64
	for i := range res.Records {
		r := &res.Records[i]
		if !r.Success {
			continue
		}
		reqs++
		if len(r.ChunkTokens) > 0 {
			for _, n := range r.ChunkTokens {
				toks += float64(n)
			}
		} else {
			toks += float64(len(r.ChunkNs))
		}
	}
	t.GatewayRequestsPerS, t.GatewayTokensPerS = reqs/dur, toks/dur
	if sm != nil {
		if v, ok := sm.Overall[enginemetrics.GenerationTokens]; ok && v > 0 {
			t.EngineSource = "server_metrics"
			t.EngineTokensPerS = v / dur
			return t
		}
	}
	t.EngineSource = "engine sends"
	t.EngineSendsPerS = float64(engineSends) / dur
	return t
}

func hopOf(name string, ns []int64) result.Hop {
	h := result.Hop{Name: name, Count: len(ns)}
	if len(ns) == 0 {
		return h
	}
	slices.Sort(ns)
	var sum int64
	for _, v := range ns {
		sum += v
	}
	h.MeanMs = ms(sum) / float64(len(ns))
	h.P50Ms, h.P99Ms, h.MaxMs = ms(quantile(ns, 0.5)), ms(quantile(ns, 0.99)), ms(ns[len(ns)-1])
	return h
}
