// Package job orchestrates the runs that join load and observation: `run`
// (load generator + session + correlation + report), `validate` (known
// injections, named back), `demo` and `sweep --pid`. It is the only package
// that sees the load generator, the session, correlation and the exporters
// together.
package job

import (
	"context"
	"errors"
	"fmt"
	"github.com/bpfbench/bpfbench/result"
	"iter"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/bpfbench/bpfbench/agent"
	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/internal/atomicfile"
	"github.com/bpfbench/bpfbench/internal/clock"
	"github.com/bpfbench/bpfbench/internal/manifest"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/dataset"
	"github.com/bpfbench/bpfbench/loadgen/enginemetrics"
	"github.com/bpfbench/bpfbench/loadgen/metrics"
	"github.com/bpfbench/bpfbench/loadgen/transport"
	"github.com/bpfbench/bpfbench/readiness"
	"github.com/bpfbench/bpfbench/session"
)

// RunConfig configures `bpfbench run`: a load against a server whose
// process the collectors follow at the same time.
type RunConfig struct {
	Load loadgen.Config
	Pid  int
	// Roots are the server's other process trees (--cgroup: the cgroup's
	// processes whose parents are outside it), followed as Pid's.
	Roots []int
	// OutDir receives result.json, trace.json and report.html.
	OutDir string
	// BaselineITL and BaselineTTFT, when set, are the normal gap and TTFT;
	// otherwise they are the medians of the run.
	BaselineITL, BaselineTTFT time.Duration
	// Prior, when set, is a quiet run recorded earlier (--baseline DIR):
	// its normal gaps are the baseline of both attributions, so that a run
	// contended from start to end is still compared with normal.
	// BaselineITL and BaselineTTFT still win when set.
	Prior    *Prior
	Sections []session.SectionFactory
	Logger   *slog.Logger
	// MaxSpans bounds the spans held at once while they wait for the
	// token intervals they may overlap (default 2 million, far above what a
	// run needs: spans are correlated as they come and then forgotten);
	// the rest are counted as dropped.
	MaxSpans int
	// SpoolBytes bounds what the recorders hand over while the load runs
	// before it is correlated (job/spool.go): correlation waits for the
	// load's end, taking no CPU from the server, unless the spool passes
	// this; then it goes live. 0: DefaultSpoolBytes; negative: live from
	// the start.
	SpoolBytes int64
	// Phases, when set, is called with the run's start (monotonic ns) once
	// the load begins and returns when its scenario is done; the marks it
	// appends split the report into phases.
	Phases func(ctx context.Context, marks *PhaseMarks)
	// Readiness, when set, runs the readiness checks for the result
	// (after the cheap checks of the configuration).
	Readiness func() []readiness.Check
	// ServerMetrics is the server's Prometheus endpoint, scraped during
	// the load: "" looks for the target's /metrics (once, at the start;
	// not found, the run says so and goes on), "off" scrapes nothing.
	ServerMetrics string
	// ServerMetricsPeriod is the scrape period (250 ms to 1 s; default
	// 500 ms).
	ServerMetricsPeriod time.Duration
	// Manifest is what the run's manifest cannot find alone (the GPUs;
	// Args default to os.Args, Dataset to the load's): result.json
	// records the manifest of Pid under "manifest".
	Manifest manifest.Options
	// Agents, when set, follow the server through the bpfbench daemons of
	// its nodes: a session on AgentTarget at each (no local session; Pid
	// is then the server's on its node, and the manifest and thread names
	// are not read here). AgentTCPPort restricts their network sections.
	Agents       []*agent.Client
	AgentTarget  agent.Target
	AgentTCPPort int
	// ViaPid is a gateway in front of the server (a proxy the load goes
	// through): it and the processes it forked are followed too, and the
	// report gets the time per hop (result.json "gateway").
	ViaPid int
}

// PhaseMarks records where the phases of a scenario begin.
type PhaseMarks struct {
	mu    sync.Mutex
	marks []phaseMark
}

type phaseMark struct {
	name string
	ns   int64
}

// Begin starts a phase now.
func (p *PhaseMarks) Begin(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marks = append(p.marks, phaseMark{name, clock.Now()})
}

