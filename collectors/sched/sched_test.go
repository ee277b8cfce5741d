package sched

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testproc"
)

func TestMain(m *testing.M) {
	testproc.Register("sleep", childSleep)
	testproc.Register("spin2", childSpin2)
	testproc.Register("sleep0", childSleep0)
	testproc.Register("odirect", childODirect)
	testproc.Register("stoppable", childStoppable)
	testproc.Main()
	os.Exit(m.Run())
}

// childSleep sleeps 20 ms fifty times on one thread.
func childSleep(_ []string, ready func(...int), wait func()) {
	runtime.LockOSThread()
	ready(unix.Gettid())
	wait()
	var wall int64
	for range 50 {
		t0 := monoNs()
		ts := unix.NsecToTimespec(int64(20 * time.Millisecond))
		for unix.Nanosleep(&ts, &ts) == unix.EINTR {
		}
		wall += monoNs() - t0
	}
	fmt.Println(wall) // the sleeps' wall time, ns: the ground truth of the off-CPU time
}

// childSleep0 computes 4 ms of its own CPU time and sleeps 1 ms, two
// hundred times, on one thread pinned to CPU 0: a thread that spent its
// share and waits for the CPU once woken.
func childSleep0(_ []string, ready func(...int), wait func()) {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(0)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		panic(err)
	}
	ready(unix.Gettid())
	wait()
	cpu := func() int64 {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
		return ts.Nano()
	}
	for range 200 {
		for t0 := cpu(); cpu()-t0 < int64(4*time.Millisecond); {
		}
		ts := unix.NsecToTimespec(int64(time.Millisecond))
		for unix.Nanosleep(&ts, &ts) == unix.EINTR {
		}
	}
}

// cpu0StealNs is the time the hypervisor has stolen from CPU 0 (/proc/stat,
// in USER_HZ ticks of 10 ms), ns; 0 when it cannot be read.
func cpu0StealNs() int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 8 && f[0] == "cpu0" {
			v, _ := strconv.ParseInt(f[8], 10, 64)
			return v * 10e6
		}
	}
	return 0
}

// childSpin2 runs two CPU-bound threads pinned to CPU 0 for 2 s.
func childSpin2(_ []string, ready func(...int), wait func()) {
	var set unix.CPUSet
	set.Set(0)
	tids := make(chan int, 2)
	results := make(chan string, 2)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				panic(err)
			}
			tid := unix.Gettid()
			tids <- tid
			<-start
			t0 := time.Now()
			steal0 := cpu0StealNs()
			end := t0.Add(2 * time.Second)
			for time.Now().Before(end) {
				for i := 0; i < 10000; i++ {
				}
			}
			var ts unix.Timespec
			_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
			results <- fmt.Sprintf("%d %d %d %d", tid, ts.Nano(), time.Since(t0).Nanoseconds(), cpu0StealNs()-steal0)
		}()
	}
	a, b := <-tids, <-tids
	ready(a, b)
	wait()
	close(start)
	wg.Wait()
	close(results)
	for r := range results {
		fmt.Println(r)
	}
}

// childODirect reads args[1] blocks of 4 KiB with O_DIRECT from args[0].
func childODirect(args []string, ready func(...int), wait func()) {
	runtime.LockOSThread()
	n, _ := strconv.Atoi(args[1])
	f, err := os.OpenFile(args[0], os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		panic(err)
	}
	buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		panic(err)
	}
	ready(unix.Gettid())
	wait()
	// A loop device detached under the reader (or never bound) answers
	// every read with 0 bytes and no error: say so rather than measure
	// nothing.
	for i := range n {
		got, err := unix.Pread(int(f.Fd()), buf, int64(i%2048)*4096)
		if err != nil {
			panic(err)
		}
		if got != len(buf) {
			fmt.Printf("short %d %d\n", i, got)
			return
		}
	}
	fmt.Printf("read %d\n", n)
}

// session starts a collector streaming events of pid into an Aggregator.
func session(t *testing.T, pid int) (*Collector, *Aggregator, func()) {
	t.Helper()
	agg := NewAggregator()
	c := New(Config{OnEvent: agg.Add})
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetTarget(uint32(pid), 1, true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		if n := c.Lost(); n != 0 {
			t.Errorf("%d events lost", n)
		}
	}
	return c, agg, stop
}

