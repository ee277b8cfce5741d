package live

import (
	"container/heap"
	"slices"
	"sync"
	"unsafe"

	"github.com/bpfbench/bpfbench/correlate/critpath"
)

// Defaults of a Recorder.
const (
	DefaultRecorderWindow = int64(120e9) // two minutes
	DefaultRecorderBytes  = 32 << 20
)

// Recorder is a target's flight recorder: the gaps its live view walked
// over the last Window, each one's time by cause (a Gap), and for the slow
// ones their step-by-step critical path. It is bounded by Window and by
// MaxBytes (its own estimate of the memory it holds). A path costs ten to
// a hundred times its gap, so the window is kept before the paths: while
// the bytes are over the bound inside the window, the recorder drops the
// paths of the shortest gaps it holds (PathsShed), and takes new paths
// only above a higher quantile of the session's gaps (PathQuantiles: the
// p90, then the p95, then the p99; back down a quantile once it holds less
// than half its bound); only when no path is left does it evict the
// oldest gaps (Evicted). An incident is read from it (Window). Safe for
// concurrent use.
type Recorder struct {
	mu       sync.Mutex
	window   int64
	maxBytes int
	q        []Recorded // q[head:] oldest first
	head     int
	bytes    int
	evicted  uint64
	added    uint64 // every gap ever added (a sequence for since)
	paths    int
	// pathAt[level][kind]: at level, a gap of the kind (0 the first
	// token's, 1 later) longer than it takes its path; 0 takes every
	// path. level indexes PathQuantiles. byLen holds the paths by their
	// gap's duration, shortest first (and some of gaps gone: skipped);
	// pathsShed counts those dropped.
	pathAt    [len(PathQuantiles)][2]int64
	level     int
	byLen     pathHeap
	pathsShed uint64
}

// pathRef is a path held: its gap's sequence number and duration.
type pathRef struct {
	seq uint64
	dur int64
}

// pathHeap is a min-heap of paths by their gap's duration
// (container/heap).
type pathHeap []pathRef

