// Package gpu samples NVML: per device utilization, memory, clocks, power,
// temperature, clock event (throttle) reasons and PCIe throughput, and the
// utilization and memory of target processes. Samples carry CLOCK_MONOTONIC
// timestamps so they join the eBPF events on one timeline.
//
// On a host without NVML (no libnvidia-ml.so.1) Start returns ErrNoNVML:
// callers log it once and carry on without GPU metrics.
package gpu

import (
	"context"
	"errors"
	"fmt"
	"github.com/bpfbench/bpfbench/result"
	"log/slog"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/bpfbench/bpfbench/internal/clock"
)

// ErrNoNVML says NVML could not be loaded: GPU metrics are off.
var ErrNoNVML = errors.New("NVML is not available (libnvidia-ml.so.1 not found): GPU metrics are off")

// DefaultInterval is the sampling period when Config.Interval is zero.
const DefaultInterval = time.Second

// DefaultMaxSamples bounds the time series kept per device.
const DefaultMaxSamples = 3600

// Config configures a Collector.
type Config struct {
	// Interval is the sampling period (default 1 s).
	Interval time.Duration
	// Pids are the target processes whose per-process utilization and
	// memory are sampled. Empty: devices only.
	Pids []int
	// MaxSamples bounds the time series kept per device (default 3600);
	// the summary covers every sample regardless.
	MaxSamples int
	// NVML is the library; nil means nvml.New(). Tests pass a mock.
	NVML   nvml.Interface
	Logger *slog.Logger
	// TargetOf names the target of a pid for the per-process metrics
	// (the daemon's configured targets); nil labels them by pid.
	TargetOf func(pid int) string
}

// Field names one reading of a sample.
type Field uint32

// The readings a sample may hold. A device that does not support one
// (ERROR_NOT_SUPPORTED) or fails it leaves it out; the others are kept.
const (
	FieldGPUUtilization Field = 1 << iota
	FieldMemoryUtilization
	FieldMemoryUsed
	FieldMemoryTotal
	FieldSMClock
	FieldMemoryClock
	FieldPower
	FieldTemperature
	FieldClockEventReasons
	FieldPCIeTx
	FieldPCIeRx
	numFields = iota
)

var fieldNames = [numFields]string{
	"gpu_utilization", "memory_utilization", "memory_used", "memory_total",
	"sm_clock", "memory_clock", "power", "temperature", "clock_event_reasons",
	"pcie_tx", "pcie_rx",
}

func (f Field) String() string {
	for i := 0; i < numFields; i++ {
		if f == 1<<i {
			return fieldNames[i]
		}
	}
	return fmt.Sprintf("field(%#x)", uint32(f))
}

// ProcessField names one reading of a process sample.
type ProcessField uint32

// The readings a process sample may hold.
const (
	// ProcUtilization: SM, memory, encoder and decoder utilization, from
	// GetProcessUtilization samples newer than the previous pass.
	ProcUtilization ProcessField = 1 << iota
	// ProcMemory: device memory used, from the running processes lists.
	ProcMemory
)

// DeviceInfo (result.GPUDeviceInfo) identifies a device.
type DeviceInfo = result.GPUDeviceInfo

// Sample is one sampling pass over one device. Ratios are 0–1, clocks in
// hertz, power in watts, throughput in bytes per second.
type Sample struct {
	// TimeNs is CLOCK_MONOTONIC in nanoseconds when the pass began.
	TimeNs int64
	Device int
	// Fields says which readings below are present.
	Fields               Field
	GPUUtilization       float64
	MemoryUtilization    float64
	MemoryUsedBytes      uint64
	MemoryTotalBytes     uint64
	SMClockHz            float64
	MemoryClockHz        float64
	PowerWatts           float64
	TemperatureCelsius   float64
	ClockEventReasons    uint64
	PCIeTxBytesPerSecond float64
	PCIeRxBytesPerSecond float64
	// Processes holds the target processes seen on this device.
	Processes []ProcessSample
}

// Has reports whether the sample holds reading f.
func (s *Sample) Has(f Field) bool { return s.Fields&f != 0 }

// ProcessSample is one target process on one device in one pass.
type ProcessSample struct {
	Pid    int
	Fields ProcessField
	// Utilizations are the mean of the NVML samples of this pass.
	SMUtilization      float64
	MemoryUtilization  float64
	EncoderUtilization float64
	DecoderUtilization float64
	// NVMLTimestampUs is the newest NVML sample's timestamp (µs).
	NVMLTimestampUs uint64
	MemoryUsedBytes uint64
}

