package load

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/bpfbench/bpfbench/exporter/otlp"
	"github.com/bpfbench/bpfbench/internal/atomicfile"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/sweep"
	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// SweepJob is `bpfbench sweep`: the load options, the search and where
// to write its steps.
type SweepJob struct {
	Options
	SLO                  string
	Mode                 string
	RequestsPerStep      int
	Precision, Step      float64
	MaxRate              float64
	MaxSearchConcurrency int
	// Repeats and RepeatBudget settle the knee (sweep.Config's): the runs
	// with one verdict a level at the boundary needs, and the most steps
	// run to get them.
	Repeats, RepeatBudget int
	// The limit signals that end a step early (sweep.Config's and
	// knee.SweepSignalsConfig's): the load generator's own error rate and
	// connection resets, and the engine's KV cache, preemptions and queue.
	MaxErrorRate   float64
	MaxResets      int
	MaxKVUsage     float64
	MaxPreemptions int
	MaxWaiting     int
	MaxWaitingFor  time.Duration
	// Signals, when set, are the engine's and the kernel's signals,
	// polled during every step (knee.StartSweepSignals).
	Signals sweep.Signals
	// Out is the run directory: sweep.json (unless Result names another
	// file) and, when the knee is explained, its two runs (Out/pass,
	// Out/fail).
	Out string
	// Result, when set, is the file all steps are written to as JSON
	// instead of Out/sweep.json.
	Result string
}

// ResultFile is where the steps are written: Result, or sweep.json in
// the run directory ("" when neither is set).
func (j *SweepJob) ResultFile() string {
	if j.Result != "" || j.Out == "" {
		return j.Result
	}
	return filepath.Join(j.Out, "sweep.json")
}

// NewSweepJob returns the job with the defaults of its flags.
func NewSweepJob() *SweepJob {
	return &SweepJob{Options: *NewOptions(), Mode: sweep.ModeRate, RequestsPerStep: 200, Precision: 0.05, MaxSearchConcurrency: 1024,
		Repeats: sweep.DefaultRepeats, RepeatBudget: sweep.DefaultRepeatBudget,
		MaxErrorRate: 0.05, MaxKVUsage: 0.95, MaxWaitingFor: 2 * time.Second, Out: "bpfbench-sweep"}
}

// AddFlags defines the load options, the search's flags, the run
// directory --out (with --knee-out, its old spelling, deprecated) and
// --result.
func (j *SweepJob) AddFlags(fs *pflag.FlagSet) {
	j.Options.AddFlags(fs)
	fs.StringVar(&j.SLO, "slo", j.SLO, "objectives every step must meet, e.g. \"p99_ttft_ms<=500,p99_itl_ms<=50\" (any result field: mean_/median_/pNN_ ttft/tpot/itl/e2el _ms, request_goodput, ...)")
	fs.StringVar(&j.Mode, "mode", j.Mode, "search over the request rate (rate) or the concurrency (concurrency)")
	fs.IntVar(&j.RequestsPerStep, "requests-per-step", j.RequestsPerStep, "measured requests at every step")
	fs.Float64Var(&j.Precision, "precision", j.Precision, "rate search resolution, as a fraction of the probed capacity")
	fs.Float64Var(&j.Step, "step", j.Step, "rate search resolution in req/s (overrides --precision)")
	fs.Float64Var(&j.MaxRate, "max-rate", j.MaxRate, "top of the rate search (0: 1.25 × the probed capacity)")
	fs.IntVar(&j.MaxSearchConcurrency, "max-search-concurrency", j.MaxSearchConcurrency, "top of the concurrency search")
	fs.IntVar(&j.Repeats, "repeats", j.Repeats, "runs with one verdict that settle a level at the knee: the highest passing and the lowest failing level are run again until they have as many (a level whose runs disagree moves the boundary a step past it); 1: every level once")
	fs.IntVar(&j.RepeatBudget, "repeat-budget", j.RepeatBudget, "most steps run to settle the knee; when they run out first, the interval is what was measured and the answer says it is not stable (0: none)")
	fs.Float64Var(&j.MaxErrorRate, "max-error-rate", j.MaxErrorRate, "end a step once more than this fraction of its finished requests failed (counted from 10 on; 0 or less: off)")
	fs.IntVar(&j.MaxResets, "max-resets", j.MaxResets, "end a step once more than this many of its connections were reset or refused (negative: off)")
	fs.Float64Var(&j.MaxKVUsage, "max-kv-usage", j.MaxKVUsage, "end a step once the engine's KV cache is fuller than this fraction, from its /metrics (0: off)")
	fs.IntVar(&j.MaxPreemptions, "max-preemptions", j.MaxPreemptions, "end a step once the engine preempted more requests than this during it, from its /metrics (negative: off)")
	fs.IntVar(&j.MaxWaiting, "max-waiting", j.MaxWaiting, "end a step once more requests than this wait in the engine's queue for --max-waiting-for, from its /metrics (0: twice its slots, the peak of its running requests; negative: off)")
	fs.DurationVar(&j.MaxWaitingFor, "max-waiting-for", j.MaxWaitingFor, "how long the engine's queue must stay over --max-waiting to end a step")
	fs.StringVar(&j.Out, "out", j.Out, "run `DIR`: sweep.json (every step, unless --result names another file) and, with --pid or --port, the two runs around the knee (DIR/pass, DIR/fail)")
	deprecatedAlias(fs, &j.Out, "knee-out", "out", "the `DIR` of the two runs around the knee")
	fs.StringVar(&j.Result, "result", "", "write every step as JSON to this `FILE` instead of DIR/sweep.json")
}