func within(got, want, tol float64) bool { return math.Abs(got-want) <= tol*want }

func TestSleepIsInterruptibleOffCPU(t *testing.T) {
	privtest.Require(t)
	sleepIsInterruptibleOffCPU(t, "")
}

// Kernels before 5.18 pass sched_switch no prev_state: the variant that
// reads the state from the task is loaded there. Forced on this kernel
// (by asking the tracepoint for a fifth argument), it measures the same
// known sleep, asleep and not preempted.
func TestSleepWithoutPrevState(t *testing.T) {
	privtest.Require(t)
	saved := Variants["sched_switch_nostate"]
	Variants["sched_switch_nostate"] = bpfutil.Variant{Of: "sched_switch", Args: 5}
	t.Cleanup(func() { Variants["sched_switch_nostate"] = saved })
	sleepIsInterruptibleOffCPU(t, "sched_switch: sched_switch_nostate")
}

// sleepIsInterruptibleOffCPU: 50 sleeps of 20 ms are off-CPU asleep; the
// collector loaded the variant named by variant ("": none).
func sleepIsInterruptibleOffCPU(t *testing.T, variant string) {
	child := testproc.Start(t, "sleep")
	c, agg, stop := session(t, child.Pid())
	vs := c.Report().Variants
	if variant == "" && len(vs) != 0 || variant != "" && (len(vs) != 1 || !strings.HasPrefix(vs[0], variant)) {
		t.Fatalf("variants loaded %q, want %q", vs, variant)
	}
	child.Go(t)
	out := child.Wait(t, 10*time.Second)
	stop()
	th, ok := agg.Thread(uint32(child.Tids[0]))
	if !ok {
		t.Fatalf("no events for thread %d", child.Tids[0])
	}
	wallNs, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("child printed %q: %v", out, err)
	}
	wall := float64(wallNs) / 1e9
	t.Logf("sleeping thread: %+v; its 50 sleeps of 20 ms took %.3f s of wall time", th, wall)
	// Off-CPU is from the switch-out to the switch-in, the run-queue wait
	// after the timer's wakeup included: asleep, and preempted when other
	// load on the machine takes the CPU between two sleeps, it is the
	// sleeps' wall time, less their syscalls' time on the CPU.
	//
	// Known gap (DESIGN.md, "Known gaps of the engine and its data"): about one
	// switch-in in 500 of a thread that sleeps 20 ms at a time brings no
	// record, not counted as lost: in about one run in ten, one of the 50
	// sleeps is missing (0.988 s of 1.01). Until it is found, one missing
	// sleep is allowed and logged; two are a failure.
	off := th.OffCPU.Sleep + th.OffCPU.Preempted
	missing := wall - off
	if missing > 0.02*wall {
		t.Logf("KNOWN GAP: %.1f ms of the sleeps' wall time has no record (one sleep of 20 ms missing)", missing*1e3)
	}
	if missing > 0.02*wall+0.025 || off > 1.02*wall {
		t.Errorf("off-CPU asleep %.3fs + preempted %.3fs, want the sleeps' wall time %.3fs within 2%% (one 20 ms sleep more may be missing)", th.OffCPU.Sleep, th.OffCPU.Preempted, wall)
	}
	if th.OffCPU.Sleep < 0.995-0.025 || th.OffCPU.Sleep > wall {
		t.Errorf("off-CPU asleep %.3fs, want the 1 s asked for (less one sleep at most), at most the wall time %.3fs", th.OffCPU.Sleep, wall)
	}
	// The run-queue waits come out of the sleeps' overshoot past 1 s
	// (timer slack, wakeup, waiting for a CPU).
	if over := wall - 1.0; th.RunqueueSeconds > over+0.005 {
		t.Errorf("run-queue time %.3fs of a sleeping thread, more than its sleeps' overshoot %.3fs", th.RunqueueSeconds, over)
	}
	if th.OffCPU.IOWait != 0 {
		t.Errorf("io_wait %.3fs, want 0", th.OffCPU.IOWait)
	}
}

