package cuda

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/internal/uprobecost"
)

// SectionConfig adds what a session may want beyond the summary.
type SectionConfig struct {
	// OnEvent receives every streamed event after the section counted it
	// (for correlation: blocking calls are gpu_sync time). Same rules as
	// Config.OnEvent.
	OnEvent func(*Event)
	// StreamLaunches also streams launches and asynchronous copies.
	StreamLaunches bool
	// Budget bounds the launch probes' cost (default DefaultBudget).
	Budget Budget
	// RingBufferBytes sizes the ring buffer (default 4 MiB).
	RingBufferBytes uint32
}

// Section is the CUDA part of a session on one process and the
// processes below it: a server of several processes (vLLM's API server,
// which maps no CUDA library, and its EngineCore, which does) is one
// target. Processes that appear later, or map a CUDA library later, are
// attached as the tree is rescanned (treeScan).
type Section struct {
	*Collector
	pid      int
	roots    []int             // the target's other process trees (Options.Roots, SetRoots; under mu)
	libs     map[int][]Library // at NewSection: the tree's processes that map CUDA
	override []string
	flags    Flags
	total    *Aggregator
	interval *Aggregator

	budget Budget
	bstate budgetState

	mu       sync.Mutex
	live     bool
	snap     snapshot
	lastIntv []Counts
	lastEst  uint64          // estimated launches at the last interval line
	procs    map[uint32]bool // attached processes of the tree
}

// treeScan is how often the section looks for processes of the target's
// tree that map a CUDA library and are not attached yet.
const treeScan = time.Second

// maxTreeBackoff is the longest wait before a process of the tree that
// mapped no CUDA library is read again.
const maxTreeBackoff = 16 * time.Second

type snapshot struct {
	counts []Counts
	copies [numDirections]uint64
	dims   []LaunchDims
	libs   []Library
	instNs [2]uint64 // time in graph instantiations, per API
}

var _ collectors.Section = (*Section)(nil)

// NewSection finds the CUDA libraries opts.Pid and its descendants map
// (or opts.CUDALibs). Without any, the error wraps
// collectors.ErrNotApplicable and reads "no CUDA library mapped by pid N".
func NewSection(opts collectors.Options) (*Section, error) {
	return NewSectionConfig(opts, SectionConfig{})
}

// NewSectionConfig is NewSection with the extras of cfg.
func NewSectionConfig(opts collectors.Options, cfg SectionConfig) (*Section, error) {
	if opts.Pid <= 0 {
		return nil, fmt.Errorf("cuda: target pid %d is not a process id", opts.Pid)
	}
	libs, err := treeLibraries(opts.Pid, opts.Roots, opts.CUDALibs)
	if err != nil {
		return nil, err
	}
	s := &Section{pid: opts.Pid, roots: opts.Roots, libs: libs, override: opts.CUDALibs, flags: StreamBlocking, total: NewAggregator(), interval: NewAggregator(),
		budget: cfg.Budget, procs: map[uint32]bool{}}
	if cfg.StreamLaunches {
		s.flags = StreamAll
	}
	s.Collector = New(Config{
		Logger: opts.Logger, RingBufferBytes: cfg.RingBufferBytes,
		OnEvent: func(e *Event) {
			s.total.Add(e)
			s.interval.Add(e)
			if cfg.OnEvent != nil {
				cfg.OnEvent(e)
			}
			if r := opts.Recorder; r != nil {
				end := int64(e.End)
				if end < int64(e.Start) {
					end = int64(e.Start)
				}
				r.Record(collectors.Span{Kind: collectors.SpanCUDA, Start: int64(e.Start), End: end, Tid: e.Tid,
					Detail: e.Name(), Blocking: e.Blocking(), Bytes: e.Bytes})
			}
		},
	})
	return s, nil
}

