// Package overhead is bpfbench's measure of itself: what a session cost
// the machine and the process it watched. Every `attach`, `run`, `demo`
// and `validate` result carries its Report, and a person sees its Line.
package overhead

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Counters are one collector's pipeline figures, cumulative.
type Counters struct {
	Records, Wakeups, ReaderCPUNs        uint64
	Lost, Folded, ForcedWakeups          uint64
	Overflow, SelfPreemptions, DecodeErr uint64
	BPFRunNs, BPFRuns                    uint64
}

// Source is a collector that reports its pipeline counters.
type Source interface {
	Name() string
	OverheadCounters() Counters
}

// Thresholds above which a Report warns.
var (
	// CollectorCPURatio: reader threads plus BPF programs, in CPUs.
	CollectorCPURatio = 0.02
	// SelfPreemptionsPerSecond: target threads preempted by bpfbench.
	SelfPreemptionsPerSecond = 50.0
	// SwitchRise: the target's involuntary switches per second during the
	// session over before, and by at least SwitchRiseMin a second.
	SwitchRise    = 1.5
	SwitchRiseMin = 200.0
	// SwitchBusyBefore: below this many a second before, the target was
	// idle and the comparison is not made.
	SwitchBusyBefore = 50.0
)

// Collector is one collector's share of a Report.
type Collector struct {
	Records         uint64  `json:"records"`
	RecordsPerSec   float64 `json:"records_per_second"`
	Wakeups         uint64  `json:"wakeups"`
	WakeupsPerSec   float64 `json:"wakeups_per_second"`
	ForcedWakeups   uint64  `json:"forced_wakeups"`
	ReaderCPUSec    float64 `json:"reader_cpu_seconds"`
	BPFRunSec       float64 `json:"bpf_run_seconds"`
	BPFRuns         uint64  `json:"bpf_runs"`
	Folded          uint64  `json:"folded"`
	Lost            uint64  `json:"lost"`
	Overflow        uint64  `json:"overflow,omitempty"`
	DecodeErrors    uint64  `json:"decode_errors,omitempty"`
	SelfPreemptions uint64  `json:"self_preemptions,omitempty"`
}

// Report is what bpfbench cost while it watched a target.
type Report struct {
	Seconds float64 `json:"seconds"`
	// CPUSeconds is bpfbench's whole process (load generator included in
	// `run`), user and system; CPURatio is that over Seconds, in CPUs.
	CPUSeconds       float64 `json:"cpu_seconds"`
	CPUUserSeconds   float64 `json:"cpu_user_seconds"`
	CPUSystemSeconds float64 `json:"cpu_system_seconds"`
	CPURatio         float64 `json:"cpu_ratio"`
	// The collectors' own cost: reader threads and BPF programs (kernel
	// run-time statistics, on for the session).
	ReaderCPUSeconds float64 `json:"reader_cpu_seconds"`
	BPFRunSeconds    float64 `json:"bpf_run_seconds"`
	BPFRuns          uint64  `json:"bpf_runs"`
	BPFNsPerRun      float64 `json:"bpf_ns_per_run"`
	CollectorCPU     float64 `json:"collector_cpu_ratio"`
	Records          uint64  `json:"records"`
	RecordsPerSecond float64 `json:"records_per_second"`
	Wakeups          uint64  `json:"wakeups"`
	WakeupsPerSecond float64 `json:"wakeups_per_second"`
	ForcedWakeups    uint64  `json:"forced_wakeups"`
	Folded           uint64  `json:"folded"`
	Lost             uint64  `json:"lost"`
	SelfPreemptions  uint64  `json:"self_preemptions"`
	// The target's involuntary context switches per second, before
	// bpfbench attached (when measured) and while it was attached.
	TargetSwitchesBefore *float64 `json:"target_involuntary_switches_per_second_before,omitempty"`
	TargetSwitchesDuring float64  `json:"target_involuntary_switches_per_second_during"`
	ReaderNice           int      `json:"reader_nice"`
	ReaderCPUs           string   `json:"reader_cpus,omitempty"`
	// WithLoad: bpfbench's own threads include its load generator's.
	WithLoad   bool                 `json:"with_load,omitempty"`
	BPFStats   string               `json:"bpf_stats"`
	Collectors map[string]Collector `json:"collectors"`
	Warnings   []string             `json:"warnings,omitempty"`
}