// Has reports whether the process sample holds reading f.
func (p *ProcessSample) Has(f ProcessField) bool { return p.Fields&f != 0 }

// device is one enumerated device and what the collector keeps about it.
type device struct {
	info   DeviceInfo
	handle nvml.Device
	// lastSeen is the newest GetProcessUtilization timestamp, carried
	// between passes so each returns only newer samples.
	lastSeen uint64
	series   []Sample // ring of at most MaxSamples
	next     int
	full     bool
	latest   *Sample
	stats    deviceStats
	// useThrottle: the driver lacks the clocks event call; use the older name.
	useThrottle bool
	// pcie integrates the PCIe throughput samples into bytes (keep).
	pcie pcieBytes
}

// pcieBytes is a device's PCIe traffic integrated from NVML's throughput
// samples: each sample's rate (over NVML's 20 ms window) times the time
// since the previous sample of the same reading. A reading's first sample,
// and the interval before a sample after a failed read, add nothing.
type pcieBytes struct {
	tx, rx     float64
	txAt, rxAt int64 // TimeNs of the last sample with the reading
	has        Field // which readings were ever integrated
}

func (p *pcieBytes) add(s *Sample) {
	step := func(total *float64, at *int64, f Field, rate float64) {
		if !s.Has(f) {
			*at = 0
			return
		}
		if *at != 0 && s.TimeNs > *at {
			*total += rate * float64(s.TimeNs-*at) / 1e9
		}
		*at = s.TimeNs
		p.has |= f
	}
	step(&p.tx, &p.txAt, FieldPCIeTx, s.PCIeTxBytesPerSecond)
	step(&p.rx, &p.rxAt, FieldPCIeRx, s.PCIeRxBytesPerSecond)
}

// Collector samples NVML on a ticker.
type Collector struct {
	cfg Config
	lib nvml.Interface
	log *slog.Logger

	mu      sync.Mutex
	devices []*device
	pids    map[int]bool
	passes  int
	started bool
	initErr error
	warned  map[string]bool

	closeOnce sync.Once
	closeErr  error
	metrics   metricDescs
}

// New returns a collector; nothing is loaded before Start.
func New(cfg Config) *Collector {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MaxSamples <= 0 {
		cfg.MaxSamples = DefaultMaxSamples
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	c := &Collector{
		cfg:     cfg,
		lib:     cfg.NVML,
		log:     log.With("component", "gpu"),
		pids:    map[int]bool{},
		warned:  map[string]bool{},
		metrics: newMetricDescs(),
	}
	for _, p := range cfg.Pids {
		c.pids[p] = true
	}
	return c
}

// Start loads NVML and enumerates the devices. Without NVML it returns
// ErrNoNVML. On any error it has shut NVML down again.
func (c *Collector) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("starting the GPU collector: already started")
	}
	if c.lib == nil {
		c.lib = nvml.New()
	}
	switch ret := c.lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		c.initErr = ErrNoNVML
		return ErrNoNVML
	case nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_NO_PERMISSION:
		c.initErr = fmt.Errorf("initializing NVML: %s: GPU metrics are off", errorString(ret))
		return c.initErr
	default:
		c.initErr = fmt.Errorf("initializing NVML: %s", errorString(ret))
		return c.initErr
	}
	devices, err := c.enumerate()
	if err != nil {
		c.lib.Shutdown()
		c.initErr = err
		return err
	}
	c.devices = devices
	c.started = true
	c.log.Debug("NVML started", "devices", len(devices))
	return nil
}

func (c *Collector) enumerate() ([]*device, error) {
	n, ret := c.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting GPUs with NVML: %s", errorString(ret))
	}
	devices := make([]*device, 0, n)
	for i := 0; i < n; i++ {
		h, ret := c.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("getting the handle of GPU %d: %s", i, errorString(ret))
		}
		d := &device{handle: h, info: DeviceInfo{Index: i}}
		if uuid, ret := h.GetUUID(); ret == nvml.SUCCESS {
			d.info.UUID = uuid
		}
		if name, ret := h.GetName(); ret == nvml.SUCCESS {
			d.info.Name = name
		}
		d.series = make([]Sample, 0, min(c.cfg.MaxSamples, 64))
		devices = append(devices, d)
	}
	return devices, nil
}