// Start loads the programs, targets the process and attaches to its
// libraries. Libraries that cannot be probed are logged; none at all is
// an error.
func (s *Section) Start(ctx context.Context) error {
	// The cost of a probe hit is measured before any launch probe goes on.
	if s.budget.Cost == nil {
		if c, err := uprobecost.Measure(); err == nil {
			s.budget.Cost = &c
		} else {
			s.Log().Warn("measuring the cost of a uprobe hit", "err", err)
		}
	}
	if err := s.Collector.Start(ctx); err != nil {
		return err
	}
	var firstErr error
	for _, pid := range sortedPids(s.libs) {
		n, err := s.attachProc(pid, s.libs[pid])
		if err != nil {
			s.Log().Warn("some CUDA libraries could not be probed", "pid", pid, "err", err)
			if firstErr == nil {
				firstErr = err
			}
		}
		if n == 0 && firstErr == nil {
			firstErr = &NotMappedError{Pid: s.pid}
		}
	}
	s.mu.Lock()
	attached := len(s.procs)
	s.live = attached > 0
	s.mu.Unlock()
	if attached == 0 {
		s.Collector.Close()
		if firstErr == nil {
			firstErr = &NotMappedError{Pid: s.pid}
		}
		return firstErr
	}
	s.mu.Lock()
	s.snap.libs = s.allLibraries()
	s.mu.Unlock()
	return nil
}

// attachProc targets pid (under the section's slot) and attaches to its
// libraries; it returns how many are attached.
func (s *Section) attachProc(pid int, libs []Library) (int, error) {
	if err := s.SetTarget(uint32(pid), 1, s.flags); err != nil {
		return 0, err
	}
	attached, err := s.Attach(uint32(pid), libs, false)
	if len(attached) == 0 {
		s.Collector.DeleteTarget(uint32(pid))
		return 0, err
	}
	s.mu.Lock()
	s.procs[uint32(pid)] = true
	s.mu.Unlock()
	s.Log().Debug("following a process of the target's tree", "pid", pid, "libraries", len(attached))
	return len(attached), err
}

// SetRoots replaces the trees scanned beside the target's own (a session
// that follows several targets: session.AddTarget); the next scan attaches
// their processes that map a CUDA library and detaches those that left.
func (s *Section) SetRoots(roots []int) {
	s.mu.Lock()
	s.roots = slices.Clone(roots)
	s.mu.Unlock()
}

