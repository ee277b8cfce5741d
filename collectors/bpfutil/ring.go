package bpfutil

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/internal/overhead"
)

// The pipeline's kernel half is bpf/include/pipeline.h: one ring buffer
// (`events`) per object whose records are submitted without a wakeup, a
// per-CPU `pipe_stats` counter block and, for objects that follow
// processes, a `targets` map with its `nr_targets` count.

// DefaultRingBytes is the ring buffer size of every collector unless set.
const DefaultRingBytes = 4 << 20

// DefaultDrainPeriod is how often the reader drains a ring buffer when the
// kernel does not wake it (it does only when a record takes the ring past a
// quarter or a half of its size).
const DefaultDrainPeriod = 100 * time.Millisecond

// ReaderNice is the nice value of every reader thread: bpfbench's readers
// yield to the threads they observe.
const ReaderNice = 19

// The indexes of struct pipe_stats (enum pipe_stat of pipeline.h).
const (
	statLost        = 0
	statFolded      = 1
	statWakeups     = 2
	statOverflow    = 3
	statSelfPreempt = 4
	statUnmatched   = 5
	numPipeStats    = 8
)

type pipeStats struct {
	N [numPipeStats]uint64
}

// MaxTargets bounds the target slots of every collector (MAX_TARGETS of
// bpfbench.h); slot 0 is host-wide.
const MaxTargets = 64

// TargetHintSlots is TARGET_HINT_SLOTS of bpf/include/target_hint.h.
const TargetHintSlots = 32768

// Target is the value of a targets map entry (struct target of bpfbench.h).
type Target struct {
	Idx   uint32
	Flags uint32
}

// The flags of a target (TARGET_* of bpfbench.h).
const (
	// TargetStream: the target's events are streamed.
	TargetStream = 1
	// TargetClient: the target is the load generator, not the server; its
	// records are flagged as the client's.
	TargetClient = 2
	// TargetChild: the kernel added the target, a process a target forked.
	TargetChild = 4
)

// StreamFlags are the target flags of a target streamed or not.
func StreamFlags(stream bool) uint32 {
	if stream {
		return TargetStream
	}
	return 0
}

var readerCPUs atomic.Pointer[unix.CPUSet]

