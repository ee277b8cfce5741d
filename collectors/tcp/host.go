package tcp

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/hist"
)

// Host is the daemon's TCP collector: retransmits, zero-window time and
// episodes, receive-queue drops, loss-recovery episodes and time, and an
// srtt histogram per configured target, aggregated in the kernel and read
// at scrape time; target="host" (slot 0) carries the retransmits, srtt,
// receive-queue drops and loss-recovery episodes of every socket of the
// host.
//
// Cardinality: one series per configured target (at most MaxTargets-1)
// plus the host, per metric. There is deliberately no per-connection
// label (address, port, cookie): connections come and go by the
// thousand; the per-connection view is the session's (`bpfbench attach`).
type Host struct {
	*Collector
	names collectors.TargetNames

	retrans, zwSeconds, zwEpisodes, srtt *prometheus.Desc
	rcvqFull, lossEpisodes, lossSeconds  *prometheus.Desc
}

var _ collectors.Host = (*Host)(nil)

// SrttBuckets are srtt's classic buckets (docs/daemon.md, "Histogram buckets"):
// 1.02 µs (loopback) to 4.3 s, every second power of two of ns; the native
// histogram keeps every kernel slot.
var SrttBuckets = hist.Classic{From: 10, To: 32, Step: 2}

// NewHost returns the daemon's TCP collector; names labels the slots.
func NewHost(logger *slog.Logger, names collectors.TargetNames) *Host {
	c := New(Config{HostWide: true, Logger: logger})
	l := []string{"target"}
	return &Host{
		Collector: c,
		names:     names,
		retrans: prometheus.NewDesc("bpfbench_tcp_retransmits_total",
			"TCP segments retransmitted by a target's connections (target=\"host\": every socket of the host).", l, nil),
		zwSeconds: prometheus.NewDesc("bpfbench_tcp_zero_window_seconds_total",
			"Time a target's connections spent with the peer advertising a zero receive window (closed episodes).", l, nil),
		zwEpisodes: prometheus.NewDesc("bpfbench_tcp_zero_window_episodes_total",
			"Zero-window episodes of a target's connections (the peer's window went to zero).", l, nil),
		srtt: prometheus.NewDesc("bpfbench_tcp_srtt_seconds",
			"Smoothed round-trip time of a target's connections, sampled on every segment received (target=\"host\": every socket).", l, nil),
		rcvqFull: prometheus.NewDesc("bpfbench_tcp_rcvqueue_full_total",
			"Segments a target's connections dropped because their receive queue was full: the target did not read fast enough (target=\"host\": every TCP socket).", l, nil),
		lossEpisodes: prometheus.NewDesc("bpfbench_tcp_loss_recovery_episodes_total",
			"Entries of a target's connections into the Recovery or Loss congestion state (target=\"host\": every socket).", l, nil),
		lossSeconds: prometheus.NewDesc("bpfbench_tcp_loss_recovery_seconds_total",
			"Time a target's connections spent in the Recovery or Loss congestion state (closed episodes).", l, nil),
	}
}

// SetTarget follows tgid's sockets under slot idx, without streaming.
func (h *Host) SetTarget(tgid, idx uint32) error { return h.Collector.SetTarget(tgid, idx, false) }

// Run refreshes the targets' sockets until ctx is done.
func (h *Host) Run(ctx context.Context) error { return h.Collector.Run(ctx) }

// Describe sends the metric descriptions.
func (h *Host) Describe(ch chan<- *prometheus.Desc) {
	ch <- h.retrans
	ch <- h.zwSeconds
	ch <- h.zwEpisodes
	ch <- h.srtt
	ch <- h.rcvqFull
	ch <- h.lossEpisodes
	ch <- h.lossSeconds
}

// Collect reads the kernel's aggregates.
func (h *Host) Collect(ch chan<- prometheus.Metric) {
	for idx, name := range h.names() {
		if idx >= MaxTargets {
			continue
		}
		s, err := h.Stats(idx)
		if err != nil {
			h.Log().Warn("reading tcp aggregates", "target", name, "err", err)
			continue
		}
		ch <- prometheus.MustNewConstMetric(h.retrans, prometheus.CounterValue, float64(s.Retransmits), name)
		ch <- s.Srtt.Metric(h.srtt, SrttBuckets, name)
		ch <- prometheus.MustNewConstMetric(h.rcvqFull, prometheus.CounterValue, float64(s.RcvqueueFull), name)
		ch <- prometheus.MustNewConstMetric(h.lossEpisodes, prometheus.CounterValue, float64(s.LossEpisodes), name)
		if idx == 0 {
			continue
		}
		ch <- prometheus.MustNewConstMetric(h.zwSeconds, prometheus.CounterValue, float64(s.ZeroWindowNs)/1e9, name)
		ch <- prometheus.MustNewConstMetric(h.zwEpisodes, prometheus.CounterValue, float64(s.ZeroWindowEpisodes), name)
		ch <- prometheus.MustNewConstMetric(h.lossSeconds, prometheus.CounterValue, float64(s.LossNs)/1e9, name)
	}
}
