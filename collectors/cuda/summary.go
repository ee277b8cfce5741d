package cuda

import (
	schema "github.com/bpfbench/bpfbench/result"
	"sync"

	"github.com/bpfbench/bpfbench/internal/hist"
)

// Latency (result.CUDALatency) summarizes the durations of a call in seconds.
type Latency = schema.CUDALatency

// CallSummary (result.CUDACall) is one call's figures.
type CallSummary = schema.CUDACall

// Estimate (result.CUDAEstimate) marks a launch count taken while the
// launch probes were sampled.
type Estimate = schema.CUDAEstimate

// estimateOf is the Estimate of a launch count of count, of measured
// launches counted in all; zero when the launches were not sampled.
func estimateOf(lp LaunchProbes, count, measured uint64) Estimate {
	if lp.Mode != "sampled" {
		return Estimate{}
	}
	e := Estimate{Estimated: true, EstimatedCount: count, EstimateError: lp.EstimateError, LowerBound: lp.LowerBound}
	if measured > 0 {
		e.EstimatedCount += uint64(float64(lp.EstimatedLaunches) * float64(count) / float64(measured))
	}
	return e
}

// OOMEvent (result.CUDAOOMEvent) is an allocation that failed for lack of device memory.
type OOMEvent = schema.CUDAOOMEvent

// OutOfMemory (result.CUDAOutOfMemory) lists failed allocations (the first MaxOOMEvents).
type OutOfMemory = schema.CUDAOutOfMemory

// MaxOOMEvents bounds the out-of-memory events a summary keeps.
const MaxOOMEvents = 32

// Summary (result.CUDA) is the `cuda` section of `bpfbench attach`.
type Summary = schema.CUDA

// Aggregator turns streamed events into per-call duration distributions
// and out-of-memory events, with bounded memory. It is safe for
// concurrent use.
type Aggregator struct {
	mu     sync.Mutex
	dur    []hist.LogLinear
	events []uint64
	oom    []OOMEvent
	oomN   uint64
}

// NewAggregator returns an empty aggregator.
func NewAggregator() *Aggregator {
	return &Aggregator{dur: make([]hist.LogLinear, len(calls)), events: make([]uint64, len(calls))}
}

// Add accounts one event.
func (a *Aggregator) Add(e *Event) {
	if int(e.Call) >= len(calls) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events[e.Call]++
	if e.HasRet != 0 {
		a.dur[e.Call].Add(e.DurationNs())
	}
	if e.OutOfMemory() {
		a.oomN++
		if len(a.oom) < MaxOOMEvents {
			a.oom = append(a.oom, OOMEvent{Call: e.Name(), Tid: e.Tid, Bytes: e.Bytes, StartNs: e.Start, Code: e.Ret})
		}
	}
}

// Reset forgets everything (for per-interval views).
func (a *Aggregator) Reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.dur {
		a.dur[i].Reset()
	}
	clear(a.events)
	a.oom = a.oom[:0]
	a.oomN = 0
}

// Latency is the duration summary of call c (nil when no event had a return).
func (a *Aggregator) Latency(c Call) *Latency {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.latency(c)
}

func (a *Aggregator) latency(c Call) *Latency {
	h := &a.dur[c]
	if h.Count() == 0 {
		return nil
	}
	return &Latency{
		Count: h.Count(),
		P50:   h.Quantile(0.50) / 1e9,
		P99:   h.Quantile(0.99) / 1e9,
		Max:   float64(h.Max()) / 1e9,
		Sum:   h.Sum() / 1e9,
	}
}

// EventCount is the number of events seen for c.
func (a *Aggregator) EventCount(c Call) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.events[c]
}

// OutOfMemory is the failed allocations seen.
func (a *Aggregator) OutOfMemory() OutOfMemory {
	a.mu.Lock()
	defer a.mu.Unlock()
	return OutOfMemory{Count: a.oomN, Events: append([]OOMEvent(nil), a.oom...)}
}

// summarize joins the kernel's counters with the event distributions.
func (a *Aggregator) summarize(counts []Counts, copies [numDirections]uint64, dims []LaunchDims, libs []Library, maxDims int) Summary {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Summary{Libraries: libs, Calls: []CallSummary{}}
	if s.Libraries == nil {
		s.Libraries = []Library{}
	}
	for i, info := range calls {
		var n Counts
		if i < len(counts) {
			n = counts[i]
		}
		lat := a.latency(Call(i))
		if n.Count == 0 && lat == nil {
			continue
		}
		if lat != nil {
			s.BlockedSeconds += lat.Sum
		}
		s.Calls = append(s.Calls, CallSummary{
			Name: info.Name, API: info.API.String(), Kind: info.Kind.String(),
			Count: n.Count, Errors: n.Errors, Bytes: n.Bytes, Duration: lat,
		})
	}
	for d := HostToDevice; d < numDirections; d++ {
		if copies[d] == 0 {
			continue
		}
		if s.CopyBytes == nil {
			s.CopyBytes = map[string]uint64{}
		}
		s.CopyBytes[d.String()] = copies[d]
	}
	if maxDims > 0 && len(dims) > maxDims {
		dims = dims[:maxDims]
	}
	s.Launches = dims
	s.OutOfMemory = OutOfMemory{Count: a.oomN, Events: append([]OOMEvent(nil), a.oom...)}
	return s
}
