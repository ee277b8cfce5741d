package gpu

import (
	"log/slog"
	"sync"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
)

// Host is the daemon's GPU collector: NVML gauges per device, and per
// configured target (its processes summed, labelled by target name).
type Host struct {
	*Collector
	mu    sync.Mutex
	slots map[int]uint32 // pid -> target slot
}

var _ collectors.Host = (*Host)(nil)

// NewHost samples every interval (1 s when zero); names labels the slots.
func NewHost(logger *slog.Logger, interval time.Duration, names collectors.TargetNames) *Host {
	return newHost(Config{Interval: interval, Logger: logger}, names)
}

func newHost(cfg Config, names collectors.TargetNames) *Host {
	h := &Host{slots: map[int]uint32{}}
	cfg.TargetOf = func(pid int) string {
		h.mu.Lock()
		slot, ok := h.slots[pid]
		h.mu.Unlock()
		if !ok || names == nil {
			return ""
		}
		return names()[slot]
	}
	h.Collector = New(cfg)
	return h
}

// Name is "gpu".
func (h *Host) Name() string { return "gpu" }

// SetTarget follows process tgid under slot idx.
func (h *Host) SetTarget(tgid, idx uint32) error {
	h.mu.Lock()
	h.slots[int(tgid)] = idx
	h.mu.Unlock()
	h.AddPid(int(tgid))
	return nil
}

// DeleteTarget stops following tgid.
func (h *Host) DeleteTarget(tgid uint32) error {
	h.mu.Lock()
	delete(h.slots, int(tgid))
	h.mu.Unlock()
	h.RemovePid(int(tgid))
	return nil
}

// Losses is always zero: NVML is sampled, nothing is queued.
func (h *Host) Losses() (lost, decodeErrors uint64) { return 0, 0 }
