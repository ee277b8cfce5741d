// Package knee is the job of `bpfbench sweep --pid`: the sweep's knee
// explained by runs (job/run) followed at its two sides (ExplainKnee), the
// cause on the metric that broke, and the engine's limit signals watched
// during the sweep (SweepSignals).
package knee

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/internal/manifest"
	"github.com/bpfbench/bpfbench/job/run"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/metrics"
	"github.com/bpfbench/bpfbench/loadgen/sweep"
	"github.com/bpfbench/bpfbench/readiness"
	"github.com/bpfbench/bpfbench/session"
)

// KneeConfig configures `sweep --pid`: the runs at the bounds of the
// knee's interval of a finished sweep (its highest level that passed in
// every run and its lowest that failed in every run) are run again while
// the collectors follow the server, until a run at the pass passes and a
// run at the fail fails, and the two say what breaks the SLO.
type KneeConfig struct {
	// Load is the sweep's load; each step's rate or concurrency replaces
	// its own, and RequestsPerStep its count.
	Load            loadgen.Config
	Sweep           *sweep.Result
	RequestsPerStep int
	// SLOs are the sweep's (parsed from Sweep.SLOs when nil);
	// MaxFailedFraction its failed share that fails a step (0: 0.01).
	SLOs              []sweep.SLO
	MaxFailedFraction float64
	// Tries bounds the runs at each side (default 3): a run whose verdict
	// differs from the sweep's is taken again.
	Tries int
	// Moves is how many search steps further out (a step down for the
	// pass, up for the fail) a side is followed, one run at each, when
	// none of its Tries reproduced the sweep's verdict: the server's speed
	// moved since the search, and the boundary with it (default
	// DefaultKneeMoves; negative: none).
	Moves int
	Pid   int
	// OutDir receives the runs: OutDir/pass and OutDir/fail, then
	// OutDir/pass-2, OutDir/fail-2 ... for the runs taken again, and
	// OutDir/pass-out-1, OutDir/fail-out-1 ... for the levels further out.
	OutDir    string
	Sections  []session.SectionFactory
	Readiness func() []readiness.Check
	Logger    *slog.Logger
	// Manifest is RunConfig's.
	Manifest manifest.Options
	// ServerMetrics and ServerMetricsPeriod are RunConfig's.
	ServerMetrics       string
	ServerMetricsPeriod time.Duration
	// Before, when set, is called before each run ("pass" or "fail", and
	// the try from 1); After with its run and its verdict.
	Before func(side string, try int, step *sweep.Step)
	After  func(side string, run *run.RunResult, f sweep.FollowedRun)
}

// DefaultKneeTries is how many runs each side of the knee may take;
// DefaultKneeMoves how many steps further out it may then go.
const (
	DefaultKneeTries = 3
	DefaultKneeMoves = 2
)

// Knee is the explained knee of a sweep.
type Knee struct {
	Mode string
	// Pass and Fail are the levels explained: the interval's bounds, or
	// further out where the followed runs moved (SweepPass, SweepFail:
	// the bounds then).
	Pass, Fail           *sweep.Step
	SweepPass, SweepFail *sweep.Step
	// Interval is the sweep's.
	Interval *sweep.Interval
	// PassRun and FailRun are the runs that reproduced the sweep's
	// verdicts (a pass and a fail); nil when none did (or, for PassRun,
	// when no level passed), and both nil when every step passed.
	PassRun, FailRun *run.RunResult
	// Result is what sweep.json records: every run taken, whether they
	// reproduced the verdicts, the cause and the sentence.
	Result sweep.Explanation
	// Why says why there is no cause when the runs reproduced the
	// verdicts but the cause could not be read from them.
	Why string
}