// SetReaderCPUs restricts every reader thread started afterwards to cpus
// (nil or empty: no restriction), so that bpfbench stays off the CPUs it
// is told to keep free.
func SetReaderCPUs(cpus []int) {
	if len(cpus) == 0 {
		readerCPUs.Store(nil)
		return
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	readerCPUs.Store(&set)
}

// ReaderCPUs is the set SetReaderCPUs gave, or nil.
func ReaderCPUs() *unix.CPUSet { return readerCPUs.Load() }

// ConfigureRing sizes the ring buffer of spec (ringBytes, a power of two;
// 0 for DefaultRingBytes) and sets the pipeline's load-time constants.
func ConfigureRing(spec *ebpf.CollectionSpec, ringBytes uint32) error {
	if ringBytes == 0 {
		ringBytes = DefaultRingBytes
	}
	if ringBytes&(ringBytes-1) != 0 || ringBytes < 4096 {
		return fmt.Errorf("ring buffer size %d is not a power of two of at least 4096", ringBytes)
	}
	m, ok := spec.Maps["events"]
	if !ok {
		return errors.New("the object has no events ring buffer (include pipeline.h)")
	}
	m.MaxEntries = ringBytes
	for name, v := range map[string]any{"wakeup_bytes": uint64(ringBytes / 4), "self_tgid": uint32(os.Getpid())} {
		sv, ok := spec.Variables[name]
		if !ok {
			return fmt.Errorf("the object has no %s constant (include pipeline.h)", name)
		}
		if err := sv.Set(v); err != nil {
			return fmt.Errorf("setting %s: %w", name, err)
		}
	}
	return nil
}

// PipeStats are a collector's pipeline counters, summed over CPUs.
type PipeStats struct {
	// Lost records: the ring buffer was full.
	Lost uint64 `json:"lost"`
	// Folded intervals: short ones summed in the kernel instead of sent.
	Folded uint64 `json:"folded"`
	// ForcedWakeups: records that woke the reader (ring past a quarter or a half).
	ForcedWakeups uint64 `json:"forced_wakeups"`
	// Overflow: events an aggregate table had no room for.
	Overflow uint64 `json:"overflow"`
	// SelfPreemptions: a target thread preempted by a bpfbench thread.
	SelfPreemptions uint64 `json:"self_preemptions"`
	// Unmatched: reads of unix-socket data whose write's stamp was never
	// seen; they carry no data edge (collectors/sched's data edges).
	Unmatched uint64 `json:"unmatched,omitempty"`
}

// DrainStats are what a reader counted of itself.
type DrainStats struct {
	// Wakeups of the reader thread: timer expiries plus forced wakeups.
	Wakeups uint64 `json:"wakeups"`
	// Records delivered.
	Records uint64 `json:"records"`
	// DecodeErrors: records too short to decode.
	DecodeErrors uint64 `json:"decode_errors"`
	// CPUNs is the reader thread's own CPU time.
	CPUNs uint64 `json:"cpu_ns"`
}

// Base is what every eBPF collector shares: loading its object and
// attaching its tp_btf programs (Load), the ring buffer reader (Drain), the
// pipeline counters, the targets map and an idempotent Close that releases
// the reader, then what OnClose registered, in reverse order (links before
// the objects they use).
type Base struct {
	name      string
	log       *slog.Logger
	events    *ebpf.Map
	stats     *ebpf.Map
	targets   *ebpf.Map
	nrTargets *ebpf.Variable
	// targetHint (bpf/include/target_hint.h), when the object has one:
	// the filter in front of targets, set before a target is added.
	targetHint *ebpf.Map
	programs   []*ebpf.Program
	links      []link.Link
	// The tracepoints whose programs were loaded, and those this kernel lacks.
	attached, missing []string
	// variants: the programs loaded in place of others by a tracepoint's
	// arguments; standIns: the fentry/fexit programs traced in place of a
	// missing tracepoint (tracepoint -> "fexit/fn"...). Variants lists both.
	variants []string
	standIns map[string][]string
	rd       *ringbuf.Reader
	closers  []func() error
	// final are the pipeline counters as Close found them.
	final atomic.Pointer[PipeStats]

	targetsMu sync.Mutex
	targetSet map[uint32]bool

	wakeups, records, decodeErr, cpuNs atomic.Uint64

	closeOnce sync.Once
	closeErr  error
}

// NewBase returns the shared half of collector name.
func NewBase(name string, log *slog.Logger) *Base {
	if log == nil {
		log = slog.Default()
	}
	return &Base{name: name, log: log.With("component", name)}
}

// Name is the collector's name.
func (b *Base) Name() string { return b.name }

// Log is the collector's logger.
func (b *Base) Log() *slog.Logger { return b.log }

// OnClose registers fn to run at Close, before what was registered earlier.
func (b *Base) OnClose(fn func() error) { b.closers = append(b.closers, fn) }

// openReader opens the reader of the loaded events ring.
func (b *Base) openReader() error {
	if b.events == nil || b.stats == nil {
		return fmt.Errorf("the %s object has no pipeline maps (include pipeline.h)", b.name)
	}
	rd, err := ringbuf.NewReader(b.events)
	if err != nil {
		return fmt.Errorf("opening the %s ring buffer: %w", b.name, err)
	}
	b.rd = rd
	return nil
}

// Started reports whether Load succeeded.
func (b *Base) Started() bool { return b.rd != nil }

// Close keeps the pipeline counters (PipeStats and Lost report them
// afterwards), closes the reader, then runs the OnClose functions in
// reverse order. It is idempotent.
func (b *Base) Close() error {
	b.closeOnce.Do(func() {
		if b.stats != nil {
			if s, err := b.PipeStats(); err == nil {
				b.final.Store(&s)
			}
		}
		var errs []error
		if b.rd != nil {
			errs = append(errs, b.rd.Close())
		}
		for i := len(b.closers) - 1; i >= 0; i-- {
			errs = append(errs, b.closers[i]())
		}
		b.closers = nil
		b.closeErr = errors.Join(errs...)
	})
	return b.closeErr
}

// closeLinks detaches the tp_btf programs Load attached.
func (b *Base) closeLinks() error {
	var errs []error
	for i := len(b.links) - 1; i >= 0; i-- {
		errs = append(errs, b.links[i].Close())
	}
	b.links = nil
	return errors.Join(errs...)
}

// Attached lists the tracepoints whose programs Load loaded.
func (b *Base) Attached() []string { return slices.Clone(b.attached) }

// Missing lists the tracepoints this kernel lacks; their programs were
// left out.
func (b *Base) Missing() []string { return slices.Clone(b.missing) }

// LinkIDs are the kernel IDs of the links Load made.
func (b *Base) LinkIDs() []link.ID {
	var ids []link.ID
	for _, l := range b.links {
		if info, err := l.Info(); err == nil {
			ids = append(ids, info.ID)
		}
	}
	return ids
}

// CheckSlot reports a target slot outside 1..MaxTargets-1.
func CheckSlot(idx uint32) error {
	if idx == 0 || idx >= MaxTargets {
		return fmt.Errorf("target slot %d out of range 1..%d", idx, MaxTargets-1)
	}
	return nil
}

// SetTarget puts tgid in the targets map under slot idx (1..MaxTargets-1)
// with flags and keeps nr_targets current.
func (b *Base) SetTarget(tgid, idx, flags uint32) error {
	if err := CheckSlot(idx); err != nil {
		return err
	}
	if b.targets == nil {
		return fmt.Errorf("the %s collector follows no process", b.name)
	}
	b.targetsMu.Lock()
	defer b.targetsMu.Unlock()
	if b.targetHint != nil {
		if err := b.targetHint.Put(tgid%TargetHintSlots, uint32(1)); err != nil {
			return fmt.Errorf("marking target pid %d in the target filter: %w", tgid, err)
		}
	}
	if err := b.targets.Put(tgid, Target{Idx: idx, Flags: flags}); err != nil {
		return fmt.Errorf("adding target pid %d: %w", tgid, err)
	}
	if b.targetSet == nil {
		b.targetSet = map[uint32]bool{}
	}
	b.targetSet[tgid] = true
	return b.setNrTargets()
}

// DeleteTarget removes tgid; an unknown tgid is not an error.
func (b *Base) DeleteTarget(tgid uint32) error {
	if b.targets == nil {
		return nil
	}
	b.targetsMu.Lock()
	defer b.targetsMu.Unlock()
	if err := b.targets.Delete(tgid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("removing target pid %d: %w", tgid, err)
	}
	delete(b.targetSet, tgid)
	return b.setNrTargets()
}

func (b *Base) setNrTargets() error {
	if b.nrTargets == nil {
		return nil
	}
	if err := b.nrTargets.Set(uint32(len(b.targetSet))); err != nil {
		return fmt.Errorf("updating the target count: %w", err)
	}
	return nil
}

// PipeStats reads the kernel's pipeline counters (after Close: as Close
// found them).
func (b *Base) PipeStats() (PipeStats, error) {
	if s := b.final.Load(); s != nil {
		return *s, nil
	}
	if b.stats == nil {
		return PipeStats{}, fmt.Errorf("the %s collector is not started", b.name)
	}
	var per []pipeStats
	if err := b.stats.Lookup(uint32(0), &per); err != nil {
		return PipeStats{}, fmt.Errorf("reading the %s pipeline counters: %w", b.name, err)
	}
	var s PipeStats
	for _, p := range per {
		s.Lost += p.N[statLost]
		s.Folded += p.N[statFolded]
		s.ForcedWakeups += p.N[statWakeups]
		s.Overflow += p.N[statOverflow]
		s.SelfPreemptions += p.N[statSelfPreempt]
		s.Unmatched += p.N[statUnmatched]
	}
	return s, nil
}

// Losses are the records the ring buffer could not take and those too
// short to decode (collectors.Host).
func (b *Base) Losses() (lost, decodeErrors uint64) {
	s, _ := b.PipeStats()
	return s.Lost, b.decodeErr.Load()
}

// Lost is the number of records the ring buffer could not take plus those
// too short to decode (collectors.Section).
func (b *Base) Lost() uint64 {
	lost, dec := b.Losses()
	return lost + dec
}

// DecodeErrors is the number of records too short to decode.
func (b *Base) DecodeErrors() uint64 { return b.decodeErr.Load() }

// DrainStats is what the reader counted of itself.
func (b *Base) DrainStats() DrainStats {
	return DrainStats{Wakeups: b.wakeups.Load(), Records: b.records.Load(), DecodeErrors: b.decodeErr.Load(), CPUNs: b.cpuNs.Load()}
}

// OverheadCounters are the collector's cumulative pipeline figures for
// the session's cost report.
func (b *Base) OverheadCounters() overhead.Counters {
	ps, _ := b.PipeStats()
	ns, runs := b.ProgramRuntime()
	return overhead.Counters{
		Records: b.records.Load(), Wakeups: b.wakeups.Load(), ReaderCPUNs: b.cpuNs.Load(),
		Lost: ps.Lost, Folded: ps.Folded, ForcedWakeups: ps.ForcedWakeups, Overflow: ps.Overflow,
		SelfPreemptions: ps.SelfPreemptions, DecodeErr: b.decodeErr.Load(), BPFRunNs: ns, BPFRuns: runs,
	}
}

// Programs are the loaded programs, for IDs and run-time statistics.
func (b *Base) Programs() []*ebpf.Program { return b.programs }

// ProgramIDs are the kernel IDs of the loaded programs.
func (b *Base) ProgramIDs() []ebpf.ProgramID {
	var ids []ebpf.ProgramID
	for _, p := range b.programs {
		if p == nil {
			continue
		}
		if info, err := p.Info(); err == nil {
			if id, ok := info.ID(); ok {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// ProgramRuntime sums the kernel's run-time statistics of the programs
// (zero unless BPF statistics are enabled, see EnableStats).
func (b *Base) ProgramRuntime() (ns, runs uint64) {
	for _, p := range b.programs {
		if p == nil {
			continue
		}
		st, err := p.Stats()
		if err != nil {
			continue
		}
		ns += uint64(st.Runtime)
		runs += st.RunCount
	}
	return ns, runs
}

// Drain delivers the records of b's ring buffer to fn, cast to *T
// (zero-copy, length-checked; the pointer is valid during the call only;
// a nil fn counts them only),
// until ctx is done (after delivering everything written until then) or
// Close. It runs on a thread of its own at nice ReaderNice, on the CPUs of
// SetReaderCPUs, and sleeps until period has passed or the kernel woke it
// (a record took the ring past a quarter or a half of its size): the event
// rate costs no wakeups.
func Drain[T any](ctx context.Context, b *Base, period time.Duration, fn func(*T)) error {
	if b.rd == nil {
		return fmt.Errorf("%s collector not started", b.name)
	}
	if period <= 0 {
		period = DefaultDrainPeriod
	}
	if fn == nil {
		fn = func(*T) {}
	}
	errc := make(chan error, 1)
	go func() {
		// The thread is never handed back: it exits with the goroutine,
		// so its priority and affinity cannot leak to other goroutines.
		runtime.LockOSThread()
		errc <- drainLocked(ctx, b, period, fn)
	}()
	return <-errc
}

func drainLocked[T any](ctx context.Context, b *Base, period time.Duration, fn func(*T)) error {
	tid := unix.Gettid()
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, ReaderNice); err != nil {
		b.log.Debug("lowering the reader's priority", "err", err)
	}
	if set := ReaderCPUs(); set != nil {
		if err := unix.SchedSetaffinity(0, set); err != nil {
			b.log.Warn("restricting the reader to --cpus", "err", err)
		}
	}
	var rec ringbuf.Record
	size := int(unsafe.Sizeof(*new(T)))
	past := time.Unix(1, 0)
	cpu0 := threadCPU()
	defer func() { b.cpuNs.Add(threadCPU() - cpu0) }()
	drain := func() error {
		b.rd.SetDeadline(past)
		for {
			if err := b.rd.ReadInto(&rec); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ringbuf.ErrFlushed) {
					return nil
				}
				return err
			}
			b.records.Add(1)
			if len(rec.RawSample) < size {
				b.decodeErr.Add(1)
				continue
			}
			fn((*T)(unsafe.Pointer(&rec.RawSample[0])))
		}
	}
	wait, closeWait, err := b.waiter(ctx, period)
	if err != nil {
		return err
	}
	defer closeWait()
	for {
		if err := wait(); err != nil {
			return err
		}
		b.wakeups.Add(1)
		done := ctx.Err() != nil
		if err := drain(); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, os.ErrClosed) {
				return nil
			}
			return fmt.Errorf("reading the %s ring buffer: %w", b.name, err)
		}
		now := threadCPU()
		b.cpuNs.Add(now - cpu0)
		cpu0 = now
		if done {
			return nil
		}
	}
}

