package sched

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testproc"
)

func init() {
	testproc.Register("ppwait", childPingWait)
	testproc.Register("ppwake", childPingWake)
	testproc.Register("forker", childForker)
}

const pingRounds = 20

// openFifos opens the two FIFOs of a ping-pong read-write (never blocks),
// as blocking file descriptors: reads sleep in the kernel, not in Go's
// poller.
func openFifos(a, b string) (int, int) {
	fa, err := unix.Open(a, unix.O_RDWR, 0)
	if err != nil {
		panic(err)
	}
	fb, err := unix.Open(b, unix.O_RDWR, 0)
	if err != nil {
		panic(err)
	}
	return fa, fb
}

// childPingWait sends a byte on args[1] and blocks reading args[0],
// pingRounds times.
func childPingWait(args []string, ready func(...int), wait func()) {
	runtime.LockOSThread()
	ready(unix.Gettid())
	wait()
	in, out := openFifos(args[0], args[1])
	b := make([]byte, 1)
	for range pingRounds {
		if _, err := unix.Write(out, b); err != nil {
			panic(err)
		}
		if _, err := unix.Read(in, b); err != nil {
			panic(err)
		}
	}
}

// childPingWake (comm "ppwake") reads a byte on args[1], sleeps args[2] ms
// and answers on args[0], pingRounds times; it prints the sleep it
// measured, in ns, per round.
func childPingWake(args []string, ready func(...int), wait func()) {
	runtime.LockOSThread()
	setComm("ppwake")
	ms, _ := strconv.Atoi(args[2])
	ready(unix.Gettid())
	wait()
	out, in := openFifos(args[0], args[1])
	b := make([]byte, 1)
	var slept []string
	for range pingRounds {
		if _, err := unix.Read(in, b); err != nil {
			panic(err)
		}
		t0 := monoNs()
		ts := unix.NsecToTimespec(int64(ms) * 1e6)
		for unix.Nanosleep(&ts, &ts) == unix.EINTR {
		}
		slept = append(slept, strconv.FormatInt(monoNs()-t0, 10))
		if _, err := unix.Write(out, b); err != nil {
			panic(err)
		}
	}
	fmt.Println(strings.Join(slept, " "))
}

// childForker starts a child process that sleeps 20 ms ten times (in mode
// "sleep10" of the same binary) and waits for it; it prints the child's pid.
func childForker(_ []string, ready func(...int), wait func()) {
	ready(unix.Gettid())
	wait()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "BPFBENCH_SLEEP10=1")
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	fmt.Println(cmd.Process.Pid)
	_ = cmd.Wait()
}

func init() {
	if os.Getenv("BPFBENCH_SLEEP10") == "1" {
		runtime.LockOSThread()
		for range 10 {
			ts := unix.NsecToTimespec(int64(20 * time.Millisecond))
			for unix.Nanosleep(&ts, &ts) == unix.EINTR {
			}
		}
		os.Exit(0)
	}
}

func monoNs() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// setComm names the calling thread.
func setComm(name string) {
	_ = os.WriteFile(fmt.Sprintf("/proc/self/task/%d/comm", unix.Gettid()), []byte(name), 0)
}

// recorder keeps every record of a session.
type recorder struct {
	mu  sync.Mutex
	evs []Event
}

func (r *recorder) add(e *Event) {
	r.mu.Lock()
	r.evs = append(r.evs, *e)
	r.mu.Unlock()
}

func (r *recorder) all() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.evs...)
}

// wakerSession starts a collector with wakers and the process tree on,
// recording every event, targeting pid under slot 1.
func wakerSession(t *testing.T, pid int, fold *Fold) (*Collector, *recorder, func()) {
	t.Helper()
	return sessionOf(t, Config{Wakers: true, SoftirqVector: true, Tree: true, Fold: fold}, pid)
}

// sessionOf starts a collector of cfg recording every event, targeting
// pid under slot 1.
func sessionOf(t *testing.T, cfg Config, pid int) (*Collector, *recorder, func()) {
	t.Helper()
	rec := &recorder{}
	cfg.OnEvent = rec.add
	c := New(cfg)
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	t.Cleanup(func() { c.Close() })
	if pid > 0 {
		if err := c.SetTarget(uint32(pid), 1, true); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
			if n := c.Lost(); n != 0 {
				t.Errorf("%d events lost", n)
			}
		})
	}
	t.Cleanup(stop)
	return c, rec, stop
}

