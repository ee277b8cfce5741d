package validate

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/bpfbench/bpfbench/perturb"
	"github.com/bpfbench/bpfbench/pipeline"
)

// DefaultPhaseRate is the request rate of a phased job (demo, validate)
// when none is given.
const DefaultPhaseRate = 4.0

// PhaseRate is the rate of a phased job: rate, or DefaultPhaseRate when it
// is not a finite positive number (the load options' default, inf, sends
// everything at once, which a phased scenario cannot split).
func PhaseRate(rate float64) float64 {
	if rate <= 0 || math.IsInf(rate, 0) || math.IsNaN(rate) {
		return DefaultPhaseRate
	}
	return rate
}

// Settle is how long a phased job (validate, demo) lets the server settle after each
// injection before the next phase begins (a third of a phase, at most
// 3 s): a phase that slowed the server leaves a queue of requests, whose
// bigger batches would otherwise be the next phase's server_compute. The
// settling time belongs to no phase.
func Settle(phase time.Duration) time.Duration { return min(phase/3, 3*time.Second) }

// settleOutside ends the current phase and waits d outside any phase (the
// server settling after an injection); false when ctx ends first.
func settleOutside(ctx context.Context, marks *pipeline.PhaseMarks, d time.Duration) bool {
	marks.End()
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// The disk injection's sizing (the demo's disk phase, validate's io row): its reads are 1 MiB with O_DIRECT; the number
// in flight is chosen so that a read waits at least ioWait behind
// them (the decode step's order of magnitude), from a calibration of the
// disk before the run, between ioMinDepth and ioMaxDepth.
const (
	IOBlock    = 1 << 20
	ioMinDepth = 8
	ioMaxDepth = 64
	ioWait     = 10 * time.Millisecond
	ioCalib    = time.Second
)

// CalibrateIO measures the disk under path before a run: how long a 1 MiB
// O_DIRECT read takes with ioMinDepth in flight, over ioCalib;
// it returns the disk injection's depth (ioDepth) and a note on it.
func CalibrateIO(ctx context.Context, path string) (int, string) {
	cctx, cancel := context.WithTimeout(ctx, ioCalib)
	cal, err := perturb.IO{Path: path, BlockSize: IOBlock, Depth: ioMinDepth}.RunProcess(cctx)
	cancel()
	switch {
	case err != nil:
		return ioMinDepth, fmt.Sprintf("the disk's calibration failed (%v), so %d in flight", err, ioMinDepth)
	case cal.Ops == 0:
		return ioMinDepth, fmt.Sprintf("the disk's calibration read nothing, so %d in flight", ioMinDepth)
	}
	d := ioDepth(time.Duration(cal.MeanLatency * 1e9))
	return d, fmt.Sprintf("the disk took %.1f ms a read with %d in flight before the run, so %d in flight", cal.MeanLatency*1e3, ioMinDepth, d)
}

// ioDepth is the disk phase's reads in flight for a disk whose reads
// took lat each with ioMinDepth in flight.
func ioDepth(lat time.Duration) int {
	if lat <= 0 {
		return ioMinDepth
	}
	d := int(math.Ceil(float64(ioMinDepth) * float64(ioWait) / float64(lat)))
	return min(max(d, ioMinDepth), ioMaxDepth)
}
