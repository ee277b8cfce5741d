// Package pipeline is the streaming correlation of a run: what a source
// of spans (a session on this node, the agents of other nodes) and the
// load generator's records hand over is spooled while the load runs
// (spool.go), replayed into the correlation engine and the critical path
// (stream.go, critpath.go), laid out as trace.json as it goes (trace.go),
// and kept compactly for the attribution, the baseline of a later run and
// the gaps file (gaplog.go, attribution.go, baseline.go). It knows nothing
// of where the spans come from: a Pipeline is a collectors.Recorder.
package pipeline

import (
	"path/filepath"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/internal/clock"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/enginemetrics"
	"github.com/bpfbench/bpfbench/result"
)

// Config configures a run's pipeline.
type Config struct {
	// Dir receives trace.json, written as the run goes.
	Dir string
	// Marks are the phases of the run's scenario (nil: none).
	Marks *PhaseMarks
	// ThreadsOf is the process whose threads name the trace's tracks (0:
	// none readable on this node; tracks are named "thread TID").
	ThreadsOf int
	// MaxSpans bounds the spans held at once (0: 2 million); the rest are
	// counted as dropped.
	MaxSpans int
	// SpoolBytes bounds what is spooled while the load runs before it is
	// correlated (0: DefaultSpoolBytes; negative: live from the start).
	SpoolBytes int64
	// Offsets are the requests' fixed send offsets when they may be out of
	// order (a trace, requests with offsets); nil when send times grow
	// with the index. They bound the spans held for requests to come.
	Offsets []int64
}

// Pipeline correlates a run's spans with its token intervals as they
// come. Record and AddRecord may be called from any goroutine.
type Pipeline struct {
	s        *runStream
	tr       *traceStream
	marks    *PhaseMarks
	spoolMax int64
	started  bool
}

// New starts writing cfg.Dir/trace.json (under a temporary name until
// Finish and WriteTrace) and readies the correlation.
func New(cfg Config) (*Pipeline, error) {
	if cfg.Marks == nil {
		cfg.Marks = &PhaseMarks{}
	}
	tr, err := newTraceStream(cfg.Dir, clock.Now(), cfg.Marks)
	if err != nil {
		return nil, err
	}
	tr.threads = newThreadNames(cfg.ThreadsOf)
	p := &Pipeline{s: newRunStream(cfg.MaxSpans, cfg.Offsets, tr), tr: tr, marks: cfg.Marks, spoolMax: cfg.SpoolBytes}
	if p.spoolMax == 0 {
		p.spoolMax = DefaultSpoolBytes
	}
	p.s.deferUntilFinish(p.spoolMax)
	return p, nil
}

// Record takes a span (collectors.Recorder).
func (p *Pipeline) Record(sp collectors.Span) { p.s.Record(sp) }

// AddRecord takes a request the load generator has finished
// (loadgen.Config.OnRecord).
func (p *Pipeline) AddRecord(r *loadgen.Record) { p.s.AddRecord(r) }

// FollowGateway keeps what the gateway section needs: engine is the
// server's pid, via the gateway's processes.
func (p *Pipeline) FollowGateway(engine int, via []int) {
	p.s.setGateway(newGatewayStream(engine, via))
}

// Start ticks the stream's clock until Finish.
func (p *Pipeline) Start() {
	p.started = true
	p.s.start()
}

// SetRunStart marks the load's start: the first detail window of a run
// without phases.
func (p *Pipeline) SetRunStart(ns int64) { p.tr.setRunStart(ns) }

// Finish stops ticking and correlates everything left, after the load and
// the source have stopped; loadStart is the load's start (monotonic ns).
// It returns what the correlation cost after the load.
func (p *Pipeline) Finish(loadStart int64) *result.Correlation {
	corr := &result.Correlation{Deferred: p.spoolMax > 0}
	cpu0, t0 := processCPU(), time.Now()
	p.s.finish()
	corr.AfterLoadSeconds = time.Since(t0).Seconds()
	corr.AfterLoadCPUSeconds = processCPU() - cpu0
	corr.SpoolPeakBytes = p.s.q.peakBytes()
	if p.s.liveAt != 0 {
		off := float64(p.s.liveAt-loadStart) / 1e9
		corr.LiveFromOffsetS = &off
	}
	return corr
}

// Abort stops ticking and drops the partial trace, for a run that does
// not go on.
func (p *Pipeline) Abort() {
	if p.started {
		p.s.finish()
	}
	p.tr.abort()
}

// SpoolBound is the spool's bound in bytes (negative: none, live).
func (p *Pipeline) SpoolBound() int64 { return p.spoolMax }

// Late is the number of spans that arrived after intervals they may
// overlap were measured.
func (p *Pipeline) Late() uint64 { return p.s.eng.Late() }

// Spans are the spans correlated and those dropped over the bound.
func (p *Pipeline) Spans() (spans, dropped uint64) { return p.s.spans, p.s.dropped }

// Log is every token interval's measurement, once finished.
func (p *Pipeline) Log() *correlate.Log { return &p.s.log }

// Lag is how far behind the clock the watermark runs.
func Lag() time.Duration { return streamLag }

// CriticalPath is result.json's critical_path, once finished. The
// baseline is prior when given, else the first phase's gaps when there
// are phases, else the run's.
func (p *Pipeline) CriticalPath(res *loadgen.Result, prior *Prior) *result.CriticalPath {
	return p.s.crit.critResult(res.StartNs, p.marks.spans(res.EndNs), func(tid uint32) string {
		if n := p.tr.threads.name(tid); !strings.HasPrefix(n, "thread ") {
			return n
		}
		return ""
	}, prior)
}

// Attribute sets doc's attribution, and the causes of its timeline and
// phases, from the critical path's gaps (after CriticalPath).
func (p *Pipeline) Attribute(doc *result.Document, res *loadgen.Result, percentiles []float64) {
	attribute(doc, p.s.crit.gaps.all(), p.marks.spans(res.EndNs), p.s.crit.base, res.StartNs, percentiles)
}

// Gateway is the gateway section (nil without FollowGateway): comm is
// the gateway's name, via its processes, sm the server's own metrics.
func (p *Pipeline) Gateway(res *loadgen.Result, comm string, via []int, sm *enginemetrics.Result) *result.Gateway {
	return p.s.gatewayReport(res, comm, via, sm)
}

// WriteTrace completes trace.json with what needs the whole run (the
// requests, the token gaps' attribution against base, the slowest gaps,
// the server's metrics and the sections' counter tracks) and puts it in
// place; it returns its path.
func (p *Pipeline) WriteTrace(res *loadgen.Result, base correlate.Baseline, sections []collectors.Section, sm *enginemetrics.Result) (string, error) {
	p.tr.serverMetrics(sm)
	if err := p.tr.finish(res, &p.s.log, base, sections); err != nil {
		return "", err
	}
	return p.tr.path, nil
}

// WriteGaps writes dir/GapsFile, every walked gap compactly; it returns
// its path.
func (p *Pipeline) WriteGaps(dir string, res *loadgen.Result) (string, error) {
	if err := writeGaps(dir, res.StartNs, p.marks.spans(res.EndNs), p.s.crit.gaps.all()); err != nil {
		return "", err
	}
	return filepath.Join(dir, GapsFile), nil
}
