package pipeline

import (
	"cmp"
	"container/heap"
	"fmt"
	"hash/fnv"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/exporter/trace"
	"github.com/bpfbench/bpfbench/internal/atomicfile"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/enginemetrics"
)

// The run's trace.json is written while the run goes, so that its cost is
// disk, not memory. It holds:
//
//   - everywhere, per 100 ms: counters of each server thread's waits
//     (runnable, io_wait, preempted, sleep), each device's block requests,
//     each thread's CUDA calls and each client port's TCP episodes;
//   - full detail (every span as a slice) around the slowest token gaps
//     (traceGaps of them, traceGapPad either side) and for the first
//     tracePhaseDetail of each phase (of the run, without phases);
//   - one slice per request, its TTFT, and its token gaps in the detail
//     windows or among the slowest 1%, with their attribution.
const (
	traceBucket      = int64(100e6)
	traceGaps        = 50
	traceGapPad      = int64(20e6)
	traceGapMaxSpans = 20000
	tracePhaseDetail = int64(1e9)
)

// traceStream lays a run out as a Perfetto/Chrome timeline. The bucket
// and gap fields are guarded by the runStream's mutex; the writer side
// belongs to the ticking goroutine, then to the end of the run.
type traceStream struct {
	buckets map[int64][]collectors.Span // by End / traceBucket
	first   int64                       // lowest bucket not flushed
	last    int64                       // highest bucket seen
	held    int
	intern  map[string]string
	gaps    gapHeap

	// Writer side.
	tw       *trace.Trace
	f        *atomicfile.File
	path     string
	live     map[counterKey]bool
	devTid   map[string]int
	threads  *threadNames // nil: tracks are named "thread TID"
	crit     *critStream  // the slowest gaps' critical paths, drawn at the end
	marks    *PhaseMarks
	runMu    sync.Mutex
	runStart int64 // the load's start, the first detail window without phases
}

type gapDetail struct {
	m     correlate.Measurement
	spans []collectors.Span
}

// newTraceStream starts writing dir/trace.json (under a temporary name
// until it is complete); origin is its time zero.
func newTraceStream(dir string, origin int64, marks *PhaseMarks) (*traceStream, error) {
	path := filepath.Join(dir, "trace.json")
	f, err := atomicfile.Create(path, 0o644)
	if err != nil {
		return nil, err
	}
	first := origin / traceBucket
	return &traceStream{
		buckets: map[int64][]collectors.Span{}, first: first, last: first - 1,
		intern: map[string]string{}, tw: trace.NewStream(f, origin), f: f,
		path: path, live: map[counterKey]bool{}, devTid: map[string]int{},
		marks: marks, runStart: math.MinInt64,
	}, nil
}

func (t *traceStream) setRunStart(ns int64) {
	t.runMu.Lock()
	t.runStart = ns
	t.runMu.Unlock()
}

// add keeps a span in its bucket (under the stream's lock).
func (t *traceStream) add(sp collectors.Span) {
	if d, ok := t.intern[sp.Detail]; ok {
		sp.Detail = d
	} else if len(t.intern) < 4096 {
		t.intern[sp.Detail] = sp.Detail
	}
	idx := max(sp.End/traceBucket, t.first)
	t.buckets[idx] = append(t.buckets[idx], sp)
	t.last = max(t.last, idx)
	t.held++
}

// measured keeps the spans around a gap while it is among the slowest
// (under the stream's lock).
func (t *traceStream) measured(m correlate.Measurement) {
	if m.Index == 0 {
		return
	}
	d := m.Duration()
	if len(t.gaps) == traceGaps && d <= t.gaps[0].m.Duration() {
		return
	}
	lo, hi := m.Start-traceGapPad, m.End+traceGapPad
	g := &gapDetail{m: m}
	if len(t.gaps) == traceGaps {
		// The gap it displaces is dropped: its spans' array is reused,
		// since most gaps that enter early in a run leave it again.
		g.spans = t.gaps[0].spans[:0]
	}
	for idx := max(lo/traceBucket, t.first); idx <= t.last && len(g.spans) < traceGapMaxSpans; idx++ {
		for _, sp := range t.buckets[idx] {
			if overlaps(sp, lo, hi) {
				g.spans = append(g.spans, sp)
			}
		}
	}
	if len(t.gaps) == traceGaps {
		t.gaps[0] = g
		heap.Fix(&t.gaps, 0)
	} else {
		heap.Push(&t.gaps, g)
	}
}

func overlaps(sp collectors.Span, lo, hi int64) bool {
	if sp.End <= sp.Start {
		return sp.Start >= lo && sp.Start < hi
	}
	return sp.End > lo && sp.Start < hi
}

