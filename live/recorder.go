package live

import (
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
// ones (longer than PathAbove when they were walked) their step-by-step
// critical path. It is bounded by Window and by MaxBytes (its own estimate
// of the memory it holds), the oldest gap evicted first; what the bytes
// evicted before the window did is counted (Evicted). An incident is read
// from it (Window). Safe for concurrent use.
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
	// pathAbove[kind]: a gap of the kind (0 the first token's, 1 later)
	// longer than it keeps its path; 0 keeps every path.
	pathAbove [2]int64
}

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
// later gap keep their path.
func (r *Recorder) SetPathAbove(first, later int64) {
	r.mu.Lock()
	r.pathAbove = [2]int64{first, later}
	r.mu.Unlock()
}

// Add records a gap (its steps are copied when kept: the engine's buffer
// is reused; a gap the walk left out has none, and keeps no path).
func (r *Recorder) Add(g critpath.Gap) { r.add(g, false) }

// AddUnwalked keeps a gap the walk left out: its duration, no causes.
func (r *Recorder) AddUnwalked(g critpath.Gap) { r.add(g, true) }

func (r *Recorder) add(g critpath.Gap, unwalked bool) {
	rec := Recorded{Gap: CompactOf(g)}
	rec.Gap.Unwalked = unwalked
	kind := 1
	if g.Index <= 1 {
		kind = 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if g.Duration() > r.pathAbove[kind] && len(g.Steps) > 0 {
		p := g
		p.Steps = slices.Clone(g.Steps)
		rec.Path = &p
		r.paths++
	}
	r.bytes += sizeOf(rec)
	r.q = append(r.q, rec)
	r.added++
	r.evict(g.End)
}

// evict drops the gaps older than the window before now, then the oldest
// while the bytes are over the bound (under r.mu).
func (r *Recorder) evict(now int64) {
	for r.head < len(r.q) {
		old := r.q[r.head]
		inWindow := old.Gap.End >= now-r.window
		if inWindow && r.bytes <= r.maxBytes {
			break
		}
		if inWindow {
			r.evicted++
		}
		r.drop()
	}
	// Compact the slice once half of it is dropped.
	if r.head > 1024 && r.head*2 > len(r.q) {
		r.q = append(r.q[:0], r.q[r.head:]...)
		r.head = 0
	}
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
func (r *Recorder) Expire(now int64) {
	r.mu.Lock()
	r.evict(now)
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
}

// Stats is what r holds now.
func (r *Recorder) Stats() RecorderStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := RecorderStats{Gaps: len(r.q) - r.head, Paths: r.paths, Bytes: r.bytes, Evicted: r.evicted}
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