// waiter returns wait, which returns when the kernel woke the ring's
// readers, period passed or ctx is done. It parks the reader on the Go
// runtime's poller (a copy of the ring's descriptor): a thread blocked in
// a system call instead keeps its P in a system call, which the runtime's
// monitor takes back after 10 ms, and each time starts polling again every
// 20 µs (a wakeup of its own thousands of times a second: most of an idle
// reader's cost). Where the descriptor cannot be polled so, the reader
// blocks in epoll_wait.
func (b *Base) waiter(ctx context.Context, period time.Duration) (wait func() error, closeWait func(), err error) {
	if wait, closeWait, ok := b.pollWaiter(ctx, period); ok {
		return wait, closeWait, nil
	}
	return b.epollWaiter(ctx, period)
}

func (b *Base) pollWaiter(ctx context.Context, period time.Duration) (wait func() error, closeWait func(), ok bool) {
	fd, err := unix.FcntlInt(uintptr(b.events.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, nil, false
	}
	// Non-blocking: os.NewFile puts it on the poller (a map's descriptor
	// has no read or write for the flag to change).
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, nil, false
	}
	f := os.NewFile(uintptr(fd), b.name+" ring")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, false
	}
	// A descriptor the poller did not take has no deadlines
	// (os.ErrNoDeadline).
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, nil, false
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Unix(1, 0)) })
	wait = func() error {
		if err := f.SetReadDeadline(time.Now().Add(period)); err != nil {
			return fmt.Errorf("waiting on the %s ring buffer: %w", b.name, err)
		}
		if ctx.Err() != nil {
			return nil // stop's deadline may have come before this one
		}
		first := true
		err := rc.Read(func(uintptr) bool {
			// The first call asks the poller to wait; the next is after
			// a wakeup.
			w := !first
			first = false
			return w
		})
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("waiting on the %s ring buffer: %w", b.name, err)
		}
		return nil
	}
	return wait, func() { stop(); f.Close() }, true
}