// LoadConfig is the load of every step, checked with the search's
// flags: its errors are *loadgen.ConfigError.
func (j *SweepJob) LoadConfig() (loadgen.Config, []sweep.SLO, error) {
	slos, err := sweep.ParseSLOs(j.SLO)
	if err != nil {
		if !strings.Contains(err.Error(), "--slo") {
			err = fmt.Errorf("--slo: %w", err)
		}
		return loadgen.Config{}, nil, &loadgen.ConfigError{Err: err}
	}
	if err := j.checkRanges(); err != nil {
		return loadgen.Config{}, nil, &loadgen.ConfigError{Err: err}
	}
	if strings.HasSuffix(j.Out, ".json") {
		return loadgen.Config{}, nil, &loadgen.ConfigError{Err: fmt.Errorf("--out %s: --out is the run directory (sweep.json goes inside it); --result FILE names the steps' file", j.Out)}
	}
	o := j.Options
	o.Config.Scenario.NumRequests = j.RequestsPerStep
	if err := o.Validate(); err != nil {
		return loadgen.Config{}, nil, err
	}
	return o.Config, slos, nil
}

// checkRanges checks the search's numbers against their ranges.
func (j *SweepJob) checkRanges() error {
	switch {
	case j.RequestsPerStep < 1:
		return fmt.Errorf("--requests-per-step %d: give 1 or more", j.RequestsPerStep)
	case !(j.Precision > 0 && j.Precision < 1):
		return fmt.Errorf("--precision %v: give a fraction above 0 and below 1", j.Precision)
	case j.Step < 0 || math.IsNaN(j.Step):
		return fmt.Errorf("--step %v: give 0 (use --precision) or more req/s", j.Step)
	case j.MaxRate < 0 || math.IsNaN(j.MaxRate):
		return fmt.Errorf("--max-rate %v: give 0 (1.25 × the probed capacity) or more req/s", j.MaxRate)
	case j.MaxSearchConcurrency < 1:
		return fmt.Errorf("--max-search-concurrency %d: give 1 or more", j.MaxSearchConcurrency)
	case j.Repeats < 1:
		return fmt.Errorf("--repeats %d: give 1 or more", j.Repeats)
	case j.RepeatBudget < 0:
		return fmt.Errorf("--repeat-budget %d: give 0 or more", j.RepeatBudget)
	case j.MaxWaitingFor < 0:
		return fmt.Errorf("--max-waiting-for %v: give 0 or more", j.MaxWaitingFor)
	}
	return nil
}

// CheckAnswer returns a *ThresholdError when more of the requests of the
// answer's step failed than --max-failed-ratio allows (a step can pass
// with --max-error-rate off). A sweep that found no step meeting every
// SLO has an answer too, "none": it is no error.
func (j *SweepJob) CheckAnswer(res *sweep.Result) error {
	if res == nil || res.Best == nil {
		return nil
	}
	if m := res.Best.Metrics; m != nil && m.Failed+m.Completed > 0 && float64(m.Failed) > j.MaxFailedRatio*float64(m.Failed+m.Completed) {
		return &ThresholdError{Failed: m.Failed, Total: m.Failed + m.Completed, Max: j.MaxFailedRatio, Detail: "the answer's step"}
	}
	return nil
}

