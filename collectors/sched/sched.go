// Package sched is the scheduler collector: run-queue latency and off-CPU
// time by state, from the sched_switch
// tp_btf tracepoint (bpf/sched.bpf.c), through the shared event pipeline.
// For sessions it also records who woke each target thread (sched_waking),
// who held the CPU while it was preempted, and follows the target's process
// tree (sched_process_fork/exit).
package sched

import (
	"context"
	"fmt"
	"log/slog"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

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
	// Stopped: a stop signal (SIGSTOP, SIGTSTP), a tracer (ptrace) or a
	// freezer (the cgroup freezer of a paused container) held it off
	// the CPU.
	Stopped   State = 3
	None      State = 4 // no off-CPU interval known
	NumStates       = 4
)

func (s State) String() string {
	switch s {
	case Preempted:
		return "preempted"
	case IOWait:
		return "io_wait"
	case Sleep:
		return "sleep"
	case Stopped:
		return "stopped"
	}
	return "none"
}

// Event is one record of a streamed thread, as the kernel wrote it: a
// switch-in (Kind RecSwitch), or a process of the target's tree forked or
// exited (RecFork, RecExit). Ts is CLOCK_MONOTONIC ns; the off-CPU interval
// is [Ts-OffcpuNs, Ts] and, when HasRunq is set, the run-queue interval is
// [Ts-RunqNs, Ts]. With Config.Wakers, a switch-in after a sleep (S or D)
// names its waker (WakeCtx, WakeTs, Waker*), and one after a preemption
// the thread that took the CPU (Holder*).
type Event = schedEvent

// RecKind is the kind of a record (enum rec_kind of bpf/sched.bpf.c).
type RecKind uint8

// The record kinds.
const (
	// RecSwitch is a switch-in.
	RecSwitch RecKind = 0
	// RecFork: a target forked process Tgid (now followed under the same
	// slot); WakerTgid/WakerTid/WakerComm are the parent.
	RecFork RecKind = 1
	// RecExit: the last thread of followed process Tgid exited.
	RecExit RecKind = 2
	// RecData: thread Tid read at Ts, from a unix socket, data thread
	// WakerTid (of WakerTgid) wrote into it at WakeTs (Config.DataEdges).
	RecData RecKind = 3
)

// Record flags (EVF_* of bpf/sched.bpf.c).
const (
	// FlagClient marks a thread of the load generator (SetClient).
	FlagClient = 1
	// FlagChild marks a process the kernel followed through fork.
	FlagChild = 2
)

// WakeContext is where the wakeup that ended a sleep ran (enum wake_ctx).
type WakeContext uint8

// The wakeup contexts.
const (
	WakeNone    WakeContext = 0 // no wakeup known (preempted, or Wakers off)
	WakeTask    WakeContext = 1 // in task context: the waker is Waker*
	WakeHardirq WakeContext = 2 // in a hard interrupt (hrtimer expiry, device IRQ)
	WakeSoftirq WakeContext = 3 // serving a softirq; WakeVec says which
	WakeNMI     WakeContext = 4
	WakeUnknown WakeContext = 5 // woken, but the context is unreadable here
)

func (w WakeContext) String() string {
	switch w {
	case WakeNone:
		return "none"
	case WakeTask:
		return "task"
	case WakeHardirq:
		return "hardirq"
	case WakeSoftirq:
		return "softirq"
	case WakeNMI:
		return "nmi"
	}
	return "unknown"
}

// softirqNames are the softirq vectors (enum in include/linux/interrupt.h).
var softirqNames = []string{"hi", "timer", "net_tx", "net_rx", "block", "irq_poll", "tasklet", "sched", "hrtimer", "rcu"}

// SoftirqName names a softirq vector as WakeVec carries it (vector + 1);
// "" when unknown.
func SoftirqName(vec uint8) string {
	if vec == 0 || int(vec) > len(softirqNames) {
		return ""
	}
	return softirqNames[vec-1]
}

// hardirqNames name what a hard interrupt that woke a thread was, as
// WakeVec carries it for WakeHardirq (Config.IRQTime): a device handler of
// a class, or none (an hrtimer expiry, an IPI).
var hardirqNames = []string{"block", "net", "device", "timer"}

// HardirqName names WakeVec of a WakeHardirq; "" when unknown (no
// Config.IRQTime).
func HardirqName(vec uint8) string {
	if vec == 0 || int(vec) > len(hardirqNames) {
		return ""
	}
	return hardirqNames[vec-1]
}

