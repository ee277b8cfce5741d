package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	schema "github.com/bpfbench/bpfbench/result"

	"github.com/bpfbench/bpfbench/internal/uprobecost"
)

// A uprobe hit is a trap: a launch-heavy process (hundreds of kernel
// launches per decode step without CUDA Graphs) can lose more time to the
// entry probe on cuLaunchKernel than to its GPU. The launch-rate probes
// (Kind Launch) are therefore kept only while their estimated cost, the
// measured launch rate times the host's measured cost of a hit, stays
// within a budget; past it they are detached and sampled in short windows,
// and the launches in between are estimated from the windows' rates.
// Blocking calls, copies and allocations keep their probes.

// Budget configures the launch-probe budget.
type Budget struct {
	// Ratio is the share of one CPU the launch probes may cost (default 0.005).
	Ratio float64
	// Check is how often the launch rate is measured while probes are on (default 20 ms).
	Check time.Duration
	// Period is the time between sample windows once over budget (default 30 s):
	// attaching and detaching costs the target too, so not often.
	Period time.Duration
	// Window is how long a sample window lasts (default 20 ms).
	Window time.Duration
	// Burst is the probe cost allowed at once, in CPU time (default 2 ms).
	Burst time.Duration
	// First is the wait before the first sample window (default 1 s).
	First time.Duration
	// Cost overrides the measured cost of a hit (tests).
	Cost *uprobecost.Cost
}

// idleCheck is the budget's check period while no launch probe is attached.
const idleCheck = time.Second

// DefaultBudget is the budget of every session and of the daemon.
var DefaultBudget = Budget{Ratio: 0.005, Check: 20 * time.Millisecond, Period: 30 * time.Second, Window: 20 * time.Millisecond, Burst: 2 * time.Millisecond, First: time.Second}

// LaunchProbes (result.CUDALaunchProbes) says how launches were counted.
type LaunchProbes = schema.CUDALaunchProbes

type budgetState struct {
	mu    sync.Mutex
	lp    LaunchProbes
	on    bool
	since time.Time // of the current on/off stretch
	first uint64    // the launch count when the budget started
	est   estimator
	done  bool
}

func (b Budget) withDefaults() Budget {
	d := DefaultBudget
	if b.Ratio > 0 {
		d.Ratio = b.Ratio
	}
	if b.Check > 0 {
		d.Check = b.Check
	}
	if b.Period > 0 {
		d.Period = b.Period
	}
	if b.Window > 0 {
		d.Window = b.Window
	}
	if b.Burst > 0 {
		d.Burst = b.Burst
	}
	if b.First > 0 {
		d.First = b.First
	}
	d.Cost = b.Cost
	return d
}

// counter is a reading of the in-kernel counts of slot idx: launches, and
// synchronizes, whose probes stay on and so clock the steps of a decode
// loop while the launch probes are detached.
type counter struct {
	launches, syncs uint64
	t               time.Time
}

func (c *Collector) launchCount(idx uint32) (counter, error) {
	r := counter{t: time.Now()}
	var per []cudaCounts
	for i, info := range calls {
		if info.Kind != Launch && info.Kind != Sync {
			continue
		}
		key := idx*maxCalls + uint32(i)
		if err := c.objs.CallCounts.Lookup(key, &per); err != nil {
			return r, fmt.Errorf("reading call_counts[%d]: %w", key, err)
		}
		for _, p := range per {
			if info.Kind == Launch {
				r.launches += p.Count
			} else {
				r.syncs += p.Count
			}
		}
	}
	return r, nil
}

// reading is launchCount without the error (a failed read counts nothing).
func (c *Collector) reading(idx uint32) counter {
	r, _ := c.launchCount(idx)
	return r
}

// setLaunchProbes switches the launch probes of every process of procs.
func (c *Collector) setLaunchProbes(procs func() []uint32, on bool) error {
	var errs []error
	for _, tgid := range procs() {
		errs = append(errs, c.SetLaunchProbes(tgid, on))
	}
	return errors.Join(errs...)
}

// launchKinds counts the launch probes of procs by the kind of their
// first instruction.
func (c *Collector) launchKinds(procs func() []uint32) (emu, step int) {
	for _, tgid := range procs() {
		e, s := c.LaunchProbeKinds(tgid)
		emu, step = emu+e, step+s
	}
	return emu, step
}

// budgetRun is one run of the budget of a slot.
type budgetRun struct {
	c      *Collector
	procs  func() []uint32
	idx    uint32
	b      Budget
	st     *budgetState
	cost   uprobecost.Cost
	hit    float64 // ns a hit, 0: no launch probe
	tokens float64 // probe cost allowed now, CPU seconds
	last   counter
	th     threads // the launching threads at the latest check
	gen    uint32  // of the latest sample window (bpf arm map)
}

