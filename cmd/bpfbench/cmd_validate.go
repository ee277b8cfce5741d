package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/host"
	runjob "github.com/bpfbench/bpfbench/job/run"
	"github.com/bpfbench/bpfbench/job/validate"
	"github.com/bpfbench/bpfbench/llmsim/launch"

	"github.com/bpfbench/bpfbench/internal/caps"
	"github.com/bpfbench/bpfbench/job/load"
	"github.com/bpfbench/bpfbench/perturb"
)

func init() { register(newValidateCmd) }

// validateFlags are validate's own flags.
type validateFlags struct {
	useSim, simNetns               bool
	out                            string
	phase                          time.Duration
	ioFile, busyCPUs, control      string
	simCPUs, stepControl           string
	stepUS                         int
	with                           string
	gpuUS                          int
	slowRead                       time.Duration
	netIface, netNS, netRate, skip string
	netBurst, netLimit             string
	selfNice                       int
	minShare, maxUnexplained       float64
	retryWeak                      int
	minAddedMs                     float64
}

func newValidateCmd() *cobra.Command {
	var (
		opts   = load.NewOptions()
		server serverFlags
		sm     = &serverMetricsFlags{}
		v      validateFlags
		logs   logFlags
	)
	cmd := &cobra.Command{
		Use:   "validate (--sim | --target URL (--pid PID | --port PORT)) [flags]",
		Short: "Check the attribution by intervention: inject each cause in turn under one load and print the confusion matrix",
		Long: `Runs a baseline, then each perturbation in turn under the same load (CPU, disk,
GPU through the CUDA stub's control file, a slow-reading client; network
shaping: with --sim, of llmsim's side of the veth pair that joins its own
network namespace to the host; otherwise of --net-iface), and prints a confusion matrix of injected cause
against the attributed top cause, with the share of the excess attributed to
the injected cause. Writes DIR/validation.json and adds it to DIR/result.json.
It takes the load options that shape each request; those that decide which
requests are sent and when belong to the phases, so it does not take them.
--rate is 4 req/s unless given.`,
		Example: `  sudo bpfbench validate --sim
  sudo bpfbench validate --target http://127.0.0.1:8000 --port 8000 --skip gpu --out validation`,
		Args:        noArgs,
		Annotations: map[string]string{memoryBound: "true", planned: "true"},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runValidate(cmd, opts, server, sm, v, logs)
		},
	}
	fs := cmd.Flags()
	opts.AddPhasedFlags(fs, validate.DefaultPhaseRate)
	server.add(fs)
	sm.add(fs)
	fs.BoolVar(&v.useSim, "sim", false, "start bin/llmsim with the CUDA stub and validate against it (as make validate does)")
	fs.BoolVar(&v.simNetns, "sim-netns", true, "with --sim, serve llmsim in a network namespace of its own behind a veth pair, whose server side the net row shapes (false: on 127.0.0.1, no net row unless --net-iface)")
	fs.StringVar(&v.simCPUs, "sim-cpus", "auto", "with --sim, the CPUs llmsim runs on, e.g. 1 or 2-3; auto: the last of bpfbench's CPUs when it has two or more, so that the cpu row's busy threads share a CPU with the server and not with the load generator; all: no pinning")
	fs.StringVar(&v.out, "out", "bpfbench-validate", "run `DIR`: result.json, trace.json, report.html and validation.json")
	fs.DurationVar(&v.phase, "phase", 6*time.Second, "length of the baseline and of each injection")
	fs.StringVar(&v.ioFile, "io-file", "", "file to read with O_DIRECT for the io injection (default: a file the server has open with O_DIRECT)")
	fs.StringVar(&v.busyCPUs, "busy-cpus", "", "CPUs the cpu injection keeps busy (default: those the server may run on)")
	fs.StringVar(&v.busyCPUs, "cpus", "", "CPUs the cpu injection keeps busy")
	_ = fs.MarkDeprecated("cpus", "use --busy-cpus instead (--cpus names bpfbench's own CPUs in attach, run and daemon)")
	fs.StringVar(&v.control, "cuda-control", "", "the CUDA stub's control file (CUDASTUB_CONTROL_FILE) for the gpu injection; without it, no gpu row")
	fs.IntVar(&v.gpuUS, "gpu-kernel-us", 20000, "the stub's kernel time during the gpu injection, µs")
	fs.StringVar(&v.with, "with", "", "rows to add (accepted for older scripts: compute and client-cpu are default rows now)")
	fs.StringVar(&v.stepControl, "step-control", "", "the server's step control file for the compute row (llmsim --step-control: its step work in µs; --sim gives llmsim's; without one there is no compute row)")
	fs.IntVar(&v.stepUS, "step-us", 25000, "the server's step work during the compute injection, µs")
	fs.DurationVar(&v.slowRead, "slow-read", 3*time.Second, "how long the client injection's request stops reading")
	fs.StringVar(&v.netIface, "net-iface", "", "shape this interface with tbf for a net row (the server's egress towards the client; never lo unless nothing else uses it)")
	fs.StringVar(&v.netNS, "net-netns", "", "named network namespace of --net-iface")
	fs.StringVar(&v.netRate, "net-rate", "auto", "the net injection's rate, e.g. 2mbit; auto: 80% of what the interface sent per second in the baseline phase")
	fs.StringVar(&v.netBurst, "net-burst", "2kb", "the net injection's bucket size (at least one packet)")
	fs.StringVar(&v.netLimit, "net-limit", "2kb", "the net injection's queue before drops: shallow, so that the shaping drops and the sender retransmits (a deep queue only delays, which no collector names)")
	fs.StringVar(&v.skip, "skip", "", "injections to leave out, e.g. gpu,io (cpu, io, gpu, compute, client, net, client-cpu)")
	fs.IntVar(&v.selfNice, "self-nice", -10, "nice level of bpfbench itself during the validation (the server and the injections stay at theirs)")
	fs.Float64Var(&v.minShare, "min-share", 0.8, "exit 1 unless every injected cause is the top cause with at least this share of the excess it added to the slowest 10% of gaps")
	fs.IntVar(&v.retryWeak, "retry-weak", 1, "run an injection too weak to judge (it added less than a tenth of the normal gap, at least 1 ms, to its slowest gaps) again this many times, twice as strong each time, after a baseline of its own (0: report it too weak)")
	fs.Float64Var(&v.minAddedMs, "min-added-ms", 0, "the least an injection must add to each of its slowest 10% of gaps to be judged, ms (0: a tenth of the normal gap, at least 1 ms)")
	fs.Float64Var(&v.maxUnexplained, "max-unexplained", 0.05, "exit 1 when the critical path leaves more than this fraction of the run's gap time unexplained")
	logs.add(fs, "warn", true)
	_ = cmd.MarkFlagDirname("out")
	loadCompletions(cmd)
	return cmd
}