// Run samples at once, then every Interval until ctx is done.
func (c *Collector) Run(ctx context.Context) error {
	c.mu.Lock()
	started := c.started
	c.mu.Unlock()
	if !started {
		return errors.New("running the GPU collector: not started")
	}
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	c.SampleNow()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.SampleNow()
		}
	}
}

// Close shuts NVML down. It is idempotent.
func (c *Collector) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.started {
			return
		}
		if ret := c.lib.Shutdown(); ret != nvml.SUCCESS {
			c.closeErr = fmt.Errorf("shutting NVML down: %s", errorString(ret))
		}
	})
	return c.closeErr
}

// SetPids replaces the target processes.
func (c *Collector) SetPids(pids []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pids = make(map[int]bool, len(pids))
	for _, p := range pids {
		c.pids[p] = true
	}
}

// AddPid follows one more target process.
func (c *Collector) AddPid(pid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pids[pid] = true
}

// RemovePid stops following pid.
func (c *Collector) RemovePid(pid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pids, pid)
}

// Devices lists the enumerated devices.
func (c *Collector) Devices() []DeviceInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]DeviceInfo, len(c.devices))
	for i, d := range c.devices {
		out[i] = d.info
	}
	return out
}

// Latest returns the newest sample of each device that has one.
func (c *Collector) Latest() []Sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Sample
	for _, d := range c.devices {
		if d.latest != nil {
			out = append(out, *d.latest)
		}
	}
	return out
}

// Samples returns the kept time series: per device, oldest first, devices
// in index order.
func (c *Collector) Samples() []Sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Sample
	for _, d := range c.devices {
		if d.full {
			out = append(out, d.series[d.next:]...)
			out = append(out, d.series[:d.next]...)
		} else {
			out = append(out, d.series...)
		}
	}
	return out
}

// SampleNow takes one sampling pass over every device and returns it.
func (c *Collector) SampleNow() []Sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		return nil
	}
	now := clock.Now()
	out := make([]Sample, 0, len(c.devices))
	for _, d := range c.devices {
		s := c.sampleDevice(d, now)
		c.keep(d, s)
		out = append(out, s)
	}
	c.passes++
	return out
}

func (c *Collector) keep(d *device, s Sample) {
	if len(d.series) < c.cfg.MaxSamples {
		d.series = append(d.series, s)
		d.latest = &d.series[len(d.series)-1]
	} else {
		d.full = true
		d.series[d.next] = s
		d.latest = &d.series[d.next]
		d.next = (d.next + 1) % c.cfg.MaxSamples
	}
	d.stats.add(&s)
	d.pcie.add(&s)
}

// read records a reading's return: true on success; otherwise the field is
// skipped and the failure logged once per device, reading and return.
func (c *Collector) read(d *device, what string, ret nvml.Return) bool {
	if ret == nvml.SUCCESS {
		return true
	}
	key := fmt.Sprintf("%d/%s/%d", d.info.Index, what, ret)
	if !c.warned[key] {
		c.warned[key] = true
		level := slog.LevelWarn
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_NOT_FOUND {
			level = slog.LevelDebug
		}
		c.log.Log(context.Background(), level, "reading "+what+" with NVML, skipping it",
			"gpu", d.info.Index, "err", errorString(ret))
	}
	return false
}

func (c *Collector) sampleDevice(d *device, now int64) Sample {
	h := d.handle
	s := Sample{TimeNs: now, Device: d.info.Index}
	if u, ret := h.GetUtilizationRates(); c.read(d, "utilization", ret) {
		s.GPUUtilization = float64(u.Gpu) / 100
		s.MemoryUtilization = float64(u.Memory) / 100
		s.Fields |= FieldGPUUtilization | FieldMemoryUtilization
	}
	if m, ret := h.GetMemoryInfo(); c.read(d, "memory", ret) {
		s.MemoryUsedBytes, s.MemoryTotalBytes = m.Used, m.Total
		s.Fields |= FieldMemoryUsed | FieldMemoryTotal
	}
	if mhz, ret := h.GetClockInfo(nvml.CLOCK_SM); c.read(d, "SM clock", ret) {
		s.SMClockHz = float64(mhz) * 1e6
		s.Fields |= FieldSMClock
	}
	if mhz, ret := h.GetClockInfo(nvml.CLOCK_MEM); c.read(d, "memory clock", ret) {
		s.MemoryClockHz = float64(mhz) * 1e6
		s.Fields |= FieldMemoryClock
	}
	if mw, ret := h.GetPowerUsage(); c.read(d, "power", ret) {
		s.PowerWatts = float64(mw) / 1000
		s.Fields |= FieldPower
	}
	if t, ret := h.GetTemperature(nvml.TEMPERATURE_GPU); c.read(d, "temperature", ret) {
		s.TemperatureCelsius = float64(t)
		s.Fields |= FieldTemperature
	}
	if r, ok := c.clockEventReasons(d); ok {
		s.ClockEventReasons = r
		s.Fields |= FieldClockEventReasons
	}
	// NVML reports PCIe throughput in KiB/s over a 20 ms window.
	if kb, ret := h.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES); c.read(d, "PCIe TX throughput", ret) {
		s.PCIeTxBytesPerSecond = float64(kb) * 1024
		s.Fields |= FieldPCIeTx
	}
	if kb, ret := h.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES); c.read(d, "PCIe RX throughput", ret) {
		s.PCIeRxBytesPerSecond = float64(kb) * 1024
		s.Fields |= FieldPCIeRx
	}
	if len(c.pids) > 0 {
		s.Processes = c.sampleProcesses(d)
	}
	return s
}