// Two threads spinning on CPU 0 wait for it half the time each. The
// check runs once more when it misses: a shared host's noise on CPU 0
// (another guest's, the hypervisor's) lands in the ground truth's wall
// time and in the scheduler's accounting at different moments.
func TestTwoThreadsOnOneCPUWaitHalfTheTime(t *testing.T) {
	privtest.Require(t)
	var problems []string
	for attempt := 1; attempt <= 2; attempt++ {
		if problems = twoThreadsOnOneCPU(t); len(problems) == 0 {
			return
		}
		t.Logf("attempt %d: %s", attempt, strings.Join(problems, "; "))
	}
	t.Error(strings.Join(problems, "\n"))
}

func twoThreadsOnOneCPU(t *testing.T) (problems []string) {
	child := testproc.Start(t, "spin2")
	_, agg, stop := session(t, child.Pid())
	child.Go(t)
	out := child.Wait(t, 20*time.Second)
	stop()
	// Each thread never sleeps, so the time it waited for the CPU is its
	// wall time minus its own CPU time (CLOCK_THREAD_CPUTIME_ID) minus
	// the time the hypervisor stole from CPU 0 while it ran (not its CPU
	// time, nor a wait the guest sees: half of CPU 0's steal, the two
	// threads sharing it). With nothing else on CPU 0 that is half the
	// wall time; other load on the machine can only add to it, and the
	// ground truth follows it.
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var tid int
		var cpuNs, wallNs, stealNs float64
		if _, err := fmt.Sscanf(line, "%d %f %f %f", &tid, &cpuNs, &wallNs, &stealNs); err != nil {
			t.Fatalf("child result %q: %v", line, err)
		}
		th, ok := agg.Thread(uint32(tid))
		if !ok {
			t.Fatalf("no events for thread %d", tid)
		}
		truth := (wallNs - cpuNs - stealNs/2) / 1e9
		t.Logf("spinning thread %d: measured run-queue %.3fs, preempted %.3fs; ground truth %.3fs of %.3fs wall (half the wall: %.3fs; CPU 0's steal %.3fs)",
			tid, th.RunqueueSeconds, th.OffCPU.Preempted, truth, wallNs/1e9, wallNs/2e9, stealNs/1e9)
		if !within(th.RunqueueSeconds, truth, 0.20) {
			problems = append(problems, fmt.Sprintf("thread %d run-queue wait %.3fs, want %.3fs within 20%%", tid, th.RunqueueSeconds, truth))
		}
		if !within(th.OffCPU.Preempted, truth, 0.20) {
			problems = append(problems, fmt.Sprintf("thread %d preempted off-CPU %.3fs, want %.3fs within 20%%", tid, th.OffCPU.Preempted, truth))
		}
	}
	s := agg.Summary(0)
	if s.RunqueueLatency.Count == 0 || s.RunqueueLatency.P99 < s.RunqueueLatency.P50 || s.RunqueueLatency.Max < s.RunqueueLatency.P99 {
		t.Errorf("inconsistent latency summary %+v", s.RunqueueLatency)
	}
	return problems
}

// loopDevice attaches a loop device over a new file and returns its path.
// The device reads its file with direct I/O: every read waits for the
// disk below. Buffered, a read of a file in the page cache can complete
// without its reader ever waiting (CI saw 500 reads and no wait).
func loopDevice(t *testing.T, size int64) string {
	t.Helper()
	privtest.RequireTool(t, "losetup", "apt-get install mount")
	img := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for i := int64(0); i < size; i += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	out, err := exec.Command("losetup", "--find", "--show", "--direct-io=on", img).CombinedOutput()
	if err != nil {
		privtest.Skip(t, "no loop device: "+strings.TrimSpace(string(out)))
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
	return dev
}

// deviceReads is the number of reads a block device completed
// (/sys/block/NAME/stat, first field).
func deviceReads(t *testing.T, dev string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "stat"))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		t.Fatalf("empty stat for %s", dev)
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		t.Fatalf("stat of %s: %v", dev, err)
	}
	return n
}

