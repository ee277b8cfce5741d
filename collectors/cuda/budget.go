package cuda

import (
	"context"
	"errors"
	"fmt"
	schema "github.com/bpfbench/bpfbench/result"
	"sync"
	"time"

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
	mu       sync.Mutex
	lp       LaunchProbes
	on       bool
	since    time.Time // of the current on/off stretch
	offAt    counter   // the reading when the probes were last detached
	lastRate float64   // launches/s of the latest probed stretch
	perSync  float64   // launches per synchronize in it (0: none)
	pending  float64   // detached seconds not yet estimated
	// pendingSyncs are the synchronizes counted in them.
	pendingSyncs uint64
	done         bool
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

// runBudget keeps the launch probes of the processes of slot idx (procs)
// within b until ctx is done, recording what it did in st.
func (c *Collector) runBudget(ctx context.Context, procs func() []uint32, idx uint32, b Budget, st *budgetState) {
	b = b.withDefaults()
	var cost uprobecost.Cost
	if b.Cost != nil {
		cost = *b.Cost
	} else {
		var err error
		if cost, err = uprobecost.Measure(); err != nil {
			c.Log().Warn("measuring the uprobe cost; assuming 20 µs a hit", "err", err)
			cost = uprobecost.Cost{EmulatedNs: 20000, SingleStepNs: 20000}
		}
	}
	// The single-step cost if any launch function starts with an
	// instruction the kernel cannot emulate (a daemon target's processes
	// may map CUDA later: re-read at every check).
	hitCost := func() float64 {
		emu, step := c.launchKinds(procs)
		if step > 0 {
			return cost.SingleStepNs
		}
		if emu > 0 {
			return cost.EmulatedNs
		}
		return 0
	}
	now := time.Now()
	hit := hitCost()
	st.mu.Lock()
	st.lp.BudgetRatio = b.Ratio
	st.lp.HitCostNs = hit
	st.lp.Mode = "full"
	if hit == 0 {
		st.lp.Mode = "none"
	}
	st.on, st.since = true, now
	st.mu.Unlock()

	last, err := c.launchCount(idx)
	if err != nil {
		c.Log().Warn("reading launch counts", "err", err)
	}
	tokens := b.Burst.Seconds()
	// Without a launch probe to pay for (no CUDA library mapped yet), the
	// check only looks for one, once a second: 50 wakeups a second of an
	// observer for nothing are not free on a busy host.
	period := func(hit float64) time.Duration {
		if hit == 0 {
			return max(b.Check, idleCheck)
		}
		return b.Check
	}
	cur := period(hit)
	tk := time.NewTicker(cur)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			st.finish(c.reading(idx))
			return
		case <-tk.C:
		}
		st.mu.Lock()
		on := st.on
		st.mu.Unlock()
		if !on {
			continue
		}
		if h := hitCost(); h != hit {
			hit = h
			st.mu.Lock()
			st.lp.HitCostNs = hit
			if hit > 0 && st.lp.Mode == "none" {
				st.lp.Mode = "full"
			}
			st.mu.Unlock()
			if p := period(hit); p != cur {
				cur = p
				tk.Reset(cur)
			}
		}
		if hit == 0 {
			continue
		}
		maxRate := b.Ratio * 1e9 / hit
		n, err := c.launchCount(idx)
		if err != nil {
			continue
		}
		rate := st.probed(last, n, hit)
		// A token bucket: the probes may cost Ratio of a CPU on average
		// and Burst at once, so a few launches close together (a test, a
		// warm-up) do not detach them, while a launch-heavy loop does
		// within a check or two.
		tokens = min(b.Burst.Seconds(), tokens+b.Ratio*n.t.Sub(last.t).Seconds()-float64(n.launches-last.launches)*hit/1e9)
		last = n
		if tokens >= 0 {
			continue
		}
		// Over budget: detach, then sample a window every Period.
		if err := c.setLaunchProbes(procs, false); err != nil {
			c.Log().Warn("detaching launch probes", "err", err)
			continue
		}
		st.off(c.reading(idx), fmt.Sprintf("%.0f launches/s at %.2f µs a probe hit would cost %.1f%% of a CPU, over the %.1f%% budget",
			rate, hit/1e3, rate*hit/1e9*100, b.Ratio*100))
		c.Log().Info("launch probes over budget: sampling", "launches_per_second", int(rate), "hit_cost_ns", int(hit))
		// The first window comes soon, for a launches-per-synchronize
		// ratio to estimate with; the others every Period.
		wait := b.First
		for {
			select {
			case <-ctx.Done():
				st.finish(c.reading(idx))
				return
			case <-time.After(wait):
			}
			wait = b.Period
			if err := c.setLaunchProbes(procs, true); err != nil {
				c.Log().Warn("attaching launch probes for a sample window", "err", err)
				continue
			}
			n0, _ := c.launchCount(idx)
			st.window(n0)
			// A window lasts Window, and up to ten times that until it
			// has seen two synchronizes (a step that outlasts the window
			// gives no ratio).
			var n1 counter
			for end, limit := n0.t.Add(b.Window), n0.t.Add(10*b.Window); ; {
				select {
				case <-ctx.Done():
				case <-time.After(time.Until(end)):
				}
				n1, _ = c.launchCount(idx)
				if ctx.Err() != nil || n1.syncs-n0.syncs >= 2 || !n1.t.Before(limit) {
					break
				}
				end = n1.t.Add(b.Window / 2)
			}
			if r := st.probed(n0, n1, hit); r <= maxRate {
				// Back within budget: probes stay.
				last, tokens = n1, b.Burst.Seconds()
				break
			}
			_ = c.setLaunchProbes(procs, false)
			n2, _ := c.launchCount(idx)
			st.off(n2, "")
			if ctx.Err() != nil {
				st.finish(c.reading(idx))
				return
			}
		}
	}
}

