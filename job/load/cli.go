// Package load is the `bpfbench load` and `bpfbench sweep` jobs: their
// options, the load generator run with progress, and its export (JSON,
// OTLP). It sits above loadgen and the exporters, so neither imports it.
package load

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/exporter/otlp"
	"github.com/bpfbench/bpfbench/loadgen"
)

// outputFlags are the flags shared by load and sweep besides the load's.
type outputFlags struct {
	out        string
	noProgress bool
	otlp       otlp.Options
}

func (o *outputFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.out, "out", "", "write the result JSON to this `FILE`")
	fs.BoolVar(&o.noProgress, "no-progress", false, "do not draw a progress bar")
	o.otlp.RegisterFlags(fs)
}

func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: bpfbench %s\n\nflags:\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
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

// RunLoad runs `bpfbench load`: it sends the load, prints vLLM's summary
// table and writes the result JSON.
func RunLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("load", "load --target URL [--endpoint completions|chat] [--model M] [--rate R] [--burstiness B] [--max-concurrency C] [--num-requests N|--duration D] [--dataset ...] [--out FILE]", stderr)
	cfg := loadgen.DefaultConfig()
	cfg.RegisterFlags(fs)
	var o outputFlags
	o.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	exp, err := otlp.New(ctx, o.otlp)
	if err != nil {
		return err
	}
	if exp != nil {
		defer exp.Shutdown(context.Background())
		cfg.OnRecord = exp.Hook(&cfg)
	}
	var bar *progressBar
	if !o.noProgress && isTerminal(stderr) {
		bar = &progressBar{w: stderr}
		cfg.Progress = bar.update
	}
	fmt.Fprintf(stdout, "Traffic request rate: %s\n", rateString(cfg.Rate))
	if cfg.Constant {
		fmt.Fprintln(stdout, "Burstiness factor: inf (constant rate)")
	} else {
		dist := "Gamma distribution"
		if cfg.Burstiness == 1 {
			dist = "Poisson process"
		}
		fmt.Fprintf(stdout, "Burstiness factor: %g (%s)\n", cfg.Burstiness, dist)
	}
	if cfg.MaxConcurrency > 0 {
		fmt.Fprintf(stdout, "Maximum request concurrency: %d\n", cfg.MaxConcurrency)
	} else {
		fmt.Fprintln(stdout, "Maximum request concurrency: None")
	}
	res, err := loadgen.Run(ctx, cfg)
	if bar != nil {
		bar.finish()
	}
	if res == nil {
		return err
	}
	res.WriteSummary(stdout)
	if o.out != "" {
		if werr := res.WriteFile(o.out); werr != nil {
			return werr
		}
		fmt.Fprintf(stdout, "result written to %s\n", o.out)
	}
	if exp != nil {
		if ferr := exp.Flush(context.Background()); ferr != nil {
			fmt.Fprintf(stderr, "bpfbench load: exporting spans: %v\n", ferr)
		}
	}
	return err
}

func rateString(r float64) string {
	if r <= 0 || math.IsInf(r, 1) {
		return "inf"
	}
	return fmt.Sprintf("%g", r)
}

// RunSweep runs `bpfbench sweep`: it finds the highest request rate (or
// concurrency) that meets every SLO, printing each step and the answer, and
// writes all steps to JSON.
func RunSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sweep", "sweep --target URL --slo \"p99_ttft_ms<=X,p99_itl_ms<=Y\" [--mode rate|concurrency] [load flags] [--out FILE]", stderr)
	cfg := loadgen.DefaultConfig()
	cfg.RegisterFlags(fs)
	var o outputFlags
	o.register(fs)
	sloText := fs.String("slo", "", "objectives every step must meet, e.g. \"p99_ttft_ms<=500,p99_itl_ms<=50\" (any result field: mean_/median_/pNN_ ttft/tpot/itl/e2el _ms, request_goodput, ...)")
	mode := fs.String("mode", loadgen.SweepRate, "search over the request rate (rate) or the concurrency (concurrency)")
	perStep := fs.Int("requests-per-step", 200, "measured requests at every step")
	precision := fs.Float64("precision", 0.05, "rate search resolution, as a fraction of the probed capacity")
	step := fs.Float64("step", 0, "rate search resolution in req/s (overrides --precision)")
	maxRate := fs.Float64("max-rate", 0, "top of the rate search (0: 1.25 × the probed capacity)")
	maxConc := fs.Int("max-search-concurrency", 1024, "top of the concurrency search")
	if err := parse(fs, args); err != nil {
		return err
	}
	slos, err := loadgen.ParseSLOs(*sloText)
	if err != nil {
		return err
	}
	cfg.NumRequests = *perStep
	if err := cfg.Validate(); err != nil {
		return err
	}
	exp, err := otlp.New(ctx, o.otlp)
	if err != nil {
		return err
	}
	if exp != nil {
		defer exp.Shutdown(context.Background())
		cfg.OnRecord = exp.Hook(&cfg)
	}
	fmt.Fprintf(stdout, "Sweeping %s against %s for %s, %d requests per step\n", *mode, cfg.Target, *sloText, *perStep)
	sc := loadgen.SweepConfig{
		Load:            cfg,
		SLOs:            slos,
		Mode:            *mode,
		RequestsPerStep: *perStep,
		Precision:       *precision,
		Step:            *step,
		MaxRate:         *maxRate,
		MaxConcurrency:  *maxConc,
		OnStep:          func(s *loadgen.SweepStep) { printStep(stdout, s, slos) },
	}
	res, err := loadgen.Sweep(ctx, sc)
	if res != nil {
		printAnswer(stdout, res, slos)
		if o.out != "" {
			if werr := writeSweep(o.out, res); werr != nil {
				return werr
			}
			fmt.Fprintf(stdout, "steps written to %s\n", o.out)
		}
	}
	return err
}

func printStep(w io.Writer, s *loadgen.SweepStep, slos []loadgen.SLO) {
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
	fmt.Fprintf(w, "step %2d %-6s %s: %-4s throughput %.2f req/s, %s", s.N, s.Phase, at, verdict, s.Values["request_throughput"], strings.Join(parts, " "))
	if s.StoppedEarly {
		fmt.Fprint(w, " (stopped early)")
	}
	fmt.Fprintln(w)
}

func printAnswer(w io.Writer, r *loadgen.SweepResult, slos []loadgen.SLO) {
	unit := "req/s"
	if r.Mode == loadgen.SweepConcurrency {
		unit = "requests in flight"
	}
	fmt.Fprintf(w, "capacity (saturation probe): %.2f req/s; search step %.2f %s\n", r.Capacity, r.StepSize, unit)
	if r.Best == nil {
		fmt.Fprintf(w, "answer: no %s met every SLO\n", r.Mode)
		return
	}
	var parts []string
	for _, slo := range slos {
		parts = append(parts, fmt.Sprintf("%s=%.2f", slo.Metric, r.Best.Values[slo.Metric]))
	}
	fmt.Fprintf(w, "answer: %.2f %s meets every SLO (%s; throughput %.2f req/s, %.1f tok/s)\n",
		r.Answer, unit, strings.Join(parts, ", "), r.Best.Values["request_throughput"], r.Best.Values["output_throughput"])
}

func writeSweep(path string, r *loadgen.SweepResult) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding sweep result: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing sweep result: %w", err)
	}
	return nil
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
