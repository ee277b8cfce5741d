package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/clock"
)

const targetPid = 4242

// fakeGPU sets the readings the H200 server mock leaves out. Device i reads
// distinct values so tests can tell devices apart.
func fakeGPU(d *server.Device, i int) {
	u := uint32(i)
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{Gpu: 80 + u, Memory: 40 + u}, nvml.SUCCESS
	}
	d.MemoryInfo = nvml.Memory{Total: d.MemoryInfo.Total, Used: 10<<30 + uint64(i)<<20, Free: d.MemoryInfo.Total - 10<<30}
	d.GetClockInfoFunc = func(t nvml.ClockType) (uint32, nvml.Return) {
		switch t {
		case nvml.CLOCK_SM:
			return 1980 - u, nvml.SUCCESS
		case nvml.CLOCK_MEM:
			return 2619, nvml.SUCCESS
		}
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 512_250 + 1000*u, nvml.SUCCESS }
	d.GetTemperatureFunc = func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
		if s != nvml.TEMPERATURE_GPU {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return 61 + u, nvml.SUCCESS
	}
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) {
		return nvml.ClocksEventReasonSwPowerCap | nvml.ClocksThrottleReasonHwThermalSlowdown, nvml.SUCCESS
	}
	d.GetPcieThroughputFunc = func(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
		if c == nvml.PCIE_UTIL_TX_BYTES {
			return 1000 + u, nvml.SUCCESS
		}
		return 2000 + u, nvml.SUCCESS
	}
	d.GetProcessUtilizationFunc = func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return nil, nvml.ERROR_NOT_FOUND
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: targetPid, UsedGpuMemory: 8 << 30}, {Pid: 1, UsedGpuMemory: 1 << 30}}, nvml.SUCCESS
	}
	d.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
}

func newServer(t *testing.T, n int) *server.Server {
	t.Helper()
	s := dgxh200.NewWithGPUs(gpus.Multiple(n, gpus.H200_SXM5_141GB)...)
	for i, d := range s.Devices {
		fakeGPU(d.(*server.Device), i)
	}
	return s
}

