package daemon

// The live view of every target (live.enabled): one session for all of
// them (one set of programs, maps and links however many targets), its
// spans routed by their slot to each target's live.Tracker, which groups
// the server's writes into streams and walks each gap's critical path,
// exported per target. No load generator: the server's own traffic.
//
// A target's processes are followed from the roots of their trees (a
// process whose parent is not one of the target's) and the children they
// fork, under a slot of the shared session of its own (the first target's
// is the session's own, slot 1; the others' session.AddTarget's). The
// scheduler's and the TCP collector's spans carry the slot (Span.Slot);
// the other sections' spans (CUDA, block IO) are routed by their thread,
// whose slot the scheduler's spans gave. A target is added at the refresh
// that finds its processes, taken out and added again with a new tracker
// when its roots change (the server restarted, a second tree joined the
// cgroup), and taken out when it has no process left, is removed or
// changes its selector; the session ends with its last target, or when
// live.enabled is turned off. A target that cannot be followed (no such
// process, only kernel threads, a session that cannot start) is logged
// once and tried again at every refresh; it never stops the daemon. The
// figures carry over: each target's counters and histograms go on from
// where its last tracker left them, so rate() sees no reset.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/incident"
	"github.com/bpfbench/bpfbench/internal/clock"
	"github.com/bpfbench/bpfbench/internal/hist"
	"github.com/bpfbench/bpfbench/live"
	"github.com/bpfbench/bpfbench/session"
)

// liveAdvance is how often a live session's tracker walks the gaps that
// its lag has passed.
const liveAdvance = 500 * time.Millisecond

// The classic buckets of the live histograms (docs/daemon.md, "Histogram
// buckets"): gaps between two writes of a stream from 16.4 µs to 17.2 s,
// times to first byte from 262 µs to 68.7 s.
var (
	GapBuckets       = hist.Classic{From: 14, To: 34, Step: 2}
	FirstByteBuckets = hist.Classic{From: 18, To: 36, Step: 2}
)

var (
	gapDesc = prometheus.NewDesc("bpfbench_token_gap_seconds",
		"Server-side gaps between two writes of a response stream of a target (the live view: its own traffic, no load generator).",
		[]string{"target"}, nil)
	gapCauseDesc = prometheus.NewDesc("bpfbench_token_gap_cause_seconds_total",
		"Critical-path time of the target's token gaps and first bytes, by cause (rate() is the blame mix); an estimate while the live view samples the gaps below the p90 (bpfbench_live_gaps_unwalked_total{reason=\"sampled\"} grows).",
		[]string{"target", "cause"}, nil)
	firstByteDesc = prometheus.NewDesc("bpfbench_time_to_first_byte_seconds",
		"Server-side time from a request's last byte in to the first write of its response, of a target.",
		[]string{"target"}, nil)
	streamsActiveDesc = prometheus.NewDesc("bpfbench_streams_active",
		"Response streams of a target that wrote within the last 10 s.", []string{"target"}, nil)
	recorderBytesDesc = prometheus.NewDesc("bpfbench_incident_recorder_bytes",
		"The memory a target's flight recorder holds (its own estimate; bounded by incidents.recorder_bytes).",
		[]string{"target"}, nil)
	recorderGapsDesc = prometheus.NewDesc("bpfbench_incident_recorder_gaps",
		"The token gaps a target's flight recorder holds (the last incidents.recorder_window).",
		[]string{"target"}, nil)
	recorderPathQDesc = prometheus.NewDesc("bpfbench_incident_recorder_path_quantile",
		"The quantile of a target's gaps above which its flight recorder keeps a gap's path now: 0.9, higher while the paths do not fit its bytes with its window.",
		[]string{"target"}, nil)
	liveStoreDesc = prometheus.NewDesc("bpfbench_live_store_entries",
		"What a target's live view holds in each bounded store: spans (the history its walk reads: at most 1,048,576 shared over the live targets), streams (connections whose writes are grouped: at most 65,536, idle ones expire after 5 minutes), connections (those whose gaps are summed apart: at most 4,096, the rest as one).",
		[]string{"target", "store"}, nil)
	liveUnwalkedDesc = prometheus.NewDesc("bpfbench_live_gaps_unwalked_total",
		"Gaps and first bytes of a target the live view did not walk, all in the histograms: below the running p90, left out of the uniform sample walked while the walk costs over its target (reason sampled: the cause seconds estimate them), or over its budget (reason budget, 5% of a CPU over all live targets: not in the cause seconds, which then cover the walked gaps); at or above the p90, over its ceiling (reason ceiling, four times the budget: overload, the p99 bands' causes cover their walked gaps).",
		[]string{"target", "reason"}, nil)
	liveDroppedDesc = prometheus.NewDesc("bpfbench_live_spans_dropped_total",
		"Spans the live view of a target left out: held beyond its bound of history (reason held), or come after their gaps were walked (reason late).",
		[]string{"target", "reason"}, nil)
)

