// Package collectors defines the two shapes every collector takes: a
// Section of an on-call session (`bpfbench attach`, `bpfbench run`), which
// follows one process and streams discrete events, and a Host collector of
// the daemon, which aggregates in the kernel for the whole host and for
// configured targets and is read by Prometheus.
//
// Both share one lifecycle: Start loads and attaches (and releases what it
// took when it fails), Run works until its context is done, Close releases
// everything and is idempotent. Callers build every collector first, fail
// fast, run them together and close them in reverse order.
package collectors

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Lifecycle is the lifecycle shared by every collector.
type Lifecycle interface {
	// Start loads and attaches. On error it has released what it took.
	Start(ctx context.Context) error
	// Run works until ctx is done, then returns nil (or a run-time error).
	Run(ctx context.Context) error
	// Close releases every link, program and map. It is idempotent.
	Close() error
}

// Options are what a session knows about its target.
type Options struct {
	// Pid is the target process (its tgid); every thread of it is followed.
	Pid int
	// Roots are the target's other process trees, each followed with its
	// descendants as Pid is (a cgroup's processes whose parents are outside
	// it: ResolveCgroup).
	Roots []int
	// Port restricts network sections to connections on this local port (0: all).
	Port int
	// CUDALibs overrides the CUDA libraries found in the target's maps.
	CUDALibs []string
	// Interval is the period of the interval view.
	Interval time.Duration
	Logger   *slog.Logger
	// Recorder, when set, receives every discrete event of the session as
	// a Span, for correlation and the timeline (`bpfbench run`).
	Recorder Recorder
	// Live, with a Recorder, also follows the requests arriving at the
	// target's connections and their ends (SpanRequest, SpanClose): the
	// live view's streams, with no load generator (`attach`, the daemon).
	Live bool
}

// SpanKind says what a Span of a session's timeline is.
type SpanKind uint8

// The span kinds.
const (
	SpanRunqueue SpanKind = iota // a thread runnable, waiting for a CPU
	SpanOffCPU                   // a thread off CPU; Detail is its state (preempted, io_wait, sleep)
	SpanBlockIO                  // a block request of the target in flight; Detail is device and op
	SpanCUDA                     // a CUDA call; Detail is its name
	SpanTCP                      // a TCP episode of a connection; Detail says which
	// SpanSend is a send of the server on the connection whose peer (the
	// client) is on Port, its own port LocalPort: Bytes sent by thread Tid
	// from Start to End (a burst of sends folded within the collector's
	// fold window; End is the last).
	SpanSend
	// SpanArrival is data arriving at the load generator's socket on
	// LocalPort (the client's port; Port is the server's): Bytes queued
	// from Start to End (folded like sends). Client is set.
	SpanArrival
	// SpanFork is a process joining (Detail "fork") or leaving ("exit")
	// the target tree at Start = End: Tid and Tgid are its pid; for a
	// fork, Waker* is the parent.
	SpanFork
	// SpanData is data passed between the target's threads or processes
	// through a unix socket: thread Tid (of Tgid) read at End what thread
	// WakerTid (of WakerTgid, WakerComm) wrote at Start (Detail "unix").
	// A wakeup edge is lost when the reader was busy; this one is not.
	SpanData
	// SpanRequest is data that arrived at a followed server's connection
	// whose peer (the client) is on Port, its own port LocalPort, since the
	// server's last send there: Bytes from Start (the first arrival) to
	// End (the last), handed over just before the server's next SpanSend
	// on the connection (a request, when the session follows live
	// traffic: Options.Live).
	SpanRequest
	// SpanClose is the end of that connection (Options.Live), at End.
	SpanClose
)

// PeerWindowFull is the Detail of a SpanSend (Options.Live) that found the
// data sent before it unacknowledged and filling the peer's receive
// window: the chunk waits in the send queue until the reader reads, however
// fast the server wrote it.
const PeerWindowFull = "peer_window_full"