// runValidate starts or finds the server, runs the validation against
// it and prints and judges the confusion matrix.
func runValidate(cmd *cobra.Command, opts *load.Options, server serverFlags, sm *serverMetricsFlags, v validateFlags, logs logFlags) error {
	ctx, stdout, stderr := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	target := opts.Config.Target.URL
	rate, err := v.check(cmd, opts)
	if err != nil {
		return err
	}
	rows, err := v.rows()
	if err != nil {
		return err
	}
	logger, err := logs.logger(cmd)
	if err != nil {
		return err
	}
	if err := v.prepare(logger); err != nil {
		return err
	}
	var pid int
	if v.useSim {
		if server.given() {
			return usageError{"--sim starts its own server: give no --pid or --port"}
		}
		sim, err := startValidateSim(ctx, stdout, v, &rows, logger)
		if err != nil {
			return err
		}
		defer func() {
			if err := sim.Close(); err != nil {
				logger.Warn("stopping llmsim", "err", err)
			}
		}()
		target, pid = sim.URL, sim.Pid()
	} else if pid, err = server.resolve(target, cmd); err != nil {
		return err
	}
	// Isolation: the load generator and the collectors run at a higher
	// priority than the server and the busy threads (nice 0), so that the
	// cpu injection delays the server and not the client's clock. After
	// llmsim's start: a child inherits its parent's nice level.
	if err := host.ReniceSelf(v.selfNice); err != nil {
		logger.Warn("raising bpfbench's priority", "err", err)
	}
	injs, note, err := rows.Injections(pid)
	if err != nil {
		return err
	}
	if note != "" {
		fmt.Fprintf(stderr, "bpfbench validate: %s\n", note)
	}
	lc := opts.Config
	lc.Target.URL = target
	if err := load.ResolveModel(ctx, &lc); err != nil {
		return err
	}
	progress, finish := opts.Progress(stderr)
	printValidatePlan(stdout, pid, rate, injs, v.phase)
	val, res, err := validate.Validate(ctx, validate.ValidateConfig{
		Load: lc, Pid: pid, OutDir: v.out, MinShare: v.minShare, Phase: v.phase, Rate: rate, OutputLen: lc.Scenario.Dataset.OutputLen,
		Injections: injs, Sections: sessionSections(), Readiness: readinessChecks, Logger: logger, Progress: progress, RetryWeak: v.retryWeak, MinAddedMs: v.minAddedMs,
		ValidateRun: validate.ValidateRun{ServerMetrics: sm.url, ServerMetricsPeriod: sm.period, Manifest: runManifest()},
	})
	finish()
	return v.conclude(ctx, stdout, opts, val, res, err, logger)
}