// liveWant is what a refresh gives a target's live view: its selector and
// its processes now.
type liveWant struct {
	target Target
	procs  []int
}

// liveViews runs the live session of the targets and exports their
// figures (a prometheus.Collector).
type liveViews struct {
	log *slog.Logger

	mu sync.Mutex
	// ctx is Run's while the views run; nil before and after.
	ctx      context.Context
	sections []session.SectionFactory
	proc     string
	targets  map[string]*liveTarget
	// shared is the session every target's view takes its spans from;
	// nil while no target is followed.
	shared *sharedRun
	// failed is the failure last logged per target, so each is logged once.
	failed map[string]string
	wg     sync.WaitGroup
	// inc watches each target's flight recorder (nil: incidents off);
	// recorder makes a target's.
	inc      *incident.Manager
	recorder func() *live.Recorder
}

// liveTarget is one target's live view: the figures of its ended
// trackers and the one running now.
type liveTarget struct {
	sel  Target
	base live.Totals
	run  *liveRun
}

// liveRun is one target's part of the shared session: its slot, the
// processes it follows and its tracker.
type liveRun struct {
	key   string // the pid and roots it follows
	sr    *sharedRun
	slot  uint32
	pid   int
	procs []int // every process followed under slot (to forget them)
	tr    *live.Tracker
	rec   *live.Recorder // nil: incidents off
	// mu orders the tick's walks with the end's.
	mu    sync.Mutex
	ended bool
}

// sharedRun is the shared session and what routes its spans.
type sharedRun struct {
	sess   *session.Session
	router *spanRouter
	cancel context.CancelFunc
	done   chan struct{}
	used   [bpfutil.MaxTargets]bool // slots taken (0 never)
}

// slot takes a free slot of the shared session (0: none left).
func (sr *sharedRun) slot() uint32 {
	for i := session.FirstSharedSlot; i < bpfutil.MaxTargets; i++ {
		if !sr.used[i] {
			sr.used[i] = true
			return uint32(i)
		}
	}
	return 0
}

func newLiveViews(logger *slog.Logger) *liveViews {
	return &liveViews{log: logger, targets: map[string]*liveTarget{}, failed: map[string]string{}}
}

// begin lets the views start sessions under ctx with sections; proc is
// where processes are read ("" is /proc).
func (v *liveViews) begin(ctx context.Context, sections []session.SectionFactory, proc string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.ctx, v.sections, v.proc = ctx, sections, proc
}

// running reports whether the views may start sessions.
func (v *liveViews) running() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.ctx != nil
}

// stop ends the session and waits until it is closed and every target's
// figures are folded; no session starts after it. It is idempotent.
func (v *liveViews) stop() {
	v.mu.Lock()
	v.ctx = nil
	sr := v.shared
	v.mu.Unlock()
	if sr != nil {
		sr.cancel()
		<-sr.done
	}
	v.wg.Wait()
}

// resetWarnings forgets the failures logged (a reload).
func (v *liveViews) resetWarnings() {
	v.mu.Lock()
	defer v.mu.Unlock()
	clear(v.failed)
}

