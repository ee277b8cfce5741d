// Package cuda is the CUDA collector: driver (libcuda) and runtime
// (libcudart) API calls of target processes, from uprobes on the
// libraries each target really maps (bpf/cuda.bpf.c). Launches (graph
// launches too) and asynchronous copies are probed at entry only (a uprobe
// hit is a trap); synchronizes, blocking copies, allocations and frees also
// at return, for their duration and return code, and so are the calls that
// are only counted: graph instantiations and exec destroys, pool trims and
// attribute sets (graphs.go). Where the kernel has uprobe_multi links
// (6.6+) a library's probes are three links (entries, returns, launches),
// which need CAP_BPF and CAP_PERFMON only; elsewhere one perf-event uprobe
// per probe, which needs CAP_SYS_ADMIN since Linux 6.16.
package cuda

import (
	"context"
	"errors"
	"fmt"
	schema "github.com/bpfbench/bpfbench/result"
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

// LaunchDims (result.CUDALaunchDims) counts launches of one call with one grid and block.
type LaunchDims = schema.CUDALaunchDims

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

// An attachment is the probes of one library for one process. With
// uprobe_multi (the kernel has it: multi) it holds three links at most:
// every entry probe but the launches', every return probe, and the launch
// probes; without, one perf-event uprobe link per probe (the fallback for
// kernels before 6.6).
type attachment struct {
	lib   Library
	multi bool
	links []link.Link
	// The launch-rate probes (entry-only launches), kept apart so that
	// the budget can detach and re-attach them.
	ex       *link.Executable
	launches []probe
	llinks   []link.Link
}

// probe is one symbol to probe.
type probe struct {
	name   string
	off    uint64
	cookie uint64
	kind   uprobecost.Kind // of its first instruction (launches)
}

// perSymbolOnly makes the collector attach one perf-event uprobe per
// symbol even where the kernel has uprobe_multi (tests of the fallback).
var perSymbolOnly bool

// useMulti says whether to attach through uprobe_multi links: the kernel
// has them (probed once per process, uprobecost.HaveMulti).
func useMulti() bool { return !perSymbolOnly && uprobecost.HaveMulti() }

// attachProbes attaches prog (entry) or its return form to every probe of
// ps for pid: one uprobe_multi / uretprobe_multi link with multi, else one
// perf-event uprobe per symbol. On error nothing of ps stays attached.
func attachProbes(ex *link.Executable, lib string, pid uint32, ps []probe, multi, ret bool, single, multiProg *ebpf.Program) ([]link.Link, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	what := "uprobe"
	if ret {
		what = "uretprobe"
	}
	if multi {
		opts := &link.UprobeMultiOptions{PID: pid}
		for _, p := range ps {
			opts.Addresses = append(opts.Addresses, p.off)
			opts.Cookies = append(opts.Cookies, p.cookie)
		}
		var l link.Link
		var err error
		if ret {
			l, err = ex.UretprobeMulti(nil, multiProg, opts)
		} else {
			l, err = ex.UprobeMulti(nil, multiProg, opts)
		}
		if err != nil {
			return nil, fmt.Errorf("attaching %d %ss (%s_multi link) in %s: %w", len(ps), what, what, lib, err)
		}
		return []link.Link{l}, nil
	}
	var out []link.Link
	for _, p := range ps {
		opts := &link.UprobeOptions{Address: p.off, PID: int(pid), Cookie: p.cookie}
		var l link.Link
		var err error
		if ret {
			l, err = ex.Uretprobe(p.name, single, opts)
		} else {
			l, err = ex.Uprobe(p.name, single, opts)
		}
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("attaching %s %s in %s: %w", what, p.name, lib, err)
		}
		out = append(out, l)
	}
	return out, nil
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

// detachAll detaches every uprobe (at Close, before the programs close),
// every library's links together.
func (c *Collector) detachAll() error {
	var all []link.Link
	c.mu.Lock()
	c.closed = true
	for _, p := range c.procs {
		for _, a := range p.libs {
			all = append(all, a.take()...)
		}
	}
	clear(c.procs)
	c.mu.Unlock()
	return closeAll(all)
}

func (a *attachment) close() error { return closeAll(a.take()) }

// take hands over the attachment's links, to close.
func (a *attachment) take() []link.Link {
	ls := append(a.links, a.llinks...)
	a.links, a.llinks = nil, nil
	return ls
}

// closeAll closes links concurrently. Closing a uprobe link waits for the
// kernel's uprobe unregistration to sync, per link (~80 ms here): a
// uprobe_multi link of N probes waits once; N perf-event uprobes wait in
// turn even closed concurrently (70 links: 5.7 s, BenchmarkAttachDetach).
func closeAll(ls []link.Link) error {
	switch len(ls) {
	case 0:
		return nil
	case 1:
		return ls[0].Close()
	}
	errs := make([]error, len(ls))
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.Close()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// detachLaunches closes the launch probes' links (one with uprobe_multi).
func (a *attachment) detachLaunches() error {
	err := closeAll(a.llinks)
	a.llinks = nil
	return err
}

func (a *attachment) attachLaunches(pid uint32, prog, multi *ebpf.Program) error {
	if len(a.llinks) > 0 || len(a.launches) == 0 {
		return nil
	}
	ls, err := attachProbes(a.ex, a.lib.Path, pid, a.launches, a.multi, false, prog, multi)
	if err != nil {
		return err
	}
	a.llinks = ls
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
			errs = append(errs, a.attachLaunches(tgid, c.objs.CudaEnter, c.objs.CudaEnterMulti))
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
	err := c.Base.DeleteTarget(tgid)
	var ls []link.Link
	c.mu.Lock()
	if p := c.procs[tgid]; p != nil {
		for _, a := range p.libs {
			ls = append(ls, a.take()...)
		}
		delete(c.procs, tgid)
	}
	c.mu.Unlock()
	return errors.Join(err, closeAll(ls))
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
		want[libKey(l)] = true
		if p.libs[libKey(l)] != nil {
			continue
		}
		a, err := c.attach(tgid, l)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !p.launchesOff {
			if err := a.attachLaunches(tgid, c.objs.CudaEnter, c.objs.CudaEnterMulti); err != nil {
				a.close()
				errs = append(errs, err)
				continue
			}
		}
		p.libs[libKey(l)] = a
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
	offs, ok := c.offs[libKey(l)]
	if !ok {
		var err error
		offs, err = symbolOffsets(l.Open)
		if err != nil {
			return nil, fmt.Errorf("reading the symbols of %s: %w", l.Path, err)
		}
		c.offs[libKey(l)] = offs
	}
	ex, err := link.OpenExecutable(l.Open)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", l.Path, err)
	}
	a := &attachment{lib: l, ex: ex, multi: useMulti()}
	a.lib.Missing = nil
	a.lib.Symbols = 0
	var entries, returns []probe
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
			p := probe{name: name, off: off, cookie: call.cookie()}
			a.lib.Symbols++
			if info.Kind == Launch {
				// Launch-rate probes attach in Attach, and only while
				// within the budget (see budget.go).
				k, err := uprobecost.Classify(l.Open, off)
				if err != nil {
					k = uprobecost.SingleStep
				}
				p.kind = k
				a.launches = append(a.launches, p)
				continue
			}
			entries = append(entries, p)
			if info.returns() {
				returns = append(returns, p)
			}
		}
	}
	if a.lib.Symbols == 0 {
		return nil, fmt.Errorf("attaching to %s: none of the CUDA symbols is in it", l.Path)
	}
	ls, err := attachProbes(ex, l.Path, tgid, entries, a.multi, false, c.objs.CudaEnter, c.objs.CudaEnterMulti)
	if err != nil {
		return nil, err
	}
	a.links = ls
	// The return probes after the entries: a return without its entry's
	// inflight record is not counted (cuda_exit), so none is half counted.
	ls, err = attachProbes(ex, l.Path, tgid, returns, a.multi, true, c.objs.CudaExit, c.objs.CudaExitMulti)
	if err != nil {
		a.close()
		return nil, err
	}
	a.links = append(a.links, ls...)
	c.Log().Debug("attached", "pid", tgid, "library", l.Path, "symbols", a.lib.Symbols, "missing", len(a.lib.Missing), "uprobe_multi", a.multi, "links", len(a.links))
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

// Probe loads the collector's programs as the commands do (its uprobes
// attach to a target's libraries later), then releases them; `bpfbench
// check` runs it.
func Probe(bool) (bpfutil.LoadReport, error) {
	c := New(Config{RingBufferBytes: 1 << 16, Logger: slog.New(slog.DiscardHandler)})
	if err := c.Start(context.Background()); err != nil {
		return bpfutil.LoadReport{}, err
	}
	defer c.Close()
	return c.Report(), nil
}
