// Package run is the job of `bpfbench run`: the load generator, a source of
// spans (a local session or remote agents), the streaming correlation and
// the run directory's files. The other jobs (validate, demo, sweep --pid in
// job/knee) are runs of it with phases or at a sweep's steps.
package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/bpfbench/bpfbench/agent"
	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/internal/atomicfile"
	"github.com/bpfbench/bpfbench/internal/clock"
	"github.com/bpfbench/bpfbench/internal/manifest"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/dataset"
	"github.com/bpfbench/bpfbench/pipeline"
	"github.com/bpfbench/bpfbench/readiness"
	"github.com/bpfbench/bpfbench/result"
	"github.com/bpfbench/bpfbench/session"
	"golang.org/x/sync/errgroup"
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
	// before it is correlated (pipeline/spool.go): correlation waits for the
	// load's end, taking no CPU from the server, unless the spool passes
	// this; then it goes live. 0: DefaultSpoolBytes; negative: live from
	// the start.
	SpoolBytes int64
	// Phases, when set, is called with the run's start (monotonic ns) once
	// the load begins and returns when its scenario is done; the marks it
	// appends split the report into phases.
	Phases func(ctx context.Context, marks *pipeline.PhaseMarks)
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
	if err := checkRun(cfg); err != nil {
		return nil, err
	}
	src := newSource(cfg)
	defer src.close()
	r, err := newRun(ctx, cfg, log, src)
	if err != nil {
		return nil, err
	}
	if err := r.start(ctx); err != nil {
		r.pipe.Abort()
		return nil, err
	}
	res, loadErr := r.collect(ctx)
	corr := r.pipe.Finish(r.loadStartNs)
	if corr.LiveFromOffsetS != nil {
		log.Info("the spool passed its bound: correlating live from then on", "offset_s", *corr.LiveFromOffsetS, "bound_bytes", r.pipe.SpoolBound())
	}
	if res == nil {
		r.pipe.Abort()
		if loadErr == nil {
			loadErr = errors.New("the load generator returned no result")
		}
		return nil, loadErr
	}
	st := r.collected(ctx, corr)
	if n := r.pipe.Late(); n > 0 {
		log.Info("spans arrived after intervals they may overlap were measured", "spans", n, "lag", pipeline.Lag())
	}
	out, err := r.result(res, st)
	if err != nil {
		return out, err
	}
	if loadErr != nil && !errors.Is(loadErr, context.Canceled) {
		return out, loadErr
	}
	return out, nil
}

// newRun prepares a run before anything follows the server: it takes the
// manifest, finds the server's metrics, runs the readiness checks, plans
// the requests and opens the pipeline that each record of the load goes
// to.
func newRun(ctx context.Context, cfg RunConfig, log *slog.Logger, src source) (*run, error) {
	// The manifest is taken first, while the target is surely alive and
	// before the load, whose timing its reads (hashes) would disturb.
	r := &run{cfg: cfg, log: log, src: src, man: collectManifest(cfg, src.localPid(), log), marks: &pipeline.PhaseMarks{},
		cpu: newServerCPU(src.localPid(), cfg.Roots)}
	var err error
	if r.sm, err = NewServerMetrics(ctx, cfg, log); err != nil {
		return nil, err
	}
	if cfg.Readiness != nil {
		r.checks = cfg.Readiness()
	}
	// The requests are planned once, before the load: the pipeline holds
	// spans by their send offsets, and the load sends the same plan.
	var offsets []int64
	r.plan, offsets = planLoad(cfg.Load)
	// Spans are correlated with the token intervals as they come, and the
	// trace is written as the run goes.
	r.pipe, err = pipeline.New(pipeline.Config{Dir: cfg.OutDir, Marks: r.marks, ThreadsOf: src.localPid(),
		MaxSpans: cfg.MaxSpans, SpoolBytes: cfg.SpoolBytes, Offsets: offsets})
	if err != nil {
		return nil, err
	}
	onRecord := cfg.Load.Output.OnRecord
	r.cfg.Load.Output.OnRecord = func(rec *loadgen.Record) {
		if onRecord != nil {
			onRecord(rec)
		}
		r.pipe.AddRecord(rec)
	}
	return r, nil
}

