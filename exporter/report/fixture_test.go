package report

import (
	"encoding/json"
	"math"
	"math/rand"
	"sort"
	"time"

	"github.com/bpfbench/bpfbench/correlate"
)

func raw(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func sortedCopy(xs []float64) []float64 {
	out := append([]float64(nil), xs...)
	sort.Float64s(out)
	return out
}

func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	r := p / 100 * float64(len(sorted)-1)
	lo, hi := int(math.Floor(r)), int(math.Ceil(r))
	return sorted[lo] + (sorted[hi]-sorted[lo])*(r-float64(lo))
}

func meanStd(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	m := 0.0
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	ss := 0.0
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return m, math.Sqrt(ss / float64(len(xs)))
}

// loadFields returns vLLM-style load fields for the given per-request
// TTFTs and gaps (seconds); failed requests have ttft 0 and an error.
func loadFields(ttfts []float64, itls [][]float64, errs []string, duration float64) map[string]json.RawMessage {
	m := map[string]json.RawMessage{}
	completed, failed := 0, 0
	var okTTFT, allITL, tpots, e2els []float64
	outLens := make([]int, len(ttfts))
	for i := range ttfts {
		if errs[i] != "" {
			failed++
			continue
		}
		completed++
		okTTFT = append(okTTFT, ttfts[i]*1000)
		e2e := ttfts[i]
		for _, g := range itls[i] {
			allITL = append(allITL, g*1000)
			e2e += g
		}
		outLens[i] = len(itls[i]) + 1
		if n := len(itls[i]); n > 0 {
			tpots = append(tpots, (e2e-ttfts[i])/float64(n)*1000)
		}
		e2els = append(e2els, e2e*1000)
	}
	tokens := 0
	for _, n := range outLens {
		tokens += n
	}
	m["date"] = raw("20260301-101500")
	m["backend"] = raw("openai")
	m["endpoint_type"] = raw("openai")
	m["label"] = raw(nil)
	m["model_id"] = raw("llmsim-7b")
	m["num_prompts"] = raw(len(ttfts))
	m["request_rate"] = raw(8.0)
	m["burstiness"] = raw(1.0)
	m["max_concurrency"] = raw(16)
	m["duration"] = raw(duration)
	m["completed"] = raw(completed)
	m["failed"] = raw(failed)
	m["total_input_tokens"] = raw(len(ttfts) * 128)
	m["total_output_tokens"] = raw(tokens)
	m["request_throughput"] = raw(float64(completed) / duration)
	m["output_throughput"] = raw(float64(tokens) / duration)
	m["total_token_throughput"] = raw(float64(tokens+completed*128) / duration)
	m["max_output_tokens_per_s"] = raw(float64(tokens) / duration * 1.6)
	m["max_concurrent_requests"] = raw(16)
	m["request_goodput"] = raw(nil)
	for name, xs := range map[string][]float64{"ttft": okTTFT, "tpot": tpots, "itl": allITL, "e2el": e2els} {
		s := sortedCopy(xs)
		mean, std := meanStd(s)
		m["mean_"+name+"_ms"] = raw(mean)
		m["median_"+name+"_ms"] = raw(pct(s, 50))
		m["std_"+name+"_ms"] = raw(std)
		for _, p := range []float64{50, 90, 99} {
			m["p"+map[float64]string{50: "50", 90: "90", 99: "99"}[p]+"_"+name+"_ms"] = raw(pct(s, p))
		}
	}
	m["ttfts"] = raw(ttfts)
	m["itls"] = raw(itls)
	m["errors"] = raw(errs)
	m["input_lens"] = raw(make([]int, len(ttfts)))
	m["output_lens"] = raw(outLens)
	var fails []map[string]any
	kinds := map[string]int{}
	for i, e := range errs {
		if e != "" {
			fails = append(fails, map[string]any{"index": i, "request_id": "r" + string(rune('a'+i%26)), "kind": "http_status", "error": e})
			kinds["http_status"]++
		}
	}
	m["bpfbench"] = raw(map[string]any{
		"target": "http://127.0.0.1:8000/v1/completions", "endpoint": "/v1/completions",
		"failure_reasons": kinds, "failures": fails, "clock": "CLOCK_MONOTONIC",
	})
	return m
}