// probed accounts a probed stretch from a to b and returns its launch
// rate. Detached time before it is estimated with this stretch's launches
// per synchronize (the synchronizes were counted throughout) or, for a
// process that does not synchronize, with its rate.
func (st *budgetState) probed(a, b counter, hit float64) float64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := b.launches - a.launches
	rate := float64(n) / max(b.t.Sub(a.t).Seconds(), 1e-9)
	st.lp.MeasuredLaunches += n
	st.lp.CostSeconds += float64(n) * hit / 1e9
	st.lp.MaxRate = max(st.lp.MaxRate, rate)
	// Probes slow a launch-bound thread: r launches/s with a hit of h
	// seconds each are at most r/(1-r*h) without (the fallback for a
	// process that never synchronizes).
	st.lastRate = rate
	if load := rate * hit / 1e9; load > 0 && load < 0.99 {
		st.lastRate = rate / (1 - load)
	} else if load >= 0.99 {
		st.lastRate = rate * 100
	}
	// A stretch without a synchronize (the thread did not run, or the
	// process launches without synchronizing) keeps the previous ratio.
	if s := b.syncs - a.syncs; s > 0 {
		st.perSync = float64(n) / float64(s)
	}
	st.estimate()
	return rate
}

// estimate turns the pending detached stretch into launches.
func (st *budgetState) estimate() {
	if st.pending <= 0 {
		return
	}
	if st.perSync > 0 {
		st.lp.EstimatedLaunches += uint64(st.perSync * float64(st.pendingSyncs))
	} else {
		st.lp.EstimatedLaunches += uint64(st.pending * st.lastRate)
	}
	st.pending, st.pendingSyncs = 0, 0
}

func (st *budgetState) off(at counter, reason string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.on {
		st.lp.ProbedSeconds += at.t.Sub(st.since).Seconds()
	}
	st.on, st.since, st.offAt = false, at.t, at
	st.lp.Mode = "sampled"
	if reason != "" {
		st.lp.Reason = reason
	}
}

func (st *budgetState) window(at counter) {
	st.mu.Lock()
	defer st.mu.Unlock()
	d := at.t.Sub(st.since).Seconds()
	st.lp.UnprobedSeconds += d
	st.pending += d
	st.pendingSyncs += at.syncs - st.offAt.syncs
	st.lp.Windows++
	st.on, st.since = true, at.t
}

// finish closes the last stretch: detached time at the end takes the
// latest window's figures.
func (st *budgetState) finish(at counter) {
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
		st.pending += d
		st.pendingSyncs += at.syncs - st.offAt.syncs
	}
	st.estimate()
}

func (st *budgetState) snapshot() LaunchProbes {
	st.mu.Lock()
	defer st.mu.Unlock()
	lp := st.lp
	if !st.done && st.lp.Mode != "" {
		d := time.Since(st.since).Seconds()
		if st.on {
			lp.ProbedSeconds += d
		} else {
			lp.UnprobedSeconds += d
			lp.EstimatedLaunches += uint64((st.pending + d) * st.lastRate)
		}
		// (A live view: the final figures count synchronizes, see finish.)
	}
	return lp
}

// duty is the share of the time the launch probes were attached.
func probeDuty(lp LaunchProbes) float64 {
	if t := lp.ProbedSeconds + lp.UnprobedSeconds; t > 0 {
		return lp.ProbedSeconds / t
	}
	return 1
}
