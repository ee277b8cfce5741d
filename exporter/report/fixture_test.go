package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"time"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/result"
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

// loadDocument is a document holding the load fields m, read as a
// result.json holding them is.
func loadDocument(m map[string]json.RawMessage) *result.Document {
	d, err := result.Read(bytes.NewReader(raw(m)))
	if err != nil {
		panic(err)
	}
	return d
}

// fullDocument is a run with every part filled: four phases, the
// critical path's causes as the attribution, the union of activity
// disagreeing with it, every collector section, one unavailable.
func fullDocument() *result.Document {
	rng := rand.New(rand.NewSource(1))
	d := fullLoad(rng)
	d.Attribution = fullAttribution()
	d.Activity = fullActivity()
	d.Phases = fullPhases()
	d.Timeline = fullTimeline(rng)
	d.Collection = fullCollection()
	d.Collectors = collectorSections()
	d.ServerMetrics, d.ServerQueue = serverMetricsFixture()
	d.Diagnosis = Diagnose(d)
	return d
}

// fullLoad is a minute's load of 240 requests in four phases, each slower
// than the last, a few failed.
func fullLoad(rng *rand.Rand) *result.Document {
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
	return loadDocument(loadFields(ttfts, itls, errs, duration))
}

// crit is a breakdown over the critical path's causes.
func crit(cpu, io, gpu, net, compute, sleep, client, un float64) correlate.Breakdown {
	return correlate.Breakdown{"cpu_runqueue": cpu, "io_block": io, "gpu_sync": gpu, "net_backpressure": net,
		"server_compute": compute, "server_sleep": sleep, "client": client, "unexplained": un}
}

// fullAttribution is the critical path's attribution: its causes, model
// critical_path.
func fullAttribution() *correlate.Summary {
	a := &correlate.Summary{
		Model:         correlate.ModelCriticalPath,
		BaselineITLMs: 18.2, BaselineTTFTMs: 52.1,
		TTFT: crit(0.35, 0.25, 0.1, 0.05, 0.1, 0, 0.05, 0.1),
		ITL: map[string]correlate.Breakdown{
			"p50": crit(0.2, 0.1, 0.2, 0, 0.3, 0.1, 0.05, 0.05), "p90": crit(0.45, 0.2, 0.1, 0.05, 0.1, 0, 0.05, 0.05),
			"p99": crit(0.7, 0.2, 0, 0, 0, 0, 0, 0.1), "all": crit(0.5, 0.2, 0.05, 0.05, 0.1, 0.02, 0.03, 0.05),
		},
		ITLBands: map[string]correlate.Band{
			"p50": {FromMs: 18.1, ToMs: 21.4, Intervals: 6800, ExcessMs: 410, Shares: crit(0.2, 0.1, 0.2, 0, 0.3, 0.1, 0.05, 0.05)},
			"p90": {FromMs: 21.4, ToMs: 95.2, Intervals: 1290, ExcessMs: 5200, Shares: crit(0.45, 0.2, 0.1, 0.05, 0.1, 0, 0.05, 0.05)},
			"p99": {FromMs: 95.2, Intervals: 140, ExcessMs: 21000, Shares: crit(0.7, 0.2, 0, 0, 0, 0, 0, 0.1)},
		},
		TopCause: "cpu_runqueue",
	}
	for i := 0; i < 30; i++ {
		// ITL shares that do not sum to 1, and excess in the hundreds of
		// ms: the blame bars must give shares, not the ms
		a.Requests = append(a.Requests, correlate.RequestBlame{
			Request: i, TTFTMs: 40 + float64(i), TTFTShares: crit(0.5, 0.5, 0, 0, 0, 0, 0, 0),
			ITLExcessMs: float64(i * 37 % 500), ITLShares: crit(float64(i%3), float64(i%2), 0, float64(i%5)/4, 0.25, 0, float64(i%2)/2, 0.5),
			TopCause: []string{"cpu_runqueue", "io_block", "net_backpressure", "server_compute"}[i%4], TotalExcessMs: float64(i*37%500) + 20,
		})
	}
	return a
}