// fullDocument is a run with every part filled: four phases, all four
// causes, every collector section, one unavailable.
func fullDocument() *Document {
	rng := rand.New(rand.NewSource(1))
	const n = 240
	const duration = 60.0
	ttfts := make([]float64, n)
	itls := make([][]float64, n)
	errs := make([]string, n)
	for i := 0; i < n; i++ {
		ttfts[i] = 0.04 + rng.ExpFloat64()*0.03
		phase := i * 4 / n
		k := 40 + rng.Intn(40)
		for j := 0; j < k; j++ {
			g := 0.018 + rng.NormFloat64()*0.002
			if rng.Float64() < 0.03*float64(phase+1) {
				g += rng.ExpFloat64() * 0.06 * float64(phase+1)
			}
			itls[i] = append(itls[i], math.Max(g, 0.001))
		}
		if i%97 == 5 {
			errs[i] = "HTTP 503 Service Unavailable: server overloaded <retry later>"
			ttfts[i] = 0
			itls[i] = []float64{}
		}
	}
	d := &Document{Load: loadFields(ttfts, itls, errs, duration)}
	sh := func(cpu, io, gpu, net, un float64) correlate.Breakdown {
		return correlate.Breakdown{"cpu_runqueue": cpu, "io_block": io, "gpu_sync": gpu, "net_backpressure": net, "unexplained": un}
	}
	d.Attribution = &correlate.Summary{
		BaselineITLMs: 18.2, BaselineTTFTMs: 52.1,
		BaselineRates: sh(0.01, 0, 0.3, 0, 0),
		TTFT:          sh(0.35, 0.25, 0.1, 0.05, 0.25),
		ITL: map[string]correlate.Breakdown{
			"p50": sh(0.2, 0.1, 0.3, 0, 0.4), "p90": sh(0.45, 0.2, 0.1, 0.05, 0.2),
			"p99": sh(0.7, 0.2, 0, 0, 0.1), "all": sh(0.5, 0.2, 0.1, 0.05, 0.15),
		},
		ITLBands: map[string]correlate.Band{
			"p50": {FromMs: 18.1, ToMs: 21.4, Intervals: 6800, ExcessMs: 410, Shares: sh(0.2, 0.1, 0.3, 0, 0.4)},
			"p90": {FromMs: 21.4, ToMs: 95.2, Intervals: 1290, ExcessMs: 5200, Shares: sh(0.45, 0.2, 0.1, 0.05, 0.2)},
			"p99": {FromMs: 95.2, Intervals: 140, ExcessMs: 21000, Shares: sh(0.7, 0.2, 0, 0, 0.1)},
		},
		TopCause: "cpu_runqueue",
	}
	for i := 0; i < 30; i++ {
		d.Attribution.Requests = append(d.Attribution.Requests, correlate.RequestBlame{
			Request: i, TTFTMs: 40 + float64(i), TTFTShares: sh(0.5, 0.5, 0, 0, 0),
			ITLExcessMs: float64(i * 37 % 500), ITLShares: sh(float64(i%3), float64(i%2), 0, float64(i%5)/4, 0.5),
			TopCause: []string{"cpu_runqueue", "io_block", "net_backpressure", "unexplained"}[i%4], TotalExcessMs: float64(i*37%500) + 20,
		})
	}
	phases := []struct {
		name string
		p99  float64
		top  string
		sh   correlate.Breakdown
	}{
		{"baseline", 24, "unexplained", sh(0.1, 0, 0.2, 0, 0.7)},
		{"cpu contention", 180, "cpu_runqueue", sh(0.8, 0.05, 0.05, 0, 0.1)},
		{"disk contention", 140, "io_block", sh(0.1, 0.75, 0.05, 0, 0.1)},
		{"slow client", 120, "net_backpressure", sh(0.05, 0, 0, 0.85, 0.1)},
	}
	for i, p := range phases {
		d.Phases = append(d.Phases, Phase{
			Name: p.name, StartS: float64(i) * 15, EndS: float64(i+1) * 15, Requests: 60,
			P50ITLMs: 18.5 + float64(i), P99ITLMs: p.p99, P99TTFTMs: 90 + 20*float64(i), TopCause: p.top,
			ITLP99: p.sh, ITLAll: p.sh, TTFT: p.sh,
		})
	}
	for s := 0; s < 60; s++ {
		ph := s / 15
		c := map[string]float64{"unexplained": 20 + rng.Float64()*20}
		switch ph {
		case 1:
			c["cpu_runqueue"] = 300 + rng.Float64()*200
		case 2:
			c["io_block"] = 200 + rng.Float64()*150
		case 3:
			c["net_backpressure"] = 150 + rng.Float64()*100
		}
		c["gpu_sync"] = 10 + rng.Float64()*10
		d.Timeline = append(d.Timeline, TimelinePoint{
			T: float64(s), OutputTokensPerSecond: 260 - 40*float64(ph%3) + rng.Float64()*30, CompletedRequests: 4,
			P50ITLMs: 18 + rng.Float64()*2, P99ITLMs: []float64{24, 180, 140, 120}[ph] * (0.8 + 0.4*rng.Float64()),
			P50TTFTMs: 50 + 10*float64(ph) + rng.Float64()*10, CausesMs: c,
		})
	}
	start := time.Date(2026, 3, 1, 10, 15, 0, 0, time.UTC)
	d.Collection = &Collection{
		Pid: 4242, Comm: "llmsim", Started: start, Stopped: start.Add(60 * time.Second),
		StartedOffsetS: 0, StoppedOffsetS: 60.2, StoppedReason: "load finished",
		LostEvents: 12, Spans: 182345, SpansDropped: 0,
		Unavailable: map[string]string{"gpu": "NVML not found (libnvidia-ml.so.1: no such file)"},
		Readiness: []Check{
			{Status: "ok", Name: "kernel BTF", Detail: "/sys/kernel/btf/vmlinux"},
			{Status: "ok", Name: "bpf() as root", Detail: "CAP_BPF, CAP_PERFMON"},
			{Status: "warn", Name: "NVML", Detail: "libnvidia-ml.so.1 not found", Fix: "install the NVIDIA driver"},
		},
	}
	d.Collectors = map[string]json.RawMessage{
		"sched": raw(map[string]any{
			"runqueue_latency_seconds": map[string]any{"count": 18234, "p50": 0.000012, "p99": 0.0045, "max": 0.031, "sum": 2.9},
			"offcpu_seconds":           map[string]any{"preempted": 3.1, "io_wait": 1.2, "sleep": 40.5},
			"threads": []any{
				map[string]any{"tid": 4242, "comm": "llmsim", "runqueue_seconds": 1.9, "runqueue_count": 9000, "offcpu_seconds": map[string]any{"preempted": 2.0, "io_wait": 0.9, "sleep": 20}},
				map[string]any{"tid": 4250, "comm": "llmsim-io", "runqueue_seconds": 0.7, "runqueue_count": 7000, "offcpu_seconds": map[string]any{"preempted": 1.0, "io_wait": 0.3, "sleep": 20}},
			},
		}),
		"blockio": raw(map[string]any{"devices": []any{
			map[string]any{"device": "nvme0n1", "reads": 3200, "writes": 40, "read_bytes": 419430400, "write_bytes": 163840,
				"latency_seconds": map[string]any{"p50": 0.00021, "p99": 0.012, "max": 0.05}, "queue_seconds": map[string]any{"p50": 0.00001, "p99": 0.004, "max": 0.02}},
		}}),
		"tcp": raw(map[string]any{"connections": []any{
			map[string]any{"local": "127.0.0.1:8000", "remote": "127.0.0.1:51234", "srtt_seconds": 0.00004, "snd_cwnd": 10, "snd_wnd_min": 0,
				"retransmits": 0, "zero_window_seconds": 2.5, "rwnd_limited_seconds": 3.1, "sndbuf_limited_seconds": 0.2, "bytes_sent": 1048576, "bytes_received": 20480},
		}}),
		"cuda": raw(map[string]any{"calls": []any{
			map[string]any{"function": "cudaStreamSynchronize", "count": 14000, "total_seconds": 12.5, "p99_seconds": 0.004},
			map[string]any{"function": "cudaMemcpyAsync", "count": 3000, "total_seconds": 0.5, "p99_seconds": 0.0002},
		}}),
		"gpu": raw(map[string]any{"available": false, "error": "NVML not found", "interval_seconds": 0.1, "devices": []any{}, "processes": []any{}}),
	}
	d.Diagnosis = Diagnose(d)
	return d
}

// emptyDocument is a result with nothing in it.
func emptyDocument() *Document { return &Document{} }

// failedDocument is a run whose every request failed.
func failedDocument() *Document {
	const n = 20
	ttfts := make([]float64, n)
	itls := make([][]float64, n)
	errs := make([]string, n)
	for i := range errs {
		itls[i] = []float64{}
		errs[i] = "connection refused"
	}
	d := &Document{Load: loadFields(ttfts, itls, errs, 2)}
	d.Collection = &Collection{Pid: 99, Comm: "server", StoppedReason: "target pid 99 exited 1.2 s into the run", StoppedOffsetS: 1.2}
	return d
}