// check checks that validate is given a server or --sim, a steady rate
// and phases long enough, and returns the rate of the phases.
func (v validateFlags) check(cmd *cobra.Command, opts *load.Options) (float64, error) {
	if v.useSim == (opts.Config.Target.URL != "") {
		return 0, usageError{"give --sim, or the server's --target URL with --pid or --port"}
	}
	rate := validate.PhaseRate(opts.Config.Scenario.Rate)
	if cmd.Flags().Changed("rate") && rate != opts.Config.Scenario.Rate {
		return 0, usageError{"--rate must be a positive number of requests per second: the phases need a steady rate"}
	}
	if v.phase < 2*time.Second {
		return 0, usageError{"--phase must be at least 2s and --rate positive"}
	}
	return rate, nil
}

// prepare checks that bpfbench may trace, creates the run directory and
// mounts the kernel's file systems the collectors need.
func (v validateFlags) prepare(logger *slog.Logger) error {
	if !caps.CanTrace() {
		return fmt.Errorf("validation follows the server with eBPF: %s", caps.Hint)
	}
	if err := os.MkdirAll(v.out, 0o755); err != nil {
		return fmt.Errorf("cannot create --out %s: %w", v.out, err)
	}
	if err := bpfutil.EnsureFilesystems(); err != nil {
		logger.Warn("preparing kernel file systems", "err", err)
	}
	return nil
}

// printValidatePlan says what the validation will run: the server, the
// rate, the injections in turn and how long each lasts.
func printValidatePlan(stdout io.Writer, pid int, rate float64, injs []validate.Injection, phase time.Duration) {
	names := make([]string, len(injs))
	for i, inj := range injs {
		names[i] = inj.Name
	}
	fmt.Fprintf(stdout, "validating pid %d at %.3g req/s: baseline, then %s, %v each, %v of settling between two injections\n", pid, rate, strings.Join(names, ", "), phase, validate.Settle(phase))
}

// conclude exports the run's spans, prints the validation (or where the
// run is, when there is none) and judges it: err first, then the share
// of failed requests, then the verdict of the matrix.
func (v validateFlags) conclude(ctx context.Context, stdout io.Writer, opts *load.Options, val *validate.Validation, res *runjob.RunResult, err error, logger *slog.Logger) error {
	if res != nil {
		if eerr := exportSpans(ctx, opts.OTLP, res); eerr != nil {
			logger.Warn("exporting spans", "err", eerr)
		}
	}
	if val == nil {
		if res != nil {
			fmt.Fprintf(stdout, "the run is in %s\n", res.Dir)
		}
		return err
	}
	printValidation(stdout, val, res)
	if err != nil {
		return err
	}
	if res != nil && ctx.Err() == nil {
		if err := load.CheckFailed(res.Load, opts.MaxFailedRatio); err != nil {
			return err
		}
	}
	return val.Verdict(v.minShare, v.maxUnexplained)
}

// rows reads the flags of validate's rows; the net row's settings are
// checked before the server starts.
func (v validateFlags) rows() (validate.ValidateRowsConfig, error) {
	rows := validate.ValidateRowsConfig{
		IOFile: v.ioFile, CUDAControl: v.control, GPUKernelUS: v.gpuUS, StepControl: v.stepControl, StepUS: v.stepUS,
		SlowRead: v.slowRead, Net: perturb.Net{Iface: v.netIface, Netns: v.netNS}, SelfNice: v.selfNice,
	}
	var err error
	if rows.Skip, err = validate.ParseRowList("skip", v.skip, validate.ValidateRows...); err != nil {
		return rows, err
	}
	if rows.With, err = validate.ParseRowList("with", v.with, "compute", "client-cpu"); err != nil {
		return rows, err
	}
	if v.netRate != "auto" {
		if rows.Net.Rate, err = perturb.ParseRate(v.netRate); err != nil {
			return rows, usageError{"--net-" + err.Error()}
		}
	}
	if rows.Net.Burst, err = perturb.ParseSize(v.netBurst); err != nil {
		return rows, usageError{"--net-burst " + err.Error()}
	}
	if rows.Net.Limit, err = perturb.ParseSize(v.netLimit); err != nil {
		return rows, usageError{"--net-limit " + err.Error()}
	}
	if rows.BusyCPUs, err = cpuList(v.busyCPUs); err != nil {
		return rows, usageError{err.Error()}
	}
	return rows, nil
}

