// Package load is the `bpfbench load` and `bpfbench sweep` jobs and the
// load options every command that sends load shares (Options.AddFlags):
// the load generator run with progress, and its export (JSON, OTLP). It
// sits above loadgen and the exporters, so neither imports it.
package load

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/exporter/otlp"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/kserve"
	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// Options are the load options. Every command that sends load (load,
// run, sweep) takes all of them, with the same names and defaults, from
// AddFlags; the phased jobs (validate, demo) the subset they honour, from
// AddPhasedFlags.
type Options struct {
	Config     loadgen.Config
	NoProgress bool
	OTLP       otlp.Options
	// MaxFailedRatio is the fraction of the measured requests that may
	// fail: above it a run that completed is below its threshold
	// (CheckFailed, exit status 3).
	MaxFailedRatio float64
}

// DefaultMaxFailedRatio is --max-failed-ratio's default.
const DefaultMaxFailedRatio = 0.1

// NewOptions returns the defaults: loadgen's, with the model left to the
// server (the first it lists at /v1/models, as vLLM's client does).
func NewOptions() *Options {
	cfg := loadgen.DefaultConfig()
	cfg.Target.Model = ""
	return &Options{Config: cfg, MaxFailedRatio: DefaultMaxFailedRatio}
}

// AddFlags defines the load options on fs: the load generator's flags
// (loadgen.Config.RegisterFlags), OTLP export and --no-progress.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	g := flag.NewFlagSet("load", flag.ContinueOnError)
	o.Config.RegisterFlags(g)
	o.OTLP.RegisterFlags(g)
	g.BoolVar(&o.NoProgress, "no-progress", o.NoProgress, "do not draw a progress bar")
	g.Float64Var(&o.MaxFailedRatio, "max-failed-ratio", o.MaxFailedRatio, "the fraction of the measured requests that may fail: above it the command writes its results and exits with status 3 (1: never)")
	g.VisitAll(func(f *flag.Flag) { fs.AddFlag(fromGoFlag(f)) })
	fs.Lookup("model").Usage = "model name sent in requests (default: the first model the server lists at /v1/models)"
	if math.IsInf(o.Config.Scenario.Rate, 1) {
		fs.Lookup("rate").DefValue = "inf"
	}
}

// ThresholdError is a run that completed, its results written, with more
// of its requests failed than --max-failed-ratio allows (exit status 3).
type ThresholdError struct {
	Failed, Total int
	Max           float64
	// Detail, when set, says which run or step (sweep).
	Detail string
}

func (e *ThresholdError) Error() string {
	if e.Total == 0 {
		return e.Detail
	}
	s := fmt.Sprintf("%d of %d requests failed (%.0f%%), more than --max-failed-ratio %g allows", e.Failed, e.Total, 100*float64(e.Failed)/float64(e.Total), e.Max)
	if e.Detail != "" {
		s = e.Detail + ": " + s
	}
	return s
}

// CheckFailed returns a *ThresholdError when more than max of the
// measured requests of res failed, nil otherwise.
func CheckFailed(res *loadgen.Result, max float64) error {
	if res == nil || res.Metrics == nil {
		return nil
	}
	failed, total := res.Metrics.Failed, res.Metrics.Failed+res.Metrics.Completed
	if total == 0 || float64(failed) <= max*float64(total) {
		return nil
	}
	return &ThresholdError{Failed: failed, Total: total, Max: max}
}

// Validate checks the options: the load's (loadgen.Config.Validate) and
// --max-failed-ratio. Its errors are *loadgen.ConfigError.
func (o *Options) Validate() error {
	if r := o.MaxFailedRatio; r < 0 || r > 1 || math.IsNaN(r) {
		return &loadgen.ConfigError{Err: fmt.Errorf("--max-failed-ratio %v: give a fraction in [0, 1]", r)}
	}
	return o.Config.Validate()
}

// Scenario are the load options that decide which requests are sent and
// when: their count or duration, arrivals, prompts and lengths. A phased
// job (demo, validate) decides these itself, so it does not define them
// (AddPhasedFlags).
var Scenario = []string{"num-requests", "duration", "warmup", "constant", "burstiness",
	"dataset", "dataset-path", "input-len", "range-ratio", "sharegpt-output-len", "trace", "trace-time-unit",
	"input-len-file", "rag-prefix-len", "rag-prefixes", "rag-shared", "rag-passages", "rag-passage-len",
	"rag-passage-sigma", "rag-passage-len-file", "rag-question-len", "turns", "think-time", "multiturn-replies"}