func TestODirectReadsAreIOWait(t *testing.T) {
	privtest.Require(t)
	// The ground truth: the device itself completed the reads (its own
	// counter), each of them a full block. A loop device is a host-wide
	// name: one detached under the reader by another process serves
	// nothing, which is said, and tried once more on a new device.
	for try := 1; ; try++ {
		dev := loopDevice(t, 8<<20)
		before := deviceReads(t, dev)
		child := testproc.Start(t, "odirect", dev, "500")
		_, agg, stop := session(t, child.Pid())
		child.Go(t)
		out := strings.TrimSpace(child.Wait(t, 30*time.Second))
		stop()
		if served := deviceReads(t, dev) - before; out != "read 500" || served < 500 {
			msg := fmt.Sprintf("the reader said %q and %s completed %d reads: the loop device was not bound to its file throughout", out, dev, served)
			if try == 1 {
				t.Log(msg + "; again on a new device")
				continue
			}
			t.Fatal(msg)
		}
		th, ok := agg.Thread(uint32(child.Tids[0]))
		if !ok {
			t.Fatalf("no events for thread %d", child.Tids[0])
		}
		t.Logf("reading thread: %+v", th)
		if th.OffCPU.IOWait <= 0 {
			t.Errorf("io_wait = %v, want > 0 for 500 O_DIRECT reads %s completed", th.OffCPU.IOWait, dev)
		}
		return
	}
}

func TestHostWideHistogramsAndTargets(t *testing.T) {
	privtest.Require(t)
	child := testproc.Start(t, "sleep")
	c := New(Config{HostWide: true})
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	defer c.Close()
	if err := c.SetTarget(uint32(child.Pid()), 3, false); err != nil {
		t.Fatal(err)
	}
	child.Go(t)
	child.Wait(t, 10*time.Second)
	all, err := c.RunqueueHist(0)
	if err != nil {
		t.Fatal(err)
	}
	tgt, err := c.RunqueueHist(3)
	if err != nil {
		t.Fatal(err)
	}
	sleep, err := c.OffCPUHist(3, Sleep)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("host-wide runq count %d, target %d, target sleep count %d sum %.3fs", all.Count, tgt.Count, sleep.Count, float64(sleep.SumNs)/1e9)
	if all.Count <= tgt.Count || tgt.Count < 50 {
		t.Errorf("host-wide count %d should exceed the target's %d (>= 50 wakeups)", all.Count, tgt.Count)
	}
	if sleep.Count < 50 || float64(sleep.SumNs)/1e9 < 0.9 {
		t.Errorf("target sleep: %d intervals, %.3fs; want >= 50 and >= 0.9s", sleep.Count, float64(sleep.SumNs)/1e9)
	}
	if err := c.SetTarget(1, 0, false); err == nil {
		t.Error("slot 0 accepted as a target slot")
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	privtest.Require(t)
	c := New(Config{})
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	progs, links := c.ProgramIDs(), c.LinkIDs()
	if len(progs) != 1 || len(links) != 1 {
		t.Fatalf("loaded %d programs and %d links, want 1 and 1", len(progs), len(links))
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	privtest.AssertReleased(t, progs, links)
}

// A ring buffer nobody drains fills up: every event it could not take is
// counted, and the in-kernel aggregates still hold every wait.
func TestFullRingBufferIsCounted(t *testing.T) {
	privtest.Require(t)
	child := testproc.Start(t, "sleep")
	c := New(Config{RingBufferBytes: 4096})
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	defer c.Close()
	if err := c.SetTarget(uint32(child.Pid()), 1, true); err != nil {
		t.Fatal(err)
	}
	child.Go(t)
	child.Wait(t, 10*time.Second)
	ps, err := c.PipeStats()
	if err != nil {
		t.Fatal(err)
	}
	lost := ps.Lost
	sleep, err := c.OffCPUHist(1, Sleep)
	if err != nil {
		t.Fatal(err)
	}
	// 4 KiB holds 24 records (160-byte events with 8-byte headers); 50
	// sleeps and the Go runtime's own switches make more.
	t.Logf("lost %d events; the kernel aggregate counted %d sleeps", lost, sleep.Count)
	if lost == 0 {
		t.Error("no lost events counted with a full 4 KiB ring buffer")
	}
	if sleep.Count < 50 {
		t.Errorf("the in-kernel aggregate counted %d sleeps, want all 50+", sleep.Count)
	}
	// A session reports its losses after closing its collectors.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := c.Lost(); n < lost {
		t.Errorf("after Close, Lost() = %d, want at least the %d counted before", n, lost)
	}
}
