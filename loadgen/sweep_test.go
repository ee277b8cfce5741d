package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/llmsim/sim"
	"github.com/bpfbench/bpfbench/llmsim/simtest"
	"github.com/bpfbench/bpfbench/loadgen/sweep"
)

func TestSweepFindsKneeStably(t *testing.T) {
	url := simtest.Start(t, func(c *sim.Config) {
		c.MaxNumSeqs = 4
		c.PrefillBase = 2 * time.Millisecond
		c.PrefillPerToken = 0
		c.DecodeStep = 4 * time.Millisecond
	})
	slos, _ := sweep.ParseSLOs("p90_ttft_ms<=60")
	run := func() *sweep.Result {
		load := DefaultConfig()
		load.Target.URL = url
		load.Scenario.Dataset.InputLen = 16
		load.Scenario.Dataset.OutputLen = 8
		load.Scenario.Seed = 3
		res, err := Sweep(context.Background(), load, sweep.Config{SLOs: slos, RequestsPerStep: 60, Step: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range res.Steps {
			t.Logf("step %d %s rate %.1f pass %v early %v %v", s.N, s.Phase, s.Rate, s.Pass, s.StoppedEarly, s.Values)
		}
		return res
	}
	a := run()
	b := run()
	t.Logf("capacity %.1f/%.1f req/s, answers %.2f and %.2f (steps %.2f/%.2f)", a.Capacity, b.Capacity, a.Answer, b.Answer, a.StepSize, b.StepSize)
	for _, r := range []*sweep.Result{a, b} {
		if r.Best == nil || r.Answer <= 0 {
			t.Fatalf("no rate met the SLO")
		}
		failed := false
		for _, s := range r.Steps {
			if s.Phase == "search" && !s.Pass && s.Rate > r.Answer {
				failed = true
			}
		}
		if !failed {
			t.Errorf("no step above the answer failed the SLO: the knee was not found")
		}
	}
	if d := math.Abs(a.Answer - b.Answer); d > math.Max(a.StepSize, b.StepSize)*1.0001 {
		t.Errorf("answers %.2f and %.2f differ by more than one step (%.2f)", a.Answer, b.Answer, math.Max(a.StepSize, b.StepSize))
	}
}

// fakeQueue is a limit signal of a server whose queue overflows above a
// rate: past it, it says so from its second poll of a step on.
type fakeQueue struct {
	above  float64
	mu     sync.Mutex
	rate   float64
	polls  int
	phases []string
}

func (f *fakeQueue) Begin(_ context.Context, s *sweep.Step) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rate, f.polls = s.Rate, 0
	f.phases = append(f.phases, s.Phase)
}

func (f *fakeQueue) Check() []sweep.Verdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.polls++
	if f.rate > f.above && f.polls >= 2 {
		return []sweep.Verdict{{Name: "requests_waiting", Detail: "9 requests were waiting for a slot (limit 2)", Limit: true}}
	}
	return []sweep.Verdict{{Name: "requests_waiting", Detail: "no queue"}}
}

func (f *fakeQueue) Notes() []string {
	return []string{"kv_cache_usage: not exported, its signal is off"}
}