// Run finds the highest request rate (or concurrency) that meets every
// SLO, printing each step and the answer, and writes all steps to JSON.
// cfg is the load each step was sent with (its model resolved).
func (j *SweepJob) Run(ctx context.Context, stdout, stderr io.Writer) (res *sweep.Result, cfg loadgen.Config, err error) {
	cfg, slos, err := j.LoadConfig()
	if err != nil {
		return nil, cfg, err
	}
	if err := ResolveModel(ctx, &cfg); err != nil {
		return nil, cfg, err
	}
	exp, err := otlp.New(ctx, j.OTLP)
	if err != nil {
		return nil, cfg, err
	}
	if exp != nil {
		defer exp.Shutdown(context.Background())
		cfg.Output.OnRecord = exp.Hook(&cfg)
	}
	fmt.Fprintf(stdout, "Sweeping %s against %s for %s, %d requests per step\n", j.Mode, transport.Redacted(cfg.Target.URL), j.SLO, j.RequestsPerStep)
	sc := sweep.Config{
		SLOs:            slos,
		Mode:            j.Mode,
		RequestsPerStep: j.RequestsPerStep,
		Precision:       j.Precision,
		Step:            j.Step,
		MaxRate:         j.MaxRate,
		MaxConcurrency:  j.MaxSearchConcurrency,
		Signals:         j.Signals,
		MaxErrorRate:    j.MaxErrorRate,
		MaxResets:       j.MaxResets,
		Repeats:         j.Repeats,
		RepeatBudget:    repeatBudget(j.RepeatBudget),
		OnStep:          func(s *sweep.Step) { printStep(stdout, s, slos) },
	}
	if sc.MaxErrorRate <= 0 {
		sc.MaxErrorRate = -1 // 0 is loadgen's default; here it is off
	}
	res, err = loadgen.Sweep(ctx, cfg, sc)
	if res != nil {
		printAnswer(stdout, res, slos)
		if file := j.ResultFile(); file != "" {
			if werr := writeSweep(file, res); werr != nil {
				return res, cfg, werr
			}
			fmt.Fprintf(stdout, "steps written to %s\n", file)
		}
	}
	cfg.Output.OnRecord = nil
	return res, cfg, err
}

