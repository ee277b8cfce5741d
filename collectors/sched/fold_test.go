package sched

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testproc"
	"golang.org/x/sys/unix"
)

func init() { testproc.Register("napper", childNapper) }

// childNapper naps args[0] times: it spins args[1] µs, then sleeps args[2]
// µs (nanosleep); then it sleeps 5 ms, long enough to be a record of its
// own, which carries the naps' sums. It prints the time it spent inside
// its sleeps, on the monotonic clock.
func childNapper(args []string, ready func(...int), wait func()) {
	runtime.LockOSThread()
	n, _ := strconv.Atoi(args[0])
	spin, _ := strconv.ParseInt(args[1], 10, 64)
	nap, _ := strconv.ParseInt(args[2], 10, 64)
	setComm("napper")
	ready(unix.Gettid())
	wait()
	var slept int64
	sleep := func(ns int64) {
		t0 := monoNs()
		ts := unix.NsecToTimespec(ns)
		for unix.Nanosleep(&ts, &ts) == unix.EINTR {
		}
		slept += monoNs() - t0
	}
	for range n {
		for until := monoNs() + spin*1e3; monoNs() < until; {
		}
		sleep(nap * 1e3)
	}
	sleep(5e6)
	fmt.Printf("slept %d\n", slept)
}

// A thread that naps 2,000 times for 300 µs between 200 µs of work, with
// the default folding: its naps are summed in the kernel (a few records,
// not thousands), and the records' folded sleep, with their own off-CPU
// intervals, is the time the thread spent in its sleeps (its own clock
// around nanosleep, which holds a few µs of the call's own running a nap
// too).
func TestFoldedNapsAreSleep(t *testing.T) {
	privtest.Require(t)
	const naps = 2000
	child := testproc.Start(t, "napper", strconv.Itoa(naps), "200", "300")
	_, rec, stop := sessionOf(t, Config{Wakers: true, SoftirqVector: true, IRQTime: true}, child.Pid())
	goAt := monoNs()
	child.Go(t)
	out := child.Wait(t, 30*time.Second)
	stop()
	var slept int64
	for l := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "slept "); ok {
			slept, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if slept <= 0 {
		t.Fatalf("the napper printed %q", out)
	}
	var records, folded int
	var sleep, runq, io, own int64
	for _, e := range rec.all() {
		if e.Tid != uint32(child.Tids[0]) || RecKind(e.Kind) != RecSwitch || int64(e.Ts) <= goAt {
			continue
		}
		records++
		folded += int(e.FoldN)
		s, r, d := foldedOf(&e)
		sleep, runq, io = sleep+s, runq+r, io+d
		if State(e.State) < NumStates && int64(e.Ts)-int64(e.OffcpuNs) > goAt {
			own += int64(e.OffcpuNs)
		}
	}
	total := sleep + runq + io + own
	t.Logf("%d naps: %d records, %d intervals folded; folded sleep %.1f ms, run-queue %.1f ms, D %.1f ms; recorded off-CPU %.1f ms; total %.1f ms against %.1f ms slept by the thread's clock",
		naps, records, folded, float64(sleep)/1e6, float64(runq)/1e6, float64(io)/1e6, float64(own)/1e6, float64(total)/1e6, float64(slept)/1e6)
	if records > naps/4 {
		t.Errorf("%d records for %d naps: the naps were not folded", records, naps)
	}
	if folded < naps/2 {
		t.Errorf("%d intervals folded of %d naps", folded, naps)
	}
	// Off the CPU within its sleeps: at most the time inside them, and
	// all but the calls' own running (a few µs each, 10% at most here).
	if total > slept || float64(total) < 0.9*float64(slept) {
		t.Errorf("off-CPU %d ns in the records, %d ns slept by the thread's clock", total, slept)
	}
	if sleep < 3*(runq+io) {
		t.Errorf("folded sleep %d ns, run-queue %d ns, D %d ns: the naps are sleeps", sleep, runq, io)
	}
}