// Tracepoints are the tracepoints the collector attaches to: sched_switch
// always, the others when the configuration asks for them.
var Tracepoints = []string{"sched_switch", "sched_waking", "softirq_entry", "softirq_exit", "irq_handler_entry", "irq_handler_exit", "sched_process_fork", "sched_process_exit"}

// MaxTargets bounds the aggregate slots; index 0 is host-wide.
const MaxTargets = bpfutil.MaxTargets

// Fold says which switch-ins of a streamed thread are summed in the kernel
// instead of sent as records: those whose run-queue wait is under Runqueue
// and whose off-CPU stint is under OffCPU (preempted, D) or Sleep (S).
// Folded time is carried, summed, by the thread's next record, or by one
// sent once the sums are older than Flush. Correlation sees the records;
// the summaries and the in-kernel histograms count everything.
//
// With Config.Wakers, a short interval ended by a wakeup from another
// process or by a network receive is sent anyway (an edge of the critical
// path), at most one per Edge per thread.
type Fold struct {
	Runqueue, OffCPU, Sleep, Flush time.Duration
	Edge                           time.Duration
}

// DefaultFold keeps every run-queue wait of 10 µs or more, every preempted
// or D stint of 50 µs or more and every sleep of 1 ms or more.
var DefaultFold = Fold{Runqueue: 10 * time.Microsecond, OffCPU: 50 * time.Microsecond, Sleep: time.Millisecond, Flush: 250 * time.Millisecond, Edge: time.Millisecond}

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
	// random, and counts it HostSample times: the daemon's cost on a
	// context-switch storm. It is where the sampling starts; SetHostSample
	// changes it while running (the daemon follows the host's switch rate).
	// Targets' own histograms always count every switch.
	HostSample uint32
	// Wakers records, for target threads, who woke them (task, or which
	// kind of interrupt) and who held the CPU while they were preempted,
	// carried by their switch-in records (sched_waking: one more program
	// run per wakeup of the host). Sessions turn it on.
	Wakers bool
	// SoftirqVector, with Wakers, says which softirq a softirq wakeup ran
	// in (network receive, block, timer...): two more program runs per
	// softirq of the host.
	SoftirqVector bool
	// Tree follows the targets' process trees: processes they fork become
	// targets under the same slot until they exit (sched_process_fork and
	// sched_process_exit). Sessions turn it on.
	Tree bool
	// DataEdges follows data between the targets' processes and threads
	// through unix sockets: a read of what another target thread wrote
	// sends a RecData record (sk_data_ready and sock_recv_length: one
	// more program run per socket wakeup and per recvmsg of the host). Sessions
	// turn it on, for the critical path.
	DataEdges bool
	// IRQTime sums, per CPU, the time spent in block and network
	// interrupts (device handlers, by the PCI class of the device that
	// owns the vector; the BLOCK, IRQ_POLL, NET_RX and NET_TX softirqs),
	// and a target thread's record carries what of it ran on its CPU while
	// it was running (Event.IrqNs, by IRQClass): time the scheduler charges
	// to the thread when the kernel has no IRQ_TIME_ACCOUNTING. Two program
	// runs per device interrupt and per softirq of the host. Sessions turn
	// it on, for the critical path.
	IRQTime bool
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
	cfg        Config
	objs       schedObjects
	hostSample atomic.Uint32
	irqClasses map[uint32]IRQClass
}

// New returns a collector; Start loads it.
func New(cfg Config) *Collector {
	if cfg.Fold == nil {
		cfg.Fold = &DefaultFold
	}
	cfg.HostSample = pow2(cfg.HostSample)
	c := &Collector{cfg: cfg, Base: bpfutil.NewBase("sched", cfg.Logger)}
	c.hostSample.Store(c.sampleMask() + 1)
	return c
}

