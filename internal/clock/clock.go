// Package clock reads CLOCK_MONOTONIC, the one timeline bpfbench joins on:
// bpf_ktime_get_ns() in the kernel reads the same clock.
package clock

import (
	"time"

	"golang.org/x/sys/unix"
)

// Now returns CLOCK_MONOTONIC in nanoseconds.
func Now() int64 {
	var ts unix.Timespec
	// ClockGettime on CLOCK_MONOTONIC cannot fail on Linux.
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// Anchor pairs a wall-clock time with the monotonic reading taken at the
// same moment, so monotonic timestamps can be shown as real times.
type Anchor struct {
	Wall        time.Time `json:"wall"`
	MonotonicNs int64     `json:"monotonic_ns"`
}

// NewAnchor reads both clocks, taking the monotonic reading halfway through
// the wall read to halve the error.
func NewAnchor() Anchor {
	a := Now()
	w := time.Now()
	b := Now()
	return Anchor{Wall: w, MonotonicNs: a + (b-a)/2}
}

// Wall converts a monotonic timestamp to wall-clock time.
func (a Anchor) ToWall(mono int64) time.Time {
	return a.Wall.Add(time.Duration(mono - a.MonotonicNs))
}