type flushBucket struct {
	idx   int64
	spans []collectors.Span
}

// detach takes the buckets that no interval still to come can need:
// those ending before horizon less the detail pad (under the stream's
// lock).
func (t *traceStream) detach(horizon int64, final bool) []flushBucket {
	cut := (horizon - traceGapPad) / traceBucket
	if final {
		cut = t.last + 1
	}
	var out []flushBucket
	for idx := t.first; idx < cut; idx++ {
		sp := t.buckets[idx]
		delete(t.buckets, idx)
		t.held -= len(sp)
		out = append(out, flushBucket{idx, sp})
	}
	t.first = max(t.first, cut)
	return out
}

type counterKey struct {
	pid  int
	id   int
	name string
}

var counterArgs = map[int][]string{
	trace.PidServer:  {"runnable_ms", "io_wait_ms", "preempted_ms", "sleep_ms"},
	trace.PidBlock:   {"busy_ms", "bytes", "requests"},
	trace.PidCUDA:    {"blocking_ms", "calls"},
	trace.PidNetwork: {"episode_ms", "events"},
}

// trackName is the counter track's name.
func (t *traceStream) trackName(k counterKey) string {
	switch k.pid {
	case trace.PidServer:
		return t.threads.label(uint32(k.id)) + " waits"
	case trace.PidCUDA:
		return t.threads.label(uint32(k.id)) + " CUDA"
	case trace.PidNetwork:
		return fmt.Sprintf("client port %d", k.id)
	}
	return k.name
}

// phaseWindows are the detail windows of the phases (or of the run's
// start), sorted.
func (t *traceStream) phaseWindows() [][2]int64 {
	var out [][2]int64
	if t.marks != nil {
		t.marks.mu.Lock()
		for _, m := range t.marks.marks {
			out = append(out, [2]int64{m.ns, m.ns + tracePhaseDetail})
		}
		t.marks.mu.Unlock()
	}
	if len(out) == 0 {
		t.runMu.Lock()
		if t.runStart != math.MinInt64 {
			out = append(out, [2]int64{t.runStart, t.runStart + tracePhaseDetail})
		}
		t.runMu.Unlock()
	}
	return mergeWindows(out)
}

func mergeWindows(w [][2]int64) [][2]int64 {
	slices.SortFunc(w, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	var out [][2]int64
	for _, x := range w {
		if n := len(out); n > 0 && x[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], x[1])
			continue
		}
		out = append(out, x)
	}
	return out
}

// inWindows says whether [lo, hi) overlaps a window of sorted, merged ws.
func inWindows(ws [][2]int64, lo, hi int64) bool {
	i := sort.Search(len(ws), func(i int) bool { return ws[i][1] > lo })
	return i < len(ws) && ws[i][0] < hi
}

// write emits the counters of flushed buckets, and the spans of those in
// a phase's detail window.
func (t *traceStream) write(bs []flushBucket) {
	if len(bs) == 0 {
		return
	}
	ws := t.phaseWindows()
	agg := map[counterKey]*[4]float64{}
	for _, b := range bs {
		clear(agg)
		for _, sp := range b.spans {
			if inWindows(ws, sp.Start, max(sp.End, sp.Start+1)) {
				t.writeSpan(sp)
			}
			k, slot, v := counterOf(sp)
			if k.pid == 0 {
				continue
			}
			a := agg[k]
			if a == nil {
				a = &[4]float64{}
				agg[k] = a
			}
			a[slot] += v
			if k.pid == trace.PidBlock {
				a[1] += float64(sp.Bytes)
				a[2]++
			} else if k.pid == trace.PidCUDA || k.pid == trace.PidNetwork {
				a[1]++
			}
		}
		ts := b.idx * traceBucket
		for k := range t.live {
			if agg[k] == nil {
				t.counter(k, ts, &[4]float64{})
				delete(t.live, k)
			}
		}
		for k, a := range agg {
			t.counter(k, ts, a)
			t.live[k] = true
		}
	}
}

func (t *traceStream) counter(k counterKey, ts int64, a *[4]float64) {
	names := counterArgs[k.pid]
	vals := make(map[string]float64, len(names))
	for i, n := range names {
		vals[n] = a[i]
	}
	t.tw.Counter(k.pid, t.trackName(k), ts, vals)
}