// The first process of a ping-pong waits while the second sleeps a known
// time: its switch-ins name the second as waker, and its off-CPU time is
// the second's sleep.
func TestWakerOfAPingPong(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, p := range []string{a, b} {
		if err := unix.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	waiter := testproc.Start(t, "ppwait", a, b)
	waker := testproc.Start(t, "ppwake", a, b, "30")
	_, rec, stop := wakerSession(t, waiter.Pid(), nil)
	waker.Go(t)
	waiter.Go(t)
	waiter.Wait(t, 20*time.Second)
	out := waker.Wait(t, 20*time.Second)
	stop()
	var slept []int64
	for _, f := range strings.Fields(out) {
		n, _ := strconv.ParseInt(f, 10, 64)
		slept = append(slept, n)
	}
	if len(slept) != pingRounds {
		t.Fatalf("waker printed %q, want %d sleeps", out, pingRounds)
	}
	var truth, offcpu, asleep int64
	for _, s := range slept {
		truth += s
	}
	var named int
	var other []string // the waiter's other switch-ins: what a missing wait became
	for _, e := range rec.all() {
		if e.Tid != uint32(waiter.Tids[0]) {
			continue
		}
		if State(e.State) != Sleep || e.OffcpuNs < 10e6 {
			other = append(other, fmt.Sprintf("%v %.2f ms (waker %s, %v)", State(e.State), float64(e.OffcpuNs)/1e6,
				bpfutil.CString(e.WakerComm[:]), WakeContext(e.WakeCtx)))
			continue
		}
		comm := bpfutil.CString(e.WakerComm[:])
		if named < 3 {
			t.Logf("switch-in after %.1f ms off-CPU (%v): woken by %s/%d (tgid %d, %v), %.1f ms before the switch-in",
				float64(e.OffcpuNs)/1e6, State(e.State), comm, e.WakerTid, e.WakerTgid, WakeContext(e.WakeCtx), float64(e.Ts-e.WakeTs)/1e6)
		}
		if WakeContext(e.WakeCtx) != WakeTask || e.WakerTgid != uint32(waker.Pid()) || e.WakerTid != uint32(waker.Tids[0]) || comm != "ppwake" {
			t.Errorf("switch-in after %.1f ms: waker %s/%d tgid %d ctx %v, want ppwake/%d tgid %d in task context",
				float64(e.OffcpuNs)/1e6, comm, e.WakerTid, e.WakerTgid, WakeContext(e.WakeCtx), waker.Tids[0], waker.Pid())
			continue
		}
		if e.WakeTs == 0 || e.WakeTs > e.Ts || e.Ts-e.WakeTs > e.OffcpuNs {
			t.Errorf("wake time %d outside the off-CPU interval [%d, %d]", e.WakeTs, e.Ts-e.OffcpuNs, e.Ts)
		}
		named++
		offcpu += int64(e.OffcpuNs)
		asleep += int64(e.WakeTs - (e.Ts - e.OffcpuNs))
	}
	t.Logf("%d of %d waits name the waker; off-CPU %.1f ms, of which asleep (to the wakeup) %.1f ms; the waker's measured sleeps %.1f ms",
		named, pingRounds, float64(offcpu)/1e6, float64(asleep)/1e6, float64(truth)/1e6)
	if named != pingRounds {
		t.Errorf("%d switch-ins after a long wait name the waker, want %d; the waiter's other switch-ins: %v",
			named, pingRounds, other)
	}
	// Asleep is the waker's sleep plus its own wakeup by the ping and
	// pipe hops; off-CPU adds the waiter's run-queue wait after the wakeup.
	if !within(float64(asleep), float64(truth), 0.10) {
		t.Errorf("asleep %.1f ms, want the waker's sleeps %.1f ms within 10%%", float64(asleep)/1e6, float64(truth)/1e6)
	}
	if offcpu < asleep {
		t.Errorf("off-CPU %d ns shorter than the time asleep %d ns", offcpu, asleep)
	}
}

// A nanosleep ends in a timer interrupt: the wakeup is an interrupt's
// (hrtimer expiry runs in hard interrupt context), not a task's.
func TestTimerWakeupIsAnInterrupt(t *testing.T) {
	privtest.Require(t)
	// Without the interrupt time the hard interrupt is only "hardirq";
	// with it, "hardirq:timer": outside any device handler.
	for _, irqTime := range []bool{false, true} {
		child := testproc.Start(t, "sleep")
		_, rec, stop := sessionOf(t, Config{Wakers: true, SoftirqVector: true, Tree: true, IRQTime: irqTime}, child.Pid())
		child.Go(t)
		child.Wait(t, 10*time.Second)
		stop()
		kinds := map[string]int{}
		var n int
		for _, e := range rec.all() {
			if e.Tid != uint32(child.Tids[0]) || State(e.State) != Sleep || e.OffcpuNs < 15e6 {
				continue
			}
			n++
			kinds[wakeCtxName(WakeContext(e.WakeCtx), e.WakeVec)]++
		}
		t.Logf("interrupt time %v: %d sleeps of 20 ms, woken in: %v", irqTime, n, kinds)
		if n < 45 {
			t.Fatalf("%d sleeps of 20 ms recorded, want 50", n)
		}
		hard := "hardirq"
		if irqTime {
			hard = "hardirq:timer"
		}
		if irq := kinds[hard] + kinds["softirq:timer"] + kinds["softirq:hrtimer"]; irq < n*9/10 {
			t.Errorf("%d of %d timer wakeups in a timer interrupt (%s), want at least 90%%: %v", irq, n, hard, kinds)
		}
	}
}

// A thread preempted by another names the thread that took the CPU. Both
// spinning threads are targets and nothing is folded, so a holder that is
// the other thread is checked against that thread's own switch-in record:
// the same program run stamps both with the same time.
func TestPreemptedNamesTheHolder(t *testing.T) {
	privtest.Require(t)
	child := testproc.Start(t, "spin2")
	_, rec, stop := wakerSession(t, child.Pid(), &NoFold)
	child.Go(t)
	child.Wait(t, 20*time.Second)
	stop()
	a, b := uint32(child.Tids[0]), uint32(child.Tids[1])
	evs := rec.all()
	switchIn := map[[2]uint64]bool{} // (tid, ts)
	for _, e := range evs {
		switchIn[[2]uint64{uint64(e.Tid), e.Ts}] = true
	}
	var preempted, byPeer, checked int
	holders := map[string]int{}
	for _, e := range evs {
		if (e.Tid != a && e.Tid != b) || State(e.State) != Preempted {
			continue
		}
		preempted++
		holders[bpfutil.CString(e.HolderComm[:])]++
		if e.WakeCtx != uint8(WakeNone) {
			t.Errorf("preempted switch-in carries a wakeup (%v)", WakeContext(e.WakeCtx))
		}
		if e.HolderTid == 0 || e.HolderTid == e.Tid {
			t.Errorf("preempted switch-in of %d names holder %d", e.Tid, e.HolderTid)
			continue
		}
		if e.HolderTid != a && e.HolderTid != b {
			continue
		}
		byPeer++
		if e.HolderTgid != uint32(child.Pid()) {
			t.Errorf("holder %d named with tgid %d, want %d", e.HolderTid, e.HolderTgid, child.Pid())
		}
		if switchIn[[2]uint64{uint64(e.HolderTid), e.Ts - e.OffcpuNs}] {
			checked++
		}
	}
	t.Logf("%d preemptions; %d name the other spinning thread, %d of them match its switch-in; holders by comm: %v", preempted, byPeer, checked, holders)
	if preempted < 10 || byPeer == 0 {
		t.Fatalf("%d preemptions, %d by the peer: want both", preempted, byPeer)
	}
	if checked != byPeer {
		t.Errorf("%d of %d holders that are the peer match its switch-in, want all", checked, byPeer)
	}
}

// A thread woken while another process's busy loops hold its CPU waits
// for them: its switch-in after the wakeup names the task that ran on the
// CPU last, one of the loops (the ground truth: the only other runnable
// tasks the test puts on CPU 0), not the timer that woke it.
func TestWokenWaitNamesTheHolder(t *testing.T) {
	privtest.Require(t)
	taskset := privtest.RequireTool(t, "taskset", "apt-get install util-linux")
	// Two loops of one process: a woken thread that spent its share finds
	// one of them on the CPU.
	busy := exec.Command(taskset, "-c", "0", "sh", "-c", "while :; do :; done & while :; do :; done")
	busy.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Kill(-busy.Process.Pid, unix.SIGKILL); _ = busy.Process.Kill(); _ = busy.Wait() })
	child := testproc.Start(t, "sleep0")
	_, rec, stop := wakerSession(t, child.Pid(), &NoFold)
	child.Go(t)
	child.Wait(t, 30*time.Second)
	stop()
	tid := uint32(child.Tids[0])
	var woken, named, byLoop int
	holders := map[string]int{}
	for _, e := range rec.all() {
		if e.Tid != tid || State(e.State) != Sleep || e.HasRunq == 0 || e.RunqNs == 0 {
			continue
		}
		woken++
		if e.HolderTid == 0 {
			continue
		}
		named++
		holders[fmt.Sprintf("%s[%d]", bpfutil.CString(e.HolderComm[:]), e.HolderTgid)]++
		if busyProc(e.HolderTgid, busy.Process.Pid) {
			byLoop++
		}
		if e.HolderTid == tid {
			t.Errorf("a woken switch-in names itself as its holder")
		}
	}
	t.Logf("%d woken switch-ins that waited; %d name a holder, %d the busy loop (pid %d); holders: %v", woken, named, byLoop, busy.Process.Pid, holders)
	if woken < 20 {
		t.Fatalf("%d woken switch-ins that waited behind the loop, want at least 20 of 200", woken)
	}
	if named != woken {
		t.Errorf("%d of %d woken waits name no holder", woken-named, woken)
	}
	// Other tasks of the host run on CPU 0 too (kernel threads, the
	// test's own readers, other work): the loop is most, not all.
	if byLoop*2 <= woken {
		t.Errorf("%d of %d woken waits name the busy loop, want most", byLoop, woken)
	}
}

