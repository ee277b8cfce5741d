package loadgen

import (
	"context"
	"math"
	"net"
	"sort"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/testutil"
	"github.com/bpfbench/bpfbench/llmsim/sim"
	"github.com/bpfbench/bpfbench/llmsim/simtest"
	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// serverTimes is what llmsim measured itself, from its /metrics: the sums
// (seconds) and counts of its TTFT, ITL and TPOT histograms and the tokens
// it generated. It is the ground truth the client's figures are held to.
type serverTimes struct {
	ttftSum, itlSum, tpotSum       float64
	ttftN, itlN, tpotN, generation float64
}

func scrape(t *testing.T, url string) serverTimes {
	t.Helper()
	body := testutil.Scrape(t, url+"/metrics")
	val := func(name string) float64 {
		v, ok := testutil.Sum(body, name, "")
		if !ok {
			t.Fatalf("/metrics has no %s", name)
		}
		return v
	}
	return serverTimes{
		ttftSum: val("vllm:time_to_first_token_seconds_sum"), ttftN: val("vllm:time_to_first_token_seconds_count"),
		itlSum: val("vllm:inter_token_latency_seconds_sum"), itlN: val("vllm:inter_token_latency_seconds_count"),
		tpotSum: val("vllm:time_per_output_token_seconds_sum"), tpotN: val("vllm:time_per_output_token_seconds_count"),
		generation: val("vllm:generation_tokens_total"),
	}
}

func (a serverTimes) sub(b serverTimes) serverTimes {
	return serverTimes{a.ttftSum - b.ttftSum, a.itlSum - b.itlSum, a.tpotSum - b.tpotSum,
		a.ttftN - b.ttftN, a.itlN - b.itlN, a.tpotN - b.tpotN, a.generation - b.generation}
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// The client's TTFT and ITL are held to the server's own measure of the
// same requests, not to the configured step times: the client counts the
// tokens the server counted, its TTFTs cannot be shorter than the server's
// (it starts the clock before the server sees the request and stops it
// after the server produced the token), and on average a token reaches it
// before the server produces the next one.
func TestFixedTTFTAndITL(t *testing.T) {
	const ttft, itl = 20.0, 10.0 // ms, the simulator's settings
	url := simtest.Start(t, func(c *sim.Config) {
		c.PrefillBase = time.Duration(ttft * float64(time.Millisecond))
		c.PrefillPerToken = 0
		c.DecodeStep = time.Duration(itl * float64(time.Millisecond))
	})
	for _, ep := range []string{transport.EndpointCompletions, transport.EndpointChat} {
		for _, noUsage := range []bool{false, true} {
			cfg := DefaultConfig()
			cfg.Target.URL = url
			cfg.Target.Endpoint = ep
			cfg.Target.NoUsage = noUsage
			cfg.Scenario.NumRequests = 6
			cfg.Scenario.MaxConcurrency = 1
			cfg.Scenario.Dataset.InputLen = 32
			cfg.Scenario.Dataset.OutputLen = 12
			before := scrape(t, url)
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			m := res.Metrics
			// The server observes a request's TPOT after writing its last
			// chunk: wait until it has counted every request.
			var srv serverTimes
			testutil.Until(5*time.Second, func() bool {
				srv = scrape(t, url).sub(before)
				return srv.tpotN >= float64(m.Completed)
			})
			if m.Completed != 6 || m.Failed != 0 {
				t.Fatalf("%s: completed %d failed %d: %v", ep, m.Completed, m.Failed, res.Failures())
			}
			var ttfts, itls, tpots []float64
			for _, r := range res.Records {
				if r.OutputTokens != 12 || len(r.ChunkNs) != 12 {
					t.Errorf("%s: request %d: %d tokens in %d chunks, want 12", ep, r.Index, r.OutputTokens, len(r.ChunkNs))
				}
				want := transport.TokensFromUsage
				if noUsage {
					want = transport.TokensFromChunks
				}
				if r.TokenSource != want {
					t.Errorf("%s: token source %q, want %q", ep, r.TokenSource, want)
				}
				if r.PromptLen != 32 || (!noUsage && r.UsagePromptTokens != 32) {
					t.Errorf("%s: prompt %d tokens, server counted %d, want 32", ep, r.PromptLen, r.UsagePromptTokens)
				}
				if r.LocalPort == 0 || r.RequestID == "" {
					t.Errorf("%s: no local port or request id: %+v", ep, r)
				}
				ttfts = append(ttfts, float64(r.TTFTNs())/1e6)
				for j := 1; j < len(r.ChunkNs); j++ {
					itls = append(itls, float64(r.ChunkNs[j]-r.ChunkNs[j-1])/1e6)
				}
				if n := len(r.ChunkNs); n > 1 {
					tpots = append(tpots, float64(r.ChunkNs[n-1]-r.ChunkNs[0])/1e6/float64(n-1))
				}
			}
			if m.TotalOutput != 6*12 || m.TotalInput != 6*32 {
				t.Errorf("%s: totals %d in, %d out", ep, m.TotalInput, m.TotalOutput)
			}
			// Counted, not timed: the server's counts of the same requests.
			if srv.generation != float64(m.TotalOutput) || srv.ttftN != float64(len(ttfts)) || srv.itlN != float64(len(itls)) || srv.tpotN != float64(len(tpots)) {
				t.Fatalf("%s: server counted %v tokens, %v TTFTs, %v ITLs, %v TPOTs; client %d, %d, %d, %d",
					ep, srv.generation, srv.ttftN, srv.itlN, srv.tpotN, m.TotalOutput, len(ttfts), len(itls), len(tpots))
			}
			sTTFT, sITL, sTPOT := srv.ttftSum*1e3/srv.ttftN, srv.itlSum*1e3/srv.itlN, srv.tpotSum*1e3/srv.tpotN
			cTTFT, cITL, cTPOT := mean(ttfts), mean(itls), mean(tpots)
			t.Logf("%s (usage %v): mean TTFT %.3f ms (server %.3f), ITL %.3f ms (server %.3f), TPOT %.3f (server %.3f)", ep, !noUsage, cTTFT, sTTFT, cITL, sITL, cTPOT, sTPOT)
			if cTTFT < sTTFT {
				t.Errorf("%s: client mean TTFT %.3f ms shorter than the server's %.3f ms", ep, cTTFT, sTTFT)
			}
			if cTTFT-sTTFT > sITL {
				t.Errorf("%s: client mean TTFT %.3f ms, server %.3f ms: the first token took longer than a decode step (%.3f ms) to arrive", ep, cTTFT, sTTFT, sITL)
			}
			// Per request the client's gaps add up to the server's plus the
			// last token's delivery delay less the first's.
			if math.Abs(cITL-sITL) > sITL/2 || math.Abs(cTPOT-sTPOT) > sTPOT/2 {
				t.Errorf("%s: client mean ITL %.3f / TPOT %.3f ms, server %.3f / %.3f ms", ep, cITL, cTPOT, sITL, sTPOT)
			}
			// The run's metrics are the records' figures.
			if math.Abs(m.TTFT.Mean-cTTFT) > 1e-6 || math.Abs(m.ITL.Mean-cITL) > 1e-6 || math.Abs(m.TTFT.Median-testutil.Median(ttfts)) > 1e-6 || math.Abs(m.ITL.Median-testutil.Median(itls)) > 1e-6 {
				t.Errorf("%s: metrics TTFT mean %.3f median %.3f, ITL mean %.3f median %.3f; records %.3f %.3f %.3f %.3f",
					ep, m.TTFT.Mean, m.TTFT.Median, m.ITL.Mean, m.ITL.Median, cTTFT, testutil.Median(ttfts), cITL, testutil.Median(itls))
			}
		}
	}
}

func TestFailuresCounted(t *testing.T) {
	for _, netHTTP := range transports() {
		t.Run(transportName(netHTTP), func(t *testing.T) { testFailuresCounted(t, netHTTP) })
	}
}

func testFailuresCounted(t *testing.T, netHTTP bool) {
	url := simtest.Start(t, func(c *sim.Config) {
		c.PrefillBase = time.Millisecond
		c.PrefillPerToken = 0
		c.DecodeStep = 2 * time.Millisecond
		c.FailRate, c.StallRate, c.CutRate, c.MalformedRate, c.ErrorRate = 0.15, 0.1, 0.1, 0.1, 0.1
		c.Seed = 7
	})
	cfg := DefaultConfig()
	cfg.Target.URL = url
	cfg.Target.NetHTTP = netHTTP
	cfg.Scenario.NumRequests = 60
	cfg.Scenario.MaxConcurrency = 16
	cfg.Scenario.Dataset.InputLen = 8
	cfg.Scenario.Dataset.OutputLen = 6
	cfg.Target.StallTimeout = 300 * time.Millisecond
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := res.Metrics
	for _, kind := range []string{transport.FailHTTPStatus, transport.FailStall, transport.FailCut, transport.FailMalformed, transport.FailStreamError} {
		if m.Failures[kind] == 0 {
			t.Errorf("no %s failure counted: %v", kind, m.Failures)
		}
	}
	sum := 0
	for _, n := range m.Failures {
		sum += n
	}
	if sum != m.Failed || m.Failed+m.Completed != 60 || len(res.Failures()) != m.Failed {
		t.Errorf("failed %d, by kind %v, completed %d", m.Failed, m.Failures, m.Completed)
	}
	for _, r := range res.Records {
		if r.Success {
			if r.OutputTokens != 6 {
				t.Errorf("request %d: %d tokens, want 6", r.Index, r.OutputTokens)
			}
			continue
		}
		if r.Error == "" || r.Failure == "" {
			t.Errorf("request %d failed without a reason: %+v", r.Index, r)
		}
	}
	if m.TotalOutput != 6*m.Completed || m.Completed == 0 {
		t.Errorf("output tokens %d over %d completed", m.TotalOutput, m.Completed)
	}
	if len(m.TTFT.Percentiles) != 3 || m.TTFT.N != m.Completed || m.E2EL.N != m.Completed {
		t.Errorf("metrics not over the successful requests: %+v", m.TTFT)
	}

	// A total timeout against a stalled stream.
	url2 := simtest.Start(t, func(c *sim.Config) { c.StallRate = 1; c.DecodeStep = time.Millisecond })
	cfg.Target.URL = url2
	cfg.Scenario.NumRequests = 2
	cfg.Target.StallTimeout = 0
	cfg.Target.Timeout = 200 * time.Millisecond
	res, err = Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics.Failures[transport.FailTimeout] != 2 {
		t.Errorf("timeouts: %v", res.Metrics.Failures)
	}

	// Connection refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg.Target.URL = "http://" + addr
	res, err = Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics.Failures[transport.FailConnect] != 2 {
		t.Errorf("connection refused: %v %v", res.Metrics.Failures, res.Failures())
	}
}

func TestClosedLoopConcurrency(t *testing.T) {
	url := simtest.Start(t, func(c *sim.Config) { c.DecodeStep = 2 * time.Millisecond; c.PrefillBase = time.Millisecond })
	cfg := DefaultConfig()
	cfg.Target.URL = url
	cfg.Scenario.NumRequests = 0
	cfg.Scenario.Duration = 300 * time.Millisecond
	cfg.Scenario.MaxConcurrency = 3
	cfg.Scenario.Dataset.OutputLen = 5
	cfg.Scenario.Warmup = 2
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warmup) != 2 || len(res.Records) < 6 || res.Metrics.Failed != 0 {
		t.Fatalf("warmup %d, records %d, failed %d", len(res.Warmup), len(res.Records), res.Metrics.Failed)
	}
	type ev struct {
		t int64
		d int
	}
	var evs []ev
	for _, r := range res.Records {
		evs = append(evs, ev{r.StartNs, 1}, ev{r.EndNs, -1})
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].t < evs[j].t || evs[i].t == evs[j].t && evs[i].d < evs[j].d })
	cur, peak := 0, 0
	for _, e := range evs {
		cur += e.d
		peak = max(peak, cur)
	}
	if peak > 3 {
		t.Errorf("%d requests in flight, cap 3", peak)
	}
}

