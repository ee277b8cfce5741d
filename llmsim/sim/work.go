package sim

import (
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// threadCPU returns the CPU time of the calling OS thread.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

var spinSink uint64

// spinCPU burns d of this thread's CPU time. Because it counts CPU time,
// not wall time, a thread that has to wait for a CPU (contention) takes
// longer in wall time, as a real engine's step would.
func spinCPU(d time.Duration) {
	if d <= 0 {
		return
	}
	start := threadCPU()
	x := spinSink | 1
	for threadCPU()-start < d {
		for i := 0; i < 512; i++ {
			x = x*6364136223846793005 + 1442695040888963407
			x ^= x >> 29
		}
	}
	spinSink = x
}

// sleepUntil sleeps until the monotonic time t.
func sleepUntil(t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	// Go's timers can wake up to a millisecond late (the runtime's poller
	// waits in whole milliseconds on some paths); a simulated step must
	// last what it was configured to, so sleep in the kernel on an
	// absolute CLOCK_MONOTONIC deadline (high-resolution timer, ~50 µs
	// slack). The blocked thread releases its P like any syscall.
	var now unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &now) != nil {
		time.Sleep(d)
		return
	}
	deadline := unix.NsecToTimespec(now.Nano() + d.Nanoseconds())
	for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &deadline, nil) == unix.EINTR {
	}
}

// directReader reads a file with O_DIRECT at every step, like KV-cache
// offload to a local disk, so that disk contention slows the engine.
type directReader struct {
	f    *os.File
	size int64
	buf  []byte // 4096-aligned
	n    int
	off  int64
}

const directAlign = 4096

func openDirect(path string, perStep int) (*directReader, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("opening --io-file %s with O_DIRECT: %w (the filesystem does not support direct IO, tmpfs for one: use a file on a disk filesystem)", path, err)
		}
		return nil, fmt.Errorf("opening --io-file %s with O_DIRECT: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat --io-file %s: %w", path, err)
	}
	n := (max(perStep, 1) + directAlign - 1) / directAlign * directAlign
	if st.Size() < int64(n) {
		f.Close()
		return nil, fmt.Errorf("--io-file %s is %d bytes: it must hold at least one read of %d bytes", path, st.Size(), n)
	}
	raw := make([]byte, n+directAlign)
	shift := int(uintptr(unsafe.Pointer(&raw[0])) & (directAlign - 1))
	if shift != 0 {
		shift = directAlign - shift
	}
	return &directReader{f: f, size: st.Size() / directAlign * directAlign, buf: raw[shift : shift+n], n: n}, nil
}

// read performs one step's read, walking through the file.
func (r *directReader) read() error {
	if r.off+int64(r.n) > r.size {
		r.off = 0
	}
	_, err := unix.Pread(int(r.f.Fd()), r.buf, r.off)
	r.off += int64(r.n)
	if err != nil {
		return fmt.Errorf("O_DIRECT read of --io-file: %w", err)
	}
	return nil
}

func (r *directReader) close() error { return r.f.Close() }