// fullActivity is the union of overlapping activity, which disagrees: it
// calls most of the excess unexplained (what the page said before the
// critical path became the attribution).
func fullActivity() *correlate.Summary {
	ush := func(cpu, io, gpu, net, un float64) correlate.Breakdown {
		return correlate.Breakdown{"cpu_runqueue": cpu, "io_block": io, "gpu_sync": gpu, "net_backpressure": net, "unexplained": un}
	}
	return &correlate.Summary{
		Model:         correlate.ModelActivity,
		BaselineITLMs: 18.2, BaselineTTFTMs: 52.1,
		BaselineRates: ush(0.01, 0, 0.3, 0, 0),
		TTFT:          ush(0.05, 0.05, 0.1, 0.05, 0.75),
		ITL: map[string]correlate.Breakdown{
			"p50": ush(0.05, 0, 0.3, 0, 0.65), "p90": ush(0.1, 0.05, 0.1, 0.05, 0.7),
			"p99": ush(0.15, 0.05, 0, 0, 0.8), "all": ush(0.1, 0.05, 0.1, 0.05, 0.7),
		},
		ITLBands: map[string]correlate.Band{
			"p50": {FromMs: 18.1, ToMs: 21.4, Intervals: 6800, ExcessMs: 410, Shares: ush(0.05, 0, 0.3, 0, 0.65)},
			"p90": {FromMs: 21.4, ToMs: 95.2, Intervals: 1290, ExcessMs: 5200, Shares: ush(0.1, 0.05, 0.1, 0.05, 0.7)},
			"p99": {FromMs: 95.2, Intervals: 140, ExcessMs: 21000, Shares: ush(0.15, 0.05, 0, 0, 0.8)},
		},
		TopCause: "unexplained",
	}
}

// fullPhases are four phases of 15 s: a baseline, then CPU, disk and
// client contention, each with its cause on top.
func fullPhases() []result.Phase {
	phases := []struct {
		name  string
		p99   float64
		top   string
		share float64
		sh    correlate.Breakdown
	}{
		{"baseline", 24, "server_compute", 0.6, crit(0.1, 0, 0.2, 0, 0.6, 0, 0, 0.1)},
		{"cpu contention", 180, "cpu_runqueue", 0.9, crit(0.8, 0.05, 0.05, 0, 0, 0, 0, 0.1)},
		{"disk contention", 140, "io_block", 0.85, crit(0.1, 0.75, 0.05, 0, 0, 0, 0, 0.1)},
		{"slow client", 120, "net_backpressure", 0.92, crit(0.05, 0, 0, 0.85, 0, 0, 0, 0.1)},
	}
	var out []result.Phase
	for i, p := range phases {
		basis := "largest addition to the slowest 10% of gaps over baseline"
		if i == 0 {
			basis = "slowest 1% of gaps"
		}
		out = append(out, result.Phase{
			Name: p.name, StartS: float64(i) * 15, EndS: float64(i+1) * 15, Requests: 60,
			P50ITLMs: 18.5 + float64(i), P99ITLMs: p.p99, P99TTFTMs: 90 + 20*float64(i), TopCause: p.top,
			TopShare: p.share, TopCauseBasis: basis,
			ITLP99: p.sh, ITLAll: p.sh, TTFT: p.sh,
		})
	}
	return out
}

// fullTimeline is a point a second over the phases, each phase's cause
// adding its excess.
func fullTimeline(rng *rand.Rand) []result.TimelinePoint {
	var out []result.TimelinePoint
	for s := 0; s < 60; s++ {
		ph := s / 15
		c := map[string]float64{"server_compute": 20 + rng.Float64()*20}
		switch ph {
		case 1:
			c["cpu_runqueue"] = 300 + rng.Float64()*200
		case 2:
			c["io_block"] = 200 + rng.Float64()*150
		case 3:
			c["net_backpressure"] = 150 + rng.Float64()*100
		}
		c["gpu_sync"] = 10 + rng.Float64()*10
		c["unexplained"] = 2 + rng.Float64()*2
		out = append(out, result.TimelinePoint{
			T: float64(s), OutputTokensPerSecond: 260 - 40*float64(ph%3) + rng.Float64()*30, CompletedRequests: 4,
			P50ITLMs: 18 + rng.Float64()*2, P99ITLMs: []float64{24, 180, 140, 120}[ph] * (0.8 + 0.4*rng.Float64()),
			P50TTFTMs: 50 + 10*float64(ph) + rng.Float64()*10, CausesMs: c,
		})
	}
	return out
}