// AddPhasedFlags defines the load options a phased job (demo, validate)
// honours on fs: those that shape each request (endpoint, model, output
// length, timeouts, headers, OTLP export, --no-progress, ...), from the
// same definitions as AddFlags, so that their names, defaults and help
// are the same. Left out are the Scenario options and those named in
// omit. --rate is the phases' steady rate, rate unless given: its default
// and help are the phased job's.
func (o *Options) AddPhasedFlags(fs *pflag.FlagSet, rate float64, omit ...string) {
	all := pflag.NewFlagSet("load options", pflag.ContinueOnError)
	o.Config.Scenario.Rate = rate
	o.AddFlags(all)
	r := all.Lookup("rate")
	r.DefValue = strconv.FormatFloat(rate, 'g', -1, 64)
	r.Usage = "request rate in requests/s, steady through every phase (a positive number: the phases need a steady rate)"
	skip := map[string]bool{}
	for _, n := range append(append([]string{}, Scenario...), omit...) {
		skip[n] = true
	}
	all.VisitAll(func(f *pflag.Flag) {
		if !skip[f.Name] {
			fs.AddFlag(f)
		}
	})
}

// Flags returns a flag set with only the load options, to list them.
func Flags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("load options", pflag.ContinueOnError)
	NewOptions().AddFlags(fs)
	return fs
}

// goValue is a standard library flag.Value as a pflag.Value.
type goValue struct {
	flag.Value
	typ string
}

func (v goValue) Type() string { return v.typ }

// goBoolValue is a boolean goValue: the flag needs no value.
type goBoolValue struct{ goValue }

func (goBoolValue) IsBoolFlag() bool { return true }

// fromGoFlag turns a flag of the standard library into a pflag one, with
// a type name that help can show.
func fromGoFlag(f *flag.Flag) *pflag.Flag {
	typ := "string"
	switch fmt.Sprintf("%T", f.Value) {
	case "*flag.boolValue":
		typ = "bool"
	case "*flag.durationValue":
		typ = "duration"
	case "*flag.intValue":
		typ = "int"
	case "*flag.uint64Value":
		typ = "uint"
	case "*flag.float64Value":
		typ = "float"
	}
	if strings.HasSuffix(fmt.Sprintf("%T", f.Value), "floatList") {
		typ = "floats"
	}
	pf := &pflag.Flag{Name: f.Name, Usage: f.Usage, Value: goValue{f.Value, typ}, DefValue: f.Value.String()}
	switch {
	case typ == "bool":
		pf.Value = goBoolValue{goValue{f.Value, typ}}
		pf.NoOptDefVal = "true"
	case typ == "duration" && pf.DefValue == "0s":
		pf.DefValue = "0"
	}
	return pf
}

// Progress returns the progress callback for loadgen.Config.Progress and
// its finish function: a progress bar on w when w is a terminal and
// --no-progress is not given, nils otherwise.
func (o *Options) Progress(w io.Writer) (update func(done, total int), finish func()) {
	if o.NoProgress {
		return nil, func() {}
	}
	return Progress(w)
}