func dev(s *server.Server, i int) *server.Device { return s.Devices[i].(*server.Device) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func start(t *testing.T, lib nvml.Interface, pids ...int) *Collector {
	t.Helper()
	c := New(Config{NVML: lib, Pids: pids, Interval: 10 * time.Millisecond, Logger: quiet()})
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestEveryMetric(t *testing.T) {
	s := newServer(t, 2)
	c := start(t, s, targetPid)
	devs := c.Devices()
	if len(devs) != 2 || devs[1].Index != 1 || devs[1].Name != "NVIDIA H200 141GB HBM3e" ||
		!strings.HasPrefix(devs[1].UUID, "GPU-") {
		t.Fatalf("devices %+v", devs)
	}
	before := clock.Now()
	pass := c.SampleNow()
	after := clock.Now()
	if len(pass) != 2 {
		t.Fatalf("%d samples, want 2", len(pass))
	}
	x := pass[1]
	if x.TimeNs < before || x.TimeNs > after {
		t.Errorf("timestamp %d not within [%d, %d] (CLOCK_MONOTONIC)", x.TimeNs, before, after)
	}
	all := FieldGPUUtilization | FieldMemoryUtilization | FieldMemoryUsed | FieldMemoryTotal | FieldSMClock |
		FieldMemoryClock | FieldPower | FieldTemperature | FieldClockEventReasons | FieldPCIeTx | FieldPCIeRx
	if x.Fields != all {
		t.Errorf("fields %b, want %b", x.Fields, all)
	}
	checks := []struct {
		name      string
		got, want float64
	}{
		{"gpu utilization", x.GPUUtilization, 0.81},
		{"memory utilization", x.MemoryUtilization, 0.41},
		{"memory used", float64(x.MemoryUsedBytes), 10<<30 + 1<<20},
		{"memory total", float64(x.MemoryTotalBytes), 144384 << 20},
		{"sm clock", x.SMClockHz, 1979e6},
		{"memory clock", x.MemoryClockHz, 2619e6},
		{"power", x.PowerWatts, 513.25},
		{"temperature", x.TemperatureCelsius, 62},
		{"pcie tx", x.PCIeTxBytesPerSecond, 1001 * 1024},
		{"pcie rx", x.PCIeRxBytesPerSecond, 2001 * 1024},
	}
	for _, ck := range checks {
		if diff := ck.got - ck.want; diff > 1e-9 || diff < -1e-9 {
			t.Errorf("%s = %v, want %v", ck.name, ck.got, ck.want)
		}
	}
	if x.ClockEventReasons != nvml.ClocksEventReasonSwPowerCap|nvml.ClocksThrottleReasonHwThermalSlowdown {
		t.Errorf("clock event reasons %#x", x.ClockEventReasons)
	}
	// The target's memory; no utilization samples yet (ERROR_NOT_FOUND).
	if len(x.Processes) != 1 || x.Processes[0].Pid != targetPid || x.Processes[0].Fields != ProcMemory ||
		x.Processes[0].MemoryUsedBytes != 8<<30 {
		t.Errorf("processes %+v", x.Processes)
	}
	if got := c.Latest(); len(got) != 2 || got[1].TimeNs != x.TimeNs {
		t.Errorf("latest %+v", got)
	}
}

// NVML keeps process samples in a ring; each pass asks only for those newer
// than the newest seen before, and averages the target's samples.
func TestProcessUtilization(t *testing.T) {
	s := newServer(t, 1)
	d := dev(s, 0)
	var asked []uint64
	batches := [][]nvml.ProcessUtilizationSample{
		{{Pid: targetPid, TimeStamp: 100, SmUtil: 50, MemUtil: 20}, {Pid: targetPid, TimeStamp: 200, SmUtil: 70, MemUtil: 30},
			{Pid: 99, TimeStamp: 250, SmUtil: 10}},
		nil, // ERROR_NOT_FOUND
		{{Pid: targetPid, TimeStamp: 300, SmUtil: 90, MemUtil: 60, EncUtil: 5, DecUtil: 7}},
	}
	d.GetProcessUtilizationFunc = func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		asked = append(asked, last)
		b := batches[0]
		batches = batches[1:]
		if b == nil {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return b, nvml.SUCCESS
	}
	c := start(t, s, targetPid)
	p1 := c.SampleNow()[0].Processes
	p2 := c.SampleNow()[0].Processes
	p3 := c.SampleNow()[0].Processes
	if want := []uint64{0, 250, 250}; len(asked) != 3 || asked[0] != want[0] || asked[1] != want[1] || asked[2] != want[2] {
		t.Errorf("lastSeen passed %v, want %v", asked, want)
	}
	if len(p1) != 1 || !p1[0].Has(ProcUtilization) || p1[0].SMUtilization != 0.6 || p1[0].MemoryUtilization != 0.25 ||
		p1[0].NVMLTimestampUs != 200 {
		t.Errorf("first pass %+v", p1)
	}
	if len(p2) != 1 || p2[0].Has(ProcUtilization) || !p2[0].Has(ProcMemory) {
		t.Errorf("second pass (no new samples) %+v", p2)
	}
	if len(p3) != 1 || p3[0].SMUtilization != 0.9 || p3[0].MemoryUtilization != 0.6 || p3[0].EncoderUtilization != 0.05 ||
		p3[0].DecoderUtilization != 0.07 {
		t.Errorf("third pass %+v", p3)
	}
	sum := c.Summary()
	if len(sum.Processes) != 1 {
		t.Fatalf("summary processes %+v", sum.Processes)
	}
	ps := sum.Processes[0]
	if ps.Pid != targetPid || ps.GPU != 0 || ps.SMUtilization.Samples != 2 || ps.SMUtilization.Max != 0.9 ||
		ps.SMUtilization.Mean != 0.75 || ps.MemoryUsedBytes.Mean != 8<<30 || ps.MemoryUsedBytes.Samples != 3 {
		t.Errorf("process summary %+v sm %+v mem %+v", ps, ps.SMUtilization, ps.MemoryUsedBytes)
	}
}

// One device without power readings: power is skipped there, everything
// else (and the other device's power) is reported.
func TestNotSupportedField(t *testing.T) {
	s := newServer(t, 2)
	dev(s, 1).GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	c := start(t, s)
	for i := 0; i < 3; i++ {
		c.SampleNow()
	}
	l := c.Latest()
	if !l[0].Has(FieldPower) || l[1].Has(FieldPower) {
		t.Errorf("power present: gpu0 %v gpu1 %v", l[0].Has(FieldPower), l[1].Has(FieldPower))
	}
	if l[1].Fields|FieldPower != l[0].Fields || l[1].GPUUtilization != 0.81 {
		t.Errorf("gpu1 fields %b, gpu0 %b", l[1].Fields, l[0].Fields)
	}
	sum := c.Summary()
	if sum.Devices[1].PowerWatts != nil || sum.Devices[0].PowerWatts == nil || sum.Devices[1].TemperatureCelsius == nil {
		t.Errorf("summary power gpu0 %v gpu1 %v", sum.Devices[0].PowerWatts, sum.Devices[1].PowerWatts)
	}
	b, err := json.Marshal(sum.Devices[1])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "power_watts") {
		t.Errorf("gpu1 summary mentions power: %s", b)
	}
	var sb strings.Builder
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "bpfbench_gpu_power_watts" {
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "gpu" {
						sb.WriteString(lp.GetValue())
					}
				}
			}
		}
	}
	if sb.String() != "0" {
		t.Errorf("power exported for gpus %q, want only 0", sb.String())
	}
}