// fullCollection is a minute's collection from llmsim, the GPU unavailable.
func fullCollection() *result.Collection {
	start := time.Date(2026, 3, 1, 10, 15, 0, 0, time.UTC)
	return &result.Collection{
		Pid: 4242, Comm: "llmsim", Started: start, Stopped: start.Add(60 * time.Second),
		StartedOffsetS: 0, StoppedOffsetS: 60.2, StoppedReason: "load finished",
		LostEvents: 12, Spans: 182345, SpansDropped: 0,
		Unavailable: map[string]string{"gpu": "NVML not found (libnvidia-ml.so.1: no such file)"},
		Readiness: []result.Check{
			{Status: "ok", Name: "kernel BTF", Detail: "/sys/kernel/btf/vmlinux"},
			{Status: "ok", Name: "bpf() as root", Detail: "CAP_BPF, CAP_PERFMON"},
			{Status: "warn", Name: "NVML", Detail: "libnvidia-ml.so.1 not found", Fix: "install the NVIDIA driver"},
		},
	}
}

// serverMetricsFixture is a vLLM's /metrics over a minute, its queue
// filling in the second quarter, and the queue estimate.
func serverMetricsFixture() (*result.ServerMetrics, *result.ServerQueue) {
	m := &result.ServerMetrics{
		URL: "http://127.0.0.1:8000/metrics", Found: true, Engine: "vllm", VocabularyMatched: true, PeriodMs: 500,
		Scrapes: 121, ScrapeFailures: 1, FirstError: "scraping http://127.0.0.1:8000/metrics: no answer within 400ms",
		LastError: "scraping http://127.0.0.1:8000/metrics: no answer within 400ms",
		Sources:   map[string]string{smRunning: "vllm:num_requests_running", smWaiting: "vllm:num_requests_waiting", smKV: "vllm:kv_cache_usage_perc"},
		Overall:   map[string]float64{smPreempt: 3, smQueueMs: 41.5, smPrefix: 0.12, smPrompt: 61440, smGenerate: 15360},
		Peaks:     map[string]float64{smRunning: 16, smWaiting: 7, smKV: 0.93},
	}
	for i := range 120 {
		t := float64(i) / 2
		wait := 0.0
		if t >= 15 && t < 30 {
			wait = float64(i % 8)
		}
		m.Samples = append(m.Samples, result.ServerSample{T: t, Values: map[string]float64{
			smRunning: 12 + float64(i%5), smWaiting: wait, smKV: 0.5 + 0.4*float64(i%10)/10,
		}})
	}
	engine := 41.5
	q := &result.ServerQueue{
		Rule: "FIFO replay over the engine's slots", Available: true, Slots: 16, RequestsQueued: 31,
		ShareOfTTFT: 0.34, TotalMs: 1290, TTFTMs: 3794, MeanMs: 41.6, MaxMs: 180, EngineMeanMs: &engine, WaitingError: 0.4,
		Requests: []result.QueuedRequest{{Index: 60, QueueMs: 180, TTFTMs: 240}},
	}
	return m, q
}

// emptyDocument is a result with nothing in it.
func emptyDocument() *result.Document { return &result.Document{} }

// failedDocument is a run whose every request failed.
func failedDocument() *result.Document {
	const n = 20
	ttfts := make([]float64, n)
	itls := make([][]float64, n)
	errs := make([]string, n)
	for i := range errs {
		itls[i] = []float64{}
		errs[i] = "connection refused"
	}
	d := loadDocument(loadFields(ttfts, itls, errs, 2))
	d.Collection = &result.Collection{Pid: 99, Comm: "server", StoppedReason: "target pid 99 exited 1.2 s into the run", StoppedOffsetS: 1.2}
	return d
}