func TestSlowReadingRequest(t *testing.T) {
	url := simtest.Start(t, func(c *sim.Config) { c.DecodeStep = 2 * time.Millisecond; c.PrefillBase = time.Millisecond })
	cfg := DefaultConfig()
	cfg.Target.URL = url
	cfg.Scenario.Requests = []Request{
		{Prompt: "a b c", PromptLen: 3, OutputLen: 40, OffsetNs: -1},
		{Prompt: "a b c", PromptLen: 3, OutputLen: 40, OffsetNs: -1, SlowRead: 300 * time.Millisecond},
	}
	cfg.Scenario.NumRequests = 2
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics.Failed != 0 {
		t.Fatalf("failed: %+v", res.Failures())
	}
	maxGap := func(r *Record) time.Duration {
		var g int64
		for i := 1; i < len(r.ChunkNs); i++ {
			g = max(g, r.ChunkNs[i]-r.ChunkNs[i-1])
		}
		return time.Duration(g)
	}
	var fast, slow *Record
	for i := range res.Records {
		if res.Records[i].OutputTokens != 40 {
			t.Errorf("request %d: %d tokens", i, res.Records[i].OutputTokens)
		}
		if maxGap(&res.Records[i]) >= 300*time.Millisecond {
			slow = &res.Records[i]
		} else {
			fast = &res.Records[i]
		}
	}
	if slow == nil || fast == nil {
		t.Fatalf("want one request with a 300 ms pause and one without")
	}
	if slow.LocalPort == fast.LocalPort {
		t.Errorf("the slow reader shares port %d with another request", slow.LocalPort)
	}
}

