// Package cuda is the CUDA collector: driver (libcuda) and runtime
// (libcudart) API calls of target processes, from uprobes on the
// libraries each target really maps (bpf/cuda.bpf.c). Launches (graph
// launches too) and asynchronous copies are probed at entry only (a uprobe
// hit is a trap); synchronizes, blocking copies, allocations and frees also
// at return, for their duration and return code, and so are the calls that
// are only counted: graph instantiations and exec destroys, pool trims and
// attribute sets (graphs.go).
package cuda

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/internal/hist"
	"github.com/bpfbench/bpfbench/internal/uprobecost"
)

// MaxTargets bounds the aggregate slots; slot 0 is unused (uprobes only
// see targets).
const MaxTargets = bpfutil.MaxTargets

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
	// DrainPeriod is how often the reader drains the ring (default 100 ms).
	DrainPeriod time.Duration
	// OnEvent receives each event of a streamed target from the reader
	// goroutine. It must be quick; the pointer is valid during the call only.
	OnEvent func(*Event)
	Logger  *slog.Logger
}

type attachment struct {
	lib   Library
	links []link.Link
	// The launch-rate probes (entry-only launches), kept apart so that
	// the budget can detach and re-attach them.
	ex       *link.Executable
	launches []launchProbe
	llinks   []link.Link
	noMulti  bool // the kernel refused a uprobe_multi link
}

type launchProbe struct {
	name string
	opts link.UprobeOptions
	kind uprobecost.Kind
}

type proc struct {
	libs map[fileKey]*attachment
	// launchesOff: the budget has detached the launch probes; libraries
	// attached meanwhile leave theirs off too.
	launchesOff bool
}

// Collector loads the CUDA programs and attaches them to the libraries of
// each target process.
type Collector struct {
	*bpfutil.Base
	cfg  Config
	objs cudaObjects

	mu     sync.Mutex
	procs  map[uint32]*proc
	offs   map[fileKey]map[string]uint64 // symbol offsets per file
	closed bool
}

// New returns a collector; Start loads it.
func New(cfg Config) *Collector {
	return &Collector{
		cfg: cfg, Base: bpfutil.NewBase("cuda", cfg.Logger),
		procs: map[uint32]*proc{}, offs: map[fileKey]map[string]uint64{},
	}
}

// Start loads the programs and opens the ring buffer; nothing is attached
// until Attach. On error it releases everything it took.
func (c *Collector) Start(context.Context) error {
	if err := c.Load(bpfutil.Object{Spec: loadCuda, Objs: &c.objs, RingBytes: c.cfg.RingBufferBytes}); err != nil {
		return err
	}
	c.OnClose(c.detachAll) // the uprobes, before the programs
	return nil
}

// Run drains the ring buffer into OnEvent until ctx is done (after
// delivering what the kernel wrote until then) or Close.
func (c *Collector) Run(ctx context.Context) error {
	return bpfutil.Drain(ctx, c.Base, c.cfg.DrainPeriod, c.cfg.OnEvent)
}

// detachAll detaches every uprobe (at Close, before the programs close).
func (c *Collector) detachAll() error {
	var errs []error
	c.mu.Lock()
	c.closed = true
	for _, p := range c.procs {
		for _, a := range p.libs {
			errs = append(errs, a.close())
		}
	}
	clear(c.procs)
	c.mu.Unlock()
	return errors.Join(errs...)
}

func (a *attachment) close() error {
	// Every uprobe link waits for an RCU grace period as it closes (about
	// 100 ms here): closed together, they wait for about one.
	all := append(a.links, a.llinks...)
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, l := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.Close()
		}()
	}
	wg.Wait()
	a.links, a.llinks = nil, nil
	return errors.Join(errs...)
}

// detachLaunches closes the launch probes' links together: each close
// waits for an RCU grace period in the kernel (uprobe unregistration), so
// closing them one by one would keep the probes live for N grace periods.
func (a *attachment) detachLaunches() error {
	errs := make([]error, len(a.llinks))
	var wg sync.WaitGroup
	for i, l := range a.llinks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.Close()
		}()
	}
	wg.Wait()
	a.llinks = nil
	return errors.Join(errs...)
}

