// Package perturb injects one known kind of contention at a time, isolated
// from the others, and reports what it achieved: busy threads on chosen
// CPUs (compute), O_DIRECT reads or writes (disk). They let bpfbench check
// its attribution by intervention and let operators measure how sensitive
// a server is to a noisy neighbour. Every perturbation undoes itself
// completely when stopped.
package perturb

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// MaxThreads bounds the busy threads of a CPU perturbation.
const MaxThreads = 256

// CPU keeps Threads threads busy, pinned round-robin to CPUs (all CPUs
// when empty), each busy for Duty of every 10 ms period at nice level Nice.
type CPU struct {
	Threads int
	CPUs    []int
	Duty    float64
	Nice    int
}

// CPUReport is what a CPU perturbation achieved.
type CPUReport struct {
	Threads    int     `json:"threads"`
	CPUs       []int   `json:"cpus"`
	WallS      float64 `json:"wall_seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
	// Share is CPU time burnt per thread per wall second (0..Duty).
	Share float64 `json:"share_per_thread"`
}

// Validate checks the settings and fills defaults.
func (c *CPU) Validate() error {
	if c.Threads <= 0 {
		c.Threads = runtime.NumCPU()
	}
	if c.Threads > MaxThreads {
		return fmt.Errorf("%d threads asked; at most %d are allowed", c.Threads, MaxThreads)
	}
	if c.Duty == 0 {
		c.Duty = 1
	}
	if c.Duty < 0 || c.Duty > 1 {
		return fmt.Errorf("duty cycle %v: use a fraction in (0, 1]", c.Duty)
	}
	if c.Nice < -20 || c.Nice > 19 {
		return fmt.Errorf("nice %d: use -20..19", c.Nice)
	}
	if len(c.CPUs) == 0 {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			return fmt.Errorf("reading the CPU set: %w", err)
		}
		for i := 0; i < 1024; i++ {
			if set.IsSet(i) {
				c.CPUs = append(c.CPUs, i)
			}
		}
	}
	n := possibleCPUs()
	for _, cpu := range c.CPUs {
		if cpu < 0 || cpu >= n {
			return fmt.Errorf("CPU %d does not exist (this machine has %d)", cpu, n)
		}
	}
	return nil
}

// possibleCPUs is the machine's CPU count, not this process's share of it
// (runtime.NumCPU counts the CPUs this process was started allowed on: a
// bpfbench under taskset would refuse the CPUs it was kept off).
func possibleCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return runtime.NumCPU()
	}
	// "0-3" or "0": the last number is the highest CPU.
	f := strings.FieldsFunc(strings.TrimSpace(string(b)), func(r rune) bool { return r == '-' || r == ',' })
	if len(f) == 0 {
		return runtime.NumCPU()
	}
	hi, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		return runtime.NumCPU()
	}
	return max(hi+1, runtime.NumCPU())
}

// Run burns CPU until ctx is done, then reports. Its threads exit with it.
func (c CPU) Run(ctx context.Context) (CPUReport, error) {
	if err := c.Validate(); err != nil {
		return CPUReport{}, err
	}
	start := time.Now()
	var cpuNs atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, c.Threads)
	for i := range c.Threads {
		cpu := c.CPUs[i%len(c.CPUs)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The thread is locked and never unlocked: the Go runtime
			// ends it when the goroutine returns, with its affinity.
			runtime.LockOSThread()
			var set unix.CPUSet
			set.Set(cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				errc <- fmt.Errorf("pinning a thread to CPU %d: %w", cpu, err)
				return
			}
			// Always set: a thread inherits the nice level of the one
			// that created it, and the caller may run at another.
			if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), c.Nice); err != nil {
				errc <- fmt.Errorf("setting nice %d: %w", c.Nice, err)
				return
			}
			busy := time.Duration(c.Duty * float64(10*time.Millisecond))
			for ctx.Err() == nil {
				end := time.Now().Add(busy)
				for time.Now().Before(end) {
					for k := 0; k < 2000; k++ {
					}
				}
				if c.Duty < 1 {
					time.Sleep(10*time.Millisecond - busy)
				}
			}
			var ts unix.Timespec
			_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
			cpuNs.Add(ts.Nano())
		}()
	}
	wg.Wait()
	close(errc)
	wall := time.Since(start).Seconds()
	rep := CPUReport{Threads: c.Threads, CPUs: c.CPUs, WallS: wall, CPUSeconds: float64(cpuNs.Load()) / 1e9}
	if wall > 0 {
		rep.Share = rep.CPUSeconds / wall / float64(c.Threads)
	}
	return rep, errors.Join(drain(errc)...)
}

func drain(errc <-chan error) []error {
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	return errs
}

// IO issues random O_DIRECT reads (or writes) of BlockSize bytes against
// Path, Depth at a time, bypassing the page cache, from threads at nice 19
// so that it contends for the disk and not for the CPUs.
type IO struct {
	Path      string
	BlockSize int
	Depth     int
	Write     bool
}

// IOReport is what an IO perturbation achieved.
type IOReport struct {
	Ops         uint64  `json:"ops"`
	Bytes       uint64  `json:"bytes"`
	WallS       float64 `json:"wall_seconds"`
	IOPS        float64 `json:"iops"`
	MeanLatency float64 `json:"mean_latency_seconds"`
}

// Validate checks the settings and fills defaults.
func (p *IO) Validate() error {
	if p.Path == "" {
		return errors.New("no file or device to read: give --file PATH")
	}
	if p.BlockSize == 0 {
		p.BlockSize = 4096
	}
	if p.BlockSize%4096 != 0 || p.BlockSize <= 0 || p.BlockSize > 16<<20 {
		return fmt.Errorf("block size %d: use a multiple of 4096 up to 16 MiB (O_DIRECT)", p.BlockSize)
	}
	if p.Depth == 0 {
		p.Depth = 8
	}
	if p.Depth < 0 || p.Depth > 1024 {
		return fmt.Errorf("depth %d: use 1..1024", p.Depth)
	}
	return nil
}

// Run issues IO until ctx is done, then reports.
func (p IO) Run(ctx context.Context) (IOReport, error) {
	if err := p.Validate(); err != nil {
		return IOReport{}, err
	}
	flags := os.O_RDONLY
	if p.Write {
		flags = os.O_WRONLY
		// Root could write anyway: a read-only file is a statement of intent.
		if st, err := os.Stat(p.Path); err == nil && st.Mode().Perm()&0o222 == 0 {
			return IOReport{}, fmt.Errorf("%s is read-only (mode %v): refusing to write to it; give a scratch file", p.Path, st.Mode().Perm())
		}
	}
	f, err := os.OpenFile(p.Path, flags|unix.O_DIRECT, 0)
	if err != nil {
		return IOReport{}, fmt.Errorf("opening %s for O_DIRECT %s: %w", p.Path, map[bool]string{false: "reads", true: "writes"}[p.Write], err)
	}
	defer f.Close()
	size, err := f.Seek(0, 2)
	if err != nil || size < int64(p.BlockSize) {
		return IOReport{}, fmt.Errorf("%s is smaller than one %d-byte block", p.Path, p.BlockSize)
	}
	blocks := size / int64(p.BlockSize)
	var ops, latNs atomic.Uint64
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, p.Depth)
	for i := range p.Depth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The disk is the resource under test, not the CPU: each
			// IO thread runs at nice 19 and takes a CPU only when nothing
			// else wants it, yet keeps its request in the device queue.
			// The thread is never unlocked and exits with the goroutine.
			runtime.LockOSThread()
			_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 19)
			buf, err := unix.Mmap(-1, 0, p.BlockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
			if err != nil {
				errc <- err
				return
			}
			defer unix.Munmap(buf)
			r := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			for ctx.Err() == nil {
				off := r.Int64N(blocks) * int64(p.BlockSize)
				t0 := time.Now()
				var err error
				if p.Write {
					_, err = unix.Pwrite(int(f.Fd()), buf, off)
				} else {
					_, err = unix.Pread(int(f.Fd()), buf, off)
				}
				if err != nil {
					errc <- fmt.Errorf("O_DIRECT IO on %s: %w", p.Path, err)
					return
				}
				latNs.Add(uint64(time.Since(t0)))
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errc)
	wall := time.Since(start).Seconds()
	rep := IOReport{Ops: ops.Load(), Bytes: ops.Load() * uint64(p.BlockSize), WallS: wall}
	if wall > 0 {
		rep.IOPS = float64(rep.Ops) / wall
	}
	if rep.Ops > 0 {
		rep.MeanLatency = float64(latNs.Load()) / float64(rep.Ops) / 1e9
	}
	return rep, errors.Join(drain(errc)...)
}

// WriteScratch writes size bytes of real data to path (not a sparse file:
// holes read without any IO), synced, for O_DIRECT IO.
func WriteScratch(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	for w := int64(0); w < size; w += int64(len(buf)) {
		if _, err := f.Write(buf[:min(int64(len(buf)), size-w)]); err != nil {
			f.Close()
			os.Remove(path)
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}