// runBudget keeps the launch probes of the processes of slot idx (procs)
// within b until ctx is done, recording what it did in st.
func (c *Collector) runBudget(ctx context.Context, procs func() []uint32, idx uint32, b Budget, st *budgetState) {
	r := &budgetRun{c: c, procs: procs, idx: idx, b: b.withDefaults(), st: st}
	r.start()
	for r.full(ctx) && r.sampled(ctx) {
	}
	st.finish(c.reading(idx), r.th, c.readThreads(idx))
}

func (r *budgetRun) start() {
	if r.b.Cost != nil {
		r.cost = *r.b.Cost
	} else {
		var err error
		if r.cost, err = uprobecost.Measure(); err != nil {
			r.c.Log().Warn("measuring the uprobe cost; assuming 20 µs a hit", "err", err)
			r.cost = uprobecost.Cost{EmulatedNs: 20000, SingleStepNs: 20000}
		}
	}
	r.hit = r.hitCost()
	r.st.mu.Lock()
	r.st.lp.BudgetRatio = r.b.Ratio
	r.st.lp.HitCostNs = r.hit
	r.st.lp.Mode = "full"
	if r.hit == 0 {
		r.st.lp.Mode = "none"
	}
	r.st.on, r.st.since = true, time.Now()
	r.st.mu.Unlock()
	r.arm()
	var err error
	if r.last, err = r.c.launchCount(r.idx); err != nil {
		r.c.Log().Warn("reading launch counts", "err", err)
	}
	r.st.mu.Lock()
	r.st.first = r.last.launches
	r.st.mu.Unlock()
	r.th = r.c.readThreads(r.idx)
	r.tokens = r.b.Burst.Seconds()
}

// hitCost is the single-step cost if any launch function starts with an
// instruction the kernel cannot emulate (a daemon target's processes may
// map CUDA later: re-read at every check).
func (r *budgetRun) hitCost() float64 {
	emu, step := r.c.launchKinds(r.procs)
	if step > 0 {
		return r.cost.SingleStepNs
	}
	if emu > 0 {
		return r.cost.EmulatedNs
	}
	return 0
}

// arm starts a new generation: each launching thread's next synchronize
// marks the beginning of the whole steps a window measures.
func (r *budgetRun) arm() {
	r.gen++
	if err := r.c.objs.Arm.Put(r.idx, r.gen); err != nil {
		r.c.Log().Warn("arming the launch marks", "err", err)
	}
}

// checkPeriod is the check period: without a launch probe to pay for (no
// CUDA library mapped yet), the check only looks for one, once a second:
// 50 wakeups a second of an observer for nothing are not free on a busy
// host.
func (r *budgetRun) checkPeriod() time.Duration {
	if r.hit == 0 {
		return max(r.b.Check, idleCheck)
	}
	return r.b.Check
}

// full checks the launch rate while every launch is probed; it returns
// true once it has detached the probes over budget, false when ctx is done.
func (r *budgetRun) full(ctx context.Context) bool {
	cur := r.checkPeriod()
	tk := time.NewTicker(cur)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tk.C:
		}
		if h := r.hitCost(); h != r.hit {
			r.hit = h
			r.st.mu.Lock()
			r.st.lp.HitCostNs = h
			if h > 0 && r.st.lp.Mode == "none" {
				r.st.lp.Mode = "full"
			}
			r.st.mu.Unlock()
			if p := r.checkPeriod(); p != cur {
				cur = p
				tk.Reset(cur)
			}
		}
		if r.hit == 0 {
			continue
		}
		n, err := r.c.launchCount(r.idx)
		if err != nil {
			continue
		}
		th := r.c.readThreads(r.idx)
		rate := r.st.probed(r.last, n, r.hit)
		// A token bucket: the probes may cost Ratio of a CPU on average
		// and Burst at once, so a few launches close together (a test, a
		// warm-up) do not detach them, while a launch-heavy loop does
		// within a check or two.
		r.tokens = min(r.b.Burst.Seconds(), r.tokens+r.b.Ratio*n.t.Sub(r.last.t).Seconds()-float64(n.launches-r.last.launches)*r.hit/1e9)
		prev := r.th
		r.last, r.th = n, th
		if r.tokens >= 0 {
			continue
		}
		// Over budget: the rates of the latest check (the phase that
		// drove the probes over budget) and the whole steps since the
		// probes went on, then detach.
		if err := r.c.setLaunchProbes(r.procs, false); err != nil {
			r.c.Log().Warn("detaching launch probes", "err", err)
			continue
		}
		r.st.rates(prev, th, r.hit, r.gen)
		r.th = r.c.readThreads(r.idx)
		r.st.off(r.c.reading(r.idx), th, r.th, fmt.Sprintf("%.0f launches/s at %.2f µs a probe hit would cost %.1f%% of a CPU, over the %.1f%% budget",
			rate, r.hit/1e3, rate*r.hit/1e9*100, r.b.Ratio*100))
		r.c.Log().Info("launch probes over budget: sampling", "launches_per_second", int(rate), "hit_cost_ns", int(r.hit))
		return true
	}
}