// Meter measures one session.
type Meter struct {
	mu       sync.Mutex
	target   int
	sources  []Source
	start    time.Time
	ru0      unix.Rusage
	sw0      Switches
	sw       Switches // the latest count of every thread seen, exited ones too
	stop     chan struct{}
	before   *float64
	base     map[string]Counters
	stats    interface{ Close() error }
	statsErr error
	nice     int
	cpus     string
	withLoad bool
	final    *Report
}

// Options configure a Meter.
type Options struct {
	// Before measures the target's involuntary switches for this long
	// before the collectors start (0: not measured, e.g. an idle server
	// before a `run`).
	Before time.Duration
	// EnableStats turns on the kernel's BPF run-time statistics for the
	// session (they cost two clock reads per program run) and returns
	// their closer.
	EnableStats func() (interface{ Close() error }, error)
	ReaderNice  int
	ReaderCPUs  string
	// WithLoad: the load generator runs in this process (`bpfbench run`),
	// so the self-preemptions count its own, which any client of the
	// server makes as well.
	WithLoad bool
}

// Baseline measures what comes before the collectors: call it, then start
// the collectors, then Start.
func Baseline(target int, opts Options) *Meter {
	m := &Meter{target: target, nice: opts.ReaderNice, cpus: opts.ReaderCPUs, withLoad: opts.WithLoad}
	if opts.Before > 0 {
		a := InvoluntarySwitches(target)
		t0 := time.Now()
		time.Sleep(opts.Before)
		r := float64(InvoluntarySwitches(target).Since(a)) / time.Since(t0).Seconds()
		m.before = &r
	}
	if opts.EnableStats != nil {
		m.stats, m.statsErr = opts.EnableStats()
	}
	return m
}

// Start begins the measurement over sources (collectors already started).
func (m *Meter) Start(sources []Source) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sources = sources
	m.start = time.Now()
	_ = unix.Getrusage(unix.RUSAGE_SELF, &m.ru0)
	m.sw0 = InvoluntarySwitches(m.target)
	m.sw = Switches{}
	m.sw.merge(m.sw0)
	stop := make(chan struct{})
	m.stop = stop
	// Threads that exit during the session keep their last count. A read
	// is one status file per thread: the period grows with its cost, so
	// that reading a target of thousands of threads takes at most 1% of a
	// CPU (a thread that starts and exits between two reads is missed).
	go func() {
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				t0 := time.Now()
				now := InvoluntarySwitches(m.target)
				m.mu.Lock()
				m.sw.merge(now)
				m.mu.Unlock()
				tk.Reset(max(time.Second, 100*time.Since(t0)))
			}
		}
	}()
	m.base = map[string]Counters{}
	for _, s := range sources {
		m.base[s.Name()] = s.OverheadCounters()
	}
}

// Stop takes the final figures (later Reports return them) and turns the
// BPF statistics off. Call it before the collectors close.
func (m *Meter) Stop() Report {
	r := m.Report()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.final = &r
	if m.stop != nil {
		close(m.stop)
		m.stop = nil
	}
	if m.stats != nil {
		m.stats.Close()
		m.stats = nil
	}
	return r
}

func secs(ns uint64) float64 { return float64(ns) / 1e9 }