// pids is the attached processes of the tree.
func (s *Section) pids() []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]uint32, 0, len(s.procs))
	for p := range s.procs {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// allLibraries is every attached process's libraries, each file once.
// Callers hold s.mu.
func (s *Section) allLibraries() []Library {
	var out []Library
	seen := map[fileKey]bool{}
	for p := range s.procs {
		for _, l := range s.Libraries(p) {
			if !seen[libKey(l)] {
				seen[libKey(l)] = true
				out = append(out, l)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// followTree attaches, every treeScan until ctx is done, the processes of
// the target's tree that map a CUDA library and are not attached yet
// (forked later, or mapping it later), and detaches those that left.
func (s *Section) followTree(ctx context.Context) {
	t := time.NewTicker(treeScan)
	defer t.Stop()
	// A process that maps no CUDA library is read again after a wait
	// that doubles up to maxTreeBackoff (vLLM's API server never will;
	// its maps can be long).
	type backoff struct {
		next time.Time
		wait time.Duration
	}
	unmapped := map[int]backoff{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		s.mu.Lock()
		roots := s.roots
		s.mu.Unlock()
		tree := collectors.Tree(s.pid, roots)
		in := map[uint32]bool{}
		for _, p := range tree {
			in[uint32(p)] = true
		}
		for p := range unmapped {
			if !in[uint32(p)] {
				delete(unmapped, p)
			}
		}
		for _, p := range s.pids() {
			if !in[p] && p != uint32(s.pid) {
				s.mu.Lock()
				delete(s.procs, p)
				s.mu.Unlock()
				if err := s.Collector.DeleteTarget(p); err != nil {
					s.Log().Debug("detaching a process that left the tree", "pid", p, "err", err)
				}
			}
		}
		for _, p := range tree {
			s.mu.Lock()
			known := s.procs[uint32(p)]
			s.mu.Unlock()
			b, seen := unmapped[p]
			if known || (seen && now.Before(b.next)) {
				continue
			}
			libs, err := FindLibraries(p, s.override)
			if err != nil || len(libs) == 0 {
				b.wait = min(max(2*b.wait, treeScan), maxTreeBackoff)
				b.next = now.Add(b.wait)
				unmapped[p] = b
				continue
			}
			delete(unmapped, p)
			if _, err := s.attachProc(p, libs); err != nil {
				s.Log().Warn("some CUDA libraries could not be probed", "pid", p, "err", err)
			}
		}
	}
}

// treeLibraries is the CUDA libraries of pid, each of its descendants and
// of the other roots' trees, for those that map any; with none, the error
// of pid's own search (a *NotMappedError when it maps none).
func treeLibraries(pid int, roots []int, overrides []string) (map[int][]Library, error) {
	libs, err := FindLibraries(pid, overrides)
	if err != nil {
		var nm *NotMappedError
		if !errors.As(err, &nm) {
			return nil, err
		}
	}
	out := map[int][]Library{}
	if len(libs) > 0 {
		out[pid] = libs
	}
	below := collectors.Tree(pid, roots)[1:]
	for _, c := range below {
		if l, cerr := FindLibraries(c, overrides); cerr == nil && len(l) > 0 {
			out[c] = l
		}
	}
	if len(out) == 0 {
		if err == nil || errors.As(err, new(*NotMappedError)) {
			err = &NotMappedError{Pid: pid, Below: len(below)}
		}
		return nil, err
	}
	return out, nil
}

func sortedPids(m map[int][]Library) []int {
	out := make([]int, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// Run streams events until ctx is done, then keeps the kernel's final
// counters for the summary.
func (s *Section) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.runBudget(ctx, s.pids, 1, s.budget, &s.bstate)
	}()
	treeDone := make(chan struct{})
	go func() {
		defer close(treeDone)
		s.followTree(ctx)
	}()
	defer func() { <-treeDone }()
	err := s.Collector.Run(ctx)
	<-done
	s.takeSnapshot()
	return err
}

// LaunchProbes says how launches were counted (full or sampled).
func (s *Section) LaunchProbes() LaunchProbes { return s.bstate.snapshot() }

// Close keeps the final counters, then releases everything.
func (s *Section) Close() error {
	s.takeSnapshot()
	s.mu.Lock()
	s.live = false
	s.mu.Unlock()
	return s.Collector.Close()
}

func (s *Section) read() (snapshot, error) {
	var sn snapshot
	var err error
	if sn.counts, err = s.Counts(1); err != nil {
		return sn, err
	}
	if sn.copies, err = s.CopyBytes(1); err != nil {
		return sn, err
	}
	if sn.dims, err = s.Collector.LaunchDims(1); err != nil {
		return sn, err
	}
	sn.libs = s.allLibraries()
	for i, info := range calls {
		if info.graph != roleInstantiate || sn.counts[i].Count == 0 {
			continue
		}
		d, err := s.Durations(1, Call(i))
		if err != nil {
			return sn, err
		}
		sn.instNs[info.API&1] += d.SumNs
	}
	return sn, nil
}

func (s *Section) takeSnapshot() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.live {
		return
	}
	if sn, err := s.read(); err == nil {
		s.snap = sn
	}
}

func (s *Section) current() snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live {
		if sn, err := s.read(); err == nil {
			s.snap = sn
		}
	}
	return s.snap
}

// Aggregate is the session's summary with every launch shape.
func (s *Section) Aggregate() Summary { return s.summary(0) }

// Summary is the session's `cuda` JSON section.
func (s *Section) Summary() any { return s.summary(10) }

func (s *Section) summary(maxDims int) Summary {
	sn := s.current()
	sum := s.total.summarize(sn.counts, sn.copies, sn.dims, sn.libs, maxDims)
	var oom uint64
	for _, c := range sn.counts {
		oom += c.OutOfMemory
	}
	if oom > sum.OutOfMemory.Count {
		sum.OutOfMemory.Count = oom
	}
	lp := s.LaunchProbes()
	if lp.Mode != "" {
		sum.LaunchProbes = &lp
	}
	// Launches while the probes were detached are estimated; each launch
	// call and launch shape gets its share by its measured count.
	if lp.Mode == "sampled" {
		var measured, dims uint64
		for _, c := range sum.Calls {
			if c.Kind == Launch.String() {
				measured += c.Count
			}
		}
		for _, d := range sn.dims {
			dims += d.Count
		}
		for i, c := range sum.Calls {
			if c.Kind == Launch.String() {
				sum.Calls[i].CUDAEstimate = estimateOf(lp, c.Count, measured)
			}
		}
		for i, d := range sum.Launches {
			sum.Launches[i].CUDAEstimate = estimateOf(lp, d.Count, dims)
		}
	}
	sum.Graphs = graphSummaries(sn.counts, sn.instNs, func(c Call) uint64 {
		if cs, ok := findCallSummary(sum, c.String()); ok {
			return cs.EstimatedCount
		}
		return 0
	})
	return sum
}

// WriteInterval writes one line for the interval that just ended.
func (s *Section) WriteInterval(w io.Writer) {
	sn := s.current()
	s.mu.Lock()
	prev := s.lastIntv
	s.lastIntv = sn.counts
	s.mu.Unlock()
	var byKind [numKinds]uint64
	var errs, oom uint64
	for i, c := range sn.counts {
		d := c
		if i < len(prev) {
			d.Count -= prev[i].Count
			d.Errors -= prev[i].Errors
			d.OutOfMemory -= prev[i].OutOfMemory
		}
		byKind[calls[i].Kind] += d.Count
		errs += d.Errors
		oom += d.OutOfMemory
	}
	var syncN uint64
	var syncSum, syncMax float64
	for i, info := range calls {
		if info.Kind != Sync {
			continue
		}
		if l := s.interval.Latency(Call(i)); l != nil {
			syncN += l.Count
			syncSum += l.Sum
			syncMax = max(syncMax, l.Max)
		}
	}
	s.interval.Reset()
	launch := fmt.Sprint(byKind[Launch])
	if lp := s.LaunchProbes(); lp.Mode == "sampled" {
		s.mu.Lock()
		est := lp.EstimatedLaunches - min(s.lastEst, lp.EstimatedLaunches)
		s.lastEst = lp.EstimatedLaunches
		s.mu.Unlock()
		launch = fmt.Sprintf("%d+~%d", byKind[Launch], est)
		if lp.LowerBound {
			launch = ">=" + launch
		}
	}
	fmt.Fprintf(w, "cuda   launch=%-7s sync=%-5d in-sync=%-8s max=%-8s copy=%-6d alloc=%-5d free=%-5d errors=%d oom=%d\n",
		launch, syncN, bpfutil.Dur(syncSum), bpfutil.Dur(syncMax), byKind[Copy], byKind[Alloc], byKind[Free], errs, oom)
}

// WriteSummary writes the end-of-session table.
func (s *Section) WriteSummary(w io.Writer) {
	sum := s.summary(5)
	fmt.Fprintf(w, "CUDA\n  time in blocking calls: %s\n", bpfutil.Dur(sum.BlockedSeconds))
	for _, l := range sum.Libraries {
		fmt.Fprintf(w, "  %s library %s (%d symbols probed", l.API, l.Path, l.Symbols)
		if l.BuildID != "" {
			fmt.Fprintf(w, ", build id %s", l.BuildID)
		}
		fmt.Fprintln(w, ")")
	}
	if len(sum.Calls) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  call\tcount\terrors\tbytes\tp50\tp99\tmax\ttotal\t")
		for _, c := range sum.Calls {
			p50, p99, mx, tot := "-", "-", "-", "-"
			if c.Duration != nil {
				p50, p99, mx, tot = bpfutil.Dur(c.Duration.P50), bpfutil.Dur(c.Duration.P99), bpfutil.Dur(c.Duration.Max), bpfutil.Dur(c.Duration.Sum)
			}
			fmt.Fprintf(tw, "  %s\t%d%s\t%d\t%d\t%s\t%s\t%s\t%s\t\n", c.Name, c.Count, estimateSuffix(c.CUDAEstimate), c.Errors, c.Bytes, p50, p99, mx, tot)
		}
		tw.Flush()
	}
	for _, d := range sum.Launches {
		fmt.Fprintf(w, "  launches %s grid %v block %v: %d%s\n", d.Call, d.Grid, d.Block, d.Count, estimateSuffix(d.CUDAEstimate))
	}
	if lp := sum.LaunchProbes; lp != nil && lp.Mode == "sampled" {
		fmt.Fprintf(w, "  launch probes sampled: %s; attached %.0f%% of the time in %d windows\n",
			lp.Reason, 100*probeDuty(*lp), lp.Windows)
		fmt.Fprintf(w, "  launches: %s\n", probesLine(*lp))
	}
	writeGraphs(w, sum.Graphs)
	if sum.OutOfMemory.Count > 0 {
		fmt.Fprintf(w, "  out of memory: %d failed allocations\n", sum.OutOfMemory.Count)
		for _, e := range sum.OutOfMemory.Events {
			fmt.Fprintf(w, "    %s of %d bytes by tid %d: error %d\n", e.Call, e.Bytes, e.Tid, e.Code)
		}
	}
}

func findCallSummary(s Summary, name string) (CallSummary, bool) {
	for _, c := range s.Calls {
		if c.Name == name {
			return c, true
		}
	}
	return CallSummary{}, false
}
