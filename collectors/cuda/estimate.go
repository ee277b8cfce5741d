package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strconv"
)

// While the launch probes are detached (budget.go), launches are estimated
// per launching thread from what is measured without them:
//
//   - its synchronizes, whose probes stay on: a sample window measures its
//     launches per step over whole steps (from its first synchronize in the
//     window to its last, marked in the kernel: bpf/cuda.bpf.c, launchers),
//     and the detached stretch's synchronizes times that is the estimate
//     ("per_step"); exact for a loop whose steps look like the window's.
//   - its on-CPU time, read from /proc/PID/task/TID/schedstat (the
//     scheduler's own per-thread sum, exact and cheap to read): a window
//     measures launches per on-CPU second, with the probes' cost taken out
//     (each hit is charged to the thread: launches times the measured hit
//     cost), and the detached stretch's on-CPU time times that is the
//     estimate ("on_cpu"); it holds for bursts without synchronizes and
//     counts nothing while the thread is off CPU (idle between bursts).
//
// Each estimate carries a relative error bound (see threadEst.estimate),
// and where no estimate is possible (a thread that was on CPU while
// detached but never measured in a window, or one that exited between two
// readings) the count is marked a lower bound.

// minWindowLaunches is the fewest launches a rate is taken from.
const minWindowLaunches = 20

// threadSample is one reading of a launching thread.
type threadSample struct {
	l     cudaLauncher
	cpuNs uint64 // on-CPU time from schedstat
	ok    bool   // schedstat was readable (the thread exists)
}

// threads is a reading of every launching thread of a slot, by tid.
type threads map[uint32]threadSample

// readThreads reads the launching threads of slot idx: their in-kernel
// counts and their on-CPU time.
func (c *Collector) readThreads(idx uint32) threads {
	out := threads{}
	var tid uint32
	var l cudaLauncher
	var gone []uint32
	it := c.objs.Launchers.Iterate()
	for it.Next(&tid, &l) {
		if l.Idx != idx {
			continue
		}
		ns, err := threadCPU(l.Tgid, tid)
		out[tid] = threadSample{l: l, cpuNs: ns, ok: err == nil}
		if errors.Is(err, fs.ErrNotExist) {
			gone = append(gone, tid)
		}
	}
	// An exited thread is seen once (not ok), then forgotten: a daemon
	// following a process that makes and ends threads does not read a
	// dead thread's schedstat every check.
	for _, tid := range gone {
		_ = c.objs.Launchers.Delete(tid)
	}
	return out
}

// threadCPU is the on-CPU time of thread tid of tgid in ns (the first
// field of schedstat).
func threadCPU(tgid, tid uint32) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", tgid, tid))
	if err != nil {
		return 0, err
	}
	f, _, _ := bytes.Cut(bytes.TrimSpace(b), []byte(" "))
	return strconv.ParseUint(string(f), 10, 64)
}

// threadEst is what is known of one launching thread.
type threadEst struct {
	// Launches per on-CPU second in the latest window, the probes' own
	// cost included (so low: see estimate).
	low              float64
	perStep, stepErr float64 // launches per synchronize over whole steps (0: unknown)
	pendCPU          float64 // detached on-CPU seconds not yet estimated
	pendSyncs        uint64  // synchronizes in them
	// pendCounted are launches the probes counted in them: a stretch
	// across a switch of the probes (a detach, a window's attach) is
	// probed in part, and those launches are in the counts already.
	pendCounted float64
}

// estimator accounts the launches of the detached stretches.
type estimator struct {
	th        map[uint32]*threadEst
	estimated float64 // launches
	errAbs    float64 // sum of estimate times its relative bound
	methods   map[string]bool
	// lower: some detached launches could not be estimated.
	lower   bool
	lowerBy string
}

func (e *estimator) thread(tid uint32) *threadEst {
	if e.th == nil {
		e.th = map[uint32]*threadEst{}
		e.methods = map[string]bool{}
	}
	t := e.th[tid]
	if t == nil {
		t = &threadEst{}
		e.th[tid] = t
	}
	return t
}

// probed takes the rates of a window (or of the probed stretch before the
// probes were first detached) from a to b; gen is the window's generation
// (bpf arm map), for its whole steps.
func (e *estimator) probed(a, b threads, hit float64, gen uint32) {
	for tid, sb := range b {
		sa, ok := a[tid]
		t := e.thread(tid)
		if ok && sa.ok && sb.ok && sb.cpuNs > sa.cpuNs {
			n := float64(sb.l.Launches - sa.l.Launches)
			cpu := float64(sb.cpuNs-sa.cpuNs) / 1e9
			if n >= minWindowLaunches {
				t.low = n / cpu
			}
		}
		if sb.l.Gen == gen && sb.l.LastSyncs > sb.l.FirstSyncs {
			steps := float64(sb.l.LastSyncs - sb.l.FirstSyncs)
			ps := float64(sb.l.LastLaunches-sb.l.FirstLaunches) / steps
			err := 0.0
			if t.perStep > 0 {
				err = math.Abs(ps-t.perStep) / ps
			}
			if ps > 0 {
				t.perStep, t.stepErr = ps, err
			}
		}
		e.settle(t, false)
	}
}

