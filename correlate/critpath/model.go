// Package critpath attributes each token gap to causes along its critical
// path (docs/architecture.md, "Attribution model"): walking back from the
// client's read c(k), the chunk waited in the client's socket from its
// arrival r(k), was in flight from the server's send s(k), and before that
// the sending thread's states from the previous read c(k-1) tell what the
// server did: ran, waited for a CPU (and who held it), waited for a disk,
// or slept until something woke it, in which case the walk follows the
// waker. The parts of a gap sum exactly to the gap; what no event covers
// is unexplained.
//
// All times are CLOCK_MONOTONIC ns. The package is pure Go: the kernel
// side (collectors) and the load generator deliver the events below, in
// any order within a bounded lateness, and Flush hands back the gaps the
// watermark has passed.
package critpath

import (
	"strconv"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/result/cause"
)

// Cause is one reason a part of a token gap took the time it did
// (result/cause, the vocabulary on the wire). The first four are
// correlate's causes, with the same values and names; the critical path
// adds the server's own work and sleeps, the client, and unexplained as a
// cause of its own.
type Cause = cause.Cause

// The causes.
const (
	CPURunqueue     = cause.CPURunqueue     // runnable, another task on the CPU
	IOBlock         = cause.IOBlock         // D state, or woken by a block completion
	GPUSync         = cause.GPUSync         // inside a blocking CUDA call (running or asleep)
	NetBackpressure = cause.NetBackpressure // the chunk in flight, or waiting on this connection
	ServerCompute   = cause.ServerCompute
	ServerSleep     = cause.ServerSleep   // asleep until a timer or an outside process
	ServerStopped   = cause.ServerStopped // stopped: a stop signal, a tracer or a freezer
	Client          = cause.Client        // the chunk in the client's socket, not yet read
	Unexplained     = cause.Unexplained   // no event covers it
	NumCauses       = cause.NumCauses
)

// The first four causes are correlate's, value for value: a difference
// is an index out of range, and does not compile.
var (
	_ = [1]struct{}{}[int(CPURunqueue)-int(correlate.CPURunqueue)]
	_ = [1]struct{}{}[int(IOBlock)-int(correlate.IOBlock)]
	_ = [1]struct{}{}[int(GPUSync)-int(correlate.GPUSync)]
	_ = [1]struct{}{}[int(NetBackpressure)-int(correlate.NetBackpressure)]
	_ = [1]struct{}{}[int(ServerCompute)-int(correlate.NumCauses)]
)

// CauseNames lists every cause's name, in Cause order.
func CauseNames() []string { return cause.Names() }

// CauseByName is the cause called name.
func CauseByName(name string) (Cause, bool) { return cause.ByName(name) }

// Thread names a task.
type Thread struct {
	Tid, Tgid uint32
	Comm      string
}

// String is "comm[tgid]" (the process, as a user names a noisy
// neighbour), "comm" when no pid is known, "tid N" when no name is.
func (t Thread) String() string {
	pid := t.Tgid
	if pid == 0 {
		pid = t.Tid
	}
	switch {
	case t.Comm == "" && pid == 0:
		return "?"
	case t.Comm == "":
		return "tid " + strconv.FormatUint(uint64(t.Tid), 10)
	case pid == 0:
		return t.Comm
	}
	return t.Comm + "[" + strconv.FormatUint(uint64(pid), 10) + "]"
}

// State is a thread's scheduler state over a segment.
type State uint8

// The states. None marks steps that are not a thread's (client, network,
// a hole with no thread).
const (
	None     State = iota
	Running        // on a CPU
	Runnable       // TASK_RUNNING, waiting for a CPU
	IOWait         // TASK_UNINTERRUPTIBLE (D)
	Sleep          // TASK_INTERRUPTIBLE (S), ended by a wakeup
	// Stopped: held off the CPU by order, not by a wait of its own: a
	// stop signal (SIGSTOP, SIGTSTP), a tracer's stop (ptrace), a
	// freezer (the cgroup freezer of a paused container). Its Wake is
	// who resumed it (SIGCONT, the tracer, the thaw).
	Stopped
)