// ExplainKnee runs the two sides of the knee of cfg.Sweep under the
// collectors until they reproduce the sweep's verdicts, and reads the
// cause of the breach from them. With no failing step it returns a Knee
// with no runs.
func ExplainKnee(ctx context.Context, cfg KneeConfig) (*Knee, error) {
	k := &Knee{Mode: cfg.Sweep.Mode, Interval: cfg.Sweep.Interval}
	k.Pass, k.Fail = kneeSteps(cfg.Sweep)
	if k.Fail == nil {
		k.Result.Sentence = k.Explanation()
		return k, nil
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Tries <= 0 {
		cfg.Tries = DefaultKneeTries
	}
	if cfg.Moves == 0 {
		cfg.Moves = DefaultKneeMoves
	}
	slos := cfg.SLOs
	if slos == nil {
		var err error
		if slos, err = sweep.ParseSLOs(strings.Join(cfg.Sweep.SLOs, ",")); err != nil {
			return k, err
		}
	}
	kr := &kneeRuns{ctx: ctx, cfg: cfg, slos: slos, k: k}
	// The failing side's critical path against the passing side's normal
	// gaps: what the level past the knee added.
	var prior *run.Prior
	if k.Pass != nil {
		ps, pr, err := kr.followSide(k.Pass, "pass", true, nil)
		if err != nil || pr == nil {
			k.Result.Sentence = k.Explanation()
			return k, err
		}
		k.Pass, k.PassRun = kr.moved(k.Pass, ps, "pass"), pr
		if p, perr := run.LoadPrior(pr.Dir); perr == nil {
			prior = p
		} else {
			cfg.Logger.Warn("the passing run cannot be the failing run's baseline", "err", perr)
		}
	}
	fs, fr, err := kr.followSide(k.Fail, "fail", false, prior)
	if err != nil || fr == nil {
		k.Result.Sentence = k.Explanation()
		return k, err
	}
	k.Fail, k.FailRun = kr.moved(k.Fail, fs, "fail"), fr
	k.Result.Reproduced = true
	k.readCause(slos)
	k.Result.Sentence = k.Explanation()
	return k, nil
}

// kneeRuns takes the runs at the two sides of a knee and records their
// verdicts in k.
type kneeRuns struct {
	ctx  context.Context
	cfg  KneeConfig
	slos []sweep.SLO
	k    *Knee
}

// runStep runs step s once more while following the server, the try-th
// run of its side, in the directory dir of its own.
func (kr *kneeRuns) runStep(s *sweep.Step, side string, try int, dir string, prior *run.Prior) (*run.RunResult, error) {
	cfg := kr.cfg
	if cfg.Before != nil {
		cfg.Before(side, try, s)
	}
	c := cfg.Load
	if cfg.RequestsPerStep > 0 {
		c.Scenario.NumRequests = cfg.RequestsPerStep
	}
	c.Scenario.Duration = 0
	if s.Rate != 0 {
		c.Scenario.Rate = s.Rate
	}
	if s.Concurrency > 0 {
		c.Scenario.MaxConcurrency = s.Concurrency
	}
	return run.Run(kr.ctx, run.RunConfig{Load: c, Pid: cfg.Pid, OutDir: filepath.Join(cfg.OutDir, dir), Logger: cfg.Logger,
		Sections: cfg.Sections, Readiness: cfg.Readiness,
		ServerMetrics: cfg.ServerMetrics, ServerMetricsPeriod: cfg.ServerMetricsPeriod, Manifest: cfg.Manifest,
		Prior: prior})
}

// followSide follows one side at the sweep's level s, then, when no run
// there reproduced the sweep's verdict (want), one run at each of up to
// Moves levels a search step further out each, and returns the level and
// the run that reproduced it (nil when none did). A fail that a limit
// signal made is not followed further out: the followed runs watch none.
func (kr *kneeRuns) followSide(s *sweep.Step, side string, want bool, prior *run.Prior) (*sweep.Step, *run.RunResult, error) {
	r, err := kr.follow(s, side, want, prior, 1, kr.cfg.Tries, "")
	if r != nil || err != nil || !want && len(s.StoppedBy) > 0 {
		return s, r, err
	}
	sign := 1.0
	if want {
		sign = -1
	}
	step := kr.cfg.Sweep.StepSize
	for m := 1; m <= kr.cfg.Moves && step > 0; m++ {
		o := *s
		o.N, o.Phase, o.StoppedBy, o.Violations, o.Values, o.Metrics = 0, "follow", nil, nil, nil, nil
		if kr.k.Mode == sweep.ModeConcurrency {
			o.Concurrency = s.Concurrency + int(sign)*m*max(1, int(step))
			if o.Concurrency < 1 {
				break
			}
		} else if o.Rate = s.Rate + sign*float64(m)*step; o.Rate <= 0 {
			break
		}
		r, err := kr.follow(&o, side, want, prior, kr.cfg.Tries+m, kr.cfg.Tries+m, fmt.Sprintf("%s-out-%d", side, m))
		if r != nil || err != nil {
			return &o, r, err
		}
	}
	return s, nil, nil
}

// moved returns the level explained on a side (got) and, when it is not
// the sweep's (s), keeps the sweep's in SweepPass or SweepFail.
func (kr *kneeRuns) moved(s, got *sweep.Step, side string) *sweep.Step {
	if got != s {
		if side == "pass" {
			kr.k.SweepPass = s
		} else {
			kr.k.SweepFail = s
		}
	}
	return got
}

// follow runs one side at s until a run's verdict is want, tries from
// first to last, and returns that run (nil when none was). Each run has a
// directory of its own: dir, or side, side-2, ... by try.
func (kr *kneeRuns) follow(s *sweep.Step, side string, want bool, prior *run.Prior, first, last int, dir string) (*run.RunResult, error) {
	for try := first; try <= last; try++ {
		d := dir
		if d == "" {
			d = side
			if try > 1 {
				d = fmt.Sprintf("%s-%d", side, try)
			}
		}
		r, err := kr.runStep(s, side, try, d, prior)
		if r == nil {
			return nil, err
		}
		f := judgeRun(kr.slos, kr.cfg.MaxFailedFraction, kr.k.Mode, s, r)
		if side == "pass" {
			kr.k.Result.PassRuns = append(kr.k.Result.PassRuns, f)
		} else {
			kr.k.Result.FailRuns = append(kr.k.Result.FailRuns, f)
		}
		if kr.cfg.After != nil {
			kr.cfg.After(side, r, f)
		}
		if err != nil {
			return nil, err
		}
		if f.Pass == want {
			return r, nil
		}
		if !want && len(s.StoppedBy) > 0 {
			// A limit signal failed the step, and the followed runs
			// watch none: another run would meet the SLOs again.
			return nil, nil
		}
	}
	return nil, nil
}

// readCause reads the cause of the breach from the runs that reproduced
// the knee, or says in Why why there is none.
func (k *Knee) readCause(slos []sweep.SLO) {
	bc, cerr := breachCause(slos, k.PassRun, k.FailRun)
	switch {
	case errors.Is(cerr, errNoBreach):
		f := k.Result.FailRuns[len(k.Result.FailRuns)-1]
		k.Why = fmt.Sprintf("the failing run broke no latency SLO (%s): no cause on a latency to name", strings.Join(f.Violations, "; "))
	case cerr != nil:
		k.Why = cerr.Error()
	}
	k.Result.Cause = bc
}

// Annotate puts the knee into the reports of the runs that reproduced
// it: the interval and the explanation lead each one's diagnosis, and
// its result.json and report.html are written again.
func (k *Knee) Annotate() error {
	var lines []string
	if t := k.Interval.Text(k.Mode); t != "" {
		lines = append(lines, "sweep: "+t)
	}
	lines = append(lines, "sweep: "+k.Explanation())
	for _, r := range []*run.RunResult{k.PassRun, k.FailRun} {
		if r == nil || r.Doc == nil || r.Dir == "" {
			continue
		}
		d := r.Doc.Diagnosis
		if len(d) == 0 {
			d = report.Diagnose(r.Doc)
		}
		r.Doc.Diagnosis = append(append([]string(nil), lines...), d...)
		if _, err := run.WriteRunDir(r.Dir, r.Doc); err != nil {
			return err
		}
	}
	return nil
}

// levelOf is a step's level in a sweep of mode: its rate, or its
// concurrency in a concurrency sweep (sweep.FollowedRun.Level).
func levelOf(mode string, s *sweep.Step) float64 {
	if mode == sweep.ModeConcurrency {
		return float64(s.Concurrency)
	}
	return s.Rate
}

// judgeRun judges a followed run by the sweep's SLOs, as its steps are.
func judgeRun(slos []sweep.SLO, maxFailed float64, mode string, s *sweep.Step, r *run.RunResult) sweep.FollowedRun {
	f := sweep.FollowedRun{Level: levelOf(mode, s), Dir: r.Dir}
	if r.Load == nil || r.Load.Metrics == nil {
		f.Violations = []string{"no measurement"}
		return f
	}
	f.Pass, f.Violations, f.Values = sweep.Judge(slos, r.Load.Metrics, maxFailed, len(r.Load.Records))
	return f
}

// kneeSteps returns the steps at the bounds of the knee's interval: a
// passing step at its Low (the sweep's Best) and a failing one at its
// High (the sweep's Limit); for a result without them, the highest
// passing step and the lowest failing step above it.
func kneeSteps(r *sweep.Result) (pass, fail *sweep.Step) {
	pass = r.Best
	if r.Limit != nil && !r.Limit.Pass {
		return pass, r.Limit
	}
	level := func(s *sweep.Step) float64 {
		if r.Mode == sweep.ModeConcurrency {
			return float64(s.Concurrency)
		}
		return s.Rate
	}
	steps := append([]*sweep.Step(nil), r.Steps...)
	sort.Slice(steps, func(i, j int) bool { return level(steps[i]) < level(steps[j]) })
	for _, s := range steps {
		if s.Pass || s.Phase == "probe" && r.Mode == sweep.ModeRate {
			continue
		}
		if pass == nil || level(s) > level(pass) {
			return pass, s
		}
	}
	return pass, nil
}

// StepAt says where a step of a sweep in mode is: its rate, or its
// concurrency in a concurrency sweep.
func StepAt(mode string, s *sweep.Step) string {
	if s.Concurrency > 0 && mode == sweep.ModeConcurrency {
		return fmt.Sprintf("%d requests in flight", s.Concurrency)
	}
	return fmt.Sprintf("%.3g req/s", s.Rate)
}

// At says where a step of this knee's sweep is.
func (k *Knee) At(s *sweep.Step) string { return StepAt(k.Mode, s) }

// Explanation is the knee in one sentence: the breach on the metric that
// broke, at the interval's High against its Low, and the cause that added
// most to it with its share: "the SLO breaks at 15 req/s on p99 TTFT (612
// ms, want p99_ttft_ms<=500; 310 ms at 13.2 req/s), and what breaks it is
// waiting for one of the engine's 4 slots behind other requests (380 ms
// a request), 78% of the 420 ms the slowest 10% of TTFTs added". When the
// runs did not reproduce the sweep's verdicts, it says so instead.
func (k *Knee) Explanation() string {
	if k.Fail == nil {
		return "every step met the SLOs: no knee to explain"
	}
	if !k.Result.Reproduced {
		return k.notReproduced()
	}
	bc := k.Result.Cause
	if bc == nil {
		why := k.Why
		if why == "" {
			why = "no cause was read"
		}
		return fmt.Sprintf("the SLO breaks at %s; the runs reproduced the verdicts, but %s", k.At(k.Fail), why)
	}
	unit := "TTFTs"
	if bc.Metric == "itl" {
		unit = "token gaps"
	}
	metric := metricText(bc.SLO)
	against := ""
	if k.Pass != nil {
		against = fmt.Sprintf("; %s at %s", fmtMs(bc.PassValue, metric), k.At(k.Pass))
	}
	head := fmt.Sprintf("the SLO breaks at %s on %s (%s, want %s%s)", k.At(k.Fail), metric, fmtMs(bc.FailValue, metric), bc.SLO, against)
	if len(k.Fail.StoppedBy) > 0 {
		var parts []string
		for _, v := range k.Fail.StoppedBy {
			parts = append(parts, v.Detail)
		}
		head = fmt.Sprintf("the sweep stops at %s because %s, and the followed run broke %s (%s, want %s%s)",
			k.At(k.Fail), strings.Join(parts, " and "), metric, fmtMs(bc.FailValue, metric), bc.SLO, against)
	}
	head += k.movedText()
	over := "over the passing run's"
	if k.Pass == nil {
		over = "over the failing run's normal gap"
	}
	if bc.Cause == "" || bc.Share <= 0 || bc.AddedMs <= 0 {
		return fmt.Sprintf("%s; its slowest 10%% of %s added nothing %s: no cause to name", head, unit, over)
	}
	return fmt.Sprintf("%s, and what breaks it is %s, %.0f%% of the %s the slowest 10%% of %s added %s",
		head, k.describe(bc), bc.Share*100, fmtDur(bc.AddedMs), unit, over)
}

// movedText says which side was explained further out than the sweep's
// bound, and why: " (the sweep's fail at 12.9 req/s met every SLO in the
// 3 runs that followed it: explained at 14.7 req/s, a step further out)".
func (k *Knee) movedText() string {
	var parts []string
	say := func(sweepAt, at *sweep.Step, runs []sweep.FollowedRun, verdict, other string) {
		if sweepAt == nil {
			return
		}
		lv := levelOf(k.Mode, sweepAt)
		n := 0
		for _, f := range runs {
			if f.Level == lv {
				n++
			}
		}
		parts = append(parts, fmt.Sprintf("the sweep's %s at %s %s in the %d %s that followed it: explained at %s, further out", verdict, k.At(sweepAt), other, n, pluralWord(n, "run", "runs"), k.At(at)))
	}
	say(k.SweepPass, k.Pass, k.Result.PassRuns, "pass", "broke an SLO")
	say(k.SweepFail, k.Fail, k.Result.FailRuns, "fail", "met every SLO")
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// describe says the breach's cause in words.
func (k *Knee) describe(bc *sweep.BreachCause) string {
	if bc.Cause == CauseServerQueue {
		slots := "a slot of the engine"
		if bc.Slots > 0 {
			slots = fmt.Sprintf("one of the engine's %d %s", bc.Slots, pluralWord(bc.Slots, "slot", "slots"))
		}
		return fmt.Sprintf("waiting for %s behind other requests (%s a request in the queue)", slots, fmtDur(bc.QueueMs))
	}
	return DescribeCause(bc.Cause, k.FailRun)
}

// notReproduced says which side's runs did not reproduce the sweep's
// verdict.
func (k *Knee) notReproduced() string {
	side := func(runs []sweep.FollowedRun, verdict string) string {
		var vs []string
		out, far := 0, 0.0
		for i, f := range runs {
			if len(f.Violations) > 0 && verdict == "failed" {
				vs = append(vs, strings.Join(f.Violations, " and "))
			}
			if i > 0 && f.Level != runs[0].Level {
				out, far = out+1, f.Level
			}
		}
		s := fmt.Sprintf("%d %s %s", len(runs), pluralWord(len(runs), "run", "runs"), verdict)
		if out > 0 {
			at := &sweep.Step{Rate: far, Concurrency: int(far)}
			s += fmt.Sprintf(", %d of them further out (to %s)", out, k.At(at))
		}
		if len(vs) > 0 {
			s += " (" + strings.Join(vs, "; ") + ")"
		}
		return s
	}
	switch {
	case k.Pass != nil && k.PassRun == nil && len(k.Result.PassRuns) > 0:
		return fmt.Sprintf("no explanation: the runs following the server did not reproduce the sweep's pass at %s: %s",
			k.At(k.Pass), side(k.Result.PassRuns, "failed"))
	case k.FailRun == nil && len(k.Result.FailRuns) > 0 && len(k.Fail.StoppedBy) > 0:
		var parts []string
		for _, v := range k.Fail.StoppedBy {
			parts = append(parts, v.Name+": "+v.Detail)
		}
		return fmt.Sprintf("no explanation: the sweep's step at %s was stopped by a limit signal (%s), which the runs following the server do not watch, and the run met every SLO",
			k.At(k.Fail), strings.Join(parts, "; "))
	case k.FailRun == nil && len(k.Result.FailRuns) > 0:
		return fmt.Sprintf("no explanation: the runs following the server did not reproduce the sweep's fail at %s: %s",
			k.At(k.Fail), side(k.Result.FailRuns, "met every SLO"))
	}
	return fmt.Sprintf("the SLO breaks at %s; the runs to explain it did not finish", k.At(k.Fail))
}

// metricText is an SLO's metric as the sentence says it: "p99 TTFT".
func metricText(slo string) string {
	s, err := sweep.ParseSLOs(slo)
	if err != nil || len(s) != 1 {
		return slo
	}
	if p, m, ok := metrics.MetricPercentile(s[0].Metric); ok {
		return fmt.Sprintf("p%s %s", strconv.FormatFloat(p, 'g', -1, 64), strings.ToUpper(m))
	}
	return s[0].Metric
}

// fmtMs says a value of metric: "612 ms" for a latency, else the number.
func fmtMs(v float64, metric string) string {
	if strings.HasPrefix(metric, "p") && strings.Contains(metric, " ") {
		return fmtDur(v)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// fmtDur says ms: "612 ms", "4.2 ms", "1.3 s".
func fmtDur(ms float64) string {
	switch {
	case ms >= 10000:
		return fmt.Sprintf("%.0f s", ms/1000)
	case ms >= 1000:
		return fmt.Sprintf("%.1f s", ms/1000)
	case ms >= 10:
		return fmt.Sprintf("%.0f ms", ms)
	}
	return fmt.Sprintf("%.1f ms", ms)
}

// DescribeCause says the cause in words, naming the server's threads that
// waited most for a CPU when it is cpu_runqueue.
func DescribeCause(cause string, r *run.RunResult) string {
	switch cause {
	case "cpu_runqueue":
		if names := topRunqueueThreads(r); names != "" {
			return "run-queue wait on the " + names + " threads"
		}
		return "run-queue wait (the server's threads waiting for a CPU)"
	case "io_block":
		return "waiting for the disk"
	case "gpu_sync":
		return "waiting on the GPU (blocking CUDA calls)"
	case "net_backpressure":
		return "network backpressure (clients' windows closed or retransmits)"
	case "server_compute":
		return "the server's own compute (its threads running)"
	case "server_sleep":
		return "the server's threads sleeping (timed waits, polling)"
	case "server_stopped":
		return "the server stopped (a signal, a tracer or a freezer)"
	case "client":
		return "the load generator (the client's own time)"
	case CauseServerQueue:
		return "waiting for a slot of the engine behind other requests"
	}
	return "nothing bpfbench sees (unexplained)"
}

func topRunqueueThreads(r *run.RunResult) string {
	if r == nil || r.Doc == nil || r.Doc.Collectors == nil || r.Doc.Collectors.Sched == nil {
		return ""
	}
	by := map[string]float64{}
	var total float64
	for _, t := range r.Doc.Collectors.Sched.Threads {
		by[t.Comm] += t.RunqueueSeconds
		total += t.RunqueueSeconds
	}
	type kv struct {
		k string
		v float64
	}
	var list []kv
	for k, v := range by {
		list = append(list, kv{k, v})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].v > list[j].v || list[i].v == list[j].v && list[i].k < list[j].k })
	if len(list) == 0 || total == 0 {
		return ""
	}
	names := list[0].k
	if len(list) > 1 && list[1].v > 0.3*total {
		names += " and " + list[1].k
	}
	return names
}

// StepExplanation is one run's p99 attribution in a line: "p99 ITL
// cpu_runqueue 80%, unexplained 20%, TTFT no excess".
func StepExplanation(r *run.RunResult) string {
	a := r.Doc.Attribution
	if a == nil {
		return "no attribution"
	}
	return fmt.Sprintf("p99 ITL %s, TTFT %s", shareText(a.ITL["p99"]), shareText(a.TTFT))
}

func shareText(b correlate.Breakdown) string {
	var parts []string
	for _, c := range critpath.CauseNames() {
		if b[c] >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", c, b[c]*100))
		}
	}
	if len(parts) == 0 {
		return "no excess"
	}
	return strings.Join(parts, ", ")
}

func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