// obj is a JSON object of a fixture.
type obj = map[string]any

// collectorSections are the sections of a run as the collectors write
// them (the fields of collectors/*/summary.go and tcp's Connection): every
// field set, several rows a table, the long names real hosts have (IPv6
// peers, library paths, build ids). The gpu section is the one of a host
// without NVML; gpuSection is the one of a host with it.
func collectorSections() *result.Collectors {
	var threads []any
	for i, comm := range []string{"llmsim", "llmsim-io", "tokio-runtime-worker", "python3.12", "cuda-EvtHandlr"} {
		threads = append(threads, obj{
			"tid": 4242 + 8*i, "comm": comm, "runqueue_seconds": 1.9 / float64(i+1), "runqueue_count": 9000 - 1500*i,
			"offcpu_seconds": obj{"preempted": 2.0 / float64(i+1), "io_wait": 0.9 * float64(i%2), "sleep": 20 + float64(i)},
		})
	}
	sched := obj{
		"runqueue_latency_seconds": obj{"count": 18234, "p50": 0.000012, "p99": 0.0045, "max": 0.031, "sum": 2.9},
		"offcpu_seconds":           obj{"preempted": 3.1, "io_wait": 1.2, "sleep": 40.5},
		"folded_intervals":         120455,
		"threads":                  threads,
	}
	lat := func(p50, p99, max float64) obj { return obj{"p50": p50, "p99": p99, "max": max} }
	dev := func(name string, reads, writes, rb, wb int64, l, q obj) obj {
		return obj{"device": name, "reads": reads, "writes": writes, "read_bytes": rb, "write_bytes": wb, "latency_seconds": l, "queue_seconds": q}
	}
	blockio := obj{"devices": []any{
		dev("nvme0n1", 3200, 40, 419430400, 163840, lat(0.00021, 0.012, 0.05), lat(0.00001, 0.004, 0.02)),
		dev("nvme1n1p2", 1234567, 987654, 161061273600, 53687091200, lat(0.000095, 0.0031, 0.21), lat(0.000004, 0.0012, 0.09)),
		dev("dm-0", 12, 3, 49152, 12288, lat(0.0011, 0.0042, 0.0042), lat(0, 0, 0)),
	}}
	conn := func(local, remote string, i int) obj {
		f := float64(i + 1)
		return obj{
			"local": local, "remote": remote, "srtt_seconds": 0.00004 * f, "snd_cwnd": 10 * (i + 1), "snd_wnd_min": 65483 * i,
			"retransmits": 3 * i, "zero_window_seconds": 2.5 / f, "rwnd_limited_seconds": 3.1 / f, "sndbuf_limited_seconds": 0.2 * f,
			"bytes_sent": 1048576 * (i*1000 + 1), "bytes_received": 20480 * (i + 1), "rcvqueue_full": 17 * i,
			"rcv_space": 14480 * (i + 1), "rcvbuf": 131072 * (i + 1), "recovery_entries": 2 * i, "loss_entries": i,
			"congestion_loss_seconds": 0.0123 * float64(i),
		}
	}
	tcp := obj{"connections": []any{
		conn("127.0.0.1:8000", "127.0.0.1:51234", 0),
		conn("[::ffff:10.128.14.201]:8000", "[::ffff:10.128.77.193]:61022", 1),
		conn("[2001:db8:85a3::8a2e:370:7334]:8000", "[2001:db8:85a3:1f00:4b1e:9c2d:7a61:e5f0]:48712", 2),
	}}
	dur := func(count int, p50, p99, max float64) obj {
		return obj{"count": count, "p50": p50, "p99": p99, "max": max, "sum": float64(count) * p50 * 1.3}
	}
	call := func(name, api, kind string, count, errors, bytes int64, d obj, estimated int64) obj {
		c := obj{"name": name, "api": api, "kind": kind, "count": count, "errors": errors}
		if bytes != 0 {
			c["bytes"] = bytes
		}
		if d != nil {
			c["duration_seconds"] = d
		}
		if estimated != 0 {
			c["estimated_count"] = estimated
		}
		return c
	}
	cuda := obj{
		"libraries": []any{
			obj{"path": "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", "api": "driver", "build_id": "4f0c6a1d9b2e7c3a5d8e0f1a2b3c4d5e6f708192", "symbols": 31, "missing": []any{"cuLaunchKernelEx", "cuGraphLaunch_ptsz"}},
			obj{"path": "/opt/venv/lib/python3.12/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12", "api": "runtime", "build_id": "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678", "symbols": 27},
		},
		"calls": []any{
			call("cudaStreamSynchronize", "runtime", "sync", 14000, 0, 0, dur(14000, 0.0007, 0.004, 0.031), 0),
			call("cudaMemcpyAsync", "runtime", "copy", 3000, 1, 13958643712, nil, 0),
			call("cuMemcpyDtoHAsync_v2_ptsz", "driver", "copy", 123456, 0, 419430400, nil, 0),
			call("cuLaunchKernel", "driver", "launch", 1928374, 0, 0, nil, 18662584),
			call("cudaMallocAsync", "runtime", "alloc", 812, 2, 96636764160, dur(812, 0.000021, 0.0019, 0.12), 0),
			call("cuCtxSynchronize", "driver", "sync", 7, 0, 0, dur(7, 1.2, 10.5, 12.25), 0),
		},
		"launches": []any{
			obj{"call": "cuLaunchKernel", "grid": []any{1024, 32, 1}, "block": []any{256, 1, 1}, "count": 1234567},
			obj{"call": "cudaLaunchKernelExC", "grid": []any{65535, 65535, 64}, "block": []any{1024, 1, 1}, "count": 42},
		},
		"copy_bytes": obj{"host_to_device": 13958643712, "device_to_host": 419430400, "device_to_device": 8589934592},
		"out_of_memory": obj{"count": 2, "events": []any{
			obj{"call": "cudaMallocAsync", "tid": 4251, "bytes": 2147483648, "start_ns": 1234567890123456, "code": 2},
			obj{"call": "cuMemAlloc_v2", "tid": 4252, "bytes": 17179869184, "start_ns": 1234567990123456, "code": 2},
		}},
		"blocked_seconds": 13.1,
		"launch_probes": obj{
			"mode": "sampled", "reason": "3.1e+05 launches/s at 210 ns a hit is over the 1% budget", "hit_cost_ns": 210, "budget_ratio": 0.01,
			"probed_seconds": 6.2, "unprobed_seconds": 53.8, "sample_windows": 12, "measured_launches": 1928374, "estimated_launches": 16734210,
			"max_launches_per_second": 312345.6, "cost_seconds": 0.41,
		},
	}
	var c result.Collectors
	if err := json.Unmarshal(raw(obj{
		"sched": sched, "blockio": blockio, "tcp": tcp, "cuda": cuda,
		"gpu": obj{"available": false, "error": "NVML not found", "interval_seconds": 0.1, "devices": []any{}, "processes": []any{}},
	}), &c); err != nil {
		panic(err)
	}
	return &c
}