// detached accounts the on-CPU time and synchronizes of the launching
// threads from a to b, while the probes were off.
func (e *estimator) detached(a, b threads) {
	for tid, sa := range a {
		sb, ok := b[tid]
		if !sa.ok {
			continue
		}
		if !ok || !sb.ok {
			// Exited (or evicted): its time since a is unknown.
			e.lower, e.lowerBy = true, "a launching thread exited while the probes were detached"
			continue
		}
		t := e.thread(tid)
		if sb.cpuNs > sa.cpuNs {
			t.pendCPU += float64(sb.cpuNs-sa.cpuNs) / 1e9
		}
		t.pendSyncs += sb.l.Syncs - sa.l.Syncs
		t.pendCounted += float64(sb.l.Launches - sa.l.Launches)
		e.settle(t, false)
	}
}

// settle estimates a thread's pending detached stretch when it can.
func (e *estimator) settle(t *threadEst, final bool) {
	est, err, method, lower, ok := t.estimate(final)
	if !ok {
		return
	}
	t.pendCPU, t.pendSyncs, t.pendCounted = 0, 0, 0
	if lower {
		e.lower, e.lowerBy = true, "launches per on-CPU second of a window include the probes' own cost: the estimate without synchronizes is a lower bound"
	}
	e.estimated += est
	e.errAbs += est * err
	e.methods[method] = true
}

// estimate is the thread's pending launches with their relative bound,
// and whether they are only a lower bound; final: the session ends.
//
// Per step: launches per step of the latest window's whole steps times
// the stretch's synchronizes; the bound is the change of launches per step
// from the window before, plus two steps at either end of each detached
// stretch (see boundary). It holds while the steps look like the windows'.
//
// On CPU (no synchronize to count steps by): the window's launches per
// on-CPU second times the stretch's on-CPU time. The window's rate
// includes the probes' own cost, charged to the thread, and that cost is
// not known well enough to take out: the budget prices every launch hit at
// the dearest class among the launch functions (the stub's cuLaunchKernel
// is emulated, 0.6-0.9 µs, another of its launch functions single-stepped,
// 6-8 µs), the calibration times a no-op program, not this one, and the
// host's load moves both. So the figure is a lower bound for a thread
// whose work per launch is the same with and without the probes, and is
// marked so.
//
// With both, the per-step figure is taken unless the on-CPU figure exceeds
// it (launches outside the steps, a burst): then that, as a lower bound.
// Launches the probes counted in the stretch (across a switch of the
// probes) are taken off either figure.
func (t *threadEst) estimate(final bool) (est, err float64, method string, lower, ok bool) {
	if t.pendCPU == 0 && t.pendSyncs == 0 {
		return 0, 0, "", false, false
	}
	low := max(0, t.low*t.pendCPU-t.pendCounted)
	switch {
	case t.perStep > 0 && t.pendSyncs > 0:
		est = max(0, t.perStep*float64(t.pendSyncs)-t.pendCounted)
		err = t.stepErr
		if est == 0 {
			return 0, 0, "per_step", false, true
		}
		// Two steps of slack: a stretch's synchronizes and its CPU time
		// each cut a step at either end.
		if t.low > 0 && low > est*(1+err)+2*t.perStep {
			return low, 0, "on_cpu", true, true
		}
		return est, err, "per_step", false, true
	case t.perStep > 0 && !final:
		// A stepping thread between two synchronizes: wait for the next.
		return 0, 0, "", false, false
	case t.perStep > 0 && low <= t.perStep:
		// The end of the session after its last synchronize: less than a
		// step, within the bound of the steps before.
		return low, 0, "per_step", false, true
	case t.low > 0:
		return low, 0, "on_cpu", true, true
	}
	return 0, 0, "", false, false
}

// boundary accounts a detach or a window's start, from reading a before
// the probes' switch to reading b after it: the step in progress is
// counted in part and estimated in part (lost in part at a window's
// start, counted twice in part at a detach), and so are the steps made
// while the switch took (30-50 ms for uprobe_multi links here): each
// stepping thread adds two steps and those to the bound.
func (e *estimator) boundary(a, b threads) {
	for tid, t := range e.th {
		n := 2.0
		if sa, ok := a[tid]; ok {
			if sb, ok := b[tid]; ok && sb.l.Syncs > sa.l.Syncs {
				n += float64(sb.l.Syncs - sa.l.Syncs)
			}
		}
		e.errAbs += n * t.perStep
	}
}

// finish marks the count a lower bound when launching threads were on CPU
// while detached and no window ever gave them a rate.
func (e *estimator) finish() {
	for _, t := range e.th {
		e.settle(t, true)
		if t.pendCPU > 0 || t.pendSyncs > 0 {
			e.lower, e.lowerBy = true, "a launching thread ran while the probes were detached and no window measured its rate"
		}
	}
}

// unmeasured says whether thread tid launched but no window has given it
// a rate yet.
func (e *estimator) unmeasured(tid uint32) bool {
	t := e.th[tid]
	return t == nil || (t.low == 0 && t.perStep == 0)
}

// method names the methods used ("per_step", "on_cpu" or both).
func (e *estimator) method() string {
	switch {
	case e.methods["per_step"] && e.methods["on_cpu"]:
		return "per_step+on_cpu"
	case e.methods["per_step"]:
		return "per_step"
	case e.methods["on_cpu"]:
		return "on_cpu"
	}
	return ""
}