// A driver older than R535 lacks the clocks event call: the older name is used.
func TestThrottleReasonsFallback(t *testing.T) {
	s := newServer(t, 1)
	dev(s, 0).GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_FUNCTION_NOT_FOUND }
	dev(s, 0).GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) { return nvml.ClocksEventReasonGpuIdle, nvml.SUCCESS }
	c := start(t, s)
	x := c.SampleNow()[0]
	if !x.Has(FieldClockEventReasons) || x.ClockEventReasons != nvml.ClocksEventReasonGpuIdle {
		t.Errorf("reasons %#x present %v", x.ClockEventReasons, x.Has(FieldClockEventReasons))
	}
}

func TestNoNVML(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	c := New(Config{NVML: lib, Logger: quiet()})
	err := c.Start(context.Background())
	if !errors.Is(err, ErrNoNVML) {
		t.Fatalf("Start = %v, want ErrNoNVML", err)
	}
	if !strings.Contains(err.Error(), "NVML is not available") || !strings.Contains(err.Error(), "GPU metrics are off") {
		t.Errorf("message %q", err)
	}
	if len(lib.ShutdownCalls()) != 0 {
		t.Errorf("Shutdown called after a failed Init")
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close after failed Start: %v", err)
	}
	if err := c.Run(context.Background()); err == nil {
		t.Errorf("Run after failed Start succeeded")
	}
	sum := c.Summary()
	if sum.Available || !strings.Contains(sum.Error, "NVML is not available") || sum.Devices == nil {
		t.Errorf("summary %+v", sum)
	}
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("%d metrics without NVML", n)
	}
}

// The real library on this host, against what dlopen says of it (the
// ground truth): without libnvidia-ml.so.1 Start must return ErrNoNVML;
// with it, Start either sees the GPUs or says why it cannot, and never
// claims the library is missing.
func TestRealLibrary(t *testing.T) {
	lib := dl.New("libnvidia-ml.so.1", dl.RTLD_LAZY|dl.RTLD_GLOBAL)
	openErr := lib.Open()
	if openErr == nil {
		lib.Close()
	}
	c := New(Config{Logger: quiet()})
	err := c.Start(context.Background())
	defer c.Close()
	sum := c.Summary()
	switch {
	case openErr != nil:
		if !errors.Is(err, ErrNoNVML) {
			t.Errorf("Start where dlopen fails (%v) = %v, want ErrNoNVML", openErr, err)
		}
		if sum.Available {
			t.Errorf("summary %+v without NVML", sum)
		}
	case err == nil:
		if !sum.Available {
			t.Errorf("Start succeeded but the summary says unavailable: %+v", sum)
		}
		// NVML's own count, asked directly, is the ground truth.
		ref := nvml.New()
		if ret := ref.Init(); ret != nvml.SUCCESS {
			t.Fatalf("the collector started NVML, a second Init returned %v", ret)
		}
		n, ret := ref.DeviceGetCount()
		ref.Shutdown()
		if ret != nvml.SUCCESS || n != len(sum.Devices) {
			t.Errorf("summary lists %d GPUs, NVML counts %d (%v)", len(sum.Devices), n, ret)
		}
	default:
		if errors.Is(err, ErrNoNVML) {
			t.Errorf("Start = ErrNoNVML, but libnvidia-ml.so.1 opens")
		}
		if sum.Available || !strings.Contains(sum.Error, "NVML") {
			t.Errorf("Start = %v; summary %+v", err, sum)
		}
	}
}