// startValidateSim starts llmsim for validate --sim, keeps bpfbench off
// its CPUs, and fills what rows were not given from it.
func startValidateSim(ctx context.Context, stdout io.Writer, v validateFlags, rows *validate.ValidateRowsConfig, logger *slog.Logger) (*launch.Sim, error) {
	simCPUs, err := simCPUList(v.simCPUs)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	sim, err := launch.StartSim(ctx, launch.SimConfig{Dir: v.out, Netns: v.simNetns, CPUs: simCPUs})
	if err != nil {
		if v.simNetns {
			return nil, fmt.Errorf("%w (--sim-netns=false serves on 127.0.0.1, without the net row)", err)
		}
		return nil, err
	}
	if rows.IOFile == "" {
		rows.IOFile = sim.IOFile
	}
	if rows.CUDAControl == "" {
		rows.CUDAControl = sim.Control
	}
	if rows.StepControl == "" {
		rows.StepControl = sim.StepControl
	}
	if sim.Net != nil && rows.Net.Iface == "" {
		rows.Net.Iface, rows.Net.Netns = sim.Net.Iface, sim.Net.Name
	}
	where := ""
	if sim.Net != nil {
		where = fmt.Sprintf(" in network namespace %s (veth %s, host side %s)", sim.Net.Name, sim.Net.Iface, sim.Net.HostIface)
	}
	if len(simCPUs) > 0 {
		where += fmt.Sprintf(" on CPUs %v", simCPUs)
		// bpfbench (the load generator, the readers) keeps off the
		// server's CPUs: the cpu row's busy threads then delay the
		// server, not the client's clock.
		if rest, err := host.KeepOff(simCPUs); err != nil {
			logger.Warn("keeping bpfbench off llmsim's CPUs", "err", err)
		} else if len(rest) > 0 {
			where += fmt.Sprintf(" (bpfbench on %v)", rest)
		}
	}
	fmt.Fprintf(stdout, "bpfbench validate: llmsim (pid %d) at %s%s with the CUDA stub\n", sim.Pid(), sim.URL, where)
	return sim, nil
}

// printValidation writes what each injection achieved, the confusion
// matrix, the observer's overhead and the files written.
func printValidation(stdout io.Writer, val *validate.Validation, res *runjob.RunResult) {
	fmt.Fprintln(stdout, "\nWhat each injection achieved:")
	for _, r := range val.Rows {
		fmt.Fprintf(stdout, "  - %s: %s\n", r.Injection, r.Achieved)
		for _, e := range r.Earlier {
			fmt.Fprintf(stdout, "      too weak to judge before: %s\n", e)
		}
		if r.Retry > 0 {
			fmt.Fprintf(stdout, "      judged on retry %d, stronger, after a baseline of its own (%s)\n", r.Retry, r.RetryDir)
		}
	}
	fmt.Fprintln(stdout, "\nConfusion matrix (injected cause × top cause of the excess added to the slowest 10% of gaps):")
	val.WriteMatrix(stdout)
	if res != nil && res.Doc != nil && res.Doc.Overhead != nil {
		fmt.Fprintf(stdout, "\n%s\n", res.Doc.Overhead.Line())
		for _, w := range res.Doc.Overhead.Warnings {
			fmt.Fprintf(stdout, "  warning: %s\n", w)
		}
	}
	if res != nil {
		fmt.Fprintln(stdout)
		printWritten(stdout, res.Written)
	}
}

// simCPUList reads --sim-cpus: auto is the last CPU bpfbench may run on
// when it may run on two or more (none otherwise), all is no pinning.
func simCPUList(s string) ([]int, error) {
	switch s {
	case "all", "":
		return nil, nil
	case "auto":
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			return nil, fmt.Errorf("reading bpfbench's CPUs for --sim-cpus auto: %w", err)
		}
		if set.Count() < 2 {
			return nil, nil
		}
		last := -1
		for c := 0; c < 1024; c++ {
			if set.IsSet(c) {
				last = c
			}
		}
		return []int{last}, nil
	}
	l, err := cpuList(s)
	if err != nil {
		return nil, fmt.Errorf("--sim-cpus %q: use auto, all or a list like 1 or 2-3", s)
	}
	return l, nil
}
