package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/host"
	"github.com/bpfbench/bpfbench/internal/caps"
	"github.com/bpfbench/bpfbench/job/demo"
	"github.com/bpfbench/bpfbench/job/load"
	"github.com/bpfbench/bpfbench/job/validate"
	"github.com/bpfbench/bpfbench/llmsim/launch"
)

func init() { register(newDemoCmd) }

// demoSelfNice is bpfbench's nice level during the demo: above the server
// and the injections, so that they delay the server and not the client's
// clock (validate's --self-nice).
const demoSelfNice = -10

func newDemoCmd() *cobra.Command {
	var (
		opts  = load.NewOptions()
		out   string
		phase time.Duration
		logs  logFlags
	)
	cmd := &cobra.Command{
		Use:   "demo [--out DIR] [--phase 10s] [--rate 4]",
		Short: "Run the whole job on the built-in simulated server: phased contention, attribution per phase",
		Long: `Starts llmsim (found next to bpfbench: make build) with the CUDA stub, follows it
with every collector, and drives it through five phases: a baseline, CPU
contention, disk contention, a GPU slowdown and a slow-reading client. Prints
the attribution per phase and writes DIR/result.json, DIR/trace.json and
DIR/report.html. It takes the load options that shape each request
(endpoint, model, output length, timeouts, headers, OTLP export, ...); those
that decide which requests are sent and when belong to the demo's phases, and
--target to its own llmsim (bpfbench run takes another server), so it does
not take them. --rate is 4 req/s unless given.`,
		Example:     `  sudo bpfbench demo --out bpfbench-demo --phase 10s`,
		Args:        noArgs,
		Annotations: map[string]string{memoryBound: "true", planned: "true"},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDemo(cmd, opts, out, phase, logs)
		},
	}
	fs := cmd.Flags()
	opts.AddPhasedFlags(fs, validate.DefaultPhaseRate, "target")
	fs.StringVar(&out, "out", "bpfbench-demo", "run `DIR` (result.json, trace.json, report.html)")
	fs.DurationVar(&phase, "phase", 10*time.Second, "length of each phase")
	logs.add(fs, "warn", false)
	_ = cmd.MarkFlagDirname("out")
	loadCompletions(cmd)
	return cmd
}

// runDemo starts the simulated server, runs the demo's phases against it
// and prints the attribution of each.
func runDemo(cmd *cobra.Command, opts *load.Options, out string, phase time.Duration, logs logFlags) error {
	ctx, stdout, stderr := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	rate, err := checkDemo(cmd, opts, phase)
	if err != nil {
		return err
	}
	logger, err := logs.logger(cmd)
	if err != nil {
		return err
	}
	if !caps.CanTrace() {
		return fmt.Errorf("the demo follows the simulated server with eBPF: %s", caps.Hint)
	}
	if err := bpfutil.EnsureFilesystems(); err != nil {
		logger.Warn("preparing kernel file systems", "err", err)
	}
	// Isolation, as validate --sim: the server on the last of bpfbench's
	// CPUs, bpfbench, its load generator and the disk injection on the
	// others, at a higher priority; the cpu phase's busy threads on the
	// server's CPU. On one CPU nothing can be kept apart.
	simCPUs, err := simCPUList("auto")
	if err != nil {
		return err
	}
	sim, err := launch.StartSim(ctx, launch.SimConfig{Dir: out, CPUs: simCPUs})
	if err != nil {
		return err
	}
	defer sim.Close()
	where := isolateDemo(simCPUs, logger)
	cfg := opts.Config
	cfg.Target.URL = sim.URL
	if err := load.ResolveModel(ctx, &cfg); err != nil {
		return err
	}
	var finish func()
	cfg.Output.Progress, finish = opts.Progress(stderr)
	fmt.Fprintf(stdout, "bpfbench demo: llmsim (pid %d) at %s with the CUDA stub, %s; %d phases of %v at %.0f req/s\n",
		sim.Pid(), sim.URL, where, len(demo.DemoPhases), phase, rate)
	res, err := demo.Demo(ctx, demo.DemoConfig{
		Load: cfg, Sim: sim, ServerCPUs: simCPUs, OutDir: out, Phase: phase, Rate: rate,
		Sections: sessionSections(), Readiness: readinessChecks, Logger: logger, Manifest: runManifest(),
	})
	finish()
	if res == nil {
		return err
	}
	return printDemo(ctx, stdout, opts, res, err, logger)
}

// checkDemo checks the demo's rate and phase length, and returns the
// rate of its phases.
func checkDemo(cmd *cobra.Command, opts *load.Options, phase time.Duration) (float64, error) {
	rate := validate.PhaseRate(opts.Config.Scenario.Rate)
	if cmd.Flags().Changed("rate") && rate != opts.Config.Scenario.Rate {
		return 0, usageError{"--rate must be a positive number of requests per second: the phases need a steady rate"}
	}
	if err := demo.CheckDemo(rate, phase); err != nil {
		return 0, usageError{err.Error()}
	}
	return rate, nil
}

// isolateDemo keeps bpfbench off the server's CPUs (simCPUs) and raises
// its priority, and says where each runs.
func isolateDemo(simCPUs []int, logger *slog.Logger) string {
	where := "not pinned (one CPU: the injections share it with the server and bpfbench)"
	if len(simCPUs) > 0 {
		where = fmt.Sprintf("on CPU %v", simCPUs)
		if rest, err := host.KeepOff(simCPUs); err != nil {
			logger.Warn("keeping bpfbench off llmsim's CPUs", "err", err)
		} else if len(rest) > 0 {
			where += fmt.Sprintf(", bpfbench and the disk injection on %v", rest)
		}
	}
	if err := host.ReniceSelf(demoSelfNice); err != nil {
		logger.Warn("raising bpfbench's priority", "err", err)
	}
	return where
}

// printDemo exports the demo's spans, prints its report, how many
// injected causes the critical path named and the files written, and,
// when the demo itself went well (err nil), fails on the share of
// failed requests.
func printDemo(ctx context.Context, stdout io.Writer, opts *load.Options, res *demo.DemoResult, err error, logger *slog.Logger) error {
	if eerr := exportSpans(ctx, opts.OTLP, res.RunResult); eerr != nil {
		logger.Warn("exporting spans", "err", eerr)
	}
	fmt.Fprintln(stdout)
	report.WriteTerminal(stdout, res.Doc)
	fmt.Fprintf(stdout, "\nThe critical path named %d of %d injected causes", res.Named, len(demo.DemoCauses))
	if res.Weak > 0 {
		fmt.Fprintf(stdout, "; %d injections were too weak to judge", res.Weak)
	}
	fmt.Fprintln(stdout, ".")
	fmt.Fprintln(stdout)
	printWritten(stdout, res.Written)
	if len(res.Written) > 0 {
		fmt.Fprintln(stdout, "open report.html in a browser, trace.json in ui.perfetto.dev")
	}
	if err == nil && ctx.Err() == nil {
		err = load.CheckFailed(res.Load, opts.MaxFailedRatio)
	}
	return err
}
