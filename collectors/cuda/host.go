package cuda

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/hist"
)

// RescanInterval is how often the daemon rereads its targets' mappings,
// to probe CUDA libraries loaded after the target was added (PyTorch
// loads libcuda when CUDA is first used) and drop unmapped ones.
var RescanInterval = 10 * time.Second

// Host is the daemon's CUDA collector: per-target call counts, errors,
// durations of blocking calls, copy bytes and the CUDA Graph and pool
// counters (graphs.go), aggregated in the kernel and read at scrape time. Uprobes are per target process (the kernel
// plants breakpoints only in targets' address spaces, so other processes
// using the same library pay nothing).
type Host struct {
	*Collector
	names collectors.TargetNames

	mu      sync.Mutex
	targets map[uint32]uint32 // tgid -> slot
	budgets map[uint32]*budgetState
	runCtx  context.Context

	calls, durations, errs, copies, duty, estimated *prometheus.Desc
	// The bound of the estimate and whether it is a lower bound.
	estimateErr, lowerBound *prometheus.Desc
	// CUDA Graph and memory-pool counters, per target and API (graphs.go).
	graphInst, graphDestroys, graphLaunches, poolFailures, poolTrims, poolAttrs *prometheus.Desc
}

var _ collectors.Host = (*Host)(nil)

// CallBuckets are the classic buckets of the CUDA call durations (docs/daemon.md,
// "Histogram buckets"): 1.02 µs to 17.2 s, every second power of two of
// ns; the native histogram keeps every kernel slot.
var CallBuckets = hist.Classic{From: 10, To: 34, Step: 2}

// NewHost returns the daemon's CUDA collector; names labels the slots.
func NewHost(logger *slog.Logger, names collectors.TargetNames) *Host {
	c := New(Config{Logger: logger})
	return &Host{
		Collector: c,
		names:     names,
		targets:   map[uint32]uint32{},
		budgets:   map[uint32]*budgetState{},
		calls: prometheus.NewDesc("bpfbench_cuda_calls_total",
			"CUDA driver and runtime API calls of a target by call name (launches and asynchronous copies at entry, blocking calls at return).",
			[]string{"target", "call"}, nil),
		durations: prometheus.NewDesc("bpfbench_cuda_call_duration_seconds",
			"Time a target's threads spent inside CUDA calls with a return probe: blocking ones (synchronizes, blocking copies, allocations, frees), graph instantiations and exec destroys, pool trims and attribute sets.",
			[]string{"target", "call"}, nil),
		errs: prometheus.NewDesc("bpfbench_cuda_errors_total",
			"CUDA calls of a target with a return probe that returned an error (a failed allocation is out of memory).",
			[]string{"target", "call"}, nil),
		copies: prometheus.NewDesc("bpfbench_cuda_copy_bytes_total",
			"Bytes a target copied with CUDA memcpy calls by direction (unified: cuMemcpy or cudaMemcpyDefault, direction unknown).",
			[]string{"target", "direction"}, nil),
		duty: prometheus.NewDesc("bpfbench_cuda_launch_probe_duty_ratio",
			"Share of the time a target's CUDA launch probes were attached: below 1 they cost more than their budget and launches were sampled.",
			[]string{"target"}, nil),
		estimated: prometheus.NewDesc("bpfbench_cuda_launches_estimated_total",
			"Launches of a target made while its launch probes were detached, estimated from the sample windows (not in bpfbench_cuda_calls_total).",
			[]string{"target"}, nil),
		estimateErr: prometheus.NewDesc("bpfbench_cuda_launches_estimate_error_ratio",
			"Relative error bound of a target's launch count with its estimate (bpfbench_cuda_calls_total of the launch calls plus bpfbench_cuda_launches_estimated_total), while its launch probes are sampled.",
			[]string{"target", "method"}, nil),
		lowerBound: prometheus.NewDesc("bpfbench_cuda_launches_lower_bound",
			"1 when some of a target's launches while its launch probes were detached could not be estimated: its launch count and estimate are a lower bound.",
			[]string{"target"}, nil),
		graphInst: prometheus.NewDesc("bpfbench_cuda_graph_instantiations_total",
			"Successful CUDA Graph instantiations of a target (cuGraphInstantiate*, cudaGraphInstantiate*), per API: a runtime call usually reaches the driver's too. Reuse rate: bpfbench_cuda_graph_launches_total / bpfbench_cuda_graph_instantiations_total.",
			[]string{"target", "api"}, nil),
		graphDestroys: prometheus.NewDesc("bpfbench_cuda_graph_exec_destroys_total",
			"Successful cuGraphExecDestroy / cudaGraphExecDestroy calls of a target, per API.",
			[]string{"target", "api"}, nil),
		graphLaunches: prometheus.NewDesc("bpfbench_cuda_graph_launches_total",
			"CUDA Graph launches of a target counted by its launch probes (cuGraphLaunch, cudaGraphLaunch), per API; while the probes are sampled, launches between windows are in bpfbench_cuda_launches_estimated_total.",
			[]string{"target", "api"}, nil),
		poolFailures: prometheus.NewDesc("bpfbench_cuda_pool_alloc_failures_total",
			"Stream-ordered allocations of a target (cuMemAllocFromPoolAsync, cuMemAllocAsync and the runtime's) that returned out of memory, per API. Per 1,000 graph launches: 1000 * increase(bpfbench_cuda_pool_alloc_failures_total[5m]) / increase(bpfbench_cuda_graph_launches_total[5m]).",
			[]string{"target", "api"}, nil),
		poolTrims: prometheus.NewDesc("bpfbench_cuda_pool_trims_total",
			"Successful cuMemPoolTrimTo / cudaMemPoolTrimTo calls of a target, per API.",
			[]string{"target", "api"}, nil),
		poolAttrs: prometheus.NewDesc("bpfbench_cuda_pool_attribute_sets_total",
			"Successful cuMemPoolSetAttribute / cudaMemPoolSetAttribute calls of a target, per API.",
			[]string{"target", "api"}, nil),
	}
}