func (b *Base) epollWaiter(ctx context.Context, period time.Duration) (wait func() error, closeWait func(), err error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the %s reader's epoll: %w", b.name, err)
	}
	stopFd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(ep)
		return nil, nil, fmt.Errorf("creating the %s reader's eventfd: %w", b.name, err)
	}
	for _, fd := range []int{b.events.FD(), stopFd} {
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			unix.Close(ep)
			unix.Close(stopFd)
			return nil, nil, fmt.Errorf("polling the %s ring buffer: %w", b.name, err)
		}
	}
	stop := context.AfterFunc(ctx, func() {
		var one = [8]byte{1}
		_, _ = unix.Write(stopFd, one[:])
	})
	events := make([]unix.EpollEvent, 2)
	ms := int(period / time.Millisecond)
	wait = func() error {
		if _, err := unix.EpollWait(ep, events, ms); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("waiting on the %s ring buffer: %w", b.name, err)
		}
		return nil
	}
	return wait, func() { stop(); unix.Close(ep); unix.Close(stopFd) }, nil
}

func threadCPU() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return uint64(ts.Nano())
}

// EnableStats turns on the kernel's BPF run-time statistics until the
// returned closer is closed (they cost two clock reads per program run).
func EnableStats() (interface{ Close() error }, error) {
	return ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
}

