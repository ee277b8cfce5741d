package blockio

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/hist"
)

// Host is the daemon's block IO collector: latency, queue and service time
// histograms and bytes per device and op for the whole host, and per
// configured target and op, aggregated in the kernel and read at scrape
// time.
//
// Cardinality: host series are devices x ops (5 ops: read, write, flush,
// discard, other); target series are targets x ops (targets are summed
// over devices). No label is per request or per process beyond the
// configured targets.
type Host struct {
	*Collector
	names collectors.TargetNames

	latency, queue, service, bytes     *prometheus.Desc
	tLatency, tQueue, tService, tBytes *prometheus.Desc
}

var _ collectors.Host = (*Host)(nil)

// NewHost returns the daemon's block IO collector; names labels the slots.
func NewHost(logger *slog.Logger, names collectors.TargetNames) *Host {
	c := New(Config{HostWide: true, Logger: logger})
	dev := []string{"device", "op"}
	tgt := []string{"target", "op"}
	return &Host{
		Collector: c,
		names:     names,
		latency: prometheus.NewDesc("bpfbench_blockio_latency_seconds",
			"Block request latency (queue + service time: insert or issue to completion) per device and op.", dev, nil),
		queue: prometheus.NewDesc("bpfbench_blockio_queue_seconds",
			"Time block requests waited in the IO scheduler or software queue (insert to issue) per device and op.", dev, nil),
		service: prometheus.NewDesc("bpfbench_blockio_service_seconds",
			"Time block requests spent in the driver and device (issue to completion) per device and op.", dev, nil),
		bytes: prometheus.NewDesc("bpfbench_blockio_bytes_total",
			"Bytes completed by block requests per device and op.", dev, nil),
		tLatency: prometheus.NewDesc("bpfbench_target_blockio_latency_seconds",
			"Block request latency (queue + service time) of a target's requests per op, over all devices.", tgt, nil),
		tQueue: prometheus.NewDesc("bpfbench_target_blockio_queue_seconds",
			"Queue time (insert to issue) of a target's block requests per op, over all devices.", tgt, nil),
		tService: prometheus.NewDesc("bpfbench_target_blockio_service_seconds",
			"Service time (issue to completion) of a target's block requests per op, over all devices.", tgt, nil),
		tBytes: prometheus.NewDesc("bpfbench_target_blockio_bytes_total",
			"Bytes completed by a target's block requests per op, over all devices.", tgt, nil),
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
	for _, d := range []*prometheus.Desc{h.latency, h.queue, h.service, h.bytes, h.tLatency, h.tQueue, h.tService, h.tBytes} {
		ch <- d
	}
}

// The classic buckets (docs/daemon.md, "Histogram buckets"): every second power
// of two of ns over the range that matters; the native histogram keeps
// every kernel slot.
var (
	// LatencyBuckets, of latency and service time: 8.2 µs to 8.6 s.
	LatencyBuckets = hist.Classic{From: 13, To: 33, Step: 2}
	// QueueBuckets: 1.02 µs to 4.3 s (a request often waits no scheduler).
	QueueBuckets = hist.Classic{From: 10, To: 32, Step: 2}
)

type targetOp struct {
	target uint32
	op     Op
}

// Collect reads the kernel's aggregates.
func (h *Host) Collect(ch chan<- prometheus.Metric) {
	stats, err := h.Stats()
	if err != nil {
		h.Log().Warn("reading block IO aggregates", "err", err)
		return
	}
	names := h.names()
	perTarget := map[targetOp]*Stats{}
	for i := range stats {
		s := &stats[i]
		if s.Target == 0 {
			labels := []string{DevName(s.Dev), s.Op.String()}
			ch <- s.Latency.Metric(h.latency, LatencyBuckets, labels...)
			ch <- s.Queue.Metric(h.queue, QueueBuckets, labels...)
			ch <- s.Service.Metric(h.service, LatencyBuckets, labels...)
			ch <- prometheus.MustNewConstMetric(h.bytes, prometheus.CounterValue, float64(s.Bytes), labels...)
			continue
		}
		if _, ok := names[s.Target]; !ok {
			continue
		}
		k := targetOp{s.Target, s.Op}
		t := perTarget[k]
		if t == nil {
			t = &Stats{Target: s.Target, Op: s.Op}
			perTarget[k] = t
		}
		t.Bytes += s.Bytes
		t.Count += s.Count
		t.Latency.Add(s.Latency)
		t.Queue.Add(s.Queue)
		t.Service.Add(s.Service)
	}
	for k, t := range perTarget {
		labels := []string{names[k.target], k.op.String()}
		ch <- t.Latency.Metric(h.tLatency, LatencyBuckets, labels...)
		ch <- t.Queue.Metric(h.tQueue, QueueBuckets, labels...)
		ch <- t.Service.Metric(h.tService, LatencyBuckets, labels...)
		ch <- prometheus.MustNewConstMetric(h.tBytes, prometheus.CounterValue, float64(t.Bytes), labels...)
	}
}
