package sched

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"text/tabwriter"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/collectors/bpfutil"
)

// Section is the scheduler's part of a session on one process.
type Section struct {
	*Collector
	pid      int
	client   bool
	total    *Aggregator
	interval *Aggregator
}

var _ collectors.Section = (*Section)(nil)

// ClientSlot is the aggregate slot of the load generator's own threads in
// a session (the target is slot 1).
const ClientSlot = 2

// NewSection follows every thread of opts.Pid and of the processes it
// forks, streaming their events with their wakers. A session that runs its
// own load (a Recorder: `bpfbench run`) also follows this process, the load
// generator, as the client.
func NewSection(opts collectors.Options) *Section {
	s := &Section{pid: opts.Pid, total: NewAggregator(), interval: NewAggregator(), client: opts.Recorder != nil && !opts.Live}
	var comms bpfutil.Comms
	s.Collector = New(Config{
		Logger: opts.Logger,
		Wakers: true, SoftirqVector: true, Tree: true, DataEdges: opts.Recorder != nil, IRQTime: true,
		OnEvent: func(e *Event) {
			s.total.Add(e)
			s.interval.Add(e)
			if opts.Recorder != nil {
				record(opts.Recorder, e, &comms)
			}
		},
	})
	return s
}

// Start loads the programs and targets the process.
func (s *Section) Start(ctx context.Context) error {
	if err := s.Collector.Start(ctx); err != nil {
		return err
	}
	if err := s.SetTarget(uint32(s.pid), 1, true); err != nil {
		s.Close()
		return err
	}
	if s.client && s.pid != os.Getpid() {
		if err := s.SetClient(uint32(os.Getpid()), ClientSlot); err != nil {
			s.Close()
			return err
		}
	}
	return nil
}

// Summary is the session's `sched` JSON section.
func (s *Section) Summary() any {
	sum := s.total.Summary(10)
	if ps, err := s.PipeStats(); err == nil {
		sum.UnmatchedData = ps.Unmatched
	}
	return sum
}

// WriteInterval writes one line for the interval that just ended.
func (s *Section) WriteInterval(w io.Writer) {
	sum := s.interval.Summary(1)
	s.interval.Reset()
	top := "-"
	if len(sum.Threads) > 0 && sum.Threads[0].RunqueueSeconds > 0 {
		t := sum.Threads[0]
		top = fmt.Sprintf("%s/%d %s", t.Comm, t.Tid, bpfutil.Dur(t.RunqueueSeconds))
	}
	l := sum.RunqueueLatency
	stopped := ""
	if sum.OffCPU.Stopped > 0 {
		stopped = "  STOPPED " + bpfutil.Dur(sum.OffCPU.Stopped)
	}
	fmt.Fprintf(w, "sched  runq n=%-6d p50=%-8s p99=%-8s max=%-8s sum=%-8s  offcpu preempt=%-8s io=%-8s sleep=%-8s  top-runq %s%s\n",
		l.Count, bpfutil.Dur(l.P50), bpfutil.Dur(l.P99), bpfutil.Dur(l.Max), bpfutil.Dur(l.Sum),
		bpfutil.Dur(sum.OffCPU.Preempted), bpfutil.Dur(sum.OffCPU.IOWait), bpfutil.Dur(sum.OffCPU.Sleep), top, stopped)
}