// counterOf is the counter a span adds to, the slot and the value (ms).
func counterOf(sp collectors.Span) (counterKey, int, float64) {
	ms := float64(sp.End-sp.Start) / 1e6
	switch sp.Kind {
	case collectors.SpanRunqueue:
		return counterKey{pid: trace.PidServer, id: int(sp.Tid)}, 0, ms
	case collectors.SpanOffCPU:
		slot := 3
		switch sp.Detail {
		case "io_wait":
			slot = 1
		case "preempted":
			slot = 2
		}
		return counterKey{pid: trace.PidServer, id: int(sp.Tid)}, slot, ms
	case collectors.SpanBlockIO:
		return counterKey{pid: trace.PidBlock, name: sp.Detail}, 0, ms
	case collectors.SpanCUDA:
		if !sp.Blocking {
			ms = 0
		}
		return counterKey{pid: trace.PidCUDA, id: int(sp.Tid)}, 0, ms
	case collectors.SpanTCP:
		return counterKey{pid: trace.PidNetwork, id: int(sp.Port)}, 0, ms
	}
	return counterKey{}, 0, 0
}

// writeSpan writes a server-side span as a slice on its track.
func (t *traceStream) writeSpan(s collectors.Span) {
	tr := t.tw
	switch s.Kind {
	case collectors.SpanRunqueue:
		tr.NameTrack(trace.PidServer, int(s.Tid), t.threads.name(s.Tid))
		tr.Slice(trace.PidServer, int(s.Tid), "runnable (waiting for a CPU)", "sched", s.Start, s.End, nil)
	case collectors.SpanOffCPU:
		tr.NameTrack(trace.PidServer, int(s.Tid), t.threads.name(s.Tid))
		tr.Slice(trace.PidServer, int(s.Tid), "off-CPU "+s.Detail, "sched", s.Start, s.End, nil)
	case collectors.SpanBlockIO:
		tid, ok := t.devTid[s.Detail]
		if !ok {
			tid = len(t.devTid) + 1
			t.devTid[s.Detail] = tid
			tr.NameTrack(trace.PidBlock, tid, s.Detail)
		}
		tr.Slice(trace.PidBlock, tid, s.Detail, "blockio", s.Start, s.End, map[string]any{"bytes": s.Bytes, "thread": s.Tid})
	case collectors.SpanCUDA:
		tr.NameTrack(trace.PidCUDA, int(s.Tid), t.threads.name(s.Tid))
		tr.Slice(trace.PidCUDA, int(s.Tid), s.Detail, "cuda", s.Start, s.End, map[string]any{"bytes": s.Bytes})
	case collectors.SpanTCP:
		tid := int(s.Port)
		if tid == 0 {
			h := fnv.New32a()
			h.Write([]byte(s.Detail))
			tid = 70000 + int(h.Sum32()%1000)
		}
		tr.NameTrack(trace.PidNetwork, tid, fmt.Sprintf("client port %d", s.Port))
		if s.End > s.Start {
			tr.Slice(trace.PidNetwork, tid, s.Detail, "tcp", s.Start, s.End, nil)
		} else {
			tr.Instant(trace.PidNetwork, tid, s.Detail, "tcp", s.Start, nil)
		}
	}
}

// finish writes what needs the whole run (the requests, the token gaps
// with their attribution, the slowest gaps' spans, the sections' own
// tracks), ends the JSON and puts trace.json in place.
func (t *traceStream) finish(res *loadgen.Result, log *correlate.Log, base correlate.Baseline, sections []collectors.Section) error {
	t.writeRequests(res)

	// Detail windows: the phases' and the slowest gaps'.
	ws := t.phaseWindows()
	phaseWs := slices.Clone(ws)
	for _, g := range t.gaps {
		ws = append(ws, [2]int64{g.m.Start - traceGapPad, g.m.End + traceGapPad})
	}
	ws = mergeWindows(ws)

	t.writeTokens(log, base, ws)
	t.writeGapSpans(phaseWs)
	t.criticalPaths()
	t.writeCounters(sections)
	if err := t.tw.Close(); err != nil {
		return t.f.Fail(err)
	}
	return t.f.Commit()
}

// writeRequests writes each request as a slice on its own track, failed
// ones named for their failure.
func (t *traceStream) writeRequests(res *loadgen.Result) {
	tr := t.tw
	for i := range res.Records {
		r := &res.Records[i]
		tid := r.Index + 1
		tr.NameTrack(trace.PidRequests, tid, fmt.Sprintf("request %d (port %d)", r.Index, r.LocalPort))
		if !r.Success {
			tr.Slice(trace.PidRequests, tid, "failed: "+r.Failure, "request", r.StartNs, max(r.EndNs, r.StartNs), map[string]any{"error": r.Error})
			continue
		}
		tr.Slice(trace.PidRequests, tid, "request", "request", r.StartNs, max(r.EndNs, r.StartNs), map[string]any{
			"output_tokens": r.OutputTokens, "chunks": len(r.ChunkNs), "ttft_ms": float64(r.TTFTNs()) / 1e6,
			"e2el_ms": float64(r.LatencyNs()) / 1e6, "port": r.LocalPort})
	}
}