// ParseCPUList parses a CPU list as taskset and cgroups write it: "0,2-3".
func ParseCPUList(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("CPU list %q: %q is not a CPU number", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("CPU list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("CPU list %q names no CPU", s)
	}
	return out, nil
}

// RestrictToCPUs keeps bpfbench on cpus: every thread of this process now
// (threads created later inherit it from their creator) and every reader
// thread started later. The CPUs not listed are left to the target.
func RestrictToCPUs(cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	SetReaderCPUs(cpus)
	return eachThread(func(tid int) error {
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("restricting thread %d to CPUs %v: %w", tid, cpus, err)
		}
		return nil
	})
}

// eachThread calls fn for every thread of this process; threads that
// exit meanwhile are skipped.
func eachThread(fn func(tid int) error) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("listing this process's threads: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := fn(tid); err != nil && !errors.Is(err, unix.ESRCH) {
			return err
		}
	}
	return nil
}

// NiceProcess sets the nice value of every thread of this process (threads
// created later inherit it from their creator): an observer that must not
// compete with what it watches, as `attach` is.
func NiceProcess(nice int) error {
	return eachThread(func(tid int) error {
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
			return fmt.Errorf("setting thread %d to nice %d: %w", tid, nice, err)
		}
		return nil
	})
}

// LoadReport is what a collector's load found on this kernel.
type LoadReport struct {
	// Programs is the number of programs loaded.
	Programs int
	// Attached are the tracepoints attached; Missing those the kernel
	// lacks (left out); Variants the programs loaded in place of others,
	// each with why.
	Attached, Missing, Variants []string
	// StandIns are the functions traced in place of each missing
	// tracepoint ("fexit/tcp_sendmsg"), also in Variants.
	StandIns map[string][]string
}

// Report is what Load found.
func (b *Base) Report() LoadReport {
	standIns := make(map[string][]string, len(b.standIns))
	for tp, fns := range b.standIns {
		standIns[tp] = slices.Clone(fns)
	}
	return LoadReport{Programs: len(b.programs), Attached: b.Attached(), Missing: b.Missing(), Variants: b.Variants(), StandIns: standIns}
}