// result attributes every token interval of the finished run, assembles
// its document and writes the run directory. It returns nil when the
// document could not be assembled, and the result with the error when
// the directory could not be written.
func (r *run) result(res *loadgen.Result, st collected) (*RunResult, error) {
	out := &RunResult{Load: res, Dir: r.cfg.OutDir, Measured: r.pipe.Log()}
	// The baseline needs the whole run (its medians); the measurements
	// are all it needs, and the blames follow from them.
	base := runBaseline(r.cfg, r.pipe.Log())
	out.Baseline = base
	blames := r.pipe.Log().Blames(base)
	percentiles := res.Config.Metrics.Percentiles
	if len(percentiles) == 0 {
		percentiles = []float64{50, 90, 99}
	}
	summary := correlate.SummarizeSeq(blames, base, percentiles)
	if err := r.assemble(out, res, st, base, blames, summary, percentiles); err != nil {
		r.pipe.Abort()
		return nil, err
	}
	if err := r.write(out, res, base); err != nil {
		return out, err
	}
	return out, nil
}

// checkRun fails early on what cannot run: the output directory, a
// gateway with agents or that is the server.
func checkRun(cfg RunConfig) error {
	if err := checkWritable(cfg.OutDir); err != nil {
		return err
	}
	if cfg.ViaPid != 0 && len(cfg.Agents) > 0 {
		return errors.New("--via-pid/--via-port follow a gateway on this node: not with --agent")
	}
	if cfg.ViaPid != 0 && cfg.ViaPid == cfg.Pid {
		return fmt.Errorf("the gateway (pid %d) is the server itself: give the server's --pid and the proxy's --via-pid", cfg.Pid)
	}
	return nil
}

// run is one `bpfbench run` under way: what follows the server, the
// pipeline its spans and the load's records go through, and what the
// lifecycles leave for the result.
type run struct {
	cfg    RunConfig
	log    *slog.Logger
	src    source
	pipe   *pipeline.Pipeline
	sm     *ServerMetrics
	marks  *pipeline.PhaseMarks
	man    *manifest.Manifest
	checks []readiness.Check
	via    []int // the gateway's processes
	// plan is the load's requests (planLoad; nil: the load plans them).
	plan *loadgen.Plan

	loadStartNs, loadEndNs int64
	// cpu is the server's CPU over the load.
	cpu *serverCPU
	// stoppedNs and stoppedReason are set when the target exited during
	// the run (by the exit watcher; read once its group is done).
	stoppedNs     int64
	stoppedReason string
}

// start starts the source, its spans to the pipeline, follows the
// gateway, and starts the pipeline's clock.
func (r *run) start(ctx context.Context) error {
	if err := r.src.start(ctx, r.pipe); err != nil {
		return err
	}
	if r.cfg.ViaPid != 0 {
		via, err := r.src.follow(r.cfg.ViaPid)
		if err != nil {
			return err
		}
		r.via = via
		r.pipe.FollowGateway(r.cfg.Pid, via)
	}
	r.pipe.Start()
	return nil
}

// collect runs the load and what goes with it in two groups. The
// collection's (the source, the exit watcher) runs until the load's is
// done; the load's (the load, the scenario's phases, the server's
// metrics) ends with the load, whose end cancels the others. The source
// is then stopped, what it still held delivered.
func (r *run) collect(ctx context.Context) (*loadgen.Result, error) {
	collCtx, stopColl := context.WithCancel(context.Background())
	defer stopColl()
	var coll errgroup.Group
	coll.Go(func() error {
		if err := r.src.run(collCtx); err != nil {
			r.log.Warn("collection", "err", err)
		}
		return nil
	})
	coll.Go(func() error {
		r.watchExit(collCtx, stopColl)
		return nil
	})

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var load errgroup.Group
	if r.cfg.Phases != nil {
		load.Go(func() error {
			r.cfg.Phases(loadCtx, r.marks)
			return nil
		})
	}
	load.Go(func() error {
		r.sm.run(loadCtx)
		return nil
	})
	var res *loadgen.Result
	var loadErr error
	load.Go(func() error {
		defer stopLoad()
		// Collect the start's garbage (kernel BTF, program loading) now,
		// not in a collection during the load: the load's own allocations
		// are then too few to start one, and its mark workers would take
		// CPU from the server while it is measured.
		runtime.GC()
		r.cpu.start()
		r.loadStartNs = clock.Now()
		r.pipe.SetRunStart(r.loadStartNs)
		res, loadErr = loadgen.RunPlan(loadCtx, r.cfg.Load, r.plan)
		r.loadEndNs = clock.Now()
		r.cpu.end()
		return nil
	})
	_ = load.Wait()
	stopColl()
	_ = coll.Wait()
	r.src.stop()
	return res, loadErr
}