// repeatBudget is sweep.Config's for the flag's: 0 is none.
func repeatBudget(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func printStep(w io.Writer, s *sweep.Step, slos []sweep.SLO) {
	at := fmt.Sprintf("rate %8.2f req/s", s.Rate)
	if s.Rate == 0 {
		at = "rate      inf      "
	}
	if s.Concurrency > 0 {
		at += fmt.Sprintf(" concurrency %d", s.Concurrency)
	}
	verdict := "ok"
	if !s.Pass {
		verdict = "FAIL"
	}
	var parts []string
	for _, slo := range slos {
		parts = append(parts, fmt.Sprintf("%s=%.2f", slo.Metric, s.Values[slo.Metric]))
	}
	fmt.Fprintf(w, "step %2d %-7s %s: %-4s throughput %.2f req/s, %s", s.N, s.Phase, at, verdict, s.Values["request_throughput"], strings.Join(parts, " "))
	if s.StoppedEarly {
		fmt.Fprint(w, " (stopped early)")
	}
	for _, v := range s.StoppedBy {
		fmt.Fprintf(w, " (stopped by %s: %s)", v.Name, v.Detail)
	}
	fmt.Fprintln(w)
}

func printAnswer(w io.Writer, r *sweep.Result, slos []sweep.SLO) {
	unit := "req/s"
	if r.Mode == sweep.ModeConcurrency {
		unit = "requests in flight"
	}
	if len(r.Capacities) > 1 {
		caps := make([]string, len(r.Capacities))
		for i, c := range r.Capacities {
			caps[i] = fmt.Sprintf("%.2f", c)
		}
		fmt.Fprintf(w, "capacity (%d saturation probes, until two in a row agreed within %.0f%%: %s req/s): %.2f req/s; search step %.2f %s\n",
			len(r.Capacities), 100*sweep.WarmHold, strings.Join(caps, ", "), r.Capacity, r.StepSize, unit)
	} else {
		fmt.Fprintf(w, "capacity (saturation probe): %.2f req/s; search step %.2f %s\n", r.Capacity, r.StepSize, unit)
	}
	defer fmt.Fprintln(w, r.Conclusion)
	if r.Best == nil {
		fmt.Fprintf(w, "answer: no %s met every SLO\n", r.Mode)
		printKnee(w, r)
		return
	}
	var parts []string
	for _, slo := range slos {
		parts = append(parts, fmt.Sprintf("%s=%.2f", slo.Metric, r.Best.Values[slo.Metric]))
	}
	fmt.Fprintf(w, "answer: %.2f %s meets every SLO (%s; throughput %.2f req/s, %.1f tok/s)\n",
		r.Answer, unit, strings.Join(parts, ", "), r.Best.Values["request_throughput"], r.Best.Values["output_throughput"])
	printKnee(w, r)
}

// printKnee prints the knee with its interval and the runs behind it:
// "knee: 14.1 req/s, interval 13.2-15.0 req/s (stable: 3 runs with one
// verdict at each bound; 9 confirming steps)" and the levels' runs.
func printKnee(w io.Writer, r *sweep.Result) {
	in := r.Interval
	if in == nil || in.High == 0 && in.Stable {
		return
	}
	unit := "req/s"
	if r.Mode == sweep.ModeConcurrency {
		unit = "requests in flight"
	}
	state := fmt.Sprintf("stable: %d %s with one verdict at each bound", in.Repeats, plural(in.Repeats, "run", "runs"))
	if !in.Stable {
		state = "NOT stable"
	}
	if in.High == 0 {
		fmt.Fprintf(w, "knee: above %.2f %s, no level above it failed every run (%s; %d of at most %d confirming steps)\n",
			in.Low, unit, state, in.ConfirmSteps, in.Budget)
	} else {
		fmt.Fprintf(w, "knee: %.2f %s, settled levels %.2f-%.2f %s (%s; %d of at most %d confirming steps)\n",
			in.Knee, unit, in.Low, in.High, unit, state, in.ConfirmSteps, in.Budget)
		if in.FitRuns > 0 {
			fmt.Fprintf(w, "  95%% interval of the knee: %.2f-%.2f %s (the half-way point of a logistic curve of the pass probability fitted to all %d runs%s)\n",
				in.CILow, in.CIHigh, unit, in.FitRuns, driftText(r))
		}
		if k, lo, hi, ok := in.Relative(); ok {
			fmt.Fprintf(w, "  over the capacity measured around the sweep (%.2f req/s, the mean of those probes): the knee is %.2fx it, 95%% interval %.2f-%.2fx (for the server at another speed)\n",
				in.CapacityRef, k, lo, hi)
		}
	}
	for _, l := range in.Levels {
		fmt.Fprintf(w, "  %8.2f %s: passed %d of %d (steps %s)\n", l.Level, unit, l.Passed, l.Runs, joinInts(l.Steps))
	}
}

// driftText says how the capacity moved over the sweep and what that did
// to the interval: ", 16.1-18.6 req/s, each half widened in quadrature by
// the capacity's drift of ±5.2% over the sweep (probes 19.40, 19.36 req/s
// before the search, 17.50 after)", or nothing without a closing probe.
func driftText(r *sweep.Result) string {
	in := r.Interval
	if r.CapacityAfter <= 0 {
		return ""
	}
	caps := make([]string, 0, 2)
	for _, c := range r.HeldProbes() {
		caps = append(caps, fmt.Sprintf("%.2f", c))
	}
	probes := fmt.Sprintf("probes %s req/s before the search, %.2f after", strings.Join(caps, ", "), r.CapacityAfter)
	if in.CapacityDrift == 0 {
		return "; the capacity held over the sweep (" + probes + ")"
	}
	return fmt.Sprintf(": %.2f-%.2f req/s, each half widened in quadrature by the capacity's drift of ±%.1f%% over the sweep (%s)",
		in.FitLow, in.FitHigh, 100*in.CapacityDrift, probes)
}

func joinInts(xs []int) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprint(x))
	}
	return strings.Join(parts, ",")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// WriteResult writes res to the job's result file again (after the
// knee's explanation was added); nothing when there is none.
func (j *SweepJob) WriteResult(res *sweep.Result) error {
	if file := j.ResultFile(); file != "" {
		return writeSweep(file, res)
	}
	return nil
}

func writeSweep(path string, r *sweep.Result) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding sweep result: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing sweep result: %w", err)
	}
	return atomicfile.WriteFile(path, append(b, '\n'), 0o644)
}
