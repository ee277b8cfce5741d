package report

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"time"

	"github.com/bpfbench/bpfbench/collectors/blockio"
	"github.com/bpfbench/bpfbench/collectors/cuda"
	"github.com/bpfbench/bpfbench/collectors/gpu"
	"github.com/bpfbench/bpfbench/collectors/sched"
	"github.com/bpfbench/bpfbench/collectors/tcp"
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
	d.Collectors = collectorSections()
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

// collectorSections are the sections of a run as the collectors write
// them, built from their own summary types so that a field they add shows
// in the pages the tests render: every field set, several rows a table,
// the long names real hosts have (IPv6 peers, library paths, build ids).
// The gpu section is the one of a host without NVML; gpuSection is the
// one of a host with it.
func collectorSections() map[string]json.RawMessage {
	s := sched.Summary{
		RunqueueLatency: sched.Latency{Count: 18234, P50: 0.000012, P99: 0.0045, Max: 0.031, Sum: 2.9},
		OffCPU:          sched.OffCPU{Preempted: 3.1, IOWait: 1.2, Sleep: 40.5},
		Folded:          120455,
	}
	for i, comm := range []string{"llmsim", "llmsim-io", "tokio-runtime-worker", "python3.12", "cuda-EvtHandlr"} {
		s.Threads = append(s.Threads, sched.Thread{
			Tid: uint32(4242 + 8*i), Comm: comm, RunqueueSeconds: 1.9 / float64(i+1), RunqueueCount: uint64(9000 - 1500*i),
			OffCPU: sched.OffCPU{Preempted: 2.0 / float64(i+1), IOWait: 0.9 * float64(i%2), Sleep: 20 + float64(i)},
		})
	}
	lat := func(p50, p99, max float64) blockio.Latency { return blockio.Latency{P50: p50, P99: p99, Max: max} }
	bio := blockio.Summary{Devices: []blockio.Device{
		{Device: "nvme0n1", Reads: 3200, Writes: 40, ReadBytes: 419430400, WriteBytes: 163840, Latency: lat(0.00021, 0.012, 0.05), Queue: lat(0.00001, 0.004, 0.02)},
		{Device: "nvme1n1p2", Reads: 1234567, Writes: 987654, ReadBytes: 161061273600, WriteBytes: 53687091200, Latency: lat(0.000095, 0.0031, 0.21), Queue: lat(0.000004, 0.0012, 0.09)},
		{Device: "dm-0", Reads: 12, Writes: 3, ReadBytes: 49152, WriteBytes: 12288, Latency: lat(0.0011, 0.0042, 0.0042), Queue: lat(0, 0, 0)},
	}}
	conn := func(local, remote string, i int) tcp.Connection {
		f := float64(i + 1)
		return tcp.Connection{
			Local: local, Remote: remote, SrttSeconds: 0.00004 * f, SndCwnd: uint32(10 * (i + 1)), SndWndMin: uint32(65483 * i),
			Retransmits: uint32(3 * i), ZeroWindowSeconds: 2.5 / f, RwndLimitedSeconds: 3.1 / f, SndbufLimitedSeconds: 0.2 * f,
			BytesSent: uint64(1048576 * (i*1000 + 1)), BytesReceived: uint64(20480 * (i + 1)), RcvqueueFull: uint32(17 * i),
			RcvSpace: uint32(14480 * (i + 1)), Rcvbuf: uint32(131072 * (i + 1)), RecoveryEntries: uint32(2 * i), LossEntries: uint32(i),
			CongestionLossSeconds: 0.0123 * float64(i),
		}
	}
	tc := tcp.Summary{Connections: []tcp.Connection{
		conn("127.0.0.1:8000", "127.0.0.1:51234", 0),
		conn("[::ffff:10.128.14.201]:8000", "[::ffff:10.128.77.193]:61022", 1),
		conn("[2001:db8:85a3::8a2e:370:7334]:8000", "[2001:db8:85a3:1f00:4b1e:9c2d:7a61:e5f0]:48712", 2),
	}}
	cu := cuda.Summary{
		Libraries: []cuda.Library{
			{Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", API: "driver", BuildID: "4f0c6a1d9b2e7c3a5d8e0f1a2b3c4d5e6f708192", Symbols: 31, Missing: []string{"cuLaunchKernelEx", "cuGraphLaunch_ptsz"}},
			{Path: "/opt/venv/lib/python3.12/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12", API: "runtime", BuildID: "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678", Symbols: 27},
		},
		Launches: []cuda.LaunchDims{
			{Call: "cuLaunchKernel", Grid: [3]uint32{1024, 32, 1}, Block: [3]uint32{256, 1, 1}, Count: 1234567},
			{Call: "cudaLaunchKernelExC", Grid: [3]uint32{65535, 65535, 64}, Block: [3]uint32{1024, 1, 1}, Count: 42},
		},
		CopyBytes:      map[string]uint64{"host_to_device": 13958643712, "device_to_host": 419430400, "device_to_device": 8589934592},
		OutOfMemory:    cuda.OutOfMemory{Count: 2, Events: []cuda.OOMEvent{{Call: "cudaMallocAsync", Tid: 4251, Bytes: 2147483648, StartNs: 1234567890123456, Code: 2}, {Call: "cuMemAlloc_v2", Tid: 4252, Bytes: 17179869184, StartNs: 1234567990123456, Code: 2}}},
		BlockedSeconds: 13.1,
		LaunchProbes: &cuda.LaunchProbes{
			Mode: "sampled", Reason: "3.1e+05 launches/s at 210 ns a hit is over the 1% budget", HitCostNs: 210, BudgetRatio: 0.01,
			ProbedSeconds: 6.2, UnprobedSeconds: 53.8, Windows: 12, MeasuredLaunches: 1928374, EstimatedLaunches: 16734210, MaxRate: 312345.6, CostSeconds: 0.41,
		},
	}
	dur := func(count uint64, p50, p99, max float64) *cuda.Latency {
		return &cuda.Latency{Count: count, P50: p50, P99: p99, Max: max, Sum: float64(count) * p50 * 1.3}
	}
	for _, c := range []cuda.CallSummary{
		{Name: "cudaStreamSynchronize", API: "runtime", Kind: "sync", Count: 14000, Duration: dur(14000, 0.0007, 0.004, 0.031)},
		{Name: "cudaMemcpyAsync", API: "runtime", Kind: "copy", Count: 3000, Errors: 1, Bytes: 13958643712},
		{Name: "cuMemcpyDtoHAsync_v2_ptsz", API: "driver", Kind: "copy", Count: 123456, Bytes: 419430400},
		{Name: "cuLaunchKernel", API: "driver", Kind: "launch", Count: 1928374, EstimatedCount: 18662584},
		{Name: "cudaMallocAsync", API: "runtime", Kind: "alloc", Count: 812, Errors: 2, Bytes: 96636764160, Duration: dur(812, 0.000021, 0.0019, 0.12)},
		{Name: "cuCtxSynchronize", API: "driver", Kind: "sync", Count: 7, Duration: dur(7, 1.2, 10.5, 12.25)},
	} {
		cu.Calls = append(cu.Calls, c)
	}
	return map[string]json.RawMessage{
		"sched": raw(s), "blockio": raw(bio), "tcp": raw(tc), "cuda": raw(cu),
		"gpu": raw(gpu.Summary{Available: false, Error: "NVML not found", IntervalSeconds: 0.1, Devices: []gpu.DeviceSummary{}, Processes: []gpu.ProcessSummary{}}),
	}
}

// gpuSection is the gpu section of a host with two GPUs and NVML.
func gpuSection() json.RawMessage {
	st := func(mean, max float64) *gpu.Stat { return &gpu.Stat{Mean: mean, Max: max, Samples: 600} }
	dev := func(i int, name string) gpu.DeviceSummary {
		f := float64(i + 1)
		return gpu.DeviceSummary{
			DeviceInfo: gpu.DeviceInfo{Index: i, UUID: fmt.Sprintf("GPU-6f1c2a9e-%04x-4b8e-9d3a-%012x", 0x51d2+i, 0x7e0c4f1a2b3c+i), Name: name},
			Samples:    600, MemoryTotalBytes: 85899345920,
			GPUUtilization: st(0.62/f, 1), MemoryUtilization: st(0.31/f, 0.87), MemoryUsedBytes: st(71000000000/f, 79456894976),
			SMClockHz: st(1755000000, 1980000000), MemoryClockHz: st(2619000000, 2619000000), PowerWatts: st(412.3/f, 699.8),
			TemperatureCelsius: st(61/f, 78), PCIeTx: st(1.2e9/f, 2.56e10), PCIeRx: st(8.4e8/f, 2.1e10),
			ClockEventReasons: map[string]float64{"gpu_idle": 0.12 * f, "sw_power_cap": 0.31, "hw_thermal_slowdown": 0.004, "sync_boost": 0.02},
		}
	}
	proc := func(pid, g int) gpu.ProcessSummary {
		return gpu.ProcessSummary{Pid: pid, GPU: g, UUID: fmt.Sprintf("GPU-6f1c2a9e-%04x-4b8e-9d3a-%012x", 0x51d2+g, 0x7e0c4f1a2b3c+g),
			SMUtilization: st(0.58, 0.99), MemoryUtilization: st(0.29, 0.8), MemoryUsedBytes: st(70000000000, 78000000000)}
	}
	return raw(gpu.Summary{
		Available: true, IntervalSeconds: 0.1,
		Devices:   []gpu.DeviceSummary{dev(0, "NVIDIA H100 80GB HBM3"), dev(1, "NVIDIA H100 80GB HBM3")},
		Processes: []gpu.ProcessSummary{proc(4242, 0), proc(4242, 1), proc(4307, 1)},
	})
}

// gpuDocument is the full run on a host with NVML: every section filled.
func gpuDocument() *Document {
	d := fullDocument()
	d.Collectors["gpu"] = gpuSection()
	delete(d.Collection.Unavailable, "gpu")
	d.Collection.Readiness[2] = Check{Status: "ok", Name: "NVML", Detail: "libnvidia-ml.so.1 550.54.15, 2 devices"}
	d.Diagnosis = Diagnose(d)
	return d
}
