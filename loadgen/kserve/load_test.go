package kserve_test

// The gRPC load path against llmsim's gRPC side, and the time to headers of
// both protocols (HTTP on both transports): loadgen's own tests, here
// because they need this package's server.

import (
	"context"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/testutil"
	"github.com/bpfbench/bpfbench/llmsim/sim"
	"github.com/bpfbench/bpfbench/llmsim/simtest"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/kserve"
	"github.com/bpfbench/bpfbench/loadgen/metrics"
	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// serverTimes is llmsim's own measure, from its /metrics: the ground truth.
type serverTimes struct {
	ttftSum, itlSum, ttftN, itlN, generation float64
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
		generation: val("vllm:generation_tokens_total"),
	}
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func grpcConfig(addr string, n, in, out int) loadgen.Config {
	cfg := loadgen.DefaultConfig()
	cfg.Target.Protocol = transport.ProtocolKServeGRPC
	cfg.Target.URL = "grpc://" + addr
	cfg.Scenario.NumRequests = n
	cfg.Scenario.MaxConcurrency = 1
	cfg.Scenario.Dataset.InputLen = in
	cfg.Scenario.Dataset.OutputLen = out
	return cfg
}

// The client's TTFT and ITL over gRPC are held to the server's own measure
// of the same requests, as loadgen's TestFixedTTFTAndITL does for HTTP:
// counts exact; a TTFT no shorter than the server's and within a decode
// step of it; mean gaps within half a step of the server's.
func TestGRPCTTFTAndITL(t *testing.T) {
	url, addr := simtest.StartGRPC(t, func(c *sim.Config) {
		c.PrefillBase = 20 * time.Millisecond
		c.PrefillPerToken = 0
		c.DecodeStep = 10 * time.Millisecond
	})
	before := scrape(t, url)
	cfg := grpcConfig(addr, 6, 32, 12)
	res, err := loadgen.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := res.Metrics
	if m.Completed != 6 || m.Failed != 0 {
		t.Fatalf("completed %d failed %d: %v", m.Completed, m.Failed, res.Failures())
	}
	if models, err := kserve.Models(context.Background(), addr); err != nil || len(models) != 1 || models[0] != cfg.Target.Model {
		t.Errorf("models %v, %v; want [%s]", models, err, cfg.Target.Model)
	}
	// The server counts a request's last token after sending it: wait
	// (bounded) until it has counted what the client received.
	var after serverTimes
	testutil.Until(5*time.Second, func() bool {
		after = scrape(t, url)
		return after.generation-before.generation >= float64(m.TotalOutput)
	})
	srv := serverTimes{after.ttftSum - before.ttftSum, after.itlSum - before.itlSum, after.ttftN - before.ttftN, after.itlN - before.itlN, after.generation - before.generation}
	var ttfts, itls []float64
	for _, r := range res.Records {
		if r.OutputTokens != 12 || len(r.ChunkNs) != 12 || r.TokenSource != transport.TokensFromChunks {
			t.Errorf("request %d: %d tokens in %d chunks (%s), want 12", r.Index, r.OutputTokens, len(r.ChunkNs), r.TokenSource)
		}
		if r.LocalPort == 0 || r.ResponseID != r.RequestID || r.HeadersNs == 0 || r.SentNs < r.StartNs {
			t.Errorf("request %d: port %d, response id %q (sent %q), headers %d, sent %d start %d", r.Index, r.LocalPort, r.ResponseID, r.RequestID, r.HeadersNs, r.SentNs, r.StartNs)
		}
		ttfts = append(ttfts, float64(r.TTFTNs())/1e6)
		for j := 1; j < len(r.ChunkNs); j++ {
			itls = append(itls, float64(r.ChunkNs[j]-r.ChunkNs[j-1])/1e6)
		}
	}
	if srv.generation != float64(m.TotalOutput) || srv.ttftN != float64(len(ttfts)) || srv.itlN != float64(len(itls)) {
		t.Fatalf("server counted %v tokens, %v TTFTs, %v ITLs; client %d, %d, %d", srv.generation, srv.ttftN, srv.itlN, m.TotalOutput, len(ttfts), len(itls))
	}
	sTTFT, sITL := srv.ttftSum*1e3/srv.ttftN, srv.itlSum*1e3/srv.itlN
	cTTFT, cITL := mean(ttfts), mean(itls)
	t.Logf("mean TTFT %.3f ms (server %.3f), ITL %.3f ms (server %.3f), time to headers p50 %.3f ms", cTTFT, sTTFT, cITL, sITL, m.Headers.Median)
	if cTTFT < sTTFT || cTTFT-sTTFT > sITL {
		t.Errorf("client mean TTFT %.3f ms, server %.3f ms (step %.3f ms)", cTTFT, sTTFT, sITL)
	}
	if math.Abs(cITL-sITL) > sITL/2 {
		t.Errorf("client mean ITL %.3f ms, server %.3f ms", cITL, sITL)
	}
	if math.Abs(m.TTFT.Mean-cTTFT) > 1e-6 || math.Abs(m.ITL.Mean-cITL) > 1e-6 {
		t.Errorf("metrics TTFT %.3f ITL %.3f, records %.3f %.3f", m.TTFT.Mean, m.ITL.Mean, cTTFT, cITL)
	}
	// Headers before the prefill: well ahead of the first token, so no
	// header blocking.
	if m.HeadersWithFirstChunk != 0 || m.HeaderBlocking != "" || m.Headers.N != 6 || m.Headers.Median >= m.TTFT.Median {
		t.Errorf("headers sent early: %d of %d with the first chunk, p50 %.3f ms, TTFT p50 %.3f ms, %q", m.HeadersWithFirstChunk, m.HeadersTimed, m.Headers.Median, m.TTFT.Median, m.HeaderBlocking)
	}
}

// headerRun runs cfg and returns the metrics, checking that the summary
// and the JSON say what they say.
func headerRun(t *testing.T, cfg loadgen.Config) *metrics.Metrics {
	t.Helper()
	res, err := loadgen.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := res.Metrics
	if m.Failed != 0 || m.Completed != cfg.Scenario.NumRequests {
		t.Fatalf("completed %d failed %d: %v", m.Completed, m.Failed, res.Failures())
	}
	var b strings.Builder
	res.WriteSummary(&b)
	hb, _ := res.JSON()["bpfbench"].(map[string]any)["header_blocking"].(string)
	if m.HeaderBlocking != "" && (!strings.Contains(b.String(), m.HeaderBlocking) || hb != m.HeaderBlocking) {
		t.Errorf("the summary or the JSON lacks %q:\n%s\njson: %q", m.HeaderBlocking, b.String(), hb)
	}
	return m
}

// Headers held until the first token, by the server's knob, are reported
// as header blocking over gRPC and HTTP (both transports); without the
// knob they are not, and they arrive about a prefill ahead of the token.
func TestHeaderBlocking(t *testing.T) {
	const prefill, n = 30 * time.Millisecond, 10
	for _, delay := range []bool{false, true} {
		url, addr := simtest.StartGRPC(t, func(c *sim.Config) {
			c.PrefillBase = prefill
			c.PrefillPerToken = 0
			c.DecodeStep = 2 * time.Millisecond
			c.DelayHeaders = delay
			c.GRPCDelayHeaders = delay
		})
		runs := map[string]loadgen.Config{"grpc": grpcConfig(addr, n, 8, 4)}
		for _, netHTTP := range []bool{false, true} {
			cfg := loadgen.DefaultConfig()
			cfg.Target.URL = url
			cfg.Target.NetHTTP = netHTTP
			cfg.Scenario.NumRequests = n
			cfg.Scenario.MaxConcurrency = 1
			cfg.Scenario.Dataset.InputLen = 8
			cfg.Scenario.Dataset.OutputLen = 4
			runs[map[bool]string{false: "raw", true: "net/http"}[netHTTP]] = cfg
		}
		for name, cfg := range runs {
			m := headerRun(t, cfg)
			t.Logf("%s, delayed %v: time to headers p50 %.3f ms, TTFT p50 %.3f ms, %d of %d with the first chunk: %q",
				name, delay, m.Headers.Median, m.TTFT.Median, m.HeadersWithFirstChunk, m.HeadersTimed, m.HeaderBlocking)
			if m.Headers.N != n || m.HeadersTimed != n {
				t.Errorf("%s: headers timed on %d/%d requests, want %d", name, m.Headers.N, m.HeadersTimed, n)
			}
			if delay {
				if m.HeadersWithFirstChunk < n*9/10 || !strings.HasPrefix(m.HeaderBlocking, "header blocking: headers arrive with the first token") {
					t.Errorf("%s: delayed headers not reported: %d of %d with the first chunk, %q", name, m.HeadersWithFirstChunk, m.HeadersTimed, m.HeaderBlocking)
				}
				continue
			}
			// The server sent them before its prefill: at least the
			// prefill before the first token.
			if m.HeaderBlocking != "" || m.HeadersWithFirstChunk != 0 || m.TTFT.Median-m.Headers.Median < float64(prefill)/1e6*0.9 {
				t.Errorf("%s: early headers: p50 %.3f ms, TTFT p50 %.3f ms, %q", name, m.Headers.Median, m.TTFT.Median, m.HeaderBlocking)
			}
		}
	}
}

// A stream the server closes mid-way, a malformed response, an error in
// the stream and an error status each give a counted failure with its
// reason; so does a refused connection.
func TestGRPCFailures(t *testing.T) {
	for _, c := range []struct {
		name   string
		mod    func(*sim.Config)
		kind   string
		reason string
	}{
		{"close-after", func(c *sim.Config) { c.GRPCCloseAfter = 2 }, transport.FailCut, "final response"},
		{"cut", func(c *sim.Config) { c.CutRate = 1 }, transport.FailCut, "final response"},
		{"malformed", func(c *sim.Config) { c.MalformedRate = 1 }, transport.FailMalformed, "datatype INT32"},
		{"error", func(c *sim.Config) { c.ErrorRate = 1 }, transport.FailStreamError, "injected error in stream"},
		{"status", func(c *sim.Config) { c.FailRate = 1 }, transport.FailGRPCStatus, "gRPC Internal: injected failure"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, addr := simtest.StartGRPC(t, func(s *sim.Config) {
				s.PrefillBase, s.PrefillPerToken, s.DecodeStep = time.Millisecond, 0, time.Millisecond
				c.mod(s)
			})
			cfg := grpcConfig(addr, 3, 4, 6)
			res, err := loadgen.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			m := res.Metrics
			if m.Failed != 3 || m.Failures[c.kind] != 3 {
				t.Fatalf("failed %d by kind %v, want 3 %s: %v", m.Failed, m.Failures, c.kind, res.Failures())
			}
			for _, f := range res.Failures() {
				if !strings.Contains(f.Error, c.reason) {
					t.Errorf("request %s: %s: %q, want it to say %q", f.RequestID, f.Kind, f.Error, c.reason)
				}
			}
		})
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	res, err := loadgen.Run(context.Background(), grpcConfig(addr, 2, 4, 4))
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics.Failures[transport.FailConnect] != 2 {
		t.Errorf("connection refused: %v %v", res.Metrics.Failures, res.Failures())
	}
}

// A stall timeout and a total timeout end a gRPC stream that stalls.
func TestGRPCStallAndTimeout(t *testing.T) {
	_, addr := simtest.StartGRPC(t, func(c *sim.Config) { c.StallRate = 1; c.DecodeStep = time.Millisecond })
	cfg := grpcConfig(addr, 2, 4, 8)
	cfg.Target.StallTimeout = 100 * time.Millisecond
	res, err := loadgen.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics.Failures[transport.FailStall] != 2 {
		t.Errorf("stalls: %v %v", res.Metrics.Failures, res.Failures())
	}
	cfg.Target.StallTimeout = 0
	cfg.Target.Timeout = 150 * time.Millisecond
	if res, err = loadgen.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if res.Metrics.Failures[transport.FailTimeout] != 2 {
		t.Errorf("timeouts: %v %v", res.Metrics.Failures, res.Failures())
	}
}

// The header timeout holds over gRPC as over HTTP: a server that sends
// its headers with the first response, after a prefill longer than the
// timeout, fails the request as header_timeout; one that sends them
// before its prefill does not.
func TestGRPCHeaderTimeout(t *testing.T) {
	for _, delay := range []bool{true, false} {
		_, addr := simtest.StartGRPC(t, func(c *sim.Config) {
			c.PrefillBase, c.PrefillPerToken, c.DecodeStep = 400*time.Millisecond, 0, time.Millisecond
			c.GRPCDelayHeaders = delay
		})
		cfg := grpcConfig(addr, 2, 4, 4)
		cfg.Target.HeaderTimeout = 100 * time.Millisecond
		res, err := loadgen.Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if delay {
			want = 2
		}
		if got := res.Metrics.Failures[transport.FailHeaderTimeout]; got != want || res.Metrics.Failed != want {
			t.Errorf("headers with the first response %v: %d header timeouts, %d failed (%v), want %d", delay, got, res.Metrics.Failed, res.Failures(), want)
		}
	}
}