// sync adds, renews and takes out the targets of the shared session so
// that each target of want follows its processes now (refreshMu
// serialises the calls).
func (v *liveViews) sync(want map[string]liveWant) {
	v.mu.Lock()
	ctx, proc := v.ctx, v.proc
	var gone []string
	for name, lt := range v.targets {
		if w, ok := want[name]; !ok || !reflect.DeepEqual(w.target, lt.sel) {
			gone = append(gone, name)
		}
	}
	v.mu.Unlock()
	for _, name := range gone {
		// A target removed or given another selector: its series end
		// (a new selector's start at zero).
		v.end(name)
		v.mu.Lock()
		delete(v.targets, name)
		delete(v.failed, name)
		v.mu.Unlock()
	}
	if ctx == nil {
		return
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		w := want[name]
		pid, roots, why := treeRoots(proc, w.procs)
		key := ""
		if pid != 0 {
			key = fmt.Sprint(append([]int{pid}, roots...))
		}
		v.mu.Lock()
		var cur string
		if lt := v.targets[name]; lt != nil && lt.run != nil {
			cur = lt.run.key
			if cur == key {
				lt.run.procs = mergePids(lt.run.procs, w.procs)
			}
		}
		v.mu.Unlock()
		if cur == key && key != "" {
			continue
		}
		if cur != "" {
			v.end(name)
		}
		if pid == 0 {
			if why != "" {
				v.fail(name, "", "the live view follows no process of the target: "+why)
			}
			continue
		}
		v.start(ctx, name, w.target, pid, roots, key, w.procs)
	}
}

