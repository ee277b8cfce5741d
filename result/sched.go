package result

// Sched is the `sched` section of `bpfbench attach`.
type Sched struct {
	RunqueueLatency SchedLatency `json:"runqueue_latency_seconds"`
	OffCPU          SchedOffCPU  `json:"offcpu_seconds"`
	// Folded counts the switch-ins summed in the kernel instead of sent
	// (short waits and stints); they are in every figure above.
	Folded  uint64        `json:"folded_intervals"`
	Wakeups *SchedWakeups `json:"wakeups,omitempty"`
	// Forks and Exits count the processes of the target's tree the kernel
	// started and stopped following (Config.Tree).
	Forks uint64 `json:"forks,omitempty"`
	Exits uint64 `json:"exits,omitempty"`
	// ClientRecords counts the load generator's own switch-in records
	// (SetClient); they are in no figure above.
	ClientRecords uint64 `json:"client_records,omitempty"`
	// DataEdges counts the reads of data another of the target's threads
	// wrote into a unix socket (Config.DataEdges).
	DataEdges uint64 `json:"data_edges,omitempty"`
	// UnmatchedData counts the reads of such data whose write was never
	// seen (its stamp lost): they carry no data edge, and the walk follows
	// the reader's own wakeup instead.
	UnmatchedData uint64 `json:"unmatched_data_reads,omitempty"`
	// Interrupts is the time block and network interrupts ran on the
	// target's CPUs while its threads were running (Config.IRQTime): time
	// the scheduler counts as theirs.
	Interrupts *SchedInterrupts `json:"interrupts_while_running_seconds,omitempty"`
	Threads    []SchedThread    `json:"threads,omitempty"`
}

// SchedLatency summarizes a latency distribution in seconds.
type SchedLatency struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
	Sum   float64 `json:"sum"`
}

// SchedOffCPU is off-CPU time in seconds by the state the thread left in.
type SchedOffCPU struct {
	Preempted float64 `json:"preempted"`
	IOWait    float64 `json:"io_wait"`
	Sleep     float64 `json:"sleep"`
	// Stopped: stopped by a signal or a tracer, or frozen.
	Stopped float64 `json:"stopped,omitempty"`
}

// SchedWakeups counts the wakeups the target's switch-in records name, by
// where they ran (Config.Wakers; folded switch-ins are not counted).
type SchedWakeups struct {
	// SameProcess and OtherProcess: by a task of the woken thread's own
	// process, or of another (an edge of the critical path).
	SameProcess  uint64 `json:"same_process"`
	OtherProcess uint64 `json:"other_process"`
	Hardirq      uint64 `json:"hardirq"`
	// HardirqKinds splits Hardirq by what the interrupt was (Config.IRQTime):
	// a device handler ("block", "net", "device") or none ("timer": an
	// hrtimer expiry, an IPI).
	HardirqKinds map[string]uint64 `json:"hardirq_by_kind,omitempty"`
	// Softirq counts softirq wakeups by vector ("net_rx", "timer", ...;
	// "softirq" when the vector is not known).
	Softirq map[string]uint64 `json:"softirq,omitempty"`
	NMI     uint64            `json:"nmi"`
	Unknown uint64            `json:"unknown"`
	// Preempted counts switch-ins after a preemption that name the thread
	// that took the CPU.
	Preempted uint64 `json:"preempted_with_holder"`
}

// SchedInterrupts is interrupt time in seconds by what it served.
type SchedInterrupts struct {
	Block float64 `json:"block"`
	Net   float64 `json:"net"`
}

// SchedThread is one thread's share of a summary.
type SchedThread struct {
	Tid             uint32      `json:"tid"`
	Comm            string      `json:"comm"`
	RunqueueSeconds float64     `json:"runqueue_seconds"`
	RunqueueCount   uint64      `json:"runqueue_count"`
	OffCPU          SchedOffCPU `json:"offcpu_seconds"`
}
