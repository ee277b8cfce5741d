package gpu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
)

// Section is the GPU part of a session on one process.
type Section struct {
	*Collector
}

var _ collectors.Section = (*Section)(nil)

// SessionInterval is the NVML sampling period of a session: finer than the
// daemon's second, so samples can be lined up with token intervals.
const SessionInterval = 250 * time.Millisecond

// NewSection samples every device and opts.Pid's use of them every
// SessionInterval, or opts.Interval when that is finer.
func NewSection(opts collectors.Options) *Section {
	iv := SessionInterval
	if opts.Interval > 0 && opts.Interval < iv {
		iv = opts.Interval
	}
	return &Section{New(Config{Interval: iv, Pids: []int{opts.Pid}, Logger: opts.Logger})}
}

// Name is "gpu".
func (s *Section) Name() string { return "gpu" }

// Start starts NVML. Without it the error wraps both
// collectors.ErrNotApplicable and ErrNoNVML: the session reports it and
// carries on.
func (s *Section) Start(ctx context.Context) error {
	err := s.Collector.Start(ctx)
	if errors.Is(err, ErrNoNVML) {
		return fmt.Errorf("%w: %w", collectors.ErrNotApplicable, err)
	}
	return err
}

// Summary is the session's `gpu` JSON section.
func (s *Section) Summary() any { return s.Collector.Summary() }

// Lost is always 0: NVML samples are read, not streamed.
func (s *Section) Lost() uint64 { return 0 }

// WriteInterval writes one line per device from its newest sample.
func (s *Section) WriteInterval(w io.Writer) {
	for _, x := range s.Latest() {
		fmt.Fprintf(w, "gpu%-2d util=%s mem=%s/%s sm=%s power=%s temp=%s pcie tx=%s rx=%s%s\n",
			x.Device, pct(&x, FieldGPUUtilization, x.GPUUtilization),
			bytesOr(&x, FieldMemoryUsed, x.MemoryUsedBytes), bytesOr(&x, FieldMemoryTotal, x.MemoryTotalBytes),
			unitOr(&x, FieldSMClock, x.SMClockHz/1e6, "MHz"), unitOr(&x, FieldPower, x.PowerWatts, "W"),
			unitOr(&x, FieldTemperature, x.TemperatureCelsius, "C"),
			bytesOr(&x, FieldPCIeTx, uint64(x.PCIeTxBytesPerSecond)), bytesOr(&x, FieldPCIeRx, uint64(x.PCIeRxBytesPerSecond)),
			processText(x.Processes))
	}
}

// WriteSummary writes the end-of-session table.
func (s *Section) WriteSummary(w io.Writer) {
	sum := s.Collector.Summary()
	fmt.Fprintln(w, "GPU (NVML)")
	if !sum.Available {
		fmt.Fprintf(w, "  %s\n", sum.Error)
		return
	}
	for _, d := range sum.Devices {
		fmt.Fprintf(w, "  gpu%d %s: %d samples, utilization mean %s max %s, power mean %s max %s\n",
			d.Index, d.Name, d.Samples, statPct(d.GPUUtilization, false), statPct(d.GPUUtilization, true),
			statUnit(d.PowerWatts, false, "W"), statUnit(d.PowerWatts, true, "W"))
		for _, r := range slices.Sorted(maps.Keys(d.ClockEventReasons)) {
			fmt.Fprintf(w, "    clock event %s in %.0f%% of samples\n", r, d.ClockEventReasons[r]*100)
		}
	}
	for _, p := range sum.Processes {
		mem := "-"
		if p.MemoryUsedBytes != nil {
			mem = fmt.Sprintf("%.0fMiB max", p.MemoryUsedBytes.Max/(1<<20))
		}
		fmt.Fprintf(w, "  pid %d on gpu%d: SM %s mean, memory %s\n", p.Pid, p.GPU, statPct(p.SMUtilization, false), mem)
	}
}

func pct(s *Sample, f Field, v float64) string {
	if !s.Has(f) {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", v*100)
}

func unitOr(s *Sample, f Field, v float64, unit string) string {
	if !s.Has(f) {
		return "-"
	}
	return fmt.Sprintf("%.0f%s", v, unit)
}

func bytesOr(s *Sample, f Field, v uint64) string {
	if !s.Has(f) {
		return "-"
	}
	return fmt.Sprintf("%.1fGiB", float64(v)/(1<<30))
}

func statPct(st *Stat, max bool) string {
	if st == nil {
		return "-"
	}
	if max {
		return fmt.Sprintf("%.0f%%", st.Max*100)
	}
	return fmt.Sprintf("%.0f%%", st.Mean*100)
}

func statUnit(st *Stat, max bool, unit string) string {
	if st == nil {
		return "-"
	}
	if max {
		return fmt.Sprintf("%.0f%s", st.Max, unit)
	}
	return fmt.Sprintf("%.0f%s", st.Mean, unit)
}

func processText(ps []ProcessSample) string {
	out := ""
	for _, p := range ps {
		out += fmt.Sprintf("  pid %d", p.Pid)
		if p.Has(ProcUtilization) {
			out += fmt.Sprintf(" sm=%.0f%%", p.SMUtilization*100)
		}
		if p.Has(ProcMemory) {
			out += fmt.Sprintf(" mem=%.1fGiB", float64(p.MemoryUsedBytes)/(1<<30))
		}
	}
	return out
}

// Counters are the session's samples as counter tracks, in time order per device.
func (s *Section) Counters() []collectors.Counter {
	var out []collectors.Counter
	for _, x := range s.Samples() {
		name := fmt.Sprintf("gpu%d", x.Device)
		add := func(f Field, track, unit string, v float64) {
			if x.Has(f) {
				out = append(out, collectors.Counter{Track: name + " " + track, Unit: unit, TimeNs: x.TimeNs, Value: v})
			}
		}
		add(FieldGPUUtilization, "utilization", "ratio", x.GPUUtilization)
		add(FieldMemoryUsed, "memory used", "bytes", float64(x.MemoryUsedBytes))
		add(FieldPower, "power", "watts", x.PowerWatts)
		add(FieldSMClock, "SM clock", "hertz", x.SMClockHz)
	}
	return out
}