func tv(t unix.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// Report is the measurement so far (or the final one after Stop).
func (m *Meter) Report() Report {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.final != nil {
		return *m.final
	}
	var r Report
	if m.start.IsZero() {
		return r
	}
	r.Seconds = time.Since(m.start).Seconds()
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	r.CPUUserSeconds = tv(ru.Utime) - tv(m.ru0.Utime)
	r.CPUSystemSeconds = tv(ru.Stime) - tv(m.ru0.Stime)
	r.CPUSeconds = r.CPUUserSeconds + r.CPUSystemSeconds
	r.ReaderNice, r.ReaderCPUs, r.WithLoad = m.nice, m.cpus, m.withLoad
	r.BPFStats = "on"
	if m.statsErr != nil {
		r.BPFStats = "unavailable: " + m.statsErr.Error()
	} else if m.stats == nil {
		r.BPFStats = "off"
	}
	per := func(n uint64) float64 {
		if r.Seconds <= 0 {
			return 0
		}
		return float64(n) / r.Seconds
	}
	r.Collectors = map[string]Collector{}
	for _, s := range m.sources {
		c, b := s.OverheadCounters(), m.base[s.Name()]
		d := Collector{
			Records: c.Records - b.Records, Wakeups: c.Wakeups - b.Wakeups, ForcedWakeups: c.ForcedWakeups - b.ForcedWakeups,
			ReaderCPUSec: secs(c.ReaderCPUNs - b.ReaderCPUNs), BPFRunSec: secs(c.BPFRunNs - b.BPFRunNs), BPFRuns: c.BPFRuns - b.BPFRuns,
			Folded: c.Folded - b.Folded, Lost: c.Lost - b.Lost, Overflow: c.Overflow - b.Overflow,
			DecodeErrors: c.DecodeErr - b.DecodeErr, SelfPreemptions: c.SelfPreemptions - b.SelfPreemptions,
		}
		d.RecordsPerSec, d.WakeupsPerSec = per(d.Records), per(d.Wakeups)
		r.Collectors[s.Name()] = d
		r.Records += d.Records
		r.Wakeups += d.Wakeups
		r.ForcedWakeups += d.ForcedWakeups
		r.ReaderCPUSeconds += d.ReaderCPUSec
		r.BPFRunSeconds += d.BPFRunSec
		r.BPFRuns += d.BPFRuns
		r.Folded += d.Folded
		r.Lost += d.Lost + d.DecodeErrors
		r.SelfPreemptions += d.SelfPreemptions
	}
	if r.BPFRuns > 0 {
		r.BPFNsPerRun = r.BPFRunSeconds * 1e9 / float64(r.BPFRuns)
	}
	r.RecordsPerSecond, r.WakeupsPerSecond = per(r.Records), per(r.Wakeups)
	if r.Seconds > 0 {
		r.CPURatio = r.CPUSeconds / r.Seconds
		r.CollectorCPU = (r.ReaderCPUSeconds + r.BPFRunSeconds) / r.Seconds
	}
	m.sw.merge(InvoluntarySwitches(m.target))
	r.TargetSwitchesDuring = per(m.sw.Since(m.sw0))
	r.TargetSwitchesBefore = m.before
	r.Warnings = warnings(r)
	return r
}

func warnings(r Report) []string {
	var w []string
	if r.CollectorCPU > CollectorCPURatio {
		w = append(w, fmt.Sprintf("bpfbench's collectors used %.1f%% of a CPU (readers %.2fs, BPF programs %.2fs): fewer collectors or a longer --interval would cost less",
			100*r.CollectorCPU, r.ReaderCPUSeconds, r.BPFRunSeconds))
	}
	if r.Lost > 0 {
		w = append(w, fmt.Sprintf("%d events lost (ring buffer full or undecodable): the figures that need them are short by that much", r.Lost))
	}
	if r.Seconds > 0 && float64(r.SelfPreemptions)/r.Seconds > SelfPreemptionsPerSecond {
		if r.WithLoad {
			w = append(w, fmt.Sprintf("bpfbench, its load generator included, preempted the target's threads %.0f times a second (a client of its own would too; the noisy neighbours say how long it held their CPUs): keep it off the target's CPUs with --cpus",
				float64(r.SelfPreemptions)/r.Seconds))
		} else {
			w = append(w, fmt.Sprintf("bpfbench preempted the target's threads %.0f times a second: keep it off the target's CPUs with --cpus",
				float64(r.SelfPreemptions)/r.Seconds))
		}
	}
	// An idle target before (a paused workload, a server before its load)
	// says nothing about what bpfbench added.
	if b := r.TargetSwitchesBefore; b != nil && *b >= SwitchBusyBefore && r.TargetSwitchesDuring > *b*SwitchRise && r.TargetSwitchesDuring-*b > SwitchRiseMin {
		w = append(w, fmt.Sprintf("the target's involuntary context switches rose from %.0f/s to %.0f/s while bpfbench was attached: its threads were preempted more (by bpfbench, or by a load that started meanwhile)",
			*b, r.TargetSwitchesDuring))
	}
	return w
}

// Line is the one-line cost of a session for a person.
func (r Report) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "bpfbench cost: %.2f CPU-s in %.1fs (%.1f%% of a CPU); collectors %.2f%% of a CPU (readers %.3fs, BPF %.3fs over %d runs, %.0f ns each); %.1f wakeups/s, %.0f records/s, %d folded, %d lost, %d self-preemptions",
		r.CPUSeconds, r.Seconds, 100*r.CPURatio, 100*r.CollectorCPU, r.ReaderCPUSeconds, r.BPFRunSeconds, r.BPFRuns, r.BPFNsPerRun,
		r.WakeupsPerSecond, r.RecordsPerSecond, r.Folded, r.Lost, r.SelfPreemptions)
	if r.TargetSwitchesBefore != nil {
		fmt.Fprintf(&b, "; target involuntary switches %.0f/s before, %.0f/s during", *r.TargetSwitchesBefore, r.TargetSwitchesDuring)
	} else {
		fmt.Fprintf(&b, "; target involuntary switches %.0f/s", r.TargetSwitchesDuring)
	}
	return b.String()
}

