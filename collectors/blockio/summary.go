package blockio

import (
	"github.com/bpfbench/bpfbench/result"
	"sort"
	"sync"

	"github.com/bpfbench/bpfbench/internal/hist"
)

// Latency (result.BlockIOLatency) summarizes a latency distribution in seconds.
type Latency = result.BlockIOLatency

// Device (result.BlockIODevice) is one device's share of a summary. Latency is queue + service
// time of every request (all ops); Queue covers requests that were
// inserted into a queue (insert -> issue).
type Device = result.BlockIODevice

// Summary (result.BlockIO) is the `blockio` section of `bpfbench attach`.
type Summary = result.BlockIO

type devAgg struct {
	reads, writes, readBytes, writeBytes uint64
	other                                uint64
	latency, queue, service              hist.LogLinear
}

// Aggregator turns a target's requests into a Summary with bounded memory
// (log-linear histograms per device). It is safe for concurrent use.
type Aggregator struct {
	mu   sync.Mutex
	devs map[uint32]*devAgg
}

// NewAggregator returns an empty aggregator.
func NewAggregator() *Aggregator { return &Aggregator{devs: map[uint32]*devAgg{}} }

// Add accounts one request.
func (a *Aggregator) Add(e *Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	d := a.devs[e.Dev]
	if d == nil {
		d = &devAgg{}
		a.devs[e.Dev] = d
	}
	switch Op(e.Op) {
	case Read:
		d.reads++
		d.readBytes += uint64(e.Bytes)
	case Write:
		d.writes++
		d.writeBytes += uint64(e.Bytes)
	default:
		d.other++
	}
	d.latency.Add(e.Latency())
	d.service.Add(e.ServiceNs)
	if e.Flags&FlagQueued != 0 {
		d.queue.Add(e.QueueNs)
	}
}

// Reset forgets everything (for per-interval views).
func (a *Aggregator) Reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.devs)
}

func latencyOf(h *hist.LogLinear) Latency {
	return Latency{P50: h.Quantile(0.50) / 1e9, P99: h.Quantile(0.99) / 1e9, Max: float64(h.Max()) / 1e9}
}

// DeviceStats is one device's figures with counts and the service time,
// for callers that want more than the JSON section.
type DeviceStats struct {
	Device
	Dev      uint32
	Requests uint64
	Service  Latency
	// LatencySum is the total queue + service time in seconds.
	LatencySum float64
}

// Devices reports every device seen, ordered by name.
func (a *Aggregator) Devices() []DeviceStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]DeviceStats, 0, len(a.devs))
	for dev, d := range a.devs {
		out = append(out, DeviceStats{
			Device: Device{
				Device: DevName(dev),
				Reads:  d.reads, Writes: d.writes, ReadBytes: d.readBytes, WriteBytes: d.writeBytes,
				Latency: latencyOf(&d.latency), Queue: latencyOf(&d.queue),
			},
			Dev:        dev,
			Requests:   d.latency.Count(),
			Service:    latencyOf(&d.service),
			LatencySum: d.latency.Sum() / 1e9,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Device.Device < out[j].Device.Device })
	return out
}

// Summary is the JSON section.
func (a *Aggregator) Summary() Summary {
	s := Summary{Devices: []Device{}}
	for _, d := range a.Devices() {
		s.Devices = append(s.Devices, d.Device)
	}
	return s
}