func (h pathHeap) Len() int           { return len(h) }
func (h pathHeap) Less(i, j int) bool { return h[i].dur < h[j].dur }
func (h pathHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pathHeap) Push(x any)        { *h = append(*h, x.(pathRef)) }
func (h *pathHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// PathQuantiles are the quantiles of the session's gaps above which a
// recorder keeps a gap's path, the first while its bytes allow.
var PathQuantiles = [...]float64{0.9, 0.95, 0.99}

// Recorded is a gap in the recorder: its causes, and its path (Steps
// set) when it was slow.
type Recorded struct {
	Gap  Gap
	Path *critpath.Gap
}

// NewRecorder returns a recorder of window ns (<= 0: two minutes) and
// maxBytes (<= 0: 32 MiB).
func NewRecorder(window int64, maxBytes int) *Recorder {
	if window <= 0 {
		window = DefaultRecorderWindow
	}
	if maxBytes <= 0 {
		maxBytes = DefaultRecorderBytes
	}
	return &Recorder{window: window, maxBytes: maxBytes}
}

// The estimated sizes of what a recorder holds.
var (
	recordedSize = int(unsafe.Sizeof(Recorded{}))
	pathSize     = int(unsafe.Sizeof(critpath.Gap{}))
	stepSize     = int(unsafe.Sizeof(critpath.Step{}))
)

func sizeOf(r Recorded) int {
	n := recordedSize
	if r.Path != nil {
		n += pathSize + cap(r.Path.Steps)*stepSize
		for _, s := range r.Path.Steps {
			n += len(s.Thread.Comm) + len(s.Other.Comm) + len(s.Note)
		}
	}
	return n
}

// SetPathAbove sets the durations above which a first token's gap and a
// later gap keep their path, at each of PathQuantiles: q(p) is the
// session's p-quantile of the first tokens' gaps and of the later ones.
func (r *Recorder) SetPathAbove(q func(p float64) (first, later int64)) {
	var at [len(PathQuantiles)][2]int64
	for i, p := range PathQuantiles {
		at[i][0], at[i][1] = q(p)
	}
	r.mu.Lock()
	r.pathAt = at
	r.mu.Unlock()
}

// kindOf is a gap's kind by its index: 0 a first token's (the first
// write and the gap after it), 1 a later gap's.
func kindOf(index int) int {
	if index <= 1 {
		return 0
	}
	return 1
}

// Add records a gap (its steps are copied when kept: the engine's buffer
// is reused; a gap the walk left out has none, and keeps no path).
func (r *Recorder) Add(g critpath.Gap) { r.add(g, false) }

// AddUnwalked keeps a gap the walk left out: its duration, no causes.
func (r *Recorder) AddUnwalked(g critpath.Gap) { r.add(g, true) }

func (r *Recorder) add(g critpath.Gap, unwalked bool) {
	rec := Recorded{Gap: CompactOf(g)}
	rec.Gap.Unwalked = unwalked
	r.mu.Lock()
	defer r.mu.Unlock()
	if g.Duration() > r.pathAt[r.level][kindOf(g.Index)] && len(g.Steps) > 0 {
		p := g
		p.Steps = slices.Clone(g.Steps)
		rec.Path = &p
		r.paths++
		heap.Push(&r.byLen, pathRef{seq: r.added, dur: g.Duration()})
	}
	r.bytes += sizeOf(rec)
	r.q = append(r.q, rec)
	r.added++
	r.evict(g.End)
}

// evict drops the gaps older than the window before now; while the bytes
// are over the bound inside the window, the shortest gaps' paths, then the
// oldest gaps (under r.mu).
func (r *Recorder) evict(now int64) {
	for r.head < len(r.q) {
		old := r.q[r.head]
		inWindow := old.Gap.End >= now-r.window
		if inWindow && r.bytes <= r.maxBytes {
			break
		}
		if inWindow {
			if r.shedPaths() {
				continue
			}
			r.evicted++
		}
		r.drop()
	}
	// Compact the slice once half of it is dropped, and the heap once
	// most of it is of gaps gone.
	if r.head > 1024 && r.head*2 > len(r.q) {
		r.q = append(r.q[:0], r.q[r.head:]...)
		r.head = 0
	}
	if len(r.byLen) > 2*r.paths+1024 {
		keep := r.byLen[:0]
		for _, p := range r.byLen {
			if rec := r.at(p.seq); rec != nil && rec.Path != nil {
				keep = append(keep, p)
			}
		}
		r.byLen = keep
		heap.Init(&r.byLen)
	}
}

// at is the gap of sequence number seq, nil when it is gone (under r.mu).
func (r *Recorder) at(seq uint64) *Recorded {
	first := r.added - uint64(len(r.q)-r.head)
	if seq < first || seq >= r.added {
		return nil
	}
	return &r.q[r.head+int(seq-first)]
}

// shedPaths drops the paths of the shortest gaps held until the bytes are
// within the bound, and takes new paths only above the next quantile up;
// false when no path is left (under r.mu).
func (r *Recorder) shedPaths() bool {
	r.level = min(r.level+1, len(PathQuantiles)-1)
	for r.bytes > r.maxBytes && len(r.byLen) > 0 {
		rec := r.at(heap.Pop(&r.byLen).(pathRef).seq)
		if rec == nil || rec.Path == nil {
			continue
		}
		r.bytes -= sizeOf(*rec)
		rec.Path = nil
		r.bytes += sizeOf(*rec)
		r.paths--
		r.pathsShed++
	}
	return r.bytes <= r.maxBytes
}

func (r *Recorder) drop() {
	old := r.q[r.head]
	r.bytes -= sizeOf(old)
	if old.Path != nil {
		r.paths--
	}
	r.q[r.head] = Recorded{}
	r.head++
}

// Expire drops what is older than the window before now (a quiet target
// records no gap to push it out).
// Under half its bound, it goes back down a quantile.
func (r *Recorder) Expire(now int64) {
	r.mu.Lock()
	r.evict(now)
	if r.level > 0 && r.bytes < r.maxBytes/2 {
		r.level--
	}
	r.mu.Unlock()
}

// RecorderStats is what a recorder holds.
type RecorderStats struct {
	Gaps, Paths int
	Bytes       int
	// FromNs is the oldest gap's end (0: none).
	FromNs int64
	// Evicted are the gaps the byte bound dropped before their window.
	Evicted uint64
	// PathQuantile is the quantile of the session's gaps above which a
	// gap keeps its path now (PathQuantiles); PathsShed the paths the
	// byte bound dropped to keep the window.
	PathQuantile float64
	PathsShed    uint64
}

// Stats is what r holds now.
func (r *Recorder) Stats() RecorderStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := RecorderStats{Gaps: len(r.q) - r.head, Paths: r.paths, Bytes: r.bytes, Evicted: r.evicted,
		PathQuantile: PathQuantiles[r.level], PathsShed: r.pathsShed}
	if st.Gaps > 0 {
		st.FromNs = r.q[r.head].Gap.End
	}
	return st
}

// Window is a copy of the gaps that ended in [from, to].
func (r *Recorder) Window(from, to int64) []Recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Recorded
	for _, rec := range r.q[r.head:] {
		if rec.Gap.End >= from && rec.Gap.End <= to {
			out = append(out, rec)
		}
	}
	return out
}

// since calls f with the compact gaps added after the seq'th (those
// still held), and returns the sequence now.
func (r *Recorder) since(seq uint64, f func(Gap)) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.q[r.head:]
	n := min(r.added-min(seq, r.added), uint64(len(q)))
	for _, rec := range q[len(q)-int(n):] {
		f(rec.Gap)
	}
	return r.added
}

// gapsSince calls f with the compact gaps that ended at or after from
// (under no lock of the caller's).
func (r *Recorder) gapsSince(from int64, f func(Gap)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.q[r.head:]
	i, _ := slices.BinarySearchFunc(q, from, func(rec Recorded, t int64) int {
		switch {
		case rec.Gap.End < t:
			return -1
		case rec.Gap.End > t:
			return 1
		}
		return 0
	})
	for _, rec := range q[i:] {
		f(rec.Gap)
	}
}
