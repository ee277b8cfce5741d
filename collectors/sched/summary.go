package sched

import (
	"github.com/bpfbench/bpfbench/result"
	"maps"
	"sort"
	"sync"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/internal/hist"
)

// Latency (result.SchedLatency) summarizes a latency distribution in seconds.
type Latency = result.SchedLatency

// OffCPU (result.SchedOffCPU) is off-CPU time in seconds by the state the thread left in.
type OffCPU = result.SchedOffCPU

// Thread (result.SchedThread) is one thread's share of a summary.
type Thread = result.SchedThread

// Wakeups (result.SchedWakeups) counts the wakeups the target's switch-in records name, by
// where they ran (Config.Wakers; folded switch-ins are not counted).
type Wakeups = result.SchedWakeups

// Summary (result.Sched) is the `sched` section of `bpfbench attach`.
type Summary = result.Sched

// Interrupts (result.SchedInterrupts) is interrupt time in seconds by what it served.
type Interrupts = result.SchedInterrupts

type threadAgg struct {
	comm     string
	runqNs   uint64
	runqN    uint64
	offcpuNs [NumStates]uint64
}

// Aggregator turns a target's events into a Summary with bounded memory
// (a log-linear histogram and one record per thread). It is safe for
// concurrent use.
type Aggregator struct {
	mu        sync.Mutex
	runq      hist.LogLinear
	offcpuNs  [NumStates]uint64
	threads   map[uint32]*threadAgg
	folded    uint64
	wakeups   Wakeups
	woken     bool // a record named a waker or holder
	forks     uint64
	exits     uint64
	client    uint64
	dataEdges uint64
	irqNs     [NumIRQClasses]uint64
}

// NewAggregator returns an empty aggregator.
func NewAggregator() *Aggregator { return &Aggregator{threads: map[uint32]*threadAgg{}} }

// Add accounts one event.
func (a *Aggregator) Add(e *Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch RecKind(e.Kind) {
	case RecFork:
		a.forks++
		return
	case RecExit:
		a.exits++
		return
	case RecData:
		a.dataEdges++
		return
	}
	if e.Flags&FlagClient != 0 {
		a.client++
		return
	}
	a.addWakeup(e)
	t := a.threads[e.Tid]
	if t == nil {
		t = &threadAgg{comm: bpfutil.CString(e.Comm[:])}
		a.threads[e.Tid] = t
	}
	if e.HasRunq != 0 {
		a.runq.Add(e.RunqNs)
		t.runqNs += e.RunqNs
		t.runqN++
	}
	if s := State(e.State); s < NumStates {
		a.offcpuNs[s] += e.OffcpuNs
		t.offcpuNs[s] += e.OffcpuNs
	}
	// What the kernel folded since this thread's previous record: the
	// waits enter the distribution at their mean (all under the fold
	// threshold), the times in full.
	if n := uint64(e.FoldRunqN); n > 0 {
		a.runq.AddN(e.FoldRunqNs/n, n)
		t.runqNs += e.FoldRunqNs
		t.runqN += n
	}
	for s := range NumStates {
		a.offcpuNs[s] += e.FoldOffcpuNs[s]
		t.offcpuNs[s] += e.FoldOffcpuNs[s]
	}
	a.folded += uint64(e.FoldN)
	for k := range NumIRQClasses {
		a.irqNs[k] += e.IrqNs[k]
	}
}

func (a *Aggregator) addWakeup(e *Event) {
	w := &a.wakeups
	if e.HolderTid != 0 {
		if State(e.State) == Preempted {
			w.Preempted++
		}
		a.woken = true
	}
	switch WakeContext(e.WakeCtx) {
	case WakeNone:
		return
	case WakeTask:
		if e.WakerTgid == e.Tgid {
			w.SameProcess++
		} else {
			w.OtherProcess++
		}
	case WakeHardirq:
		w.Hardirq++
		if name := HardirqName(e.WakeVec); name != "" {
			if w.HardirqKinds == nil {
				w.HardirqKinds = map[string]uint64{}
			}
			w.HardirqKinds[name]++
		}
	case WakeSoftirq:
		name := SoftirqName(e.WakeVec)
		if name == "" {
			name = "softirq"
		}
		if w.Softirq == nil {
			w.Softirq = map[string]uint64{}
		}
		w.Softirq[name]++
	case WakeNMI:
		w.NMI++
	default:
		w.Unknown++
	}
	a.woken = true
}

// Reset forgets everything (for per-interval views).
func (a *Aggregator) Reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.runq.Reset()
	a.offcpuNs = [NumStates]uint64{}
	a.folded = 0
	a.wakeups = Wakeups{}
	a.woken = false
	a.forks, a.exits, a.client, a.dataEdges = 0, 0, 0, 0
	a.irqNs = [NumIRQClasses]uint64{}
	clear(a.threads)
}

func secs(ns uint64) float64 { return float64(ns) / 1e9 }

func offcpuOf(ns [NumStates]uint64) OffCPU {
	return OffCPU{Preempted: secs(ns[Preempted]), IOWait: secs(ns[IOWait]), Sleep: secs(ns[Sleep]), Stopped: secs(ns[Stopped])}
}

// Summary reports what was aggregated, with up to maxThreads threads
// ordered by run-queue time (all when maxThreads <= 0).
func (a *Aggregator) Summary(maxThreads int) Summary {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Summary{
		RunqueueLatency: Latency{
			Count: a.runq.Count(),
			P50:   a.runq.Quantile(0.50) / 1e9,
			P99:   a.runq.Quantile(0.99) / 1e9,
			Max:   secs(a.runq.Max()),
			Sum:   a.runq.Sum() / 1e9,
		},
		OffCPU: offcpuOf(a.offcpuNs),
		Folded: a.folded,
		Forks:  a.forks, Exits: a.exits, ClientRecords: a.client, DataEdges: a.dataEdges,
	}
	if a.irqNs != ([NumIRQClasses]uint64{}) {
		s.Interrupts = &Interrupts{Block: secs(a.irqNs[IRQBlock]), Net: secs(a.irqNs[IRQNet])}
	}
	if a.woken {
		w := a.wakeups
		if w.Softirq != nil {
			w.Softirq = maps.Clone(w.Softirq)
		}
		if w.HardirqKinds != nil {
			w.HardirqKinds = maps.Clone(w.HardirqKinds)
		}
		s.Wakeups = &w
	}
	for tid, t := range a.threads {
		s.Threads = append(s.Threads, Thread{
			Tid: tid, Comm: t.comm,
			RunqueueSeconds: secs(t.runqNs), RunqueueCount: t.runqN,
			OffCPU: offcpuOf(t.offcpuNs),
		})
	}
	sort.Slice(s.Threads, func(i, j int) bool {
		if s.Threads[i].RunqueueSeconds != s.Threads[j].RunqueueSeconds {
			return s.Threads[i].RunqueueSeconds > s.Threads[j].RunqueueSeconds
		}
		return s.Threads[i].Tid < s.Threads[j].Tid
	})
	if maxThreads > 0 && len(s.Threads) > maxThreads {
		s.Threads = s.Threads[:maxThreads]
	}
	return s
}

// Thread returns one thread's figures, if it was seen.
func (a *Aggregator) Thread(tid uint32) (Thread, bool) {
	for _, t := range a.Summary(0).Threads {
		if t.Tid == tid {
			return t, true
		}
	}
	return Thread{}, false
}