// watchExit stops the collection when the target exits: the load goes
// on.
func (r *run) watchExit(ctx context.Context, stop context.CancelFunc) {
	select {
	case <-r.src.exited():
		r.stoppedNs = clock.Now()
		r.stoppedReason = fmt.Sprintf("target pid %d (%s) exited during the run", r.cfg.Pid, r.src.comm())
		r.log.Warn("target exited; the load goes on, collection stopped", "pid", r.cfg.Pid)
		stop()
	case <-ctx.Done():
	}
}

// collected is when and why collection stopped, and what it gave.
func (r *run) collected(ctx context.Context, corr *result.Correlation) collected {
	st := collected{corr: corr, stoppedNs: r.stoppedNs, reason: r.stoppedReason, interrupted: ctx.Err() != nil}
	if st.stoppedNs == 0 {
		st.stoppedNs = r.loadEndNs
	}
	if st.reason == "" {
		st.reason = "load finished"
	}
	if st.interrupted {
		st.reason = "interrupted"
	}
	st.spans, st.dropped = r.pipe.Spans()
	return st
}

// runBaseline is the normal gap and TTFT: those given, else the prior
// run's, else the run's medians.
func runBaseline(cfg RunConfig, log *correlate.Log) correlate.Baseline {
	base := correlate.Baseline{TTFTNs: cfg.BaselineTTFT.Nanoseconds(), ITLNs: cfg.BaselineITL.Nanoseconds()}
	est := log.Baseline()
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
	return base
}

// write writes the run directory. Each file is written whole or not at
// all, and one that cannot be (a full disk) does not keep the others from
// being tried: out.Written lists those that were, in the order written.
func (r *run) write(out *RunResult, res *loadgen.Result, base correlate.Baseline) error {
	var werrs []error
	if p, err := r.pipe.WriteTrace(res, base, r.src.sections(), r.sm.result()); err != nil {
		werrs = append(werrs, err)
	} else {
		out.Written = append(out.Written, p)
	}
	written, err := WriteRunDir(r.cfg.OutDir, out.Doc)
	out.Written = append(out.Written, written...)
	if err != nil {
		werrs = append(werrs, err)
	}
	if p, err := r.pipe.WriteGaps(r.cfg.OutDir, res); err != nil {
		werrs = append(werrs, err)
	} else {
		out.Written = append(out.Written, p)
	}
	return errors.Join(werrs...)
}

// planLoad plans the load's requests (a trace read once, for the load and
// the pipeline) and returns their fixed send offsets when they may be out
// of order (the Go API's requests with offsets, a trace), for the
// pipeline's bound on the spans it holds; nil offsets when send times grow
// with the index. A plan that fails is left to the load, which reports
// it; the pipeline then holds spans from the start.
func planLoad(cfg loadgen.Config) (*loadgen.Plan, []int64) {
	plan, err := cfg.Plan()
	if err != nil {
		return nil, []int64{0}
	}
	return plan, plan.Offsets()
}

// WriteRunDir writes result.json and report.html, each atomically, and
// returns those it wrote whole.
func WriteRunDir(dir string, doc *result.Document) (written []string, err error) {
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

// collectManifest records the target's manifest before the load; each part
// it could not read is a note in it (and a debug line). The dataset is the
// load's own description, added when the load is done (datasetOf).
// pid is the target's when its /proc is readable here, else 0 (the
// server is on another node).
func collectManifest(cfg RunConfig, pid int, log *slog.Logger) *manifest.Manifest {
	opts := cfg.Manifest
	if opts.Args == nil {
		opts.Args = os.Args
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
