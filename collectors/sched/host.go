package sched

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"strconv"
	"time"

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

// DefaultHostSample is where the daemon's host-wide sampling starts: one
// context switch in 8 goes into the host-wide run-queue histogram (counted
// 8 times); targets count every switch. From then on Run follows the
// host's switch rate (HostSamplesPerSecond).
var DefaultHostSample uint32 = 8

// HostSamplesPerSecond is about how many context switches a second the
// daemon's host-wide run-queue histogram takes: Run sets the sampling to
// the host's switch rate over this (a power of two, at most
// MaxHostSample), so a context-switch storm costs the early return of
// almost every switch and a quiet host is counted in full.
var HostSamplesPerSecond = 2000.0

// MaxHostSample bounds the host-wide sampling (one switch in this many).
const MaxHostSample = 1024

// hostSampleFor is the sampling that takes about HostSamplesPerSecond of
// rate switches a second.
func hostSampleFor(rate float64) uint32 {
	n := rate / HostSamplesPerSecond
	if !(n > 1) {
		return 1
	}
	if n >= MaxHostSample {
		return MaxHostSample
	}
	return pow2(uint32(math.Ceil(n)))
}

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

// Run has nothing to stream in the daemon: until ctx ends, it reads the
// host's context-switch count (/proc/stat ctxt, free) every second and
// sets the host-wide sampling to that rate (hostSampleFor).
func (h *Host) Run(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last, lastT, err := procCtxt()
	if err != nil {
		h.Log().Warn("the host's context-switch rate is unknown; host-wide sampling stays fixed", "sample", h.HostSample(), "err", err)
		<-ctx.Done()
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, now, err := procCtxt()
		if err != nil || n < last {
			continue
		}
		rate := float64(n-last) / now.Sub(lastT).Seconds()
		last, lastT = n, now
		if s := hostSampleFor(rate); s != h.HostSample() {
			if err := h.SetHostSample(s); err != nil {
				h.Log().Warn("setting the host-wide sampling", "err", err)
				continue
			}
			h.Log().Debug("host-wide run-queue sampling", "switches_per_s", math.Round(rate), "one_in", s)
		}
	}
}

// procCtxt reads the host's context switches since boot from /proc/stat.
func procCtxt() (uint64, time.Time, error) {
	b, err := os.ReadFile("/proc/stat")
	now := time.Now()
	if err != nil {
		return 0, now, err
	}
	return parseCtxt(b, now)
}

func parseCtxt(b []byte, now time.Time) (uint64, time.Time, error) {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("ctxt ")); ok {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			return n, now, err
		}
	}
	return 0, now, errors.New("/proc/stat has no ctxt line")
}

// SetTarget aggregates tgid under slot idx, without streaming.
func (h *Host) SetTarget(tgid, idx uint32) error { return h.Collector.SetTarget(tgid, idx, false) }

// Describe sends the metric descriptions.
func (h *Host) Describe(ch chan<- *prometheus.Desc) {
	ch <- h.runq
	ch <- h.offcpu
}

// The classic buckets (docs/daemon.md, "Histogram buckets"): every second power
// of two of ns over the range that matters; the native histogram keeps
// every kernel slot.
var (
	// RunqueueBuckets: 1.02 µs to 1.07 s.
	RunqueueBuckets = hist.Classic{From: 10, To: 30, Step: 2}
	// OffCPUBuckets: 8.2 µs to 137 s.
	OffCPUBuckets = hist.Classic{From: 13, To: 37, Step: 2}
)

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
		ch <- rq.Metric(h.runq, RunqueueBuckets, name)
		if idx == 0 {
			continue
		}
		for s := State(0); s < NumStates; s++ {
			oh, err := h.OffCPUHist(idx, s)
			if err != nil {
				h.Log().Warn("reading off-CPU histogram", "target", name, "err", err)
				continue
			}
			ch <- oh.Metric(h.offcpu, OffCPUBuckets, name, s.String())
		}
	}
}