// WriteSummary writes the end-of-session table.
func (s *Section) WriteSummary(w io.Writer) {
	sum := s.total.Summary(10)
	l := sum.RunqueueLatency
	fmt.Fprintf(w, "Scheduler\n  run-queue latency: %d waits, p50 %s, p99 %s, max %s, total %s\n",
		l.Count, bpfutil.Dur(l.P50), bpfutil.Dur(l.P99), bpfutil.Dur(l.Max), bpfutil.Dur(l.Sum))
	fmt.Fprintf(w, "  off-CPU: preempted %s, io_wait (D) %s, sleep (S) %s",
		bpfutil.Dur(sum.OffCPU.Preempted), bpfutil.Dur(sum.OffCPU.IOWait), bpfutil.Dur(sum.OffCPU.Sleep))
	if sum.OffCPU.Stopped > 0 {
		fmt.Fprintf(w, ", stopped (a stop signal, a tracer or a freezer) %s", bpfutil.Dur(sum.OffCPU.Stopped))
	}
	fmt.Fprintln(w)
	if wk := sum.Wakeups; wk != nil {
		hard := strconv.FormatUint(wk.Hardirq, 10)
		if len(wk.HardirqKinds) > 0 {
			hard += fmt.Sprintf(" %v", wk.HardirqKinds)
		}
		fmt.Fprintf(w, "  wakeups recorded: same process %d, other process %d, hardirq %s, softirq %v, nmi %d, unknown %d; preemptions with holder %d\n",
			wk.SameProcess, wk.OtherProcess, hard, wk.Softirq, wk.NMI, wk.Unknown, wk.Preempted)
	}
	if i := sum.Interrupts; i != nil {
		fmt.Fprintf(w, "  interrupts while its threads ran (their CPU time, not theirs): block %s, network %s\n",
			bpfutil.Dur(i.Block), bpfutil.Dur(i.Net))
	}
	if sum.Forks+sum.Exits+sum.ClientRecords > 0 {
		fmt.Fprintf(w, "  process tree: %d forks, %d exits followed; client records %d\n", sum.Forks, sum.Exits, sum.ClientRecords)
	}
	if len(sum.Threads) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  tid\tcomm\trunq waits\trunq total\tpreempted\tio_wait\tsleep\t")
	for _, t := range sum.Threads {
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\t%s\t%s\t%s\t\n", t.Tid, t.Comm, t.RunqueueCount,
			bpfutil.Dur(t.RunqueueSeconds), bpfutil.Dur(t.OffCPU.Preempted), bpfutil.Dur(t.OffCPU.IOWait), bpfutil.Dur(t.OffCPU.Sleep))
	}
	tw.Flush()
}

// irqTimeAccounting is whether the kernel charges interrupt time apart
// from the task it interrupted (CONFIG_IRQ_TIME_ACCOUNTING, read once
// from /proc/config.gz or /boot/config-RELEASE; unknown: no).
var irqTimeAccounting = sync.OnceValue(func() bool { return kernelConfig("CONFIG_IRQ_TIME_ACCOUNTING") == "y" })

// stealOf is a switch-in record's time on the CPU that the scheduler did
// not charge the thread, less the block and network interrupts it holds
// where the kernel charges interrupts apart (they are counted there).
func stealOf(e *Event) int64 {
	u := int64(e.UnaccountedNs)
	if irqTimeAccounting() {
		u -= int64(e.IrqNs[IRQBlock] + e.IrqNs[IRQNet])
	}
	return max(u, 0)
}

// foldedOf splits the off-CPU time a switch-in record's folded intervals
// hold (since the thread's previous record, inside its running stretch)
// into sleep, run-queue wait and D. The kernel sums the off-CPU time by the
// state the thread left in and the run-queue waits apart: a preempted
// interval is a wait throughout; a sleep's or a D's ends with its wait
// after the wakeup. The waits are the larger of the two sums, the D time
// what is left of its own sum, the sleep the rest.
func foldedOf(e *Event) (sleep, runq, io int64) {
	var total int64
	for _, ns := range e.FoldOffcpuNs {
		total += int64(ns)
	}
	runq = min(max(int64(e.FoldRunqNs), int64(e.FoldOffcpuNs[Preempted])), total)
	io = min(int64(e.FoldOffcpuNs[IOWait]), total-runq)
	return total - runq - io, runq, io
}