// gpuSection is the gpu section of a host with two GPUs and NVML.
func gpuSection() json.RawMessage {
	st := func(mean, max float64) obj { return obj{"mean": mean, "max": max, "samples": 600} }
	uuid := func(i int) string {
		return fmt.Sprintf("GPU-6f1c2a9e-%04x-4b8e-9d3a-%012x", 0x51d2+i, 0x7e0c4f1a2b3c+i)
	}
	dev := func(i int, name string) obj {
		f := float64(i + 1)
		return obj{
			"index": i, "uuid": uuid(i), "name": name, "samples": 600, "memory_total_bytes": 85899345920,
			"utilization_ratio": st(0.62/f, 1), "memory_utilization_ratio": st(0.31/f, 0.87), "memory_used_bytes": st(71000000000/f, 79456894976),
			"sm_clock_hertz": st(1755000000, 1980000000), "memory_clock_hertz": st(2619000000, 2619000000), "power_watts": st(412.3/f, 699.8),
			"temperature_celsius": st(61/f, 78), "pcie_tx_bytes_per_second": st(1.2e9/f, 2.56e10), "pcie_rx_bytes_per_second": st(8.4e8/f, 2.1e10),
			"clock_event_reasons_ratio": obj{"gpu_idle": 0.12 * f, "sw_power_cap": 0.31, "hw_thermal_slowdown": 0.004, "sync_boost": 0.02},
		}
	}
	proc := func(pid, g int) obj {
		return obj{"pid": pid, "gpu": g, "uuid": uuid(g),
			"sm_utilization_ratio": st(0.58, 0.99), "memory_utilization_ratio": st(0.29, 0.8), "memory_used_bytes": st(70000000000, 78000000000)}
	}
	return raw(obj{
		"available": true, "interval_seconds": 0.1,
		"devices":   []any{dev(0, "NVIDIA H100 80GB HBM3"), dev(1, "NVIDIA H100 80GB HBM3")},
		"processes": []any{proc(4242, 0), proc(4242, 1), proc(4307, 1)},
	})
}