func (a *attachment) attachLaunches(prog, multi *ebpf.Program) error {
	if len(a.llinks) > 0 || len(a.launches) == 0 {
		return nil
	}
	// One uprobe_multi link for every launch symbol (Linux 6.6+): it
	// attaches and detaches at once.
	if multi != nil && !a.noMulti {
		opts := &link.UprobeMultiOptions{PID: uint32(a.launches[0].opts.PID)}
		for _, lp := range a.launches {
			opts.Addresses = append(opts.Addresses, lp.opts.Address)
			opts.Cookies = append(opts.Cookies, lp.opts.Cookie)
		}
		l, err := a.ex.UprobeMulti(nil, multi, opts)
		if err == nil {
			a.llinks = append(a.llinks, l)
			return nil
		}
		a.noMulti = true
	}
	for _, lp := range a.launches {
		opts := lp.opts
		up, err := a.ex.Uprobe(lp.name, prog, &opts)
		if err != nil {
			a.detachLaunches()
			return fmt.Errorf("attaching uprobe %s in %s: %w", lp.name, a.lib.Path, err)
		}
		a.llinks = append(a.llinks, up)
	}
	return nil
}

// SetLaunchProbes attaches (on) or detaches the launch-rate probes of
// every library of tgid; the other probes stay.
func (c *Collector) SetLaunchProbes(tgid uint32, on bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.procs[tgid]
	if p == nil || c.closed {
		return nil
	}
	p.launchesOff = !on
	var errs []error
	for _, a := range p.libs {
		if on {
			errs = append(errs, a.attachLaunches(c.objs.CudaEnter, c.objs.CudaEnterMulti))
		} else {
			errs = append(errs, a.detachLaunches())
		}
	}
	return errors.Join(errs...)
}

// LaunchProbeKinds counts the launch-rate probes of tgid by the kind of
// their first instruction (which sets what a hit costs).
func (c *Collector) LaunchProbeKinds(tgid uint32) (emulated, singleStep int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.procs[tgid]; p != nil {
		for _, a := range p.libs {
			for _, lp := range a.launches {
				if lp.kind == uprobecost.Emulated {
					emulated++
				} else {
					singleStep++
				}
			}
		}
	}
	return emulated, singleStep
}

// SetTarget aggregates the calls of tgid under slot idx (1..MaxTargets-1)
// and streams what flags say. It attaches nothing: see Attach.
func (c *Collector) SetTarget(tgid, idx uint32, flags Flags) error {
	return c.Base.SetTarget(tgid, idx, uint32(flags))
}

// DeleteTarget stops following tgid and detaches its uprobes. Deleting an
// unknown tgid is not an error.
func (c *Collector) DeleteTarget(tgid uint32) error {
	errs := []error{c.Base.DeleteTarget(tgid)}
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
	if c.closed || !c.Started() {
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
		if !p.launchesOff {
			if err := a.attachLaunches(c.objs.CudaEnter, c.objs.CudaEnterMulti); err != nil {
				a.close()
				errs = append(errs, err)
				continue
			}
		}
		p.libs[l.key()] = a
	}
	if detach {
		for k, a := range p.libs {
			if !want[k] {
				c.Log().Debug("detaching", "pid", tgid, "library", a.lib.Path)
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
	a := &attachment{lib: l, ex: ex}
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
					c.Log().Debug("symbol not in library, skipped", "symbol", name, "library", l.Path)
				}
				continue
			}
			if done[off] {
				continue
			}
			done[off] = true
			opts := &link.UprobeOptions{Address: off, PID: int(tgid), Cookie: call.cookie()}
			if info.Kind == Launch {
				// Launch-rate probes attach below, and only while
				// within the budget (see budget.go).
				k, err := uprobecost.Classify(l.Open, off)
				if err != nil {
					k = uprobecost.SingleStep
				}
				a.launches = append(a.launches, launchProbe{name: name, opts: *opts, kind: k})
				a.lib.Symbols++
				continue
			}
			up, err := ex.Uprobe(name, c.objs.CudaEnter, opts)
			if err != nil {
				a.close()
				return nil, fmt.Errorf("attaching uprobe %s in %s: %w", name, l.Path, err)
			}
			a.links = append(a.links, up)
			if info.returns() {
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
	c.Log().Debug("attached", "pid", tgid, "library", l.Path, "symbols", a.lib.Symbols, "missing", len(a.lib.Missing))
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

// Durations reads the in-kernel duration histogram of a call with a return
// probe (blocking or counted) for slot idx.
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

// LinkIDs are the kernel IDs of the attached links (uprobe perf links
// have IDs on kernels with BPF perf links, 5.15+).
func (c *Collector) LinkIDs() []link.ID {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []link.ID
	for _, p := range c.procs {
		for _, a := range p.libs {
			for _, l := range append(append([]link.Link(nil), a.links...), a.llinks...) {
				if info, err := l.Info(); err == nil {
					ids = append(ids, info.ID)
				}
			}
		}
	}
	return ids
}