// Start loads the program and attaches it. On error it releases
// everything it took.
func (c *Collector) Start(context.Context) error {
	f := c.cfg.Fold
	var skip []string
	if !c.cfg.Wakers {
		skip = append(skip, "sched_waking")
	}
	vec := c.cfg.Wakers && c.cfg.SoftirqVector
	if !vec && !c.cfg.IRQTime {
		skip = append(skip, "softirq_entry", "softirq_exit")
	}
	if !c.cfg.IRQTime {
		skip = append(skip, "irq_handler_entry", "irq_handler_exit")
	}
	if !c.cfg.Tree {
		skip = append(skip, "sched_process_fork", "sched_process_exit")
	}
	if !c.cfg.DataEdges {
		skip = append(skip, "data_send", "data_recv")
	}
	if err := bpfutil.Preflight(); err != nil {
		return err // before any warning about what this kernel lacks
	}
	var delta int64
	if c.cfg.Wakers {
		var err error
		if delta, err = PreemptDelta(); err != nil && !PreemptInThreadInfo() {
			c.Log().Warn("wakeup contexts unknown on this kernel", "err", err)
		}
	}
	err := c.Load(bpfutil.Object{Spec: loadSched, Objs: &c.objs, RingBytes: c.cfg.RingBufferBytes, Skip: skip,
		Variants: Variants, Consts: map[string]any{
			schedVarHostWide: c.cfg.HostWide, schedVarFoldRunqNs: uint64(f.Runqueue), schedVarFoldOffcpuNs: uint64(f.OffCPU),
			schedVarFoldSleepNs: uint64(f.Sleep), schedVarFlushNs: uint64(f.Flush), schedVarHostSampleMask: c.sampleMask(),
			schedVarEdgeGapNs: uint64(f.Edge), schedVarWithWakers: c.cfg.Wakers, schedVarWithSoftirqVec: vec,
			schedVarWithTree: c.cfg.Tree, schedVarWithDataEdges: c.cfg.DataEdges, schedVarPreemptDelta: delta,
			schedVarWithIrqTime: c.cfg.IRQTime,
		}})
	if err != nil || !c.cfg.IRQTime {
		return err
	}
	if c.objs.IrqHandlerEntry == nil || c.objs.IrqHandlerExit == nil {
		c.Log().Warn("no irq_handler_entry/exit tracepoints: device interrupt time inside the target's running time reads as its compute")
	}
	classes, err := IRQClasses(sysRoot)
	if err != nil {
		c.Log().Warn("device interrupts unclassified: their time inside the target's running time reads as its compute (softirqs are still counted)", "err", err)
	}
	c.irqClasses = classes
	for irq, cls := range classes {
		if err := c.objs.IrqClasses.Put(irq, uint32(cls)+1); err != nil {
			c.Close()
			return fmt.Errorf("classifying interrupt %d: %w", irq, err)
		}
	}
	return nil
}

// IRQClassesOf is what Start classified: device interrupt number -> class.
func (c *Collector) IRQClassesOf() map[uint32]IRQClass { return c.irqClasses }

// Variants are the sched programs loaded in place of others on older
// kernels: sched_switch without prev_state before 5.18; the unix data
// edges' sk_data_ready and sock_recv_length (6.1 has neither) traced at
// sock_def_readable's entry and the unix sockets' recvmsg's return.
var Variants = map[string]bpfutil.Variant{
	"sched_switch_nostate": {Of: "sched_switch", Args: 4},
	"data_send_fentry":     {Of: "data_send"},
	"data_recv_stream":     {Of: "data_recv"},
	"data_recv_dgram":      {Of: "data_recv"},
}

var (
	preemptOnce  sync.Once
	preemptDelta int64
	preemptErr   error
)

// PreemptDelta is the distance from a CPU's run queue to its preempt
// count, both per-CPU variables (runqueues and __preempt_count, x86-64):
// the difference of their offsets in the kernel's per-CPU section, read
// from its BTF. The kernel reaches its CPU's run queue through the running
// task, so it reads the preempt count, and so the context of a wakeup,
// without a typed per-CPU ksym.
func PreemptDelta() (int64, error) {
	preemptOnce.Do(func() {
		spec, err := bpfutil.KernelBTF()
		if err != nil {
			preemptErr = fmt.Errorf("reading kernel BTF: %w", err)
			return
		}
		var ds *btf.Datasec
		if err := spec.TypeByName(".data..percpu", &ds); err != nil {
			preemptErr = fmt.Errorf("finding the per-CPU section in kernel BTF: %w", err)
			return
		}
		pc, rq, err := preemptOffsets(ds)
		if err != nil {
			preemptErr = err
			return
		}
		preemptDelta = pc - rq
	})
	return preemptDelta, preemptErr
}

// PreemptInThreadInfo reports whether the kernel keeps a task's preempt
// count in its thread_info (arm64, riscv and most architectures but
// x86-64), where the sched programs read it from the running task (CO-RE)
// and need no PreemptDelta.
func PreemptInThreadInfo() bool {
	spec, err := bpfutil.KernelBTF()
	if err != nil {
		return false
	}
	var ti *btf.Struct
	if err := spec.TypeByName("thread_info", &ti); err != nil {
		return false
	}
	_, ok := memberOffset(ti, "preempt_count")
	return ok
}