func (c *Collector) clockEventReasons(d *device) (uint64, bool) {
	if !d.useThrottle {
		r, ret := d.handle.GetCurrentClocksEventReasons()
		if ret != nvml.ERROR_FUNCTION_NOT_FOUND {
			return r, c.read(d, "clock event reasons", ret)
		}
		// Drivers before R535 only have the older name.
		d.useThrottle = true
	}
	r, ret := d.handle.GetCurrentClocksThrottleReasons()
	return r, c.read(d, "clock throttle reasons", ret)
}

// sampleProcesses reads the targets' utilization since the last pass and
// their memory.
func (c *Collector) sampleProcesses(d *device) []ProcessSample {
	byPid := map[int]*ProcessSample{}
	get := func(pid int) *ProcessSample {
		p := byPid[pid]
		if p == nil {
			p = &ProcessSample{Pid: pid}
			byPid[pid] = p
		}
		return p
	}
	samples, ret := d.handle.GetProcessUtilization(d.lastSeen)
	// ERROR_NOT_FOUND: no sample newer than lastSeen yet; not an error.
	if ret == nvml.ERROR_NOT_FOUND || c.read(d, "process utilization", ret) {
		n := map[int]int{}
		for _, u := range samples {
			if u.TimeStamp > d.lastSeen {
				d.lastSeen = u.TimeStamp
			}
			pid := int(u.Pid)
			if !c.pids[pid] {
				continue
			}
			p := get(pid)
			p.Fields |= ProcUtilization
			p.SMUtilization += float64(u.SmUtil) / 100
			p.MemoryUtilization += float64(u.MemUtil) / 100
			p.EncoderUtilization += float64(u.EncUtil) / 100
			p.DecoderUtilization += float64(u.DecUtil) / 100
			p.NVMLTimestampUs = max(p.NVMLTimestampUs, u.TimeStamp)
			n[pid]++
		}
		for pid, k := range n {
			p := byPid[pid]
			p.SMUtilization /= float64(k)
			p.MemoryUtilization /= float64(k)
			p.EncoderUtilization /= float64(k)
			p.DecoderUtilization /= float64(k)
		}
	}
	for _, list := range []struct {
		what string
		get  func() ([]nvml.ProcessInfo, nvml.Return)
	}{
		{"compute processes", d.handle.GetComputeRunningProcesses},
		{"graphics processes", d.handle.GetGraphicsRunningProcesses},
	} {
		procs, ret := list.get()
		if !c.read(d, list.what, ret) {
			continue
		}
		for _, pi := range procs {
			if !c.pids[int(pi.Pid)] {
				continue
			}
			p := get(int(pi.Pid))
			if p.Has(ProcMemory) {
				continue // listed as both compute and graphics: same memory
			}
			p.Fields |= ProcMemory
			p.MemoryUsedBytes = pi.UsedGpuMemory
		}
	}
	if len(byPid) == 0 {
		return nil
	}
	out := make([]ProcessSample, 0, len(byPid))
	for pid := range c.pids {
		if p := byPid[pid]; p != nil {
			out = append(out, *p)
		}
	}
	sortProcesses(out)
	return out
}

func errorString(ret nvml.Return) string {
	// nvml.ErrorString needs the library loaded; Return.Error falls back
	// to the constant's name when it is not.
	return ret.Error()
}
