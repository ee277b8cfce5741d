package clock

import _ "unsafe" // for go:linkname

// runtimeNano is the Go runtime's monotonic clock. On Linux it reads
// CLOCK_MONOTONIC through the vDSO (clock_gettime without entering the
// kernel), the clock Now reads with a system call.
//
//go:linkname runtimeNano runtime.nanotime
func runtimeNano() int64

// Fast returns CLOCK_MONOTONIC in nanoseconds, the same reading as Now, at
// the cost of a vDSO call instead of a system call: for the hot paths that
// timestamp every event (the load generator's chunk arrivals).
func Fast() int64 { return runtimeNano() }