// record turns an event into spans: a switch-in into the run-queue and
// off-CPU spans it closes (the run-queue span first), with the waker of a
// sleep and the holder of a preemption; a fork or exit of the target tree
// into a SpanFork. The load generator's threads are flagged Client.
func record(r collectors.Recorder, e *Event, comms *bpfutil.Comms) {
	client := e.Flags&FlagClient != 0
	switch RecKind(e.Kind) {
	case RecFork, RecExit:
		sp := collectors.Span{Kind: collectors.SpanFork, Start: int64(e.Ts), End: int64(e.Ts), Tid: e.Tgid, Tgid: e.Tgid,
			Detail: "fork", Client: client, Slot: e.Slot}
		if RecKind(e.Kind) == RecExit {
			sp.Detail = "exit"
		} else {
			sp.WakerTid, sp.WakerTgid, sp.WakerComm = e.WakerTid, e.WakerTgid, comms.Of(e.WakerComm)
		}
		r.Record(sp)
		return
	case RecData:
		r.Record(collectors.Span{Kind: collectors.SpanData, Start: int64(e.WakeTs), End: int64(e.Ts), Tid: e.Tid, Tgid: e.Tgid,
			Detail: "unix", Client: client, Slot: e.Slot, WakerTid: e.WakerTid, WakerTgid: e.WakerTgid, WakerComm: comms.Of(e.WakerComm)})
		return
	case RecSwitch:
	default:
		return
	}
	end := int64(e.Ts)
	var holder string
	if e.HolderTid != 0 {
		holder = comms.Of(e.HolderComm)
	}
	st := State(e.State)
	off := st < NumStates && e.OffcpuNs > 0
	fs, fr, fio := foldedOf(e)
	if e.HasRunq != 0 && e.RunqNs > 0 {
		sp := collectors.Span{Kind: collectors.SpanRunqueue, Start: end - int64(e.RunqNs), End: end, Tid: e.Tid, Blocking: true,
			Tgid: e.Tgid, HolderTid: e.HolderTid, HolderTgid: e.HolderTgid, HolderComm: holder, Client: client, Slot: e.Slot}
		if !off {
			sp.IRQBlockNs, sp.IRQNetNs, sp.StealNs = int64(e.IrqNs[IRQBlock]), int64(e.IrqNs[IRQNet]), stealOf(e)
			sp.FoldSleepNs, sp.FoldRunqNs, sp.FoldIONs = fs, fr, fio
		}
		r.Record(sp)
	}
	if off {
		sp := collectors.Span{Kind: collectors.SpanOffCPU, Start: end - int64(e.OffcpuNs), End: end, Tid: e.Tid,
			Detail: st.String(), Blocking: st == IOWait, Tgid: e.Tgid, Client: client, Slot: e.Slot,
			HolderTid: e.HolderTid, HolderTgid: e.HolderTgid, HolderComm: holder,
			IRQBlockNs: int64(e.IrqNs[IRQBlock]), IRQNetNs: int64(e.IrqNs[IRQNet]), StealNs: stealOf(e),
			FoldSleepNs: fs, FoldRunqNs: fr, FoldIONs: fio}
		if ctx := WakeContext(e.WakeCtx); ctx != WakeNone && st != Preempted {
			sp.WakeTs = int64(e.WakeTs)
			sp.WakeCtx = wakeCtxName(ctx, e.WakeVec)
			if ctx == WakeTask || e.WakerTid != 0 {
				sp.WakerTid, sp.WakerTgid, sp.WakerComm = e.WakerTid, e.WakerTgid, comms.Of(e.WakerComm)
			}
		}
		r.Record(sp)
	}
}

// wakeCtxName is a Span's WakeCtx: "task", "hardirq:KIND" (block, net,
// device: a device handler; timer: none, an hrtimer or an IPI; "hardirq"
// when unknown), "softirq:VECTOR" ("softirq" when the vector is unknown),
// "nmi" or "unknown".
func wakeCtxName(ctx WakeContext, vec uint8) string {
	switch ctx {
	case WakeSoftirq:
		if n := SoftirqName(vec); n != "" {
			return "softirq:" + n
		}
	case WakeHardirq:
		if n := HardirqName(vec); n != "" {
			return "hardirq:" + n
		}
	}
	return ctx.String()
}