// A failure after Init releases NVML.
func TestStartReleasesOnError(t *testing.T) {
	s := newServer(t, 2)
	shutdowns := 0
	s.ShutdownFunc = func() nvml.Return { shutdowns++; return nvml.SUCCESS }
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 1 {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return s.Devices[i], nvml.SUCCESS
	}
	c := New(Config{NVML: s, Logger: quiet()})
	err := c.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "GPU 1") {
		t.Fatalf("Start = %v", err)
	}
	if shutdowns != 1 {
		t.Errorf("%d shutdowns after a failed Start, want 1", shutdowns)
	}
	c.Close()
	if shutdowns != 1 {
		t.Errorf("Close after a failed Start shut NVML down again")
	}
}

func TestCloseIdempotent(t *testing.T) {
	s := newServer(t, 1)
	shutdowns := 0
	s.ShutdownFunc = func() nvml.Return { shutdowns++; return nvml.SUCCESS }
	c := New(Config{NVML: s, Logger: quiet()})
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if shutdowns != 1 {
		t.Errorf("%d shutdowns, want 1", shutdowns)
	}
}

func TestRunTicks(t *testing.T) {
	s := newServer(t, 2)
	c := start(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Millisecond)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	series := c.Samples()
	per := len(series) / 2
	if per < 3 || len(series)%2 != 0 {
		t.Fatalf("%d samples over 55ms at 10ms for 2 GPUs", len(series))
	}
	for i := 1; i < per; i++ {
		if series[i].TimeNs <= series[i-1].TimeNs || series[i].Device != 0 || series[per+i].Device != 1 {
			t.Fatalf("series out of order at %d: %+v", i, series[i])
		}
	}
}

func TestSeriesBounded(t *testing.T) {
	s := newServer(t, 1)
	c := New(Config{NVML: s, MaxSamples: 4, Logger: quiet()})
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var want []int64
	for i := 0; i < 10; i++ {
		want = append(want, c.SampleNow()[0].TimeNs)
	}
	got := c.Samples()
	if len(got) != 4 {
		t.Fatalf("%d samples kept, want 4", len(got))
	}
	for i, s := range got {
		if s.TimeNs != want[6+i] {
			t.Errorf("kept sample %d is %d, want %d", i, s.TimeNs, want[6+i])
		}
	}
	if n := c.Summary().Devices[0].Samples; n != 10 {
		t.Errorf("summary covers %d samples, want 10", n)
	}
}