var stateNames = [...]string{"none", "running", "runnable", "io_wait", "sleep", "stopped"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// WakeKind says what ended a sleep.
type WakeKind uint8

// The wakers. WakeUnknown: the wakeup was lost or not recorded.
const (
	WakeUnknown      WakeKind = iota
	WakeThread                // a task in process context (Wake.Waker)
	WakeHardIRQ               // a device interrupt
	WakeNetRx                 // softirq NET_RX (Wake.Port: the connection's client port, 0 when unknown)
	WakeBlock                 // softirq BLOCK: a block IO completion
	WakeSoftIRQTimer          // softirq TIMER (timer wheel)
	WakeTimer                 // hrtimer expiry
)

var wakeNames = [...]string{"unknown", "thread", "hardirq", "softirq-net-rx", "softirq-block", "softirq-timer", "timer"}

func (k WakeKind) String() string {
	if int(k) < len(wakeNames) {
		return wakeNames[k]
	}
	return "wake(" + strconv.Itoa(int(k)) + ")"
}

// Wake is the wakeup edge that ended a Sleep segment (sched_wakeup at the
// segment's End: the waker is current, or the interrupt context it ran in).
type Wake struct {
	Kind  WakeKind
	Waker Thread // WakeThread
	Port  uint16 // WakeNetRx: the connection's client port, 0 when unknown
}

// Holder is a task that ran on the waiting thread's CPU while it was
// runnable (sched_switch's next task), and for how long.
type Holder struct {
	Thread
	Ns int64
}

// Segment is one stretch of a target thread in one state. A thread's
// segments are expected to be disjoint (sched_switch and sched_wakeup cut
// them); a stretch no segment covers is a hole (lost events).
type Segment struct {
	Thread     Thread
	State      State
	Start, End int64
	// Holders: for Runnable, the tasks that ran on its CPU meanwhile, in
	// the order they ran; their Ns may sum to less than the segment (the
	// rest is runnable time with no holder known).
	Holders []Holder
	// Wake: for Sleep and Stopped, what woke it at End.
	Wake Wake
	// IRQ: for Running, the interrupts that ran on its CPU meanwhile.
	IRQ IRQTime
	// Folded: for Running, the time it was off its CPU meanwhile in
	// intervals too short to be recorded one by one.
	Folded Folded
}

// Folded is the time a thread was off its CPU inside a Running segment,
// in intervals the scheduler collector folded into sums (each shorter
// than its fold thresholds: a sleep under 1 ms, a wait for a CPU under
// 10 µs, a preemption or a D under 50 µs). Where in the segment they fell
// is not known: a part of the segment has its share of them. A thread
// that naps (a runtime's monitor thread, a spin-then-sleep barrier, a
// polling loop's usleep) would otherwise read as running throughout.
type Folded struct {
	Sleep int64 // asleep (S): the waker is not known
	Runq  int64 // runnable, waiting for a CPU: the holder is not known
	IO    int64 // in D
}

// Total is the folded time.
func (f Folded) Total() int64 { return f.Sleep + f.Runq + f.IO }

// mostlyOff says whether a Running segment was off its CPU for more of its
// time than on it (its folded time over half of it): at an instant inside
// it the thread more likely slept or waited than ran.
func (s *Segment) mostlyOff() bool {
	return s.State == Running && 2*s.Folded.Total() > s.End-s.Start
}

// IRQTime is the time block and network interrupts (device handlers and
// their softirqs) ran on a thread's CPU while it was running. A kernel
// without IRQ_TIME_ACCOUNTING counts it as the thread's, and a disk or a
// network link busy on that CPU would otherwise read as the thread's
// compute. Where in the running stretch they ran is not known: a part of
// the stretch has its share of them.
type IRQTime struct {
	Block int64 // io_block
	Net   int64 // net_backpressure
	// Steal is the time the thread was on its CPU that the scheduler did
	// not charge it: with PARAVIRT_TIME_ACCOUNTING, the hypervisor ran
	// something else on the vCPU (steal). cpu_runqueue, held by
	// Hypervisor: the thread waited for a physical CPU.
	Steal int64
}

// Hypervisor holds a vCPU while it is stolen (IRQTime.Steal).
var Hypervisor = Thread{Comm: "hypervisor (steal)"}

// CUDACall is a blocking CUDA call (cudaStreamSynchronize, cuMemcpyDtoH,
// ...) on a thread, from entry to return (uprobe and uretprobe).
type CUDACall struct {
	Tid        uint32
	Start, End int64
	Name       string
}

// Send is the server's send of a chunk on a connection (tcp_sendmsg or a
// socket tracepoint, on the server's side): when, by which thread, on the
// connection whose client port is Port, how many bytes.
type Send struct {
	Time  int64
	Tid   uint32
	Port  uint16
	Bytes int64
}

// Arrival is a chunk reaching the load generator's socket (tcp_rcv or
// sock_def_readable on the client's side), on the connection whose client
// (local) port is Port.
type Arrival struct {
	Time  int64
	Port  uint16
	Bytes int64
}

// Hold is a stretch during which the connection whose client port is
// Port could not carry the server's data (the tcp collector's blocking
// episodes: the peer's window at zero, the sender in loss recovery, a
// segment on its way again after a retransmission). Kind names it.
type Hold struct {
	Port       uint16
	Start, End int64
	Kind       string
}

// Data is data passed from one target thread to another through a local
// socket (a frontend and its engine): Reader read at Read what Writer
// wrote at Written. When the reader was asleep, the writer's wakeup is an
// edge already; when it was busy (an event loop, a runtime that polls its
// sockets) there is no wakeup, and this is the edge.
type Data struct {
	Reader, Writer Thread
	Written, Read  int64
}

// ClientWait is a stretch during which a thread of the load generator
// was runnable, waiting for a CPU (its own scheduler events: bpfbench
// watches its client), with the task that held it when known. A chunk
// "in flight" meanwhile was held by the client: its socket's receive
// processing and acknowledgements wait for the owner thread.
type ClientWait struct {
	Start, End int64
	Holder     Thread
}

// Read is one token gap as the load generator recorded it: request,
// token index (0: the TTFT, from the request's write), the connection's
// client port, the previous read c(k-1) (or the write) and this read c(k).
type Read struct {
	Request    int
	Index      int
	Port       uint16
	Start, End int64
	// PauseStart, PauseEnd: the reader stopped reading on purpose (a
	// simulated slow client) from PauseStart to PauseEnd; a chunk waiting
	// in the socket meanwhile is the reader's backpressure, not the load
	// generator's delay. Zero: no pause.
	PauseStart, PauseEnd int64
	// AtSend: a gap of the server's writes, not of a client's reads (the
	// live view of traffic bpfbench does not generate): Start and End are
	// the server's sends (Start the request's arrival for Index 0), and
	// the gap is walked back from the send at End, with no network or
	// client part.
	AtSend bool
	// SentAt, with AtSend: the chunk was written at this time, before End
	// (the reader took it at End, a window full of earlier data holding
	// it): the walk goes back from that send, and from it to End the chunk
	// waited for the connection (net_backpressure). 0: sent at End.
	SentAt int64
}

// Duration is End-Start.
func (r Read) Duration() int64 { return r.End - r.Start }
