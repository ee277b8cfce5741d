package loadgen

import (
	"context"
	"math"
	"net"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/tools/llmsim/sim"
)

// startSim runs llmsim in-process and returns its base URL.
func startSim(t testing.TB, mod func(*sim.Config)) string {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Work = sim.WorkSleep
	cfg.EOSProb = 0
	cfg.BatchSlowdown = 0
	if mod != nil {
		mod(&cfg)
	}
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		s.Close()
	})
	return ts.URL
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return Percentile(s, 50)
}

func within(got, want float64) bool {
	return math.Abs(got-want) <= math.Max(0.05*want, 1.0)
}

func TestFixedTTFTAndITL(t *testing.T) {
	const ttft, itl = 20.0, 10.0 // ms
	url := startSim(t, func(c *sim.Config) {
		c.PrefillBase = time.Duration(ttft * float64(time.Millisecond))
		c.PrefillPerToken = 0
		c.DecodeStep = time.Duration(itl * float64(time.Millisecond))
	})
	for _, ep := range []string{EndpointCompletions, EndpointChat} {
		for _, noUsage := range []bool{false, true} {
			cfg := DefaultConfig()
			cfg.Target = url
			cfg.Endpoint = ep
			cfg.NoUsage = noUsage
			cfg.NumRequests = 6
			cfg.MaxConcurrency = 1
			cfg.Dataset.InputLen = 32
			cfg.Dataset.OutputLen = 12
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			m := res.Metrics
			if m.Completed != 6 || m.Failed != 0 {
				t.Fatalf("%s: completed %d failed %d: %v", ep, m.Completed, m.Failed, res.Failures())
			}
			var ttfts, itls []float64
			for _, r := range res.Records {
				if r.OutputTokens != 12 || len(r.ChunkNs) != 12 {
					t.Errorf("%s: request %d: %d tokens in %d chunks, want 12", ep, r.Index, r.OutputTokens, len(r.ChunkNs))
				}
				want := TokensFromUsage
				if noUsage {
					want = TokensFromChunks
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
			}
			if m.TotalOutput != 6*12 || m.TotalInput != 6*32 {
				t.Errorf("%s: totals %d in, %d out", ep, m.TotalInput, m.TotalOutput)
			}
			t.Logf("%s (usage %v): median TTFT %.3f ms, ITL %.3f ms; configured %.0f and %.0f", ep, !noUsage, median(ttfts), median(itls), ttft, itl)
			if got := median(ttfts); !within(got, ttft) {
				t.Errorf("%s: median TTFT %.3f ms, want %.1f ms ±5%% or 1 ms", ep, got, ttft)
			}
			if got := median(itls); !within(got, itl) {
				t.Errorf("%s: median ITL %.3f ms, want %.1f ms ±5%% or 1 ms", ep, got, itl)
			}
			if !within(m.ITL.Median, itl) || !within(m.TTFT.Median, ttft) {
				t.Errorf("%s: metrics median TTFT %.3f ITL %.3f", ep, m.TTFT.Median, m.ITL.Median)
			}
			// TPOT = (E2EL - TTFT) / (tokens - 1) = ITL for evenly spaced
			// tokens; it averages each request's gaps, so outliers from a
			// loaded machine move it: a sanity bound only.
			if math.Abs(m.TPOT.Median-itl) > 0.25*itl {
				t.Errorf("%s: median TPOT %.3f ms, want %.1f", ep, m.TPOT.Median, itl)
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
	url := startSim(t, func(c *sim.Config) {
		c.PrefillBase = time.Millisecond
		c.PrefillPerToken = 0
		c.DecodeStep = 2 * time.Millisecond
		c.FailRate, c.StallRate, c.CutRate, c.MalformedRate, c.ErrorRate = 0.15, 0.1, 0.1, 0.1, 0.1
		c.Seed = 7
	})
	cfg := DefaultConfig()
	cfg.Target = url
	cfg.NetHTTP = netHTTP
	cfg.NumRequests = 60
	cfg.MaxConcurrency = 16
	cfg.Dataset.InputLen = 8
	cfg.Dataset.OutputLen = 6
	cfg.StallTimeout = 300 * time.Millisecond
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := res.Metrics
	for _, kind := range []string{FailHTTPStatus, FailStall, FailCut, FailMalformed, FailStreamError} {
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
	url2 := startSim(t, func(c *sim.Config) { c.StallRate = 1; c.DecodeStep = time.Millisecond })
	cfg.Target = url2
	cfg.NumRequests = 2
	cfg.StallTimeout = 0
	cfg.Timeout = 200 * time.Millisecond
	res, err = Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics.Failures[FailTimeout] != 2 {
		t.Errorf("timeouts: %v", res.Metrics.Failures)
	}

	// Connection refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg.Target = "http://" + addr
	res, err = Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics.Failures[FailConnect] != 2 {
		t.Errorf("connection refused: %v %v", res.Metrics.Failures, res.Failures())
	}
}

func TestClosedLoopConcurrency(t *testing.T) {
	url := startSim(t, func(c *sim.Config) { c.DecodeStep = 2 * time.Millisecond; c.PrefillBase = time.Millisecond })
	cfg := DefaultConfig()
	cfg.Target = url
	cfg.NumRequests = 0
	cfg.Duration = 300 * time.Millisecond
	cfg.MaxConcurrency = 3
	cfg.Dataset.OutputLen = 5
	cfg.Warmup = 2
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
	url := startSim(t, func(c *sim.Config) { c.DecodeStep = 2 * time.Millisecond; c.PrefillBase = time.Millisecond })
	cfg := DefaultConfig()
	cfg.Target = url
	cfg.Requests = []Request{
		{Prompt: "a b c", PromptLen: 3, OutputLen: 40, OffsetNs: -1},
		{Prompt: "a b c", PromptLen: 3, OutputLen: 40, OffsetNs: -1, SlowRead: 300 * time.Millisecond},
	}
	cfg.NumRequests = 2
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