// writeTokens writes the token slices with their attribution: every
// TTFT, and the gaps in a detail window (ws) or among the slowest 1%.
func (t *traceStream) writeTokens(log *correlate.Log, base correlate.Baseline, ws [][2]int64) {
	gaps := make([]int64, 0, log.Len())
	for m := range log.All() {
		if m.Index > 0 {
			gaps = append(gaps, m.Duration())
		}
	}
	slices.Sort(gaps)
	p99 := int64(math.MaxInt64)
	if len(gaps) > 0 {
		p99 = gaps[int(0.99*float64(len(gaps)-1))]
	}
	gaps = nil
	for b := range log.Blames(base) {
		if b.Index > 0 && b.Duration() < p99 && !inWindows(ws, b.Start, b.End) {
			continue
		}
		name := "ttft"
		if b.Index > 0 {
			name = "token"
		}
		args := map[string]any{"index": b.Index, "duration_ms": float64(b.Duration()) / 1e6, "excess_ms": float64(b.ExcessNs) / 1e6}
		if b.ExcessNs > 0 {
			for c, v := range b.Shares() {
				if v > 0 {
					args[correlate.CauseNames()[c]] = v
				}
			}
		}
		t.tw.Slice(trace.PidRequests, b.Request+1, name, "latency", b.Start, b.End, args)
	}
}

// writeGapSpans writes the slowest gaps' spans, once each, but for those
// the phases' detail (phaseWs) has written, and forgets the gaps.
func (t *traceStream) writeGapSpans(phaseWs [][2]int64) {
	var spans []collectors.Span
	for _, g := range t.gaps {
		for _, sp := range g.spans {
			if !inWindows(phaseWs, sp.Start, max(sp.End, sp.Start+1)) {
				spans = append(spans, sp)
			}
		}
	}
	slices.SortFunc(spans, func(a, b collectors.Span) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.End, b.End), cmp.Compare(a.Kind, b.Kind),
			cmp.Compare(a.Tid, b.Tid), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Detail, b.Detail))
	})
	spans = slices.Compact(spans)
	for _, sp := range spans {
		t.writeSpan(sp)
	}
	t.gaps = nil
}

// writeCounters writes the sections' own counter tracks.
func (t *traceStream) writeCounters(sections []collectors.Section) {
	for _, sec := range sections {
		if cs, ok := sec.(collectors.CounterSource); ok {
			for _, c := range cs.Counters() {
				t.tw.Counter(trace.PidGPU, c.Track, c.TimeNs, map[string]float64{c.Unit: c.Value})
			}
		}
	}
}

// serverMetrics writes the scrapes as counter tracks.
func (t *traceStream) serverMetrics(r *enginemetrics.Result) {
	if r == nil {
		return
	}
	var names []string
	for _, smp := range r.Samples {
		names = names[:0]
		for name := range smp.Values {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			t.tw.Counter(trace.PidServerMetrics, "server metrics: "+name, smp.Ns, map[string]float64{"value": smp.Values[name]})
		}
	}
}

// abort drops the partial trace.
func (t *traceStream) abort() {
	t.f.Close()
}

// criticalPaths draws the slowest gaps' critical paths in their own track
// group: one track per thread on a path (track 0: the client and the
// network), a slice per step named by its cause, and flow arrows from each
// step to the next when the path moves to another track.
func (t *traceStream) criticalPaths() {
	if t.crit == nil {
		return
	}
	tr := t.tw
	flow := 0
	for gi, g := range t.crit.slowest() {
		steps := slices.Clone(g.Steps)
		slices.SortStableFunc(steps, func(a, b critpath.Step) int { return cmp.Compare(a.Start, b.Start) })
		prev := -1
		var prevStep critpath.Step
		for _, st := range steps {
			if st.End <= st.Start {
				continue
			}
			tid := int(st.Thread.Tid)
			if tid == 0 {
				tr.NameTrack(trace.PidCriticalPath, 0, "client and network")
			} else {
				tr.NameTrack(trace.PidCriticalPath, tid, t.threads.name(st.Thread.Tid))
			}
			tr.Slice(trace.PidCriticalPath, tid, st.Cause.String(), "critical_path", st.Start, st.End, map[string]any{
				"gap": gi, "request": g.Read.Request, "index": g.Read.Index, "detail": st.Detail(), "depth": st.Depth})
			if prev >= 0 && prev != tid {
				flow++
				tr.Flow(trace.PidCriticalPath, prev, "critical path", "critical_path", flow, "s", max(prevStep.Start, prevStep.End-1000))
				tr.Flow(trace.PidCriticalPath, tid, "critical path", "critical_path", flow, "f", st.Start)
			}
			prev, prevStep = tid, st
		}
	}
}
