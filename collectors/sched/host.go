package sched

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/hist"
)

// Host is the daemon's scheduler collector: host-wide run-queue latency and
// per-target run-queue latency and off-CPU time, aggregated in the kernel
// and read at scrape time.
type Host struct {
	*Collector
	names collectors.TargetNames

	runq   *prometheus.Desc
	offcpu *prometheus.Desc
}

var _ collectors.Host = (*Host)(nil)

// DefaultHostSample is the daemon's host-wide sampling: one context switch
// in 8 goes into the host-wide run-queue histogram (scaled back), which
// keeps a context-switch storm within budget; targets count every switch.
var DefaultHostSample uint32 = 8

// NewHost returns the daemon's scheduler collector; names labels the slots.
func NewHost(logger *slog.Logger, names collectors.TargetNames) *Host {
	c := New(Config{HostWide: true, HostSample: DefaultHostSample, Logger: logger})
	return &Host{
		Collector: c,
		names:     names,
		runq: prometheus.NewDesc("bpfbench_sched_runqueue_latency_seconds",
			"Time threads spent runnable before getting a CPU (wakeup or preemption to switch-in). target=\"host\" covers every thread of the host.",
			[]string{"target"}, nil),
		offcpu: prometheus.NewDesc("bpfbench_sched_offcpu_duration_seconds",
			"Off-CPU intervals of a target's threads by the state they left the CPU in (preempted, io_wait = uninterruptible, sleep = interruptible).",
			[]string{"target", "state"}, nil),
	}
}

// Run has nothing to stream in the daemon; it waits for ctx.
func (h *Host) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// SetTarget aggregates tgid under slot idx, without streaming.
func (h *Host) SetTarget(tgid, idx uint32) error { return h.Collector.SetTarget(tgid, idx, false) }

// Describe sends the metric descriptions.
func (h *Host) Describe(ch chan<- *prometheus.Desc) {
	ch <- h.runq
	ch <- h.offcpu
}

func (h *Host) histMetric(desc *prometheus.Desc, hh hist.Log2, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstHistogram(desc, hh.Count, float64(hh.SumNs)/1e9, hh.Buckets(), labels...)
}

// Collect reads the kernel's aggregates.
func (h *Host) Collect(ch chan<- prometheus.Metric) {
	names := h.names()
	for idx, name := range names {
		if idx >= MaxTargets {
			continue
		}
		rq, err := h.RunqueueHist(idx)
		if err != nil {
			h.Log().Warn("reading run-queue histogram", "target", name, "err", err)
			continue
		}
		ch <- h.histMetric(h.runq, rq, name)
		if idx == 0 {
			continue
		}
		for s := State(0); s < NumStates; s++ {
			oh, err := h.OffCPUHist(idx, s)
			if err != nil {
				h.Log().Warn("reading off-CPU histogram", "target", name, "err", err)
				continue
			}
			ch <- h.histMetric(h.offcpu, oh, name, s.String())
		}
	}
}