// sampled runs detached with sample windows until a window finds the
// launches back within budget (true) or ctx is done (false). While
// detached it reads the launching threads every Check: their on-CPU time
// and synchronizes are the estimate's base, and a thread that launched
// before coming back on CPU after a gap (a check without CPU time) opens a
// window, so that a burst is sampled when it starts; windows also open
// every Period (the first after First), and a window opened by a thread
// waits for the budget's tokens.
func (r *budgetRun) sampled(ctx context.Context) bool {
	tk := time.NewTicker(r.b.Check)
	defer tk.Stop()
	next := time.Now().Add(r.b.First)
	idle := map[uint32]bool{}
	var lastUnmeasured time.Time
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tk.C:
		}
		th := r.c.readThreads(r.idx)
		r.st.detached(r.th, th)
		back, unmeasured := false, false
		for tid, s := range th {
			p, ok := r.th[tid]
			busy := ok && s.ok && p.ok && s.cpuNs-p.cpuNs > uint64(r.b.Check.Nanoseconds()/10)
			if busy && idle[tid] {
				back = true
			}
			if busy && r.st.unmeasured(tid) {
				unmeasured = true
			}
			idle[tid] = ok && s.ok && p.ok && s.cpuNs == p.cpuNs
		}
		now := time.Now()
		r.tokens = min(r.b.Burst.Seconds(), r.tokens+r.b.Ratio*r.b.Check.Seconds())
		r.th = th
		// A busy thread no window has measured (its launches began in the
		// check that detached the probes) gets one at once, tokens or not,
		// at most every ten windows' time: without it the stretch has no
		// estimate at all.
		if unmeasured && now.Sub(lastUnmeasured) >= 10*r.b.Window {
			lastUnmeasured = now
		} else if !now.After(next) && !(back && r.tokens > 0) {
			continue
		}
		next = now.Add(r.b.Period)
		within, ok := r.window(ctx)
		if !ok {
			return false
		}
		if within {
			return true
		}
	}
}

// window attaches the launch probes for a sample window and measures the
// launching threads' rates in it. It returns whether the launches were
// within budget (the probes then stay) and false in ok when ctx is done.
func (r *budgetRun) window(ctx context.Context) (within, ok bool) {
	if err := r.c.setLaunchProbes(r.procs, true); err != nil {
		r.c.Log().Warn("attaching launch probes for a sample window", "err", err)
		return false, true
	}
	// Armed once the probes are on: the window's first synchronize then
	// begins a step whose every launch is counted.
	r.arm()
	n0, _ := r.c.launchCount(r.idx)
	a := r.c.readThreads(r.idx)
	r.st.window(n0, r.th, a)
	// A window lasts Window, and up to ten times that until it has seen
	// two synchronizes (a step that outlasts the window gives no ratio).
	var n1 counter
	for end, limit := n0.t.Add(r.b.Window), n0.t.Add(10*r.b.Window); ; {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(end)):
		}
		n1, _ = r.c.launchCount(r.idx)
		if ctx.Err() != nil || n1.syncs-n0.syncs >= 2 || !n1.t.Before(limit) {
			break
		}
		end = n1.t.Add(r.b.Window / 2)
	}
	b := r.c.readThreads(r.idx)
	rate := r.st.probed(n0, n1, r.hit)
	r.st.rates(a, b, r.hit, r.gen)
	r.tokens -= float64(n1.launches-n0.launches) * r.hit / 1e9
	if maxRate := r.b.Ratio * 1e9 / r.hit; rate <= maxRate {
		// Back within budget: probes stay.
		r.last, r.th, r.tokens = n1, b, r.b.Burst.Seconds()
		return true, true
	}
	_ = r.c.setLaunchProbes(r.procs, false)
	r.th = r.c.readThreads(r.idx)
	r.st.off(r.c.reading(r.idx), b, r.th, "")
	return false, ctx.Err() == nil
}