// Under --max-concurrency a request due while the cap is full waits for a
// slot: its queue time, not a late client. Four requests due at once, one
// at a time: each after the first waited for the one before it to end.
func TestSlotWaitIsNotLate(t *testing.T) {
	url := simtest.Start(t, func(c *sim.Config) {
		c.PrefillBase = 10 * time.Millisecond
		c.PrefillPerToken = 0
		c.DecodeStep = 5 * time.Millisecond
	})
	for _, cap := range []int{1, 0} {
		cfg := DefaultConfig()
		cfg.Target.URL = url
		cfg.Scenario.NumRequests = 4
		cfg.Scenario.MaxConcurrency = cap
		cfg.Scenario.Dataset.InputLen = 16
		cfg.Scenario.Dataset.OutputLen = 8
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res.Records {
			if r.SlotWaitNs < 0 || r.SlotWaitNs > r.QueueNs() || r.LateNs() != r.QueueNs()-r.SlotWaitNs {
				t.Errorf("cap %d, request %d: slot wait %d ns, queue %d ns, late %d ns", cap, i, r.SlotWaitNs, r.QueueNs(), r.LateNs())
			}
			switch {
			case cap == 0 && r.SlotWaitNs != 0:
				t.Errorf("no cap, request %d: slot wait %d ns", i, r.SlotWaitNs)
			case cap == 1 && i > 0 && r.StartNs < res.Records[i-1].EndNs:
				t.Errorf("cap 1, request %d started at %d, before request %d ended at %d", i, r.StartNs, i-1, res.Records[i-1].EndNs)
			case cap == 1 && i > 0 && r.SlotWaitNs == 0:
				t.Errorf("cap 1, request %d: no slot wait, though due while request %d ran", i, i-1)
			}
		}
	}
}