func TestSummary(t *testing.T) {
	s := newServer(t, 1)
	util := []uint32{20, 60, 100}
	reasons := []uint64{0, nvml.ClocksEventReasonSwPowerCap, nvml.ClocksEventReasonSwPowerCap | nvml.ClocksEventReasonGpuIdle}
	i := 0
	dev(s, 0).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{Gpu: util[i], Memory: util[i] / 2}, nvml.SUCCESS
	}
	dev(s, 0).GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return reasons[i], nvml.SUCCESS }
	c := start(t, s, targetPid)
	for i = 0; i < 3; i++ {
		c.SampleNow()
	}
	sum := c.Summary()
	d := sum.Devices[0]
	if !sum.Available || sum.IntervalSeconds != 0.01 || d.Samples != 3 {
		t.Errorf("summary %+v", sum)
	}
	if d.GPUUtilization.Mean != 0.6 || d.GPUUtilization.Max != 1 || d.MemoryUtilization.Max != 0.5 {
		t.Errorf("utilization %+v memory %+v", d.GPUUtilization, d.MemoryUtilization)
	}
	if d.ClockEventReasons["sw_power_cap"] != 2.0/3 || d.ClockEventReasons["gpu_idle"] != 1.0/3 || len(d.ClockEventReasons) != 2 {
		t.Errorf("reasons %v", d.ClockEventReasons)
	}
	if d.MemoryTotalBytes != 144384<<20 || d.PowerWatts.Mean != 512.25 || d.SMClockHz.Max != 1980e6 {
		t.Errorf("device summary %+v", d)
	}
	b, err := json.Marshal(sum)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"available":true`, `"utilization_ratio":{"mean":0.6`, `"memory_used_bytes"`,
		`"sm_clock_hertz"`, `"power_watts"`, `"temperature_celsius"`, `"pcie_tx_bytes_per_second"`,
		`"clock_event_reasons_ratio"`, `"processes":[{"pid":4242`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("summary JSON lacks %s: %s", key, b)
		}
	}
}

func TestPrometheus(t *testing.T) {
	s := newServer(t, 1)
	dev(s, 0).GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return []nvml.ProcessUtilizationSample{{Pid: targetPid, TimeStamp: 5, SmUtil: 33, MemUtil: 11}}, nvml.SUCCESS
	}
	c := start(t, s, targetPid)
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("%d metrics before the first sample", n)
	}
	c.SampleNow()
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	uuid := dev(s, 0).UUID
	lbl := `gpu="0",name="NVIDIA H200 141GB HBM3e",uuid="` + uuid + `"`
	plbl := `gpu="0",name="NVIDIA H200 141GB HBM3e",target="4242",uuid="` + uuid + `"`
	want := `
# HELP bpfbench_gpu_power_watts Power drawn by the board.
# TYPE bpfbench_gpu_power_watts gauge
bpfbench_gpu_power_watts{` + lbl + `} 512.25
# HELP bpfbench_gpu_utilization_ratio Fraction of the last sample period during which one or more kernels ran on the GPU (NVML utilization.gpu).
# TYPE bpfbench_gpu_utilization_ratio gauge
bpfbench_gpu_utilization_ratio{` + lbl + `} 0.8
# HELP bpfbench_gpu_process_sm_utilization_ratio SM utilization of a target's processes over the last sample period (summed over its processes).
# TYPE bpfbench_gpu_process_sm_utilization_ratio gauge
bpfbench_gpu_process_sm_utilization_ratio{` + plbl + `} 0.33
# HELP bpfbench_gpu_process_memory_used_bytes Device memory used by a target's processes (summed).
# TYPE bpfbench_gpu_process_memory_used_bytes gauge
bpfbench_gpu_process_memory_used_bytes{` + plbl + `} 8.589934592e+09
`
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"bpfbench_gpu_power_watts", "bpfbench_gpu_utilization_ratio",
		"bpfbench_gpu_process_sm_utilization_ratio", "bpfbench_gpu_process_memory_used_bytes"); err != nil {
		t.Error(err)
	}
	names := map[string]bool{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"bpfbench_gpu_utilization_ratio", "bpfbench_gpu_memory_utilization_ratio",
		"bpfbench_gpu_memory_used_bytes", "bpfbench_gpu_memory_total_bytes", "bpfbench_gpu_sm_clock_hertz",
		"bpfbench_gpu_memory_clock_hertz", "bpfbench_gpu_power_watts", "bpfbench_gpu_temperature_celsius",
		"bpfbench_gpu_clock_event_reason_active", "bpfbench_gpu_pcie_tx_bytes_total",
		"bpfbench_gpu_pcie_rx_bytes_total", "bpfbench_gpu_process_sm_utilization_ratio",
		"bpfbench_gpu_process_memory_utilization_ratio", "bpfbench_gpu_process_memory_used_bytes"} {
		if !names[n] {
			t.Errorf("metric %s not exported", n)
		}
	}
	// Every reason is exported, 1 for the active ones.
	reasons, active := 0, 0
	for _, mf := range mfs {
		if mf.GetName() != "bpfbench_gpu_clock_event_reason_active" {
			continue
		}
		for _, m := range mf.GetMetric() {
			reasons++
			if m.GetGauge().GetValue() == 1 {
				active++
			}
		}
	}
	if reasons != len(Reasons) || active != 2 {
		t.Errorf("%d reason series (%d active), want %d (2 active)", reasons, active, len(Reasons))
	}
	// The text exposition passes promlint too.
	var exp strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&exp, mf); err != nil {
			t.Fatal(err)
		}
	}
	problems, err = promlint.New(strings.NewReader(exp.String())).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint (text): %s: %s", p.Metric, p.Text)
	}
}

func TestSection(t *testing.T) {
	sec := &Section{New(Config{NVML: newServer(t, 1), Pids: []int{targetPid}, Logger: quiet()})}
	if err := sec.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	sec.SampleNow()
	var b strings.Builder
	sec.WriteInterval(&b)
	sec.WriteSummary(&b)
	out := b.String()
	for _, want := range []string{"util=80%", "power=512W", "pid 4242", "mem=8.0GiB", "clock event sw_power_cap"} {
		if !strings.Contains(out, want) {
			t.Errorf("section text lacks %q:\n%s", want, out)
		}
	}
	if _, ok := sec.Summary().(Summary); !ok || sec.Name() != "gpu" {
		t.Errorf("summary type %T name %s", sec.Summary(), sec.Name())
	}

	none := &Section{New(Config{NVML: &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}, Logger: quiet()})}
	err := none.Start(context.Background())
	if !errors.Is(err, ErrNoNVML) || !errors.Is(err, collectors.ErrNotApplicable) {
		t.Errorf("Start without NVML = %v", err)
	}
	b.Reset()
	none.WriteSummary(&b)
	if !strings.Contains(b.String(), "NVML is not available") {
		t.Errorf("summary without NVML: %s", b.String())
	}
}

func TestHostTargets(t *testing.T) {
	h := newHost(Config{NVML: newServer(t, 1), Logger: quiet()}, func() map[uint32]string { return map[uint32]string{0: "host", 1: "vllm"} })
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if p := h.SampleNow()[0].Processes; len(p) != 0 {
		t.Errorf("processes without targets: %+v", p)
	}
	h.SetTarget(targetPid, 1)
	if p := h.SampleNow()[0].Processes; len(p) != 1 || p[0].Pid != targetPid {
		t.Errorf("processes with a target: %+v", p)
	}
	// The daemon labels a target's processes by the target's name, never by pid.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "bpfbench_gpu_process_memory_used_bytes" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pid" {
					t.Errorf("a pid label on %s", mf.GetName())
				}
				if l.GetName() == "target" && l.GetValue() == "vllm" {
					found = true
				}
			}
		}
	}
	if !found {
		t.Error("no bpfbench_gpu_process_memory_used_bytes{target=\"vllm\"}")
	}
	h.DeleteTarget(targetPid)
	if p := h.SampleNow()[0].Processes; len(p) != 0 {
		t.Errorf("processes after DeleteTarget: %+v", p)
	}
}

// The PCIe counters integrate NVML's throughput samples: each sample's
// rate times the time since the previous one; a failed read leaves its
// interval out.
func TestPCIeBytesIntegrated(t *testing.T) {
	var p pcieBytes
	both := FieldPCIeTx | FieldPCIeRx
	for _, s := range []Sample{
		{TimeNs: 1e9, Fields: both, PCIeTxBytesPerSecond: 1e6, PCIeRxBytesPerSecond: 4e6},   // first: nothing
		{TimeNs: 2e9, Fields: both, PCIeTxBytesPerSecond: 2e6, PCIeRxBytesPerSecond: 4e6},   // +2e6, +4e6
		{TimeNs: 2.5e9, Fields: both, PCIeTxBytesPerSecond: 2e6, PCIeRxBytesPerSecond: 8e6}, // +1e6, +4e6
		{TimeNs: 3.5e9, Fields: FieldPCIeTx, PCIeTxBytesPerSecond: 1e6},                     // +1e6, rx failed
		{TimeNs: 4.5e9, Fields: both, PCIeTxBytesPerSecond: 1e6, PCIeRxBytesPerSecond: 1e9}, // +1e6, rx restarts
	} {
		p.add(&s)
	}
	if p.tx != 5e6 || p.rx != 8e6 || p.has != both {
		t.Errorf("tx %g rx %g (has %b), want 5e6 and 8e6", p.tx, p.rx, p.has)
	}
}