// SetTarget aggregates tgid under slot idx and attaches to the CUDA
// libraries it maps. A process without one is kept and rescanned: it may
// load CUDA later.
func (h *Host) SetTarget(tgid, idx uint32) error {
	if err := h.Collector.SetTarget(tgid, idx, 0); err != nil {
		return err
	}
	h.mu.Lock()
	h.targets[tgid] = idx
	h.startBudget(idx)
	h.mu.Unlock()
	return h.scan(tgid)
}

// startBudget runs the launch-probe budget of slot idx once Run has
// started; callers hold h.mu.
func (h *Host) startBudget(idx uint32) {
	if h.runCtx == nil || h.budgets[idx] != nil {
		return
	}
	st := &budgetState{}
	h.budgets[idx] = st
	procs := func() []uint32 {
		h.mu.Lock()
		defer h.mu.Unlock()
		var out []uint32
		for tgid, i := range h.targets {
			if i == idx {
				out = append(out, tgid)
			}
		}
		return out
	}
	go h.runBudget(h.runCtx, procs, idx, DefaultBudget, st)
}

func (h *Host) scan(tgid uint32) error {
	libs, err := FindLibraries(int(tgid), nil)
	var nm *NotMappedError
	if errors.As(err, &nm) {
		h.Log().Debug("no CUDA library mapped yet", "pid", tgid)
		_, err = h.Attach(tgid, nil, true)
		return err
	}
	if err != nil {
		return err
	}
	_, err = h.Attach(tgid, libs, true)
	return err
}

// DeleteTarget stops following tgid and detaches its uprobes.
func (h *Host) DeleteTarget(tgid uint32) error {
	h.mu.Lock()
	delete(h.targets, tgid)
	h.mu.Unlock()
	return h.Collector.DeleteTarget(tgid)
}

// Run rescans the targets' mappings every RescanInterval until ctx is done.
func (h *Host) Run(ctx context.Context) error {
	h.mu.Lock()
	h.runCtx = ctx
	for _, idx := range h.targets {
		h.startBudget(idx)
	}
	h.mu.Unlock()
	t := time.NewTicker(RescanInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		h.mu.Lock()
		tgids := make([]uint32, 0, len(h.targets))
		for tgid := range h.targets {
			tgids = append(tgids, tgid)
		}
		h.mu.Unlock()
		sort.Slice(tgids, func(i, j int) bool { return tgids[i] < tgids[j] })
		for _, tgid := range tgids {
			if err := h.scan(tgid); err != nil {
				h.Log().Debug("rescanning CUDA libraries", "pid", tgid, "err", err)
			}
		}
	}
}