// ResolveModel sets cfg.Model, when it is empty, to the first model the
// server lists at /v1/models.
func ResolveModel(ctx context.Context, cfg *loadgen.Config) error {
	if cfg.Target.Model != "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if cfg.Target.Protocol == transport.ProtocolKServeGRPC {
		models, err := kserve.Models(ctx, cfg.Target.URL)
		if err != nil {
			return fmt.Errorf("asking %s which model it serves: %w (or give --model)", cfg.Target.URL, err)
		}
		if len(models) == 0 {
			return fmt.Errorf("%s lists no model in its repository: give --model", cfg.Target.URL)
		}
		cfg.Target.Model = models[0]
		return nil
	}
	base, err := transport.BaseURL(cfg.Target.URL)
	if err != nil {
		return &loadgen.ConfigError{Err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return fmt.Errorf("--target %q: %w", cfg.Target.URL, err)
	}
	for k, vs := range transport.WithAPIKey(cfg.Target.Headers) {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("asking %s/v1/models which model it serves: %w (or give --model)", base, err)
	}
	defer resp.Body.Close()
	var m struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("asking %s/v1/models which model it serves: %s: give --model", base, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || len(m.Data) == 0 || m.Data[0].ID == "" {
		return fmt.Errorf("%s/v1/models lists no model: give --model", base)
	}
	cfg.Target.Model = m.Data[0].ID
	return nil
}

// deprecatedAlias defines old as a hidden, deprecated spelling of the
// string flag new, sharing its value.
func deprecatedAlias(fs *pflag.FlagSet, p *string, old, new, usage string) {
	fs.StringVar(p, old, *p, usage)
	_ = fs.MarkDeprecated(old, "use --"+new+" instead")
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progressBar draws "[=====>     ] done/total" on a terminal, at most ten
// times a second.
type progressBar struct {
	mu   sync.Mutex
	w    io.Writer
	last time.Time
	on   bool
}

func (p *progressBar) update(done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Sub(p.last) < 100*time.Millisecond && done != total {
		return
	}
	p.last = now
	p.on = true
	if total <= 0 {
		fmt.Fprintf(p.w, "\r%d requests done", done)
		return
	}
	const width = 40
	n := done * width / total
	bar := strings.Repeat("=", n)
	if n < width {
		bar += ">" + strings.Repeat(" ", width-n-1)
	}
	fmt.Fprintf(p.w, "\r[%s] %d/%d", bar, done, total)
}

func (p *progressBar) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on {
		fmt.Fprintln(p.w)
		p.on = false
	}
}

// LoadJob is `bpfbench load`: the load options and where to write the
// result.
type LoadJob struct {
	Options
	// Result is the file the result JSON (vLLM's fields) is written to.
	Result string
	// Logger, when set, takes the job's warnings (the command's
	// --log.level and --log.format); without it they go to stderr.
	Logger *slog.Logger
}

// NewLoadJob returns the job with the defaults of its flags.
func NewLoadJob() *LoadJob { return &LoadJob{Options: *NewOptions()} }

// AddFlags defines the load options and --result (with --out, its old
// spelling, deprecated: --out names a directory in every other command).
func (j *LoadJob) AddFlags(fs *pflag.FlagSet) {
	j.Options.AddFlags(fs)
	fs.StringVar(&j.Result, "result", "", "write the result JSON (vLLM's result fields) to this `FILE`")
	deprecatedAlias(fs, &j.Result, "out", "result", "write the result JSON to this `FILE`")
}

// RunLoad parses args as `bpfbench load`'s flags and runs the job (for
// programs that are the load generator alone, like job/load/loadclient).
func RunLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("load", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	j := NewLoadJob()
	j.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return j.Run(ctx, stdout, stderr)
}

// Run sends the load, prints vLLM's summary table and writes the result
// JSON.
func (j *LoadJob) Run(ctx context.Context, stdout, stderr io.Writer) error {
	cfg := j.Config
	if err := j.Options.Validate(); err != nil {
		return err
	}
	if err := ResolveModel(ctx, &cfg); err != nil {
		return err
	}
	exp, err := otlp.New(ctx, j.OTLP)
	if err != nil {
		return err
	}
	if exp != nil {
		defer exp.Shutdown(context.Background())
		cfg.Output.OnRecord = exp.Hook(&cfg)
	}
	var finish func()
	cfg.Output.Progress, finish = j.Progress(stderr)
	fmt.Fprintf(stdout, "Traffic request rate: %s\n", rateString(cfg.Scenario.Rate))
	if cfg.Scenario.Constant {
		fmt.Fprintln(stdout, "Burstiness factor: inf (constant rate)")
	} else {
		dist := "Gamma distribution"
		if cfg.Scenario.Burstiness == 1 {
			dist = "Poisson process"
		}
		fmt.Fprintf(stdout, "Burstiness factor: %g (%s)\n", cfg.Scenario.Burstiness, dist)
	}
	if cfg.Scenario.MaxConcurrency > 0 {
		fmt.Fprintf(stdout, "Maximum request concurrency: %d\n", cfg.Scenario.MaxConcurrency)
	} else {
		fmt.Fprintln(stdout, "Maximum request concurrency: None")
	}
	res, err := loadgen.Run(ctx, cfg)
	finish()
	if res == nil {
		return err
	}
	res.WriteSummary(stdout)
	if j.Result != "" {
		if werr := res.WriteFile(j.Result); werr != nil {
			return werr
		}
		fmt.Fprintf(stdout, "result written to %s\n", j.Result)
	}
	if exp != nil {
		if ferr := exp.Flush(context.Background()); ferr != nil {
			if j.Logger != nil {
				j.Logger.Warn("exporting spans", "err", ferr)
			} else {
				fmt.Fprintf(stderr, "bpfbench load: exporting spans: %v\n", ferr)
			}
		}
	}
	if err == nil && ctx.Err() == nil {
		err = CheckFailed(res, j.MaxFailedRatio)
	}
	return err
}

func rateString(r float64) string {
	if r <= 0 || math.IsInf(r, 1) {
		return "inf"
	}
	return fmt.Sprintf("%g", r)
}

// Progress returns a progress callback for loadgen.Config.Progress and a
// finish function when w is a terminal, and nils otherwise.
func Progress(w io.Writer) (update func(done, total int), finish func()) {
	if !isTerminal(w) {
		return nil, func() {}
	}
	bar := &progressBar{w: w}
	return bar.update, bar.finish
}
