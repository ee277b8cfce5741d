package gpu

import (
	"log/slog"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
)

// Host is the daemon's GPU collector: NVML gauges per device, and per target
// process (labelled by pid) for the daemon's targets.
type Host struct {
	*Collector
}

var _ collectors.Host = (*Host)(nil)

// NewHost samples every interval (1 s when zero).
func NewHost(logger *slog.Logger, interval time.Duration) *Host {
	return &Host{New(Config{Interval: interval, Logger: logger})}
}

// Name is "gpu".
func (h *Host) Name() string { return "gpu" }

// SetTarget follows process tgid; slot idx is not used (pid labels).
func (h *Host) SetTarget(tgid, idx uint32) error {
	h.AddPid(int(tgid))
	return nil
}

// DeleteTarget stops following tgid.
func (h *Host) DeleteTarget(tgid uint32) error {
	h.RemovePid(int(tgid))
	return nil
}

// Losses is always zero: NVML is sampled, nothing is queued.
func (h *Host) Losses() (lost, decodeErrors uint64) { return 0, 0 }