// Describe sends the metric descriptions.
func (h *Host) Describe(ch chan<- *prometheus.Desc) {
	ch <- h.calls
	ch <- h.durations
	ch <- h.errs
	ch <- h.copies
	ch <- h.duty
	ch <- h.estimated
	ch <- h.estimateErr
	ch <- h.lowerBound
	ch <- h.graphInst
	ch <- h.graphDestroys
	ch <- h.graphLaunches
	ch <- h.poolFailures
	ch <- h.poolTrims
	ch <- h.poolAttrs
}

// Collect reads the kernel's aggregates of every target slot. Only calls
// a target made appear, so a series per (target, call) at most.
func (h *Host) Collect(ch chan<- prometheus.Metric) {
	for idx, name := range h.names() {
		if idx == 0 || idx >= MaxTargets {
			continue
		}
		counts, err := h.Counts(idx)
		if err != nil {
			h.Log().Warn("reading CUDA call counts", "target", name, "err", err)
			continue
		}
		for i, c := range counts {
			if c.Count == 0 {
				continue
			}
			info := calls[i]
			ch <- prometheus.MustNewConstMetric(h.calls, prometheus.CounterValue, float64(c.Count), name, info.Name)
			if !info.returns() {
				continue
			}
			ch <- prometheus.MustNewConstMetric(h.errs, prometheus.CounterValue, float64(c.Errors), name, info.Name)
			d, err := h.Durations(idx, Call(i))
			if err != nil {
				h.Log().Warn("reading CUDA call durations", "target", name, "call", info.Name, "err", err)
				continue
			}
			ch <- d.Metric(h.durations, CallBuckets, name, info.Name)
		}
		// Every graph and pool family of an API the target made such calls
		// with, zeros included, so that the ratios have both sides.
		for api, g := range graphFigures(counts) {
			if !g.used {
				continue
			}
			a := API(api).String()
			for _, m := range []struct {
				d *prometheus.Desc
				v uint64
			}{{h.graphInst, g.instantiations}, {h.graphDestroys, g.execDestroys}, {h.graphLaunches, g.launches},
				{h.poolFailures, g.poolOOM}, {h.poolTrims, g.trims}, {h.poolAttrs, g.setAttr}} {
				ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.v), name, a)
			}
		}
		h.mu.Lock()
		st := h.budgets[idx]
		h.mu.Unlock()
		if st != nil {
			h.collectBudget(ch, st.snapshot(), name)
		}
		copies, err := h.CopyBytes(idx)
		if err != nil {
			h.Log().Warn("reading CUDA copy bytes", "target", name, "err", err)
			continue
		}
		for d := HostToDevice; d < numDirections; d++ {
			if copies[d] > 0 {
				ch <- prometheus.MustNewConstMetric(h.copies, prometheus.CounterValue, float64(copies[d]), name, d.String())
			}
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectBudget sends the launch-probe budget's figures of a target: the
// estimated launches are a series of their own, never added to the counts.
func (h *Host) collectBudget(ch chan<- prometheus.Metric, lp LaunchProbes, name string) {
	if lp.Mode != "full" && lp.Mode != "sampled" {
		return
	}
	ch <- prometheus.MustNewConstMetric(h.duty, prometheus.GaugeValue, probeDuty(lp), name)
	ch <- prometheus.MustNewConstMetric(h.estimated, prometheus.CounterValue, float64(lp.EstimatedLaunches), name)
	if lp.Mode == "sampled" {
		ch <- prometheus.MustNewConstMetric(h.estimateErr, prometheus.GaugeValue, lp.EstimateError, name, lp.Method)
		ch <- prometheus.MustNewConstMetric(h.lowerBound, prometheus.GaugeValue, b2f(lp.LowerBound), name)
	}
}