// busyProc reports whether pid is the busy loops' shell or its child.
func busyProc(pid uint32, shell int) bool {
	if int(pid) == shell {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 1 && f[1] == strconv.Itoa(shell)
}

// A process forked by the target after the collector started is followed
// under the target's slot until it exits.
func TestForkedChildIsFollowed(t *testing.T) {
	privtest.Require(t)
	parent := testproc.Start(t, "forker")
	c, rec, stop := wakerSession(t, parent.Pid(), nil)
	parent.Go(t)
	out := parent.Wait(t, 20*time.Second)
	stop()
	kid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("forker printed %q", out)
	}
	var forks, exits, sleeps int
	for _, e := range rec.all() {
		if e.Tgid != uint32(kid) {
			continue
		}
		switch RecKind(e.Kind) {
		case RecFork:
			forks++
			if e.WakerTgid != uint32(parent.Pid()) {
				t.Errorf("fork record names parent %d, want %d", e.WakerTgid, parent.Pid())
			}
		case RecExit:
			exits++
		default:
			if e.Flags&FlagChild == 0 {
				t.Errorf("a record of the child lacks FlagChild")
			}
			if State(e.State) == Sleep && e.OffcpuNs >= 15e6 {
				sleeps++
			}
		}
	}
	sleep, err := c.OffCPUHist(1, Sleep)
	if err != nil {
		t.Fatal(err)
	}
	var tgt bpfutil.Target
	left := c.objs.Targets.Lookup(uint32(kid), &tgt)
	var nrChildren uint32
	if err := c.objs.NrChildren.Get(&nrChildren); err != nil {
		t.Fatal(err)
	}
	t.Logf("child %d: %d fork and %d exit records, %d sleeps of 20 ms; slot 1 counted %d sleeps; targets entry after exit: %v; nr_children %d",
		kid, forks, exits, sleeps, sleep.Count, left, nrChildren)
	if forks != 1 || exits != 1 {
		t.Errorf("%d fork and %d exit records of the child, want 1 and 1", forks, exits)
	}
	if sleeps < 10 {
		t.Errorf("%d sleeps of the child recorded, want 10", sleeps)
	}
	if sleep.Count < 10 {
		t.Errorf("slot 1 counted %d sleeps, want the child's 10 at least", sleep.Count)
	}
	if left == nil {
		t.Errorf("the exited child %d is still in targets", kid)
	}
	if nrChildren != 0 {
		t.Errorf("nr_children = %d after the child exited, want 0", nrChildren)
	}
}

// The load generator's own threads are streamed, flagged as the client's.
func TestClientRecordsAreFlagged(t *testing.T) {
	privtest.Require(t)
	c, rec, stop := wakerSession(t, 0, nil)
	if err := c.SetClient(uint32(os.Getpid()), 2); err != nil {
		t.Fatal(err)
	}
	done := make(chan int)
	go func() {
		runtime.LockOSThread()
		tid := unix.Gettid()
		for range 10 {
			time.Sleep(5 * time.Millisecond)
		}
		done <- tid
	}()
	tid := <-done
	stop()
	var mine int
	for _, e := range rec.all() {
		if e.Tgid != uint32(os.Getpid()) {
			continue
		}
		if e.Flags&FlagClient == 0 {
			t.Errorf("a record of the client lacks FlagClient")
		}
		if e.Tid == uint32(tid) {
			mine++
		}
	}
	t.Logf("%d records of the client's sleeping thread", mine)
	if mine < 10 {
		t.Errorf("%d records of the client's sleeping thread, want 10", mine)
	}
}