// Span is one interval of the target's timeline, CLOCK_MONOTONIC ns.
type Span struct {
	Kind       SpanKind
	Start, End int64
	Tid        uint32
	// Port is the peer's port for TCP spans: the client's port when the
	// target is the server.
	Port   uint16
	Detail string
	// Blocking marks time the target waited: io_wait off-CPU intervals,
	// blocking CUDA calls, backpressure and retransmission episodes.
	Blocking bool
	Bytes    uint64

	// Tgid is the thread's process (sched spans): the target tree may
	// hold several.
	Tgid uint32
	// LocalPort is this side's port for SpanSend and SpanArrival (Port is
	// the peer's): a client arrival needs its own port to join its request.
	LocalPort uint16
	// The wakeup that ended the sleep of a SpanOffCPU (sched, with
	// wakers): WakeTs is when it was woken, WakerTid, WakerTgid and
	// WakerComm the task that woke it (in an interrupt: the task the
	// interrupt ran on), WakeCtx where the wakeup ran: "task", "hardirq",
	// "softirq:net_rx", "softirq:timer", "softirq:block" (any vector by
	// name), "nmi", "unknown", or "" when none is known (preempted, a
	// folded interval, wakers off).
	WakeTs    int64
	WakerTid  uint32
	WakerTgid uint32
	WakerComm string
	WakeCtx   string
	// The task that took the CPU when the thread was preempted, on the
	// SpanRunqueue (and SpanOffCPU "preempted") that followed.
	HolderTid  uint32
	HolderTgid uint32
	HolderComm string
	// Client marks spans of the load generator's own threads and sockets;
	// they are not the target's.
	Client bool
	// Slot is the target slot the span's process (sched) or socket (tcp)
	// is followed under (0: not known, spans of the other sections): 1
	// for a session's target, another for each target of a session that
	// follows several (Session.AddTarget: the daemon's live views).
	Slot uint8
	// Conn is the socket's cookie for the spans of a connection (SpanSend,
	// SpanRequest, SpanClose, SpanTCP holds; 0: unknown): two clients on
	// different hosts may share a port, never a cookie.
	Conn uint64
	// Seq (Options.Live): a SpanSend's send sequence after it (the end of
	// its bytes in the connection's stream), a PeerWindowFull SpanTCP's
	// sequence the peer acknowledged (what the reader took up to).
	Seq uint32
	// IRQBlockNs and IRQNetNs, on the SpanOffCPU of a switch-in (or its
	// SpanRunqueue when it has none; sched with interrupt time): the time
	// block and network interrupts (device handlers and their softirqs)
	// ran on the thread's CPU while it was running, from its previous
	// switch-in record to this switch-in's switch-out. The scheduler counts
	// that time as the thread's.
	IRQBlockNs, IRQNetNs int64
	// StealNs, beside them: the time the thread was on its CPU that the
	// scheduler did not charge it, less those interrupts where the kernel
	// charges interrupts apart (IRQ_TIME_ACCOUNTING): with
	// PARAVIRT_TIME_ACCOUNTING, the hypervisor's steal (the vCPU ran
	// nothing of the guest). The guest sees the thread running throughout.
	StealNs int64
	// FoldSleepNs, FoldRunqNs and FoldIONs, beside them: the time the
	// thread was off its CPU inside that running stretch, in intervals
	// too short to be recorded one by one (folded in the kernel, sched's
	// fold thresholds): asleep (S or stopped: woken by a timer, a thread
	// of its own process or an interrupt, the waker not kept), runnable
	// waiting for a CPU, in D. Where in the stretch they fell is not kept.
	FoldSleepNs, FoldRunqNs, FoldIONs int64
}

// Recorder receives spans from the sections' reader goroutines; it must be
// safe for concurrent use and quick.
type Recorder interface {
	Record(Span)
}

// Section is one collector's part of a session on one process.
type Section interface {
	Lifecycle
	// Name is the section's key in the JSON summary ("sched", "tcp", ...).
	Name() string
	// WriteInterval writes the compact view of the interval that just
	// ended (one or a few lines, no trailing blank line) and starts a new one.
	WriteInterval(w io.Writer)
	// WriteSummary writes the human-readable end-of-session summary.
	WriteSummary(w io.Writer)
	// Summary is the section's JSON value for the whole session.
	Summary() any
	// Lost is the number of events the kernel could not hand over plus
	// those userspace could not decode.
	Lost() uint64
}

// Counter is one reading of a section's counter track (a GPU's utilisation,
// its power): sampled values rather than intervals, drawn as counter tracks
// on the timeline.
type Counter struct {
	// Track names the series ("gpu0 utilization"); Unit names the value ("ratio").
	Track, Unit string
	TimeNs      int64
	Value       float64
}

// CounterSource is a Section that also keeps sampled counters.
type CounterSource interface {
	Counters() []Counter
}

// ErrNotApplicable says a section has nothing to follow in this target
// (say, no CUDA library mapped). The session reports it in the section and
// carries on with the others.
var ErrNotApplicable = errors.New("not applicable to this process")

// Host is a collector of the daemon: host-wide aggregates in the kernel and
// per-target aggregates under slots 1..MaxTargets-1, exported on /metrics.
type Host interface {
	Lifecycle
	prometheus.Collector
	// Name is the collector's name ("sched", "blockio", ...).
	Name() string
	// SetTarget aggregates process tgid under target slot idx.
	SetTarget(tgid uint32, idx uint32) error
	// DeleteTarget stops following tgid.
	DeleteTarget(tgid uint32) error
	// Losses reports events the kernel could not queue and records
	// userspace could not decode; the daemon exports both.
	Losses() (lost, decodeErrors uint64)
}

// TargetNames gives the name of each target slot, for metric labels. Slot
// 0 is the host. It is set by the daemon before the first scrape and read
// by collectors during scrapes; implementations must copy it when they keep it.
type TargetNames func() map[uint32]string
