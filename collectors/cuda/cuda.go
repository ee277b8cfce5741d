// Package cuda is the CUDA collector: driver (libcuda) and runtime
// (libcudart) API calls of target processes, from uprobes on the
// libraries each target really maps (bpf/cuda.bpf.c). Launches and
// asynchronous copies are probed at entry only (a uprobe hit is a trap);
// synchronizes, blocking copies, allocations and frees also at return, for
// their duration and return code.
package cuda

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/internal/hist"
)

// MaxTargets bounds the aggregate slots; slot 0 is unused (uprobes only
// see targets).
const MaxTargets = 64

// Flags say what a target streams through the ring buffer.
type Flags uint32

const (
	// StreamBlocking streams one event per blocking call (synchronizes,
	// blocking copies, allocations, frees) and counts launch dimensions.
	StreamBlocking Flags = 1
	// StreamAll also streams the entry-only calls (launches, asynchronous
	// copies): one event per launch, for timelines.
	StreamAll Flags = 3
)

// Event is one call of a streamed target, as the kernel wrote it. Start
// and End are CLOCK_MONOTONIC ns; for entry-only calls End == Start and
// HasRet is 0. Call is a Call id.
type Event = cudaEvent

// CallID is the event's call.
func (e *cudaEvent) CallID() Call { return Call(e.Call) }

// Name is the event's call name ("cuStreamSynchronize").
func (e *cudaEvent) Name() string { return Call(e.Call).String() }

// DurationNs is End - Start.
func (e *cudaEvent) DurationNs() uint64 {
	if e.End < e.Start {
		return 0
	}
	return e.End - e.Start
}

// Blocking reports whether the calling thread waited in the call for its
// whole duration (a synchronize, a blocking copy, an allocation or a free):
// the time attribution counts as gpu_sync.
func (e *cudaEvent) Blocking() bool { return e.HasRet != 0 && Call(e.Call).Info().Blocking }

// Failed reports a non-zero return code.
func (e *cudaEvent) Failed() bool { return e.HasRet != 0 && e.Ret != 0 }

// OutOfMemory reports an allocation that failed for lack of device memory.
func (e *cudaEvent) OutOfMemory() bool {
	return e.HasRet != 0 && e.Ret == 2 && Call(e.Call).Info().Kind == Alloc
}

// Counts are a call's in-kernel counters for one target slot.
type Counts struct {
	Count       uint64
	Errors      uint64
	Bytes       uint64
	OutOfMemory uint64
}

// LaunchDims counts launches of one call with one grid and block.
type LaunchDims struct {
	Call  string    `json:"call"`
	Grid  [3]uint32 `json:"grid"`
	Block [3]uint32 `json:"block"`
	Count uint64    `json:"count"`
}

// Config configures a Collector.
type Config struct {
	// RingBufferBytes sizes the event ring buffer (a power of two, default 4 MiB).
	RingBufferBytes uint32
	// OnEvent receives each event of a streamed target from the reader
	// goroutine. It must be quick; the pointer is valid during the call only.
	OnEvent func(*Event)
	Logger  *slog.Logger
}

type attachment struct {
	lib   Library
	links []link.Link
}

type proc struct {
	libs map[fileKey]*attachment
}

// Collector loads the CUDA programs and attaches them to the libraries of
// each target process.
type Collector struct {
	cfg       Config
	log       *slog.Logger
	objs      cudaObjects
	rd        *ringbuf.Reader
	loaded    bool
	decodeErr atomic.Uint64

	mu     sync.Mutex
	procs  map[uint32]*proc
	offs   map[fileKey]map[string]uint64 // symbol offsets per file
	closed bool

	closeOnce sync.Once
	closeErr  error
}

// New returns a collector; Start loads it.
func New(cfg Config) *Collector {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RingBufferBytes == 0 {
		cfg.RingBufferBytes = 4 << 20
	}
	return &Collector{
		cfg: cfg, log: cfg.Logger.With("component", "cuda"),
		procs: map[uint32]*proc{}, offs: map[fileKey]map[string]uint64{},
	}
}

// Start loads the programs and opens the ring buffer; nothing is attached
// until Attach. On error it releases everything it took.
func (c *Collector) Start(context.Context) (err error) {
	spec, err := loadCuda()
	if err != nil {
		return fmt.Errorf("reading the cuda eBPF object: %w", err)
	}
	spec.Maps["events"].MaxEntries = c.cfg.RingBufferBytes
	if err := spec.LoadAndAssign(&c.objs, nil); err != nil {
		return bpfutil.LoadError("the cuda programs", err)
	}
	c.loaded = true
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	c.rd, err = ringbuf.NewReader(c.objs.Events)
	if err != nil {
		return fmt.Errorf("opening the cuda ring buffer: %w", err)
	}
	c.log.Debug("loaded", "programs", c.ProgramIDs())
	return nil
}