// A signal past its limit ends a step early and fails it, and the answer
// names it; the latency SLO alone would pass every step.
func TestSweepStopsOnSignal(t *testing.T) {
	url := simtest.Start(t, func(c *sim.Config) {
		c.MaxNumSeqs = 64
		c.PrefillBase = time.Millisecond
		c.PrefillPerToken = 0
		c.DecodeStep = time.Millisecond
	})
	slos, _ := sweep.ParseSLOs("p99_ttft_ms<=60000")
	load := DefaultConfig()
	load.Target.URL = url
	load.Scenario.Dataset.InputLen = 8
	load.Scenario.Dataset.OutputLen = 4
	load.Scenario.Seed = 1
	fq := &fakeQueue{above: 20}
	res, err := Sweep(context.Background(), load, sweep.Config{SLOs: slos, RequestsPerStep: 40, Step: 5, MaxRate: 40,
		Signals: fq, SignalPeriod: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stopped := 0
	for _, s := range res.Steps {
		t.Logf("step %d %s rate %.1f pass %v stopped_by %v completed %d", s.N, s.Phase, s.Rate, s.Pass, s.StoppedBy, s.Metrics.Completed)
		if s.Phase == "search" && s.Rate > 20 {
			if s.Pass || len(s.StoppedBy) != 1 || s.StoppedBy[0].Name != "requests_waiting" {
				t.Errorf("step %d at %.1f req/s: pass %v, stopped by %v; want it stopped by requests_waiting", s.N, s.Rate, s.Pass, s.StoppedBy)
			}
			if s.Metrics.Completed >= 40 {
				t.Errorf("step %d at %.1f req/s completed all its %d requests: not ended early", s.N, s.Rate, s.Metrics.Completed)
			}
			stopped++
		}
		if s.Rate <= 20 && len(s.StoppedBy) > 0 {
			t.Errorf("step %d at %.1f req/s stopped by %v", s.N, s.Rate, s.StoppedBy)
		}
	}
	if stopped == 0 {
		t.Fatal("no step above 20 req/s")
	}
	if slices.Contains(fq.phases, "probe") {
		t.Errorf("the saturation probe was watched: %v", fq.phases)
	}
	if res.Answer <= 10 || res.Answer > 20 {
		t.Errorf("answer %.2f, want in (10, 20]", res.Answer)
	}
	t.Log(res.Conclusion)
	if !slices.Equal(res.LimitedBy, []string{"requests_waiting"}) || res.Limit == nil ||
		!strings.HasPrefix(res.Conclusion, "the SLO holds up to ") ||
		!strings.Contains(res.Conclusion, "req/s 9 requests were waiting for a slot (limit 2)") {
		t.Errorf("limited by %v, conclusion %q", res.LimitedBy, res.Conclusion)
	}
	if len(res.SignalNotes) != 1 {
		t.Errorf("signal notes %v", res.SignalNotes)
	}
	b, _ := json.Marshal(res.Limit)
	if !strings.Contains(string(b), `"stopped_by":[{"signal":"requests_waiting","detail":"9 requests were waiting for a slot (limit 2)"}]`) {
		t.Errorf("limit step JSON %s", b)
	}
}

// The load generator's own signals: a server that fails a request in
// three (error rate) or resets the connection of one in three (resets).
func TestSweepLoadSignals(t *testing.T) {
	for _, tc := range []struct {
		name, signal string
		reset        bool
	}{
		{"errors", "error_rate", false},
		{"resets", "connection_resets", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var served atomic.Int32
			srv := startRawServer(t, func(c net.Conn, _ *http.Request, _ []byte, _ int) bool {
				n := served.Add(1)
				time.Sleep(5 * time.Millisecond)
				if n%3 == 0 {
					if tc.reset {
						// One chunk, then a reset.
						bw := bufio.NewWriter(c)
						bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
						msg := "data: " + llamaEvents(false, 1, 4)[0] + "\n\n"
						fmt.Fprintf(bw, "%x\r\n%s\r\n", len(msg), msg)
						bw.Flush()
						c.(*net.TCPConn).SetLinger(0)
						return false
					}
					body := `{"error":{"code":503,"message":"busy"}}`
					fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
					return true
				}
				return writeSSE(c, llamaEvents(false, 4, 4)) == nil
			})
			slos, _ := sweep.ParseSLOs("p99_ttft_ms<=60000")
			load := DefaultConfig()
			load.Target.URL = srv.url
			load.Scenario.Dataset.InputLen = 4
			load.Scenario.Dataset.OutputLen = 4
			load.Scenario.MaxConcurrency = 2
			sc := sweep.Config{SLOs: slos, RequestsPerStep: 200, Mode: sweep.ModeConcurrency, MaxConcurrency: 2, SignalPeriod: 20 * time.Millisecond}
			if tc.reset {
				sc.MaxErrorRate = -1 // the resets alone
			}
			res, err := Sweep(context.Background(), load, sc)
			if err != nil {
				t.Fatal(err)
			}
			s := res.Steps[0]
			t.Logf("step %d: stopped by %v, %d completed, %d failed: %v", s.N, s.StoppedBy, s.Metrics.Completed, s.Metrics.Failed, s.Violations)
			if s.Pass || len(s.StoppedBy) == 0 || s.StoppedBy[0].Name != tc.signal {
				t.Fatalf("step 1 stopped by %v, want %s", s.StoppedBy, tc.signal)
			}
			if s.Metrics.Completed+s.Metrics.Failed >= 200 {
				t.Errorf("the step sent all its requests: not ended early")
			}
			if res.Answer != 0 || !slices.Equal(res.LimitedBy, []string{tc.signal}) || !strings.HasPrefix(res.Conclusion, "no concurrency met every SLO; at 1 request in flight ") {
				t.Errorf("answer %v limited by %v: %q", res.Answer, res.LimitedBy, res.Conclusion)
			}
			t.Log(res.Conclusion)
		})
	}
}