// Switches are the involuntary context switches of a process's threads, by tid.
type Switches map[int]uint64

// InvoluntarySwitches reads nonvoluntary_ctxt_switches of every thread of pid.
// A thread's status file is read into a buffer kept for the whole scan
// (one read where it fits), and the count is its last lines' (a target of
// thousands of threads is read four times a session: the file's reading
// and splitting were half of a scan's CPU; BenchmarkInvoluntarySwitches).
func InvoluntarySwitches(pid int) Switches {
	out := Switches{}
	if pid <= 0 {
		return out
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return out
	}
	buf := make([]byte, 4096)
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if x, ok := nonvoluntary(dir+e.Name()+"/status", &buf); ok {
			out[tid] = x
		}
	}
	return out
}

var nonvoluntaryKey = []byte("nonvoluntary_ctxt_switches:")

// nonvoluntary reads the count from a thread's status file into *buf
// (grown when the file does not fit).
func nonvoluntary(path string, buf *[]byte) (uint64, bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	n := 0
	for {
		m, err := unix.Read(fd, (*buf)[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || m <= 0 {
			break
		}
		if n += m; n == len(*buf) {
			*buf = append(*buf, make([]byte, len(*buf))...)
		}
	}
	b := (*buf)[:n]
	i := bytes.LastIndex(b, nonvoluntaryKey)
	if i < 0 {
		return 0, false
	}
	v := b[i+len(nonvoluntaryKey):]
	if j := bytes.IndexByte(v, '\n'); j >= 0 {
		v = v[:j]
	}
	x, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
	return x, err == nil
}

func (s Switches) merge(o Switches) {
	for tid, n := range o {
		s[tid] = max(s[tid], n)
	}
}

// Since is how many switches the threads of now made since then: threads
// that exited in between are not counted, threads born since count in full.
func (now Switches) Since(then Switches) uint64 {
	var n uint64
	for tid, x := range now {
		if y, ok := then[tid]; ok && y <= x {
			n += x - y
		} else if !ok {
			n += x
		}
	}
	return n
}
