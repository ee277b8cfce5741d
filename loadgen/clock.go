package loadgen

import (
	"time"

	"github.com/bpfbench/bpfbench/internal/clock"
)

// Mono returns CLOCK_MONOTONIC in nanoseconds, the clock the kernel's
// bpf_ktime_get_ns() reads, so client and kernel events share one timeline.
// It reads the clock through the vDSO (clock.Fast): one reading per chunk.
func Mono() int64 { return clock.Fast() }

// Anchor ties the monotonic clock to wall-clock time, taken once per run so
// that reports and OTLP spans can carry Unix times.
type Anchor struct {
	MonoNs int64 `json:"mono_ns"`
	UnixNs int64 `json:"unix_ns"`
}

// NewAnchor reads both clocks back to back.
func NewAnchor() Anchor {
	a := clock.NewAnchor()
	return Anchor{MonoNs: a.MonotonicNs, UnixNs: a.Wall.UnixNano()}
}

// Wall converts a monotonic timestamp to wall-clock time.
func (a Anchor) Wall(mono int64) time.Time {
	return time.Unix(0, a.UnixNs+(mono-a.MonoNs))
}

// sleepUntil waits until the monotonic clock reaches t or ctx-like done closes.
func sleepUntil(t int64, done <-chan struct{}) bool {
	for {
		d := t - Mono()
		if d <= 0 {
			return true
		}
		timer := time.NewTimer(time.Duration(d))
		select {
		case <-done:
			timer.Stop()
			return false
		case <-timer.C:
		}
	}
}