// probed accounts a probed stretch from a to b and returns its launch rate.
func (st *budgetState) probed(a, b counter, hit float64) float64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := b.launches - a.launches
	rate := float64(n) / max(b.t.Sub(a.t).Seconds(), 1e-9)
	st.lp.MeasuredLaunches += n
	st.lp.CostSeconds += float64(n) * hit / 1e9
	st.lp.MaxRate = max(st.lp.MaxRate, rate)
	return rate
}

// rates takes the launching threads' rates of a probed stretch.
func (st *budgetState) rates(a, b threads, hit float64, gen uint32) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.est.probed(a, b, hit, gen)
	st.publish()
}

// unmeasured says whether a launching thread has no rate yet.
func (st *budgetState) unmeasured(tid uint32) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.est.unmeasured(tid)
}

// detached accounts the launching threads from a to b while detached.
func (st *budgetState) detached(a, b threads) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.est.detached(a, b)
	st.publish()
}

// publish copies the estimator's figures into lp.
func (st *budgetState) publish() {
	st.lp.EstimatedLaunches = uint64(math.Round(st.est.estimated))
	st.lp.Method = st.est.method()
	st.lp.LowerBound, st.lp.LowerBoundReason = st.est.lower, st.est.lowerBy
	st.lp.EstimateError = 0
	if t := float64(st.lp.MeasuredLaunches) + st.est.estimated; t > 0 {
		st.lp.EstimateError = st.est.errAbs / t
	}
}

// off accounts a detach: a and b are the launching threads read before
// and after it; what ran in between is taken as detached (the part still
// probed is in the bound, see estimator.boundary).
func (st *budgetState) off(at counter, a, b threads, reason string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.on {
		st.lp.ProbedSeconds += at.t.Sub(st.since).Seconds()
	}
	st.on, st.since = false, at.t
	st.est.detached(a, b)
	st.est.boundary(a, b)
	st.lp.Mode = "sampled"
	if reason != "" {
		st.lp.Reason = reason
	}
	st.publish()
}

// window accounts a window's start: a and b are the launching threads
// read before and after the probes were attached.
func (st *budgetState) window(at counter, a, b threads) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.lp.UnprobedSeconds += at.t.Sub(st.since).Seconds()
	st.lp.Windows++
	st.est.detached(a, b)
	st.est.boundary(a, b)
	st.on, st.since = true, at.t
	st.publish()
}

// finish closes the last stretch: detached time at the end is accounted
// with the threads' latest readings.
func (st *budgetState) finish(at counter, prev, th threads) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return
	}
	st.done = true
	d := at.t.Sub(st.since).Seconds()
	if st.on {
		st.lp.ProbedSeconds += d
	} else {
		st.lp.UnprobedSeconds += d
		st.est.detached(prev, th)
	}
	st.lp.MeasuredLaunches = at.launches - st.first
	st.est.finish()
	st.publish()
}

func (st *budgetState) snapshot() LaunchProbes {
	st.mu.Lock()
	defer st.mu.Unlock()
	lp := st.lp
	lp.Estimated = lp.Mode == "sampled"
	if !st.done && st.lp.Mode != "" {
		d := time.Since(st.since).Seconds()
		if st.on {
			lp.ProbedSeconds += d
		} else {
			lp.UnprobedSeconds += d
		}
	}
	return lp
}

// line is the terminal's account of the launches of a sampled session.
func probesLine(lp LaunchProbes) string {
	s := fmt.Sprintf("%d counted + %d estimated", lp.MeasuredLaunches, lp.EstimatedLaunches)
	if lp.Method != "" {
		s += fmt.Sprintf(" (%s, ±%.0f%%)", lp.Method, 100*lp.EstimateError)
	}
	if lp.LowerBound {
		s += "; a lower bound: " + lp.LowerBoundReason
	}
	return s
}

// suffix marks a count in a table: empty when exact.
func estimateSuffix(e Estimate) string {
	switch {
	case !e.Estimated:
		return ""
	case e.LowerBound:
		return fmt.Sprintf(" (>=%d, sampled)", e.EstimatedCount)
	}
	return fmt.Sprintf(" (~%d ±%.0f%%, sampled)", e.EstimatedCount, 100*e.EstimateError)
}

// duty is the share of the time the launch probes were attached.
func probeDuty(lp LaunchProbes) float64 {
	if t := lp.ProbedSeconds + lp.UnprobedSeconds; t > 0 {
		return lp.ProbedSeconds / t
	}
	return 1
}