// preemptOffsets finds the per-CPU offsets of the preempt count and the
// run queue. x86-64 keeps the preempt count in its own per-CPU variable,
// __preempt_count, except from 6.2 to 6.14, where it is a field of the
// per-CPU struct pcpu_hot.
func preemptOffsets(ds *btf.Datasec) (pc, rq int64, err error) {
	var hasPC, hasRQ bool
	for _, v := range ds.Vars {
		vr, ok := v.Type.(*btf.Var)
		if !ok {
			continue
		}
		switch vr.Name {
		case "runqueues":
			rq, hasRQ = int64(v.Offset), true
		case "__preempt_count":
			pc, hasPC = int64(v.Offset), true
		case "pcpu_hot":
			if hasPC {
				continue
			}
			if off, ok := memberOffset(vr.Type, "preempt_count"); ok {
				pc, hasPC = int64(v.Offset)+off, true
			}
		}
	}
	if !hasPC || !hasRQ {
		return 0, 0, fmt.Errorf("the kernel's per-CPU section has no runqueues, or no preempt count (__preempt_count, pcpu_hot.preempt_count: x86-64 only)")
	}
	return pc, rq, nil
}

// memberOffset is the byte offset of the member name in the struct or
// union t, looked for in its anonymous members too (pcpu_hot nests its
// fields in an anonymous struct inside an anonymous union).
func memberOffset(t btf.Type, name string) (int64, bool) {
	var members []btf.Member
	switch c := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		members = c.Members
	case *btf.Union:
		members = c.Members
	default:
		return 0, false
	}
	for _, m := range members {
		if m.Name == name {
			return int64(m.Offset.Bytes()), true
		}
		if m.Name == "" {
			if off, ok := memberOffset(m.Type, name); ok {
				return int64(m.Offset.Bytes()) + off, true
			}
		}
	}
	return 0, false
}

// SetClient follows the threads of tgid, the load generator, under slot
// idx: their switch-ins are streamed like a target's, flagged FlagClient.
func (c *Collector) SetClient(tgid, idx uint32) error {
	return c.Base.SetTarget(tgid, idx, bpfutil.TargetStream|bpfutil.TargetClient)
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
// sampled host-wide histogram is scaled in the kernel: each sampled switch
// counts as many as the mask in force when it was taken stood for.
// Without HostWide the kernel keeps only the target slots (a switch-in
// costs two cache lines less) and slot 0 is their sum, read here.
func (c *Collector) RunqueueHist(idx uint32) (hist.Log2, error) {
	if idx != 0 || c.cfg.HostWide {
		return c.readHist(c.objs.RunqHist, idx)
	}
	var all hist.Log2
	for i := uint32(1); i < bpfutil.MaxTargets; i++ {
		h, err := c.readHist(c.objs.RunqHist, i)
		if err != nil {
			return hist.Log2{}, err
		}
		all.Add(h)
	}
	return all, nil
}

// SetHostSample makes the host-wide histogram take one switch in n from
// now on (a power of two; rounded up; 0 or 1: every switch). It is safe
// while the program runs; without HostWide it does nothing.
func (c *Collector) SetHostSample(n uint32) error {
	if !c.cfg.HostWide || c.objs.HostSampleMask == nil {
		return nil
	}
	n = pow2(n)
	if err := c.objs.HostSampleMask.Set(max(n, 1) - 1); err != nil {
		return fmt.Errorf("setting the host-wide sampling: %w", err)
	}
	c.hostSample.Store(max(n, 1))
	return nil
}

// HostSample is the host-wide sampling in force: one switch in this many.
func (c *Collector) HostSample() uint32 { return max(c.hostSample.Load(), 1) }

func pow2(n uint32) uint32 {
	if n&(n-1) != 0 {
		return 1 << bits.Len32(n-1)
	}
	return n
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

// Probe loads and attaches the collector's programs as the commands do
// (host-wide as the daemon, else as a session: every optional part on),
// then releases them: `bpfbench check` runs it, so that it cannot say ok
// where a command's load fails.
func Probe(hostWide bool) (bpfutil.LoadReport, error) {
	c := New(Config{HostWide: hostWide, HostSample: 1, Wakers: true, SoftirqVector: true, Tree: !hostWide,
		DataEdges: !hostWide, IRQTime: !hostWide, RingBufferBytes: 1 << 16, Logger: slog.New(slog.DiscardHandler)})
	if err := c.Start(context.Background()); err != nil {
		return bpfutil.LoadReport{}, err
	}
	defer c.Close()
	return c.Report(), nil
}