// gpuDocument is the full run on a host with NVML: every section filled.
func gpuDocument() *result.Document {
	d := fullDocument()
	d.Collectors.GPU = nil
	if err := json.Unmarshal(gpuSection(), &d.Collectors.GPU); err != nil {
		panic(err)
	}
	delete(d.Collection.Unavailable, "gpu")
	d.Collection.Readiness[2] = result.Check{Status: "ok", Name: "NVML", Detail: "libnvidia-ml.so.1 550.54.15, 2 devices"}
	d.Diagnosis = Diagnose(d)
	return d
}

// injectionDocument is the full run as a validation writes it: each later
// phase says what it injected and the verdict, one too weak to judge.
func injectionDocument() *result.Document {
	d := fullDocument()
	d.Phases[1].Injection = "cpu: 2 busy threads per CPU on CPUs 0-3; the run queue added 4.1 ms per gap of the slowest 10%"
	d.Phases[1].Expected = "cpu_runqueue"
	d.Phases[1].Verdict = "the critical path named cpu_runqueue, the cause injected"
	d.Phases[2].Injection = "io: O_DIRECT reads of /var/tmp/bpfbench-io, 1 MiB at a time, 8 in flight; 0.2 ms more block IO per gap"
	d.Phases[2].Expected = "io_block"
	d.Phases[2].Weak = true
	d.Phases[2].Verdict = "injection too weak to judge: it added 0.2 ms per gap of the slowest 10%, under the 1 ms needed"
	d.Phases[3].Injection = "client: the load generator reads each chunk 30 ms late"
	d.Phases[3].Expected = "client"
	d.Phases[3].Verdict = "the critical path named net_backpressure, not client"
	return d
}

// criticalPathOnlyDocument is a run with a critical path and no
// attribution (a result.json of an older bpfbench whose gaps file is
// gone): the headline and the bands come from the critical path.
func criticalPathOnlyDocument() *result.Document {
	d := fullDocument()
	d.Attribution = nil
	d.CriticalPath = &result.CriticalPath{
		Baseline: "run", Gaps: 3000, GapMs: 40000, UnexplainedFraction: 0.01,
		NormalITLMs:  map[string]float64{"server_compute": 7, "client": 1},
		NormalTTFTMs: map[string]float64{"server_compute": 60},
		ITLP99: &result.CriticalBand{FromMs: 14.2, Gaps: 32, ExcessMs: 200, Top: "server_compute",
			ExcessShares: map[string]float64{"server_compute": 0.47, "client": 0.3, "cpu_runqueue": 0.23}},
		TTFTP99: &result.CriticalBand{FromMs: 900, Gaps: 2, ExcessMs: 1500, Top: "cpu_runqueue",
			ExcessShares: map[string]float64{"cpu_runqueue": 1}},
	}
	d.Diagnosis = nil
	return d
}
