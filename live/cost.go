package live

import (
	"time"

	"golang.org/x/sys/unix"
)

var start = time.Now()

// nanotime is a monotonic clock, ns.
func nanotime() int64 { return int64(time.Since(start)) }

// threadCPU is the calling thread's CPU time (ns). It measures a call only
// when the goroutine stays on one thread for it: a caller that locked its
// OS thread (runtime.LockOSThread), as the advancing loops of attach and
// the daemon do. ok is false where the clock is not there.
func threadCPU() (ns int64, ok bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return ts.Nano(), true
}
