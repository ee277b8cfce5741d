// Package sched is the scheduler collector: run-queue latency and off-CPU
// time by state, from the sched_switch
// tp_btf tracepoint (bpf/sched.bpf.c), through the shared event pipeline.
package sched

import (
	"context"
	"fmt"
	"log/slog"
	"math/bits"
	"time"

	"github.com/cilium/ebpf"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/internal/hist"
)

// State is the state a thread left the CPU in.
type State uint8

// The off-CPU states, as numbered by bpf/sched.bpf.c.
const (
	Preempted State = 0 // left the CPU still runnable
	IOWait    State = 1 // uninterruptible sleep (D), usually IO
	Sleep     State = 2 // interruptible sleep (S)
	None      State = 3 // no off-CPU interval known
	NumStates       = 3
)

func (s State) String() string {
	switch s {
	case Preempted:
		return "preempted"
	case IOWait:
		return "io_wait"
	case Sleep:
		return "sleep"
	}
	return "none"
}

// Event is one switch-in of a streamed thread, as the kernel wrote it.
// Ts is CLOCK_MONOTONIC ns; the off-CPU interval is [Ts-OffcpuNs, Ts] and,
// when HasRunq is set, the run-queue interval is [Ts-RunqNs, Ts].
type Event = schedEvent

// Tracepoints are the tracepoints the collector attaches to.
var Tracepoints = []string{"sched_switch"}

// MaxTargets bounds the aggregate slots; index 0 is host-wide.
const MaxTargets = bpfutil.MaxTargets

// Fold says which switch-ins of a streamed thread are summed in the kernel
// instead of sent as records: those whose run-queue wait is under Runqueue
// and whose off-CPU stint is under OffCPU (preempted, D) or Sleep (S).
// Folded time is carried, summed, by the thread's next record, or by one
// sent once the sums are older than Flush. Correlation sees the records;
// the summaries and the in-kernel histograms count everything.
type Fold struct {
	Runqueue, OffCPU, Sleep, Flush time.Duration
}

// DefaultFold keeps every run-queue wait of 10 µs or more, every preempted
// or D stint of 50 µs or more and every sleep of 1 ms or more.
var DefaultFold = Fold{Runqueue: 10 * time.Microsecond, OffCPU: 50 * time.Microsecond, Sleep: time.Millisecond, Flush: 250 * time.Millisecond}

// NoFold sends every switch-in.
var NoFold = Fold{Flush: time.Nanosecond}

// Config configures a Collector.
type Config struct {
	// HostWide aggregates run-queue latency of every thread on the host
	// (the daemon); otherwise only of targets (a session).
	HostWide bool
	// RingBufferBytes sizes the event ring buffer (a power of two, default 4 MiB).
	RingBufferBytes uint32
	// Fold is what is folded (default DefaultFold).
	Fold *Fold
	// HostSample, with HostWide, puts one switch in HostSample (a power of
	// two; 0 or 1: every switch) into the host-wide histogram, chosen at
	// random, and scales it back: the daemon's cost on a context-switch
	// storm. Targets are always counted in full.
	HostSample uint32
	// DrainPeriod is how often the reader drains the ring (default 100 ms).
	DrainPeriod time.Duration
	// OnEvent receives each event of a streamed target from the reader
	// goroutine. It must be quick; the pointer is valid during the call only.
	OnEvent func(*Event)
	Logger  *slog.Logger
}

// Collector loads and runs the scheduler program.
type Collector struct {
	*bpfutil.Base
	cfg  Config
	objs schedObjects
}

// New returns a collector; Start loads it.
func New(cfg Config) *Collector {
	if cfg.Fold == nil {
		cfg.Fold = &DefaultFold
	}
	if cfg.HostSample&(cfg.HostSample-1) != 0 {
		cfg.HostSample = 1 << bits.Len32(cfg.HostSample-1) // the next power of two
	}
	return &Collector{cfg: cfg, Base: bpfutil.NewBase("sched", cfg.Logger)}
}

// Start loads the program and attaches it. On error it releases
// everything it took.
func (c *Collector) Start(context.Context) error {
	f := c.cfg.Fold
	return c.Load(bpfutil.Object{Spec: loadSched, Objs: &c.objs, RingBytes: c.cfg.RingBufferBytes, Consts: map[string]any{
		schedVarHostWide: c.cfg.HostWide, schedVarFoldRunqNs: uint64(f.Runqueue), schedVarFoldOffcpuNs: uint64(f.OffCPU),
		schedVarFoldSleepNs: uint64(f.Sleep), schedVarFlushNs: uint64(f.Flush), schedVarHostSampleMask: c.sampleMask(),
	}})
}

// Run drains the ring buffer into OnEvent until ctx is done (after
// delivering what the kernel wrote until then) or Close.
func (c *Collector) Run(ctx context.Context) error {
	return bpfutil.Drain(ctx, c.Base, c.cfg.DrainPeriod, c.cfg.OnEvent)
}

// SetTarget aggregates the threads of tgid under slot idx (1..MaxTargets-1)
// and, with stream, sends their events through the ring buffer.
func (c *Collector) SetTarget(tgid uint32, idx uint32, stream bool) error {
	return c.Base.SetTarget(tgid, idx, bpfutil.StreamFlags(stream))
}

func (c *Collector) readHist(m *ebpf.Map, key uint32) (hist.Log2, error) {
	var per []schedHist
	if err := m.Lookup(key, &per); err != nil {
		return hist.Log2{}, fmt.Errorf("reading %s[%d]: %w", m.String(), key, err)
	}
	out := hist.Log2{Slots: make([]uint64, len(per[0].Slots))}
	for _, h := range per {
		out.Add(hist.Log2{Slots: h.Slots[:], Count: h.Count, SumNs: h.SumNs})
	}
	return out, nil
}

// RunqueueHist is the in-kernel run-queue latency histogram of slot idx
// (0 = every thread of the host when HostWide, else every target). A
// sampled host-wide histogram is scaled back to every switch.
func (c *Collector) RunqueueHist(idx uint32) (hist.Log2, error) {
	h, err := c.readHist(c.objs.RunqHist, idx)
	if n := uint64(c.sampleMask()) + 1; err == nil && idx == 0 && c.cfg.HostWide && n > 1 {
		for i := range h.Slots {
			h.Slots[i] *= n
		}
		h.Count *= n
		h.SumNs *= n
	}
	return h, err
}

func (c *Collector) sampleMask() uint32 {
	if !c.cfg.HostWide || c.cfg.HostSample <= 1 {
		return 0
	}
	return c.cfg.HostSample - 1
}

// OffCPUHist is the in-kernel off-CPU histogram of target slot idx for state s.
func (c *Collector) OffCPUHist(idx uint32, s State) (hist.Log2, error) {
	if s >= NumStates {
		return hist.Log2{}, fmt.Errorf("no off-CPU histogram for state %v", s)
	}
	return c.readHist(c.objs.OffcpuHist, idx*NumStates+uint32(s))
}