// End ends the current phase now without starting another: the time until
// the next Begin belongs to no phase (a server settling after an
// injection, its queue draining).
func (p *PhaseMarks) End() { p.Begin("") }

// spans are the phases, each from its mark to the next mark (or end);
// the marks of End are no phase.
func (p *PhaseMarks) spans(end int64) []critPhase {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []critPhase
	for i, m := range p.marks {
		if m.name == "" {
			continue
		}
		to := end
		if i+1 < len(p.marks) {
			to = p.marks[i+1].ns
		}
		out = append(out, critPhase{name: m.name, from: m.ns, to: to})
	}
	return out
}

// RunResult is what a run produced.
type RunResult struct {
	Doc  *result.Document
	Load *loadgen.Result
	// Measured holds every token interval's measurement, compactly;
	// Baseline turns them into blames (Blames).
	Measured *correlate.Log
	Baseline correlate.Baseline
	Dir      string
	// Written are the files of Dir written whole (trace.json, result.json,
	// report.html, gaps.jsonl.gz), in the order they were: a run that
	// failed to write one lists those before it.
	Written []string
}

// Blames is the attribution of every token interval, in the order they
// were measured.
func (r *RunResult) Blames() []correlate.Blame {
	if r.Measured == nil {
		return nil
	}
	return slices.Collect(r.Measured.Blames(r.Baseline))
}

// checkWritable fails early when dir cannot take the run's files.
func checkWritable(dir string) error {
	if dir == "" {
		return errors.New("--out DIR is required: the directory for result.json, trace.json and report.html")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cannot create --out %s: %w", dir, err)
	}
	// Creating a file there also removes what a killed run left
	// (atomicfile.Clean).
	f, err := atomicfile.Create(filepath.Join(dir, ".write-test"), 0o644)
	if err != nil {
		return fmt.Errorf("cannot write to --out %s: %w", dir, err)
	}
	return f.Close()
}