// mergePids is a with b's pids it lacks, sorted.
func mergePids(a, b []int) []int {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// treeRoots returns the roots of procs' trees (a process whose parent is
// not in procs), the lowest first, leaving out the daemon itself and
// kernel threads; why says what was left out when nothing is left.
func treeRoots(proc string, procs []int) (pid int, roots []int, why string) {
	if proc == "" {
		proc = "/proc"
	}
	in := map[int]bool{}
	for _, p := range procs {
		in[p] = true
	}
	self := os.Getpid()
	var skipped []string
	for _, p := range procs {
		if in[collectors.ParentPid(proc, p)] {
			continue
		}
		switch {
		case p == self:
			skipped = append(skipped, "the daemon itself")
			continue
		case session.KernelThreadIn(proc, p):
			skipped = append(skipped, "kernel thread "+strconv.Itoa(p))
			continue
		}
		roots = append(roots, p)
	}
	if len(roots) == 0 {
		if len(skipped) > 0 {
			why = "its processes are " + strings.Join(skipped, ", ") + " (a kernel thread serves no requests; give the server's pid, comm or cgroup)"
		}
		return 0, nil, why
	}
	slices.Sort(roots)
	return roots[0], roots[1:], ""
}

// fail logs a target's failure to start a session once (until it
// changes, a session starts, or a reload).
func (v *liveViews) fail(name, pids, msg string) {
	v.mu.Lock()
	seen := v.failed[name] == pids+"\x00"+msg
	v.failed[name] = pids + "\x00" + msg
	v.mu.Unlock()
	if seen {
		v.log.Debug("live view not started (again)", "target", name, "pids", pids, "err", msg)
		return
	}
	v.log.Warn("live view not started: trying again at the next refresh", "target", name, "pids", pids, "err", msg)
}

// start follows pid and roots for target name: as the shared session's
// own target when none runs, else under a slot of its own.
func (v *liveViews) start(ctx context.Context, name string, sel Target, pid int, roots []int, key string, procs []int) {
	var rec *live.Recorder
	if v.recorder != nil {
		rec = v.recorder()
	}
	r := &liveRun{key: key, pid: pid, tr: live.NewTracker(live.Options{Recorder: rec, WalkBudget: live.DefaultWalkBudget,
		WalkTarget: live.DefaultWalkTarget, ThreadClock: true}), rec: rec}
	logger := v.log.With("target", name)
	v.mu.Lock()
	sr := v.shared
	if sr != nil {
		r.slot = sr.slot()
	}
	v.mu.Unlock()
	r.sr = sr
	var followed []int
	if sr == nil {
		var err error
		if sr, err = v.startShared(ctx, name, pid, roots, r); err != nil {
			v.fail(name, key, err.Error())
			return
		}
		r.slot, r.sr = 1, sr
		followed = collectors.Tree(pid, roots)
		logger.Info("live view started: the live session follows it", "pid", pid, "roots", roots, "comm", sr.sess.Comm(), "unavailable", sr.sess.Unavailable())
	} else {
		if r.slot == 0 {
			v.fail(name, key, fmt.Sprintf("the live session follows %d targets already, all it has slots for", bpfutil.MaxTargets-session.FirstSharedSlot+1))
			return
		}
		sr.router.set(r.slot, r.tr)
		var err error
		followed, err = sr.sess.AddTarget(pid, roots, r.slot)
		if len(followed) == 0 {
			sr.router.set(r.slot, nil)
			v.mu.Lock()
			sr.used[r.slot] = false
			v.mu.Unlock()
			v.fail(name, key, fmt.Sprintf("following pid %d: %v", pid, err))
			return
		}
		if err != nil {
			logger.Warn("live view: some processes are not followed", "err", err)
		}
		logger.Info("live view started: the live session follows it", "pid", pid, "roots", roots, "slot", r.slot)
	}
	r.procs = mergePids(followed, procs)
	v.mu.Lock()
	if v.ctx == nil || v.shared != sr {
		// stop (or the session's end) came while it started.
		v.mu.Unlock()
		r.tr.Finish()
		return
	}
	lt := v.targets[name]
	if lt == nil {
		lt = &liveTarget{sel: sel, base: live.Totals{Gap: newLog2(), FirstByte: newLog2()}}
		v.targets[name] = lt
	}
	lt.run = r
	delete(v.failed, name)
	v.mu.Unlock()
	v.shareBudget()
}

// shareBudget gives every target's tracker an equal share of the live
// views' walk budget (live.DefaultWalkBudget of a CPU over all targets)
// and of their bound of history (live.DefaultMaxHeld spans, at least
// minHeldShare each).
func (v *liveViews) shareBudget() {
	v.mu.Lock()
	var runs []*liveRun
	for _, lt := range v.targets {
		if lt.run != nil {
			runs = append(runs, lt.run)
		}
	}
	v.mu.Unlock()
	for _, r := range runs {
		r.tr.SetWalkBudget(live.DefaultWalkBudget / float64(len(runs)))
		r.tr.SetMaxHeld(max(live.DefaultMaxHeld/len(runs), minHeldShare))
	}
}

// minHeldShare is the least bound of history a target's live view gets
// when the daemon shares one over many targets (64Ki spans: 10 s of a
// server making 6,500 spans a second).
const minHeldShare = 1 << 16

// startShared starts the shared session on pid and roots, r's tracker its
// slot 1's, and runs it until stop or an error.
func (v *liveViews) startShared(ctx context.Context, name string, pid int, roots []int, r *liveRun) (*sharedRun, error) {
	v.mu.Lock()
	sections := v.sections
	v.mu.Unlock()
	router := newSpanRouter()
	router.set(1, r.tr)
	opts := collectors.Options{Pid: pid, Roots: roots, Interval: time.Second, Logger: v.log.With("live_session", name),
		Recorder: router, Live: true}
	sess, err := session.NewSession(opts, sections)
	if err == nil {
		if err = sess.Start(ctx); err != nil {
			sess.Close()
		}
	}
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	sr := &sharedRun{sess: sess, router: router, cancel: cancel, done: make(chan struct{})}
	sr.used[1] = true
	v.mu.Lock()
	if v.ctx == nil {
		v.mu.Unlock()
		cancel()
		sess.Close()
		return nil, context.Canceled
	}
	v.shared = sr
	v.wg.Add(1)
	v.mu.Unlock()
	go v.runShared(rctx, sr)
	return sr, nil
}

// runShared runs the shared session, walking every target's gaps at each
// tick, until it is cancelled or fails; then it ends every target's run
// and closes the session.
func (v *liveViews) runShared(ctx context.Context, sr *sharedRun) {
	defer v.wg.Done()
	defer close(sr.done)
	defer sr.cancel()
	locked := false
	err := sr.sess.Run(ctx, liveAdvance, func() {
		if !locked {
			// The walks' cost is read on this thread's CPU clock
			// (live.Options.ThreadClock): every tick runs on this
			// goroutine, locked to its thread until it ends.
			runtime.LockOSThread()
			locked = true
		}
		now := clock.Now()
		for _, t := range v.runs(sr) {
			t.run.mu.Lock()
			if !t.run.ended {
				t.run.tr.Advance(now)
				if v.inc != nil && t.run.rec != nil {
					v.inc.Check(t.name, v.source(t.run), now)
				}
			}
			t.run.mu.Unlock()
		}
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		v.log.Warn("live view: collection failed; the session is started again at the next refresh", "err", err)
	}
	v.mu.Lock()
	if v.shared == sr {
		v.shared = nil
	}
	v.mu.Unlock()
	for _, t := range v.runs(sr) {
		v.finish(t.name, t.run)
	}
	if cerr := sr.sess.Close(); cerr != nil {
		v.log.Warn("live view: closing the session", "err", cerr)
	}
	v.log.Info("live session stopped", "unrouted_spans", sr.router.unrouted.Load())
}

type namedRun struct {
	name string
	run  *liveRun
}

// runs is the targets' runs in sr, by name.
func (v *liveViews) runs(sr *sharedRun) []namedRun {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []namedRun
	for name, lt := range v.targets {
		if lt.run != nil && lt.run.sr == sr {
			out = append(out, namedRun{name, lt.run})
		}
	}
	slices.SortFunc(out, func(a, b namedRun) int { return strings.Compare(a.name, b.name) })
	return out
}

// source is what the incident manager reads of r.
func (v *liveViews) source(r *liveRun) incident.Source {
	return incident.Source{Tracker: r.tr, Recorder: r.rec, Pid: r.pid}
}

// finish walks r's last gaps, flushes a capture under way and folds its
// figures into its target's; it is done once.
func (v *liveViews) finish(name string, r *liveRun) {
	r.mu.Lock()
	if r.ended {
		r.mu.Unlock()
		return
	}
	r.ended = true
	r.tr.Finish()
	if v.inc != nil && r.rec != nil {
		// A capture under way keeps what was recorded.
		v.inc.Flush(name, v.source(r), clock.Now())
	}
	r.mu.Unlock()
	t := r.tr.Totals(clock.Now())
	v.mu.Lock()
	if lt := v.targets[name]; lt != nil && lt.run == r {
		lt.base = addTotals(lt.base, t)
		lt.run = nil
	}
	v.mu.Unlock()
	v.log.Info("live view stopped", "target", name, "pid", r.pid, "gaps", t.Gap.Count, "first_bytes", t.FirstByte.Count)
}

// end takes target name out of the shared session, if it is in, and
// folds its figures; the session ends with its last target.
func (v *liveViews) end(name string) {
	v.mu.Lock()
	var r *liveRun
	if lt := v.targets[name]; lt != nil {
		r = lt.run
	}
	sr := v.shared
	v.mu.Unlock()
	if r == nil {
		return
	}
	if sr != nil {
		sr.router.set(r.slot, nil)
		if err := sr.sess.RemoveTarget(r.procs); err != nil {
			v.log.Debug("live view: forgetting the target's processes", "target", name, "err", err)
		}
	}
	v.finish(name, r)
	v.mu.Lock()
	last := true
	for _, lt := range v.targets {
		last = last && lt.run == nil
	}
	if sr != nil && v.shared == sr && r.slot != 1 {
		sr.used[r.slot] = false // slot 1 is the session's own pid's until it ends
	}
	v.mu.Unlock()
	if last && sr != nil {
		sr.cancel()
		<-sr.done
		return
	}
	v.shareBudget()
}

// names are the targets with a live session now, sorted.
func (v *liveViews) names() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for name, lt := range v.targets {
		if lt.run != nil {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func newLog2() hist.Log2 { return hist.Log2{Slots: make([]uint64, 64)} }

// addTotals is a + b in new histograms; Active is b's.
func addTotals(a, b live.Totals) live.Totals {
	out := live.Totals{Gap: newLog2(), FirstByte: newLog2(), Active: b.Active,
		Dropped: a.Dropped + b.Dropped, Late: a.Late + b.Late, Unwalked: a.Unwalked + b.Unwalked,
		UnwalkedSlow: a.UnwalkedSlow + b.UnwalkedSlow, SampledOut: a.SampledOut + b.SampledOut}
	out.Gap.Add(a.Gap)
	out.Gap.Add(b.Gap)
	out.FirstByte.Add(a.FirstByte)
	out.FirstByte.Add(b.FirstByte)
	for c := range out.CauseNs {
		out.CauseNs[c] = a.CauseNs[c] + b.CauseNs[c]
	}
	return out
}

// Describe implements prometheus.Collector.
func (v *liveViews) Describe(ch chan<- *prometheus.Desc) {
	ch <- gapDesc
	ch <- gapCauseDesc
	ch <- firstByteDesc
	ch <- streamsActiveDesc
	ch <- liveDroppedDesc
	ch <- liveUnwalkedDesc
	ch <- recorderBytesDesc
	ch <- recorderGapsDesc
	ch <- recorderPathQDesc
	ch <- liveStoreDesc
}

// Collect implements prometheus.Collector: every target that had a live
// session since its selector was configured.
func (v *liveViews) Collect(ch chan<- prometheus.Metric) {
	now := clock.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	for name, lt := range v.targets {
		t := addTotals(lt.base, live.Totals{})
		if lt.run != nil {
			t = addTotals(lt.base, lt.run.tr.Totals(now))
		}
		ch <- t.Gap.Metric(gapDesc, GapBuckets, name)
		ch <- t.FirstByte.Metric(firstByteDesc, FirstByteBuckets, name)
		for c, ns := range t.CauseNs {
			ch <- prometheus.MustNewConstMetric(gapCauseDesc, prometheus.CounterValue, float64(ns)/1e9, name, critpath.Cause(c).String())
		}
		ch <- prometheus.MustNewConstMetric(streamsActiveDesc, prometheus.GaugeValue, float64(t.Active), name)
		ch <- prometheus.MustNewConstMetric(liveDroppedDesc, prometheus.CounterValue, float64(t.Dropped), name, "held")
		ch <- prometheus.MustNewConstMetric(liveDroppedDesc, prometheus.CounterValue, float64(t.Late), name, "late")
		ch <- prometheus.MustNewConstMetric(liveUnwalkedDesc, prometheus.CounterValue, float64(t.Unwalked-t.UnwalkedSlow), name, "budget")
		ch <- prometheus.MustNewConstMetric(liveUnwalkedDesc, prometheus.CounterValue, float64(t.UnwalkedSlow), name, "ceiling")
		ch <- prometheus.MustNewConstMetric(liveUnwalkedDesc, prometheus.CounterValue, float64(t.SampledOut), name, "sampled")
		if lt.run != nil {
			st := lt.run.tr.Stores()
			ch <- prometheus.MustNewConstMetric(liveStoreDesc, prometheus.GaugeValue, float64(st.Held), name, "spans")
			ch <- prometheus.MustNewConstMetric(liveStoreDesc, prometheus.GaugeValue, float64(st.Streams), name, "streams")
			ch <- prometheus.MustNewConstMetric(liveStoreDesc, prometheus.GaugeValue, float64(st.Conns), name, "connections")
		}
		if lt.run != nil && lt.run.rec != nil {
			st := lt.run.rec.Stats()
			ch <- prometheus.MustNewConstMetric(recorderBytesDesc, prometheus.GaugeValue, float64(st.Bytes), name)
			ch <- prometheus.MustNewConstMetric(recorderGapsDesc, prometheus.GaugeValue, float64(st.Gaps), name)
			ch <- prometheus.MustNewConstMetric(recorderPathQDesc, prometheus.GaugeValue, st.PathQuantile, name)
		}
	}
}

// syncLive gives each target's live view its processes of the last
// refresh (under refreshMu).
func (d *Daemon) syncLive() {
	if !d.views.running() {
		return
	}
	want := map[string]liveWant{}
	if d.cfg.Live.Enabled {
		d.mu.Lock()
		procs := map[int][]int{}
		for tgid, slot := range d.assigned {
			i := int(slot) - 1
			if o, ok := d.slots.owners[slot]; ok {
				i = o.target
			}
			procs[i] = append(procs[i], int(tgid))
		}
		for i, t := range d.cfg.Targets {
			want[t.Name] = liveWant{target: t, procs: procs[i]}
		}
		d.mu.Unlock()
	}
	d.views.sync(want)
}