// Run drains the ring buffer into OnEvent until ctx is done (after
// delivering what the kernel wrote until then) or Close.
func (c *Collector) Run(ctx context.Context) error {
	if c.rd == nil {
		return errors.New("cuda collector not started")
	}
	stop := context.AfterFunc(ctx, func() { _ = c.rd.Flush() })
	defer stop()
	fn := c.cfg.OnEvent
	if fn == nil {
		fn = func(*Event) {}
	}
	return bpfutil.DrainRing(c.rd, &c.decodeErr, fn)
}

// Close detaches every uprobe before closing programs and maps. It is
// idempotent.
func (c *Collector) Close() error {
	c.closeOnce.Do(func() {
		var errs []error
		if c.rd != nil {
			errs = append(errs, c.rd.Close())
		}
		c.mu.Lock()
		c.closed = true
		for _, p := range c.procs {
			for _, a := range p.libs {
				errs = append(errs, a.close())
			}
		}
		clear(c.procs)
		c.mu.Unlock()
		if c.loaded {
			errs = append(errs, c.objs.Close())
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

func (a *attachment) close() error {
	var errs []error
	for i := len(a.links) - 1; i >= 0; i-- {
		errs = append(errs, a.links[i].Close())
	}
	a.links = nil
	return errors.Join(errs...)
}

// SetTarget aggregates the calls of tgid under slot idx (1..MaxTargets-1)
// and streams what flags say. It attaches nothing: see Attach.
func (c *Collector) SetTarget(tgid, idx uint32, flags Flags) error {
	if idx == 0 || idx >= MaxTargets {
		return fmt.Errorf("target slot %d out of range 1..%d", idx, MaxTargets-1)
	}
	if err := c.objs.Targets.Put(tgid, cudaTarget{Idx: idx, Flags: uint32(flags)}); err != nil {
		return fmt.Errorf("adding target pid %d: %w", tgid, err)
	}
	return nil
}

// DeleteTarget stops following tgid and detaches its uprobes. Deleting an
// unknown tgid is not an error.
func (c *Collector) DeleteTarget(tgid uint32) error {
	var errs []error
	if err := c.objs.Targets.Delete(tgid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		errs = append(errs, fmt.Errorf("removing target pid %d: %w", tgid, err))
	}
	c.mu.Lock()
	if p := c.procs[tgid]; p != nil {
		for _, a := range p.libs {
			errs = append(errs, a.close())
		}
		delete(c.procs, tgid)
	}
	c.mu.Unlock()
	return errors.Join(errs...)
}

// Attach attaches the probes to each library of tgid not attached yet,
// filtered to tgid, and, with detach, detaches those of its libraries no
// longer in libs. Symbols a library lacks are skipped (debug log); a
// library where nothing attaches is an error, and the others are kept.
// It returns the libraries attached for tgid, with Symbols and Missing.
func (c *Collector) Attach(tgid uint32, libs []Library, detach bool) ([]Library, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || !c.loaded {
		return nil, errors.New("cuda collector not started")
	}
	p := c.procs[tgid]
	if p == nil {
		p = &proc{libs: map[fileKey]*attachment{}}
		c.procs[tgid] = p
	}
	var errs []error
	want := map[fileKey]bool{}
	for _, l := range libs {
		want[l.key()] = true
		if p.libs[l.key()] != nil {
			continue
		}
		a, err := c.attach(tgid, l)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.libs[l.key()] = a
	}
	if detach {
		for k, a := range p.libs {
			if !want[k] {
				c.log.Debug("detaching", "pid", tgid, "library", a.lib.Path)
				errs = append(errs, a.close())
				delete(p.libs, k)
			}
		}
	}
	out := make([]Library, 0, len(p.libs))
	for _, a := range p.libs {
		out = append(out, a.lib)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, errors.Join(errs...)
}

// attach probes every known symbol of l for tgid. Callers hold c.mu.
func (c *Collector) attach(tgid uint32, l Library) (*attachment, error) {
	offs, ok := c.offs[l.key()]
	if !ok {
		var err error
		offs, err = symbolOffsets(l.Open)
		if err != nil {
			return nil, fmt.Errorf("reading the symbols of %s: %w", l.Path, err)
		}
		c.offs[l.key()] = offs
	}
	ex, err := link.OpenExecutable(l.Open)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", l.Path, err)
	}
	a := &attachment{lib: l}
	a.lib.Missing = nil
	a.lib.Symbols = 0
	done := map[uint64]bool{} // aliases at one address attach once
	for id, info := range calls {
		call := Call(id)
		for _, name := range append([]string{info.Name}, info.Aliases...) {
			off, ok := offs[name]
			if !ok {
				if name == info.Name && (l.API == info.API.String()) {
					a.lib.Missing = append(a.lib.Missing, name)
					c.log.Debug("symbol not in library, skipped", "symbol", name, "library", l.Path)
				}
				continue
			}
			if done[off] {
				continue
			}
			done[off] = true
			opts := &link.UprobeOptions{Address: off, PID: int(tgid), Cookie: call.cookie()}
			up, err := ex.Uprobe(name, c.objs.CudaEnter, opts)
			if err != nil {
				a.close()
				return nil, fmt.Errorf("attaching uprobe %s in %s: %w", name, l.Path, err)
			}
			a.links = append(a.links, up)
			if info.Blocking {
				ret, err := ex.Uretprobe(name, c.objs.CudaExit, opts)
				if err != nil {
					a.close()
					return nil, fmt.Errorf("attaching uretprobe %s in %s: %w", name, l.Path, err)
				}
				a.links = append(a.links, ret)
			}
			a.lib.Symbols++
		}
	}
	if a.lib.Symbols == 0 {
		return nil, fmt.Errorf("attaching to %s: none of the CUDA symbols is in it", l.Path)
	}
	c.log.Debug("attached", "pid", tgid, "library", l.Path, "symbols", a.lib.Symbols, "missing", len(a.lib.Missing))
	return a, nil
}

// Libraries lists the libraries attached for tgid.
func (c *Collector) Libraries(tgid uint32) []Library {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.procs[tgid]
	if p == nil {
		return nil
	}
	out := make([]Library, 0, len(p.libs))
	for _, a := range p.libs {
		out = append(out, a.lib)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Counts reads the in-kernel counters of every call for slot idx.
func (c *Collector) Counts(idx uint32) ([]Counts, error) {
	if idx >= MaxTargets {
		return nil, fmt.Errorf("target slot %d out of range", idx)
	}
	out := make([]Counts, len(calls))
	var per []cudaCounts
	for i := range calls {
		key := idx*maxCalls + uint32(i)
		if err := c.objs.CallCounts.Lookup(key, &per); err != nil {
			return nil, fmt.Errorf("reading call_counts[%d]: %w", key, err)
		}
		for _, p := range per {
			out[i].Count += p.Count
			out[i].Errors += p.Errors
			out[i].Bytes += p.Bytes
			out[i].OutOfMemory += p.Oom
		}
	}
	return out, nil
}

// Durations reads the in-kernel duration histogram of a blocking call for slot idx.
func (c *Collector) Durations(idx uint32, call Call) (hist.Log2, error) {
	var h cudaHist
	key := idx*maxCalls + uint32(call)
	if err := c.objs.Durations.Lookup(key, &h); err != nil {
		return hist.Log2{}, fmt.Errorf("reading durations[%d]: %w", key, err)
	}
	return hist.Log2{Slots: append([]uint64(nil), h.Slots[:]...), Count: h.Count, SumNs: h.SumNs}, nil
}

// CopyBytes reads the bytes copied per direction for slot idx (indexed by Direction).
func (c *Collector) CopyBytes(idx uint32) ([numDirections]uint64, error) {
	var out [numDirections]uint64
	for d := HostToDevice; d < numDirections; d++ {
		n, err := bpfutil.SumPerCPU(c.objs.CopyBytes, idx*maxDirs+uint32(d))
		if err != nil {
			return out, err
		}
		out[d] = n
	}
	return out, nil
}

// LaunchDims reads the launch counts by grid and block of slot idx (streamed targets only).
func (c *Collector) LaunchDims(idx uint32) ([]LaunchDims, error) {
	var out []LaunchDims
	var k cudaDimsKey
	var n uint64
	it := c.objs.LaunchDims.Iterate()
	for it.Next(&k, &n) {
		if k.Idx != idx {
			continue
		}
		out = append(out, LaunchDims{Call: Call(k.Call).String(), Grid: k.Grid, Block: k.Block, Count: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return fmt.Sprint(out[i]) < fmt.Sprint(out[j])
	})
	return out, it.Err()
}

// Lost is the number of events the ring buffer could not take.
func (c *Collector) Lost() (uint64, error) { return bpfutil.SumPerCPU(c.objs.Lost, 0) }

// DimsOverflow is the number of launches not counted by grid and block
// because the kernel's table was full.
func (c *Collector) DimsOverflow() (uint64, error) { return bpfutil.SumPerCPU(c.objs.Lost, 1) }

// DecodeErrors is the number of ring buffer records too short to decode.
func (c *Collector) DecodeErrors() uint64 { return c.decodeErr.Load() }

// ProgramIDs are the kernel IDs of the loaded programs (for logs and leak checks).
func (c *Collector) ProgramIDs() []ebpf.ProgramID {
	var ids []ebpf.ProgramID
	for _, p := range []*ebpf.Program{c.objs.CudaEnter, c.objs.CudaExit} {
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

// LinkIDs are the kernel IDs of the attached links (uprobe perf links
// have IDs on kernels with BPF perf links, 5.15+).
func (c *Collector) LinkIDs() []link.ID {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []link.ID
	for _, p := range c.procs {
		for _, a := range p.libs {
			for _, l := range a.links {
				if info, err := l.Info(); err == nil {
					ids = append(ids, info.ID)
				}
			}
		}
	}
	return ids
}
