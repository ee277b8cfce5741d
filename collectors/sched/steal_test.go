package sched

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testproc"
)

// The time a thread was on its CPU that the scheduler did not charge it
// (the hypervisor's steal, with PARAVIRT_TIME_ACCOUNTING) closes the
// thread's accounts: two threads that never sleep, pinned to CPU 0 for
// 2 s, spent their wall time running (CLOCK_THREAD_CPUTIME_ID, which
// excludes steal), waiting for the CPU (the records' run-queue time) and
// stolen (the records' steal). And the two threads' steal is CPU 0's
// steal while they ran (/proc/stat, in 10 ms units): CPU 0 ran nothing
// else of note. On a host with no steal both are zero.
func TestStealClosesASpinningThreadsAccounts(t *testing.T) {
	privtest.Require(t)
	child := testproc.Start(t, "spin2")
	_, rec, stop := sessionOf(t, Config{Wakers: true, SoftirqVector: true, IRQTime: true, Fold: &NoFold}, child.Pid())
	child.Go(t)
	out := child.Wait(t, 20*time.Second)
	stop()
	type acct struct{ runq, steal int64 }
	got := map[uint32]*acct{}
	for _, e := range rec.all() {
		if RecKind(e.Kind) != RecSwitch {
			continue
		}
		a := got[e.Tid]
		if a == nil {
			a = &acct{}
			got[e.Tid] = a
		}
		if e.HasRunq != 0 {
			a.runq += int64(e.RunqNs)
		}
		a.steal += stealOf(&e)
	}
	var stealSum, cpuSteal int64
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var tid int
		var cpuNs, wallNs, stealNs int64
		if _, err := fmt.Sscanf(line, "%d %d %d %d", &tid, &cpuNs, &wallNs, &stealNs); err != nil {
			t.Fatalf("child result %q: %v", line, err)
		}
		a := got[uint32(tid)]
		if a == nil {
			t.Fatalf("no records for thread %d", tid)
		}
		truth := wallNs - cpuNs
		t.Logf("thread %d: %.3f s wall, %.3f s on its CPU clock: %.3f s not its own; measured %.3f s run queue + %.3f s steal = %.3f s",
			tid, float64(wallNs)/1e9, float64(cpuNs)/1e9, float64(truth)/1e9, float64(a.runq)/1e9, float64(a.steal)/1e9, float64(a.runq+a.steal)/1e9)
		if d := math.Abs(float64(a.runq + a.steal - truth)); d > 0.1*float64(truth)+10e6 {
			t.Errorf("thread %d: run queue + steal %.3f s, want its wall less its CPU time, %.3f s, within 10%% + 10 ms", tid, float64(a.runq+a.steal)/1e9, float64(truth)/1e9)
		}
		stealSum += a.steal
		cpuSteal = max(cpuSteal, stealNs)
	}
	t.Logf("the threads' steal %.3f s, CPU 0's steal meanwhile %.3f s (/proc/stat)", float64(stealSum)/1e9, float64(cpuSteal)/1e9)
	if d := math.Abs(float64(stealSum - cpuSteal)); d > 0.25*float64(cpuSteal)+30e6 {
		t.Errorf("the threads' steal %.3f s, CPU 0's %.3f s: want within 25%% + 30 ms", float64(stealSum)/1e9, float64(cpuSteal)/1e9)
	}
}
