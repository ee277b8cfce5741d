// Package sched is the scheduler collector: run-queue latency and off-CPU
// time by state, from the sched_wakeup, sched_wakeup_new and sched_switch
// tp_btf tracepoints (bpf/sched.bpf.c).
package sched

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

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
var Tracepoints = []string{"sched_wakeup", "sched_wakeup_new", "sched_switch"}

// MaxTargets bounds the aggregate slots; index 0 is host-wide.
const MaxTargets = 64

// Config configures a Collector.
type Config struct {
	// HostWide aggregates run-queue latency of every thread on the host
	// (the daemon); otherwise only of targets (a session).
	HostWide bool
	// RingBufferBytes sizes the event ring buffer (a power of two, default 4 MiB).
	RingBufferBytes uint32
	// OnEvent receives each event of a streamed target from the reader
	// goroutine. It must be quick; the pointer is valid during the call only.
	OnEvent func(*Event)
	Logger  *slog.Logger
}

// Collector loads and runs the scheduler programs.
type Collector struct {
	cfg       Config
	log       *slog.Logger
	objs      schedObjects
	links     []link.Link
	rd        *ringbuf.Reader
	loaded    bool
	decodeErr atomic.Uint64
	closeOnce sync.Once
	closeErr  error

	targetsMu sync.Mutex
	targetSet map[uint32]bool // mirrors the targets map, for nr_targets
}

// New returns a collector; Start loads it.
func New(cfg Config) *Collector {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RingBufferBytes == 0 {
		cfg.RingBufferBytes = 4 << 20
	}
	return &Collector{cfg: cfg, log: cfg.Logger.With("component", "sched")}
}

// Start loads the programs and attaches them. On error it releases
// everything it took.
func (c *Collector) Start(context.Context) (err error) {
	spec, err := loadSched()
	if err != nil {
		return fmt.Errorf("reading the sched eBPF object: %w", err)
	}
	if err := spec.Variables["host_wide"].Set(c.cfg.HostWide); err != nil {
		return fmt.Errorf("configuring sched: %w", err)
	}
	spec.Maps["events"].MaxEntries = c.cfg.RingBufferBytes
	if err := spec.LoadAndAssign(&c.objs, nil); err != nil {
		return bpfutil.LoadError("the sched programs", err)
	}
	c.loaded = true
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	for _, p := range []struct {
		name string
		prog *ebpf.Program
	}{
		{"sched_wakeup", c.objs.SchedWakeup},
		{"sched_wakeup_new", c.objs.SchedWakeupNew},
		{"sched_switch", c.objs.SchedSwitch},
	} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p.prog})
		if err != nil {
			return fmt.Errorf("attaching tp_btf/%s: %w", p.name, err)
		}
		c.links = append(c.links, l)
	}
	c.rd, err = ringbuf.NewReader(c.objs.Events)
	if err != nil {
		return fmt.Errorf("opening the sched ring buffer: %w", err)
	}
	c.log.Debug("attached", "programs", c.ProgramIDs(), "host_wide", c.cfg.HostWide)
	return nil
}

// Run drains the ring buffer into OnEvent until ctx is done (after
// delivering what the kernel wrote until then) or Close.
func (c *Collector) Run(ctx context.Context) error {
	if c.rd == nil {
		return errors.New("sched collector not started")
	}
	stop := context.AfterFunc(ctx, func() { _ = c.rd.Flush() })
	defer stop()
	fn := c.cfg.OnEvent
	if fn == nil {
		fn = func(*Event) {}
	}
	return bpfutil.DrainRing(c.rd, &c.decodeErr, fn)
}

// Close detaches links before closing programs and maps. It is idempotent.
func (c *Collector) Close() error {
	c.closeOnce.Do(func() {
		var errs []error
		if c.rd != nil {
			errs = append(errs, c.rd.Close())
		}
		for i := len(c.links) - 1; i >= 0; i-- {
			errs = append(errs, c.links[i].Close())
		}
		if c.loaded {
			errs = append(errs, c.objs.Close())
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// SetTarget aggregates the threads of tgid under slot idx (1..MaxTargets-1)
// and, with stream, sends their events through the ring buffer.
func (c *Collector) SetTarget(tgid uint32, idx uint32, stream bool) error {
	if idx == 0 || idx >= MaxTargets {
		return fmt.Errorf("target slot %d out of range 1..%d", idx, MaxTargets-1)
	}
	v := schedTarget{Idx: idx}
	if stream {
		v.Flags = 1
	}
	c.targetsMu.Lock()
	defer c.targetsMu.Unlock()
	if err := c.objs.Targets.Put(tgid, v); err != nil {
		return fmt.Errorf("adding target pid %d: %w", tgid, err)
	}
	if c.targetSet == nil {
		c.targetSet = map[uint32]bool{}
	}
	c.targetSet[tgid] = true
	return c.setNrTargets()
}

// setNrTargets tells the programs how many targets there are: with none
// they skip the targets lookups on every switch.
func (c *Collector) setNrTargets() error {
	if err := c.objs.NrTargets.Set(uint32(len(c.targetSet))); err != nil {
		return fmt.Errorf("updating the target count: %w", err)
	}
	return nil
}

// DeleteTarget stops following tgid. Deleting an unknown tgid is not an error.
func (c *Collector) DeleteTarget(tgid uint32) error {
	c.targetsMu.Lock()
	defer c.targetsMu.Unlock()
	if err := c.objs.Targets.Delete(tgid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("removing target pid %d: %w", tgid, err)
	}
	delete(c.targetSet, tgid)
	return c.setNrTargets()
}

// Targets lists the tgids currently followed, with their slots.
func (c *Collector) Targets() (map[uint32]uint32, error) {
	out := map[uint32]uint32{}
	var k uint32
	var v schedTarget
	it := c.objs.Targets.Iterate()
	for it.Next(&k, &v) {
		out[k] = v.Idx
	}
	return out, it.Err()
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
// (0 = every thread of the host when HostWide, else every target).
func (c *Collector) RunqueueHist(idx uint32) (hist.Log2, error) {
	return c.readHist(c.objs.RunqHist, idx)
}

// OffCPUHist is the in-kernel off-CPU histogram of target slot idx for state s.
func (c *Collector) OffCPUHist(idx uint32, s State) (hist.Log2, error) {
	if s >= NumStates {
		return hist.Log2{}, fmt.Errorf("no off-CPU histogram for state %v", s)
	}
	return c.readHist(c.objs.OffcpuHist, idx*NumStates+uint32(s))
}

// Lost is the number of events the ring buffer could not take.
func (c *Collector) Lost() (uint64, error) { return bpfutil.SumPerCPU(c.objs.Lost, 0) }

// DecodeErrors is the number of ring buffer records too short to decode.
func (c *Collector) DecodeErrors() uint64 { return c.decodeErr.Load() }

// ProgramIDs are the kernel IDs of the loaded programs (for logs and leak checks).
func (c *Collector) ProgramIDs() []ebpf.ProgramID {
	var ids []ebpf.ProgramID
	for _, p := range []*ebpf.Program{c.objs.SchedWakeup, c.objs.SchedWakeupNew, c.objs.SchedSwitch} {
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

// LinkIDs are the kernel IDs of the attached links.
func (c *Collector) LinkIDs() []link.ID {
	var ids []link.ID
	for _, l := range c.links {
		if info, err := l.Info(); err == nil {
			ids = append(ids, info.ID)
		}
	}
	return ids
}