// Run follows cfg.Pid with the sections while the load runs, then
// correlates and writes the run directory. The load result is kept even
// when the target exits mid-run.
func Run(ctx context.Context, cfg RunConfig) (*RunResult, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("component", "run")
	if err := checkWritable(cfg.OutDir); err != nil {
		return nil, err
	}
	if cfg.ViaPid != 0 && len(cfg.Agents) > 0 {
		return nil, errors.New("--via-pid/--via-port follow a gateway on this node: not with --agent")
	}
	if cfg.ViaPid != 0 && cfg.ViaPid == cfg.Pid {
		return nil, fmt.Errorf("the gateway (pid %d) is the server itself: give the server's --pid and the proxy's --via-pid", cfg.Pid)
	}
	// The manifest is taken first, while the target is surely alive and
	// before the load, whose timing its reads (hashes) would disturb.
	man := collectManifest(cfg, log)
	localPid := cfg.Pid
	if len(cfg.Agents) > 0 {
		localPid = 0
	}
	sm, err := newServerMetrics(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	var checks []readiness.Check
	if cfg.Readiness != nil {
		checks = cfg.Readiness()
	}
	// Spans are correlated with the token intervals as they come, and the
	// trace is written as the run goes (runstream.go, runtrace.go).
	marks := &PhaseMarks{}
	tr, err := newTraceStream(cfg.OutDir, clock.Now(), marks)
	if err != nil {
		return nil, err
	}
	tr.threads = newThreadNames(localPid)
	traceDone := false
	defer func() {
		if !traceDone {
			tr.abort()
		}
	}()
	stream := newRunStream(cfg, tr)
	spoolMax := cfg.SpoolBytes
	if spoolMax == 0 {
		spoolMax = DefaultSpoolBytes
	}
	stream.deferUntilFinish(spoolMax)
	onRecord := cfg.Load.Output.OnRecord
	cfg.Load.Output.OnRecord = func(r *loadgen.Record) {
		if onRecord != nil {
			onRecord(r)
		}
		stream.AddRecord(r)
	}
	var sess *session.Session
	var remote *remoteRun
	var via []int // the gateway's processes
	sessCtx, stopSess := context.WithCancel(context.Background())
	defer stopSess()
	sessDone := make(chan error, 1)
	exited := make(<-chan struct{})
	if len(cfg.Agents) > 0 {
		req := agent.StartRequest{Target: cfg.AgentTarget, TCPPort: cfg.AgentTCPPort}
		if remote, err = startAgents(ctx, cfg.Agents, req, stream, cfg.Logger); err != nil {
			return nil, err
		}
		stream.start()
		defer stream.finish()
		sessDone <- nil
	} else {
		opts := collectors.Options{Pid: cfg.Pid, Roots: cfg.Roots, Interval: time.Second, Logger: cfg.Logger, Recorder: stream}
		if sess, err = session.NewSession(opts, cfg.Sections); err != nil {
			return nil, err
		}
		if err := sess.Start(ctx); err != nil {
			return nil, err
		}
		defer sess.Close()
		if cfg.ViaPid != 0 {
			pids, err := sess.Follow(cfg.ViaPid)
			if len(pids) == 0 {
				return nil, fmt.Errorf("following the gateway: %w", err)
			}
			if err != nil {
				log.Warn("following the gateway", "pids", pids, "err", err)
			}
			via = pids
			stream.setGateway(newGatewayStream(cfg.Pid, pids))
		}
		stream.start()
		defer stream.finish()
		exited = sess.Exited()
		go func() { sessDone <- sess.Run(sessCtx, 0, nil) }()
	}

	var stopMu sync.Mutex
	stoppedReason := "load finished"
	stoppedNs := int64(0)
	go func() {
		select {
		case <-exited:
			stopMu.Lock()
			stoppedNs = clock.Now()
			stoppedReason = fmt.Sprintf("target pid %d (%s) exited during the run", cfg.Pid, sess.Comm())
			stopMu.Unlock()
			log.Warn("target exited; the load goes on, collection stopped", "pid", cfg.Pid)
			stopSess()
		case <-sessCtx.Done():
		}
	}()

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	phasesDone := make(chan struct{})
	if cfg.Phases != nil {
		go func() {
			defer close(phasesDone)
			cfg.Phases(loadCtx, marks)
		}()
	} else {
		close(phasesDone)
	}
	sm.start(ctx)
	defer sm.stop()
	// Collect the start's garbage (kernel BTF, program loading) now, not
	// in a collection during the load: the load's own allocations are
	// then too few to start one, and its mark workers would take CPU from
	// the server while it is measured.
	runtime.GC()
	loadStartNs := clock.Now()
	tr.setRunStart(loadStartNs)
	res, loadErr := loadgen.Run(loadCtx, cfg.Load)
	loadEndNs := clock.Now()
	stopLoad()
	sm.stop()
	<-phasesDone
	stopSess()
	if err := <-sessDone; err != nil {
		log.Warn("collection", "err", err)
	}
	if sess != nil {
		sess.Close()
	}
	if remote != nil {
		remote.stop()
	}
	corr := &result.Correlation{Deferred: spoolMax > 0}
	cpu0, t0 := processCPU(), time.Now()
	stream.finish()
	corr.AfterLoadSeconds = time.Since(t0).Seconds()
	corr.AfterLoadCPUSeconds = processCPU() - cpu0
	corr.SpoolPeakBytes = stream.q.peakBytes()
	if stream.liveAt != 0 {
		off := float64(stream.liveAt-loadStartNs) / 1e9
		corr.LiveFromOffsetS = &off
		log.Info("the spool passed its bound: correlating live from then on", "offset_s", off, "bound_bytes", spoolMax)
	}
	if res == nil {
		if loadErr == nil {
			loadErr = errors.New("the load generator returned no result")
		}
		return nil, loadErr
	}
	stopMu.Lock()
	if stoppedNs == 0 {
		stoppedNs = loadEndNs
	}
	reason := stoppedReason
	stopMu.Unlock()
	if ctx.Err() != nil {
		reason = "interrupted"
	}

	if n := stream.eng.Late(); n > 0 {
		log.Info("spans arrived after intervals they may overlap were measured", "spans", n, "lag", streamLag)
	}
	out := &RunResult{Load: res, Dir: cfg.OutDir, Measured: &stream.log}
	// The baseline needs the whole run (its medians); the measurements
	// are all it needs, and the blames follow from them.
	base := correlate.Baseline{TTFTNs: cfg.BaselineTTFT.Nanoseconds(), ITLNs: cfg.BaselineITL.Nanoseconds()}
	est := stream.log.Baseline()
	if p := cfg.Prior; p != nil && p.Union.ITLNs > 0 {
		est = p.Union
	}
	if base.ITLNs == 0 {
		base.ITLNs = est.ITLNs
	}
	if base.TTFTNs == 0 {
		base.TTFTNs = est.TTFTNs
	}
	base.Rate = est.Rate
	out.Baseline = base
	blames := stream.log.Blames(base)
	percentiles := res.Config.Metrics.Percentiles
	if len(percentiles) == 0 {
		percentiles = []float64{50, 90, 99}
	}
	summary := correlate.SummarizeSeq(blames, base, percentiles)

	doc := &result.Document{SchemaVersion: result.SchemaVersion, Activity: &summary, Collectors: &result.Collectors{}}
	if err := doc.SetLoad(res.JSON()); err != nil {
		return nil, err
	}
	if man.Dataset == nil {
		man.Dataset = datasetOf(res.Dataset)
	}
	doc.Manifest = man
	var sections []collectors.Section
	if sess != nil {
		sections = sess.Sections()
		for _, sec := range sections {
			doc.Collectors.Set(sec.Name(), sec.Summary())
		}
		anchor := sess.Anchor()
		doc.Collection = &result.Collection{
			Pid: cfg.Pid, Comm: sess.Comm(),
			Started: anchor.ToWall(sess.StartNs()), Stopped: anchor.ToWall(stoppedNs),
			StartedOffsetS: float64(sess.StartNs()-res.StartNs) / 1e9,
			StoppedOffsetS: float64(stoppedNs-res.StartNs) / 1e9,
			StoppedReason:  reason, LostEvents: sess.Lost(),
			Spans: stream.spans, SpansDropped: stream.dropped,
			Unavailable: sess.Unavailable(), Correlation: corr,
		}
		ov := sess.Overhead()
		doc.Overhead = &ov
	} else {
		remote.collection(res, doc, stream.spans, stream.dropped)
		doc.Collection.Correlation = corr
		if ctx.Err() != nil {
			doc.Collection.StoppedReason = "interrupted; " + doc.Collection.StoppedReason
		}
		doc.Agents = remote.report(res)
		doc.ClockBoundNs = remote.boundNs()
	}
	for _, c := range checks {
		doc.Collection.Readiness = append(doc.Collection.Readiness, result.Check{Status: string(c.Status), Name: c.Name, Detail: c.Detail, Fix: c.Fix})
	}
	doc.ServerMetrics, doc.ServerQueue = sm.report(res)
	doc.Timeline = timeline(res, blames)
	doc.Phases = phases(res, blames, base, marks)
	cphases := critPhases(res, marks)
	doc.CriticalPath = stream.crit.critResult(res.StartNs, cphases, func(tid uint32) string {
		if n := tr.threads.name(tid); !strings.HasPrefix(n, "thread ") {
			return n
		}
		return ""
	}, cfg.Prior)
	attribute(doc, stream.crit.gaps.all(), cphases, stream.crit.base, res.StartNs, percentiles)
	if via != nil {
		doc.Gateway = stream.gatewayReport(res, viaComm(cfg.ViaPid), via, sm.result())
	}
	doc.Diagnosis = report.Diagnose(doc)
	out.Doc = doc

	traceDone = true
	tr.serverMetrics(sm.result())
	// Each file is written whole or not at all, and one that cannot be
	// (a full disk) does not keep the others from being tried: Written
	// lists those that were, in the order written.
	var werrs []error
	if err := tr.finish(res, &stream.log, base, sections); err != nil {
		werrs = append(werrs, err)
	} else {
		out.Written = append(out.Written, tr.path)
	}
	written, err := writeRunDir(cfg.OutDir, doc)
	out.Written = append(out.Written, written...)
	if err != nil {
		werrs = append(werrs, err)
	}
	if err := writeGaps(cfg.OutDir, res.StartNs, cphases, stream.crit.gaps.all()); err != nil {
		werrs = append(werrs, err)
	} else {
		out.Written = append(out.Written, filepath.Join(cfg.OutDir, GapsFile))
	}
	if len(werrs) > 0 {
		return out, errors.Join(werrs...)
	}
	if loadErr != nil && !errors.Is(loadErr, context.Canceled) {
		return out, loadErr
	}
	return out, nil
}

// writeRunDir writes result.json and report.html, each atomically, and
// returns those it wrote whole.
func writeRunDir(dir string, doc *result.Document) (written []string, err error) {
	p := filepath.Join(dir, "result.json")
	if err := doc.WriteFile(p); err != nil {
		return nil, err
	}
	h := filepath.Join(dir, "report.html")
	if err := report.WriteHTMLFile(h, doc); err != nil {
		return []string{p}, err
	}
	return []string{p, h}, nil
}

// intervalsOf turns each successful measured request into its TTFT and
// inter-chunk intervals.
func intervalsOf(res *loadgen.Result) []correlate.Interval {
	var out []correlate.Interval
	for i := range res.Records {
		out = intervalsOfRecord(out, &res.Records[i])
	}
	return out
}

// intervalsOfRecord appends a successful request's TTFT and inter-chunk
// intervals to out.
func intervalsOfRecord(out []correlate.Interval, r *loadgen.Record) []correlate.Interval {
	if !r.Success || len(r.ChunkNs) == 0 {
		return out
	}
	port := uint16(r.LocalPort)
	out = append(out, correlate.Interval{Request: r.Index, Index: 0, Start: r.StartNs, End: r.ChunkNs[0], Port: port})
	for k := 1; k < len(r.ChunkNs); k++ {
		out = append(out, correlate.Interval{Request: r.Index, Index: k, Start: r.ChunkNs[k-1], End: r.ChunkNs[k], Port: port})
	}
	return out
}

// activitiesOf maps the sections' spans to causes (activityOf).
func activitiesOf(spans []collectors.Span) []correlate.Activity {
	out := make([]correlate.Activity, 0, len(spans))
	for _, s := range spans {
		if a, ok := activityOf(s); ok {
			out = append(out, a)
		}
	}
	return out
}

// activityOf maps a section's span to its cause: run-queue waits are
// cpu_runqueue; uninterruptible sleep and block requests are io_block;
// blocking CUDA calls are gpu_sync; blocking TCP episodes are
// net_backpressure on their connection's client port. Other spans (the
// load generator's own, sends, arrivals, forks) explain nothing.
func activityOf(s collectors.Span) (correlate.Activity, bool) {
	a := correlate.Activity{Start: s.Start, End: s.End, Tid: s.Tid}
	if s.Client {
		return a, false
	}
	switch s.Kind {
	case collectors.SpanRunqueue:
		a.Cause = correlate.CPURunqueue
	case collectors.SpanOffCPU:
		if !s.Blocking {
			return a, false
		}
		a.Cause = correlate.IOBlock
	case collectors.SpanBlockIO:
		a.Cause = correlate.IOBlock
	case collectors.SpanCUDA:
		if !s.Blocking {
			return a, false
		}
		a.Cause = correlate.GPUSync
	case collectors.SpanTCP:
		if !s.Blocking {
			return a, false
		}
		a.Cause = correlate.NetBackpressure
		a.Port = s.Port
	default:
		return a, false
	}
	return a, true
}

func percentile(xs []float64, p float64) float64 {
	sort.Float64s(xs)
	return metrics.Percentile(xs, p)
}

// timeline buckets the run by second: throughput, latency and the excess
// attributed to each cause.
func timeline(res *loadgen.Result, blames iter.Seq[correlate.Blame]) []result.TimelinePoint {
	if res.EndNs <= res.StartNs {
		return nil
	}
	n := int((res.EndNs-res.StartNs)/1e9) + 1
	pts := make([]result.TimelinePoint, n)
	itls := make([][]float64, n)
	ttfts := make([][]float64, n)
	tokens := make([]float64, n)
	bucket := func(ns int64) int {
		b := int((ns - res.StartNs) / 1e9)
		return min(max(b, 0), n-1)
	}
	for i := range res.Records {
		r := &res.Records[i]
		if !r.Success {
			continue
		}
		pts[bucket(r.EndNs)].CompletedRequests++
		for k, ns := range r.ChunkNs {
			tok := 1.0
			if r.ChunkTokens != nil && k < len(r.ChunkTokens) {
				tok = float64(r.ChunkTokens[k])
			}
			tokens[bucket(ns)] += tok
		}
	}
	for i := range pts {
		pts[i].T = float64(i)
		pts[i].CausesMs = map[string]float64{}
	}
	// Sums in integer ns: the same whatever order the blames come in.
	causeNs := make([][correlate.NumCauses + 1]int64, n)
	for b := range blames {
		k := bucket(b.End)
		if b.Index == 0 {
			ttfts[k] = append(ttfts[k], float64(b.Duration())/1e6)
		} else {
			itls[k] = append(itls[k], float64(b.Duration())/1e6)
		}
		for c, v := range b.AttributedNs {
			if v > 0 {
				causeNs[k][c] += v
			}
		}
	}
	for i := range pts {
		for c, name := range correlate.CauseNames() {
			if causeNs[i][c] > 0 {
				pts[i].CausesMs[name] = float64(causeNs[i][c]) / 1e6
			}
		}
		pts[i].OutputTokensPerSecond = tokens[i]
		pts[i].P50ITLMs = percentile(itls[i], 50)
		pts[i].P99ITLMs = percentile(itls[i], 99)
		pts[i].P50TTFTMs = percentile(ttfts[i], 50)
	}
	return pts
}

// phases summarizes each phase of a scenario: the intervals ending inside
// it. A phase's top cause is the cause whose attributed excess per
// interval grew most over the first phase (the scenario's baseline): what
// the phase changed, not what every phase has (a busy machine's ordinary
// run-queue waits). The first phase's top cause is that of its slowest 1%.
func phases(res *loadgen.Result, blames iter.Seq[correlate.Blame], base correlate.Baseline, marks *PhaseMarks) []result.Phase {
	ms := marks.spans(res.EndNs)
	var out []result.Phase
	var ref []float64
	for i, m := range ms {
		end := m.to
		m := phaseMark{name: m.name, ns: m.from}
		// The intervals ending in the phase, read again for its summary.
		sel := func(yield func(correlate.Blame) bool) {
			for b := range blames {
				if b.End >= m.ns && b.End < end && !yield(b) {
					return
				}
			}
		}
		var itls, ttfts []float64
		n := 0
		reqs := map[int]bool{}
		// Sums in integer ns: the same whatever order the blames come in.
		var sumNs [correlate.NumCauses + 1]int64
		perInterval := make([]float64, len(correlate.CauseNames()))
		for b := range sel {
			n++
			reqs[b.Request] = true
			if b.Index == 0 {
				ttfts = append(ttfts, float64(b.Duration())/1e6)
			} else {
				itls = append(itls, float64(b.Duration())/1e6)
			}
			for c, v := range b.AttributedNs {
				sumNs[c] += v
			}
		}
		att := correlate.Breakdown{}
		for c, name := range correlate.CauseNames() {
			perInterval[c] = float64(sumNs[c]) / 1e6
			if n > 0 {
				perInterval[c] /= float64(n)
			}
			att[name] = perInterval[c]
		}
		s := correlate.SummarizeSeq(sel, base, []float64{50, 99})
		p := result.Phase{
			Name: m.name, StartS: float64(m.ns-res.StartNs) / 1e9, EndS: float64(end-res.StartNs) / 1e9,
			Requests: len(reqs), P50ITLMs: percentile(itls, 50), P99ITLMs: percentile(itls, 99),
			P99TTFTMs: percentile(ttfts, 99), ITLP99: s.ITL["p99"], ITLAll: s.ITL["all"], TTFT: s.TTFT,
			AttributedMsPerInterval: att,
		}
		if i == 0 {
			ref = perInterval
			p.TopCause, p.TopCauseBasis = correlate.Top(s.ITL["p99"]), "slowest 1% of gaps"
		} else {
			best, bestV := "unexplained", 0.0
			for c := 0; c < int(correlate.NumCauses); c++ {
				if d := perInterval[c] - ref[c]; d > bestV {
					best, bestV = correlate.CauseNames()[c], d
				}
			}
			p.TopCause, p.TopCauseBasis = best, "largest increase over "+ms[0].name
		}
		out = append(out, p)
	}
	return out
}

// critPhases are the phases' spans of time, as phases() cuts them.
func critPhases(res *loadgen.Result, marks *PhaseMarks) []critPhase { return marks.spans(res.EndNs) }

// serverMetrics scrapes the server's own /metrics during the load.
type serverMetrics struct {
	url   string
	note  string                 // why nothing is scraped
	s     *enginemetrics.Scraper // nil: nothing scraped
	stopS context.CancelFunc
	done  chan struct{}
	res   *enginemetrics.Result
}

// serverProbeTimeout bounds the look for the target's /metrics.
const serverProbeTimeout = 2 * time.Second

// newServerMetrics resolves the endpoint: cfg.ServerMetrics, or the load
// target's /metrics when it answers with Prometheus text.
func newServerMetrics(ctx context.Context, cfg RunConfig, log *slog.Logger) (*serverMetrics, error) {
	sm := &serverMetrics{url: cfg.ServerMetrics}
	if sm.url == "off" {
		return &serverMetrics{}, nil
	}
	auto := sm.url == ""
	if auto {
		target := cfg.Load.Target.URL
		if cfg.Load.Target.Protocol == transport.ProtocolKServeGRPC && !strings.Contains(target, "://") {
			// HOST:PORT of a gRPC server: its metrics are not on that port
			// (Triton's are on 8002).
			target = "grpc://" + target
		}
		u, err := enginemetrics.MetricsURL(target)
		if err != nil {
			sm.note = err.Error()
			return sm, nil
		}
		sm.url = u
	}
	s, err := enginemetrics.New(enginemetrics.Config{URL: sm.url, Period: cfg.ServerMetricsPeriod, Logger: cfg.Logger})
	if err != nil {
		if auto {
			sm.note = err.Error()
			return sm, nil
		}
		return nil, fmt.Errorf("--server-metrics: %w", err)
	}
	if auto {
		if err := enginemetrics.Probe(ctx, sm.url, serverProbeTimeout); err != nil {
			sm.note = "no Prometheus endpoint at the target's /metrics (" + err.Error() + "); pass --server-metrics URL"
			log.Info("server metrics not found", "url", sm.url, "err", err)
			return sm, nil
		}
	}
	sm.s = s
	return sm, nil
}

// start scrapes until stop.
func (sm *serverMetrics) start(ctx context.Context) {
	if sm.s == nil {
		return
	}
	sctx, cancel := context.WithCancel(ctx)
	sm.stopS, sm.done = cancel, make(chan struct{})
	go func() {
		defer close(sm.done)
		sm.s.Run(sctx)
	}()
}

// stop ends the scrapes and keeps what they saw; it may be called again.
func (sm *serverMetrics) stop() {
	if sm.stopS == nil {
		return
	}
	sm.stopS()
	<-sm.done
	sm.stopS = nil
	r := sm.s.Result()
	sm.res = &r
}

func (sm *serverMetrics) result() *enginemetrics.Result { return sm.res }

// report is the result.json sections: the samples on the load's time
// axis, the gauges' peaks, and the queue estimate of every request.
func (sm *serverMetrics) report(res *loadgen.Result) (*result.ServerMetrics, *result.ServerQueue) {
	if sm.url == "" && sm.note == "" {
		return nil, nil
	}
	out := &result.ServerMetrics{URL: sm.url, Note: sm.note}
	r := sm.res
	if r == nil {
		return out, nil
	}
	out.Found = true
	out.Engine, out.VocabularyMatched = r.Engine, r.VocabularyMatched
	out.PeriodMs = float64(r.Period) / 1e6
	out.Scrapes, out.ScrapeFailures = r.Scrapes, r.Failures
	out.FirstError, out.LastError = r.FirstError, r.LastError
	out.Sources, out.Overall = r.Sources, r.Overall
	out.RawSeries, out.RawSeriesDropped = r.RawSeries, r.RawDropped
	out.Samples = make([]result.ServerSample, 0, len(r.Samples))
	if r.VocabularyMatched {
		out.Peaks = map[string]float64{}
	}
	for _, smp := range r.Samples {
		out.Samples = append(out.Samples, result.ServerSample{T: float64(smp.Ns-res.StartNs) / 1e9, Values: smp.Values})
		if !r.VocabularyMatched {
			continue
		}
		for _, name := range []string{enginemetrics.RequestsRunning, enginemetrics.RequestsWaiting, enginemetrics.KVCacheUsage} {
			if v, ok := smp.Values[name]; ok {
				out.Peaks[name] = max(out.Peaks[name], v)
			}
		}
	}
	if !r.VocabularyMatched {
		return out, nil
	}
	return out, serverQueue(res, r)
}

// serverQueueRule is the rule of the server_queue estimate, as
// result.json states it.
const serverQueueRule = "each request's wait for a slot, replayed in send order (FIFO) over the engine's slots " +
	"(its peak of requests running), a slot freeing when a request ends; counted only while the engine " +
	"reported requests waiting, and at most the request's TTFT. The share is the queue time over the TTFT, " +
	"summed over the successful measured requests."

// serverQueue estimates each request's time in the engine's queue.
func serverQueue(res *loadgen.Result, r *enginemetrics.Result) *result.ServerQueue {
	reqs := make([]enginemetrics.Request, 0, len(res.Warmup)+len(res.Records))
	add := func(rec *loadgen.Record, measured bool) {
		q := enginemetrics.Request{StartNs: rec.StartNs, EndNs: rec.EndNs, Measured: measured && rec.Success}
		if rec.Success && len(rec.ChunkNs) > 0 {
			q.FirstTokenNs = rec.ChunkNs[0]
		}
		reqs = append(reqs, q)
	}
	for i := range res.Warmup {
		add(&res.Warmup[i], false)
	}
	for i := range res.Records {
		add(&res.Records[i], true)
	}
	est := enginemetrics.EstimateQueue(reqs, r.Samples, r.Period)
	q := &result.ServerQueue{Rule: serverQueueRule, Available: est.Available, Reason: est.Reason}
	if !est.Available {
		return q
	}
	q.Slots, q.RequestsQueued, q.Unconfirmed = est.Slots, est.Queued, est.Unconfirmed
	q.ShareOfTTFT = est.Share
	q.TotalMs, q.TTFTMs = float64(est.TotalNs)/1e6, float64(est.TTFTNs)/1e6
	q.WaitingError = est.WaitingError
	if v, ok := r.Overall[enginemetrics.QueueTimeMs]; ok {
		q.EngineMeanMs = &v
	}
	for i := range res.Records {
		w := est.WaitNs[len(res.Warmup)+i]
		rec := &res.Records[i]
		if w <= 0 || !rec.Success || len(rec.ChunkNs) == 0 {
			continue
		}
		ms := float64(w) / 1e6
		q.MaxMs = max(q.MaxMs, ms)
		q.Requests = append(q.Requests, result.QueuedRequest{Index: rec.Index, QueueMs: ms, TTFTMs: float64(rec.TTFTNs()) / 1e6})
	}
	if est.Queued > 0 {
		q.MeanMs = q.TotalMs / float64(est.Queued)
	}
	return q
}

// collectManifest records the target's manifest before the load; each part
// it could not read is a note in it (and a debug line). The dataset is the
// load's own description, added when the load is done (datasetOf).
func collectManifest(cfg RunConfig, log *slog.Logger) *manifest.Manifest {
	opts := cfg.Manifest
	if opts.Args == nil {
		opts.Args = os.Args
	}
	pid := cfg.Pid
	if len(cfg.Agents) > 0 {
		pid = 0 // the server's on another node: its manifest is not readable here
	}
	m, notes := manifest.Collect(pid, opts)
	for _, n := range notes {
		log.Debug("manifest", "note", n)
	}
	return m
}

// datasetOf is the load's dataset as the manifest records it.
func datasetOf(d dataset.Info) *manifest.Dataset {
	if d.Name == "" {
		return nil
	}
	return &manifest.Dataset{Name: d.Name, Path: d.Path, Seed: d.Seed, Params: d.Params, SHA256: d.SHA256, Hashed: d.Hashed}
}
