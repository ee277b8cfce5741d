package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/internal/caps"
	"github.com/bpfbench/bpfbench/job/knee"
	"github.com/bpfbench/bpfbench/job/load"
	runjob "github.com/bpfbench/bpfbench/job/run"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/sweep"
)

func init() { register(newSweepCmd) }

func newSweepCmd() *cobra.Command {
	var (
		j      = load.NewSweepJob()
		server serverFlags
		sm     = &serverMetricsFlags{}
		logs   logFlags
	)
	cmd := &cobra.Command{
		Use:   "sweep --target URL --slo \"p99_ttft_ms<=X,p99_itl_ms<=Y\" [--pid PID | --port PORT] [--out DIR] [load options]",
		Short: "Find the highest request rate (or concurrency) a server sustains within latency SLOs, with the knee's interval; with --pid, explain what breaks them",
		Long: `Finds the highest request rate (or concurrency) that meets every SLO. One short
step near the boundary is noise, so the highest passing and the lowest
failing level are run again until each has --repeats runs with one verdict
(a level whose runs disagree moves its side a step out; the passing side
moves at its first failing run), within
--repeat-budget more steps; the answer is the highest level whose every run
passed, and the knee is given with its interval and the runs behind it:
"the knee is at 14.1 req/s (95% interval 12.6-15.4 req/s from a logistic
fit of its 19 runs), between 13.2 req/s (3 of 3 runs passed) and 15 req/s
(3 of 3 failed)", or "not stable" and why when the budget ran out. The 95%
interval is of the half-way point of a logistic curve of the pass
probability over the level, fitted to every run of the search (Firth's
penalised likelihood-ratio interval), each half widened in quadrature by
how far the server's capacity moved over the sweep times the knee (the
saturation probe runs once more after the confirmation: "and the capacity's
drift of ±4.2% over the sweep"); the settled levels say which levels
passed or failed every run.

With --pid (or --port), the two bounds are run again with the collectors
attached (DIR/pass and DIR/fail of the run directory --out DIR, then
DIR/pass-2 ... for a run taken again) until a run at the pass passes and a
run at the fail fails; if they do not, the answer says so instead of
explaining. The breach is explained on the metric that broke: a TTFT
breach on the TTFTs (the wait for one of the engine's slots behind other
requests, from its /metrics, and the critical path), an ITL breach on the
token gaps, with the named cause's share of what the slowest 10% added
over the passing run: "the SLO breaks at 15 req/s on p99 TTFT (612 ms,
want p99_ttft_ms<=500; 310 ms at 13.2 req/s), and what breaks it is
waiting for one of the engine's 4 slots behind other requests (380 ms a
request in the queue), 78% of the 420 ms the slowest 10% of TTFTs added".
Every step, the interval and the explanation go to DIR/sweep.json (or
--result FILE). It takes every load option of bpfbench load;
--num-requests is the count of every step, like --requests-per-step.

A step also ends early, and fails, when a signal says the server is past
its limit: more than --max-error-rate of its requests failed, more than
--max-resets connections were reset or refused; from the server's /metrics
(--server-metrics), its KV cache fuller than --max-kv-usage, more than
--max-preemptions preemptions, or more than --max-waiting requests in its
queue for --max-waiting-for (the queue signal); with --pid, CUDA
allocations that failed for lack of device memory and events the kernel's
ring buffer lost. A signal the engine does not export is off, and said so
once. Each step shows what stopped it, and the answer names the limit:
"the SLO holds up to 14 req/s; at 16 req/s the KV cache was 98% full".`,
		Example: `  bpfbench sweep --target http://127.0.0.1:8000 --slo "p99_ttft_ms<=500,p99_itl_ms<=50" --out sweep1
  sudo bpfbench sweep --target http://127.0.0.1:8000 --port 8000 --slo "p99_itl_ms<=50" --out knee`,
		Args:        noArgs,
		Annotations: map[string]string{memoryBound: "true", planned: "true"},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSweep(cmd, j, server, sm, logs)
		},
	}
	fs := cmd.Flags()
	j.AddFlags(fs)
	server.add(fs)
	sm.add(fs)
	fs.Lookup("pid").Usage = "the server's process id: explain the knee by following it"
	fs.Lookup("port").Usage = "explain the knee by following the process listening on this local TCP port"
	logs.add(fs, "warn", false)
	_ = cmd.MarkFlagDirname("out")
	_ = cmd.RegisterFlagCompletionFunc("mode", cobra.FixedCompletions([]string{sweep.ModeRate, sweep.ModeConcurrency}, cobra.ShellCompDirectiveNoFileComp))
	loadCompletions(cmd)
	return cmd
}

// runSweep is `bpfbench sweep`: the load generator's SLO search; with
// --pid it then runs the highest passing and the first failing step again
// while following the server and says what breaks the SLO there.
func runSweep(cmd *cobra.Command, j *load.SweepJob, server serverFlags, sm *serverMetricsFlags, logs logFlags) error {
	ctx, stdout, stderr := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	if err := checkSweep(cmd, j, sm); err != nil {
		return err
	}
	logger, err := logs.logger(cmd)
	if err != nil {
		return err
	}
	pid, err := sweepServer(cmd, j, &server, logger)
	if err != nil {
		return err
	}
	sigs, err := startSweepSignals(ctx, stdout, j, sm, pid, logger)
	if err != nil {
		return err
	}
	defer sigs.Close()
	j.Signals = sigs
	res, cfg, err := j.Run(ctx, stdout, stderr)
	sigs.Close()
	if err != nil {
		return err
	}
	if pid == 0 || ctx.Err() != nil {
		return j.CheckAnswer(res)
	}
	knee, err := explainKnee(ctx, j, cfg, res, pid, sm, logger, stdout)
	if knee == nil {
		return err
	}
	return recordKnee(stdout, j, res, knee, err)
}

// checkSweep checks sweep's options before anything probes the server:
// --num-requests is the count of every step, and a missing --slo or
// --target is a usage error.
func checkSweep(cmd *cobra.Command, j *load.SweepJob, sm *serverMetricsFlags) error {
	// --num-requests, a load option, is the count of every step here.
	if cmd.Flags().Changed("num-requests") {
		if cmd.Flags().Changed("requests-per-step") {
			return usageError{"give --requests-per-step or --num-requests, not both"}
		}
		j.RequestsPerStep = j.Config.Scenario.NumRequests
	}
	if err := sm.check(); err != nil {
		return err
	}
	// The options first (a missing --slo or --target is a usage error),
	// before anything probes the server.
	_, _, err := j.LoadConfig()
	return err
}

// sweepServer finds the server to follow at the knee when one is given
// (0 when none is), checks that its runs can be written and traced, and
// mounts the kernel's file systems the collectors need.
func sweepServer(cmd *cobra.Command, j *load.SweepJob, server *serverFlags, logger *slog.Logger) (int, error) {
	if !server.given() {
		return 0, nil
	}
	var err error
	if server.pid, err = server.resolve(j.Config.Target.URL, cmd); err != nil {
		return 0, err
	}
	pid := server.pid
	if j.Out == "" {
		return 0, usageError{"explaining the knee writes its two runs into the run directory: give --out DIR"}
	}
	if !caps.CanTrace() {
		return 0, fmt.Errorf("explaining the knee follows the server with eBPF: %s", caps.Hint)
	}
	if pid != 0 {
		if err := bpfutil.EnsureFilesystems(); err != nil {
			logger.Warn("preparing kernel file systems", "err", err)
		}
	}
	return pid, nil
}

// startSweepSignals starts the watch of every step for the signals that
// the server is past its limit: the engine's from its /metrics and, with
// a pid, the kernel's (the CUDA probes alone). Each note is printed.
func startSweepSignals(ctx context.Context, stdout io.Writer, j *load.SweepJob, sm *serverMetricsFlags, pid int, logger *slog.Logger) (*knee.SweepSignals, error) {
	var sayMu sync.Mutex
	return knee.StartSweepSignals(ctx, knee.SweepSignalsConfig{
		Target: j.Config.Target.URL, ServerMetrics: sm.url, ServerMetricsPeriod: sm.period,
		MaxKVUsage: j.MaxKVUsage, MaxPreemptions: j.MaxPreemptions, MaxWaiting: j.MaxWaiting, WaitingFor: j.MaxWaitingFor,
		Pid: pid, Sections: sessionSections(), Logger: logger,
		Say: func(note string) {
			sayMu.Lock()
			defer sayMu.Unlock()
			fmt.Fprintf(stdout, "signals: %s\n", note)
		},
	})
}

// recordKnee writes the explained knee into the sweep's result and the
// reports of its runs, prints it with the runs behind it, and checks the
// sweep's answer; err is explaining's, returned first.
func recordKnee(stdout io.Writer, j *load.SweepJob, res *sweep.Result, knee *knee.Knee, err error) error {
	if knee.Fail == nil {
		fmt.Fprintln(stdout, knee.Explanation())
		return err
	}
	res.Explanation = &knee.Result
	if werr := j.WriteResult(res); werr != nil && err == nil {
		err = werr
	}
	if aerr := knee.Annotate(); aerr != nil && err == nil {
		err = aerr
	}
	fmt.Fprintf(stdout, "\n%s\n", knee.Explanation())
	if err != nil {
		return err
	}
	var dirs []string
	for _, r := range []*runjob.RunResult{knee.PassRun, knee.FailRun} {
		if r != nil {
			dirs = append(dirs, r.Dir)
		}
	}
	if len(dirs) > 0 {
		fmt.Fprintf(stdout, "the runs explained: %s\n", strings.Join(dirs, ", "))
	}
	return j.CheckAnswer(res)
}

// explainKnee follows the server at both ends of the knee's interval,
// printing each run as it ends (knee.ExplainKnee).
func explainKnee(ctx context.Context, j *load.SweepJob, cfg loadgen.Config, res *sweep.Result, pid int,
	sm *serverMetricsFlags, logger *slog.Logger, stdout io.Writer) (*knee.Knee, error) {
	return knee.ExplainKnee(ctx, knee.KneeConfig{
		Load: cfg, Sweep: res, RequestsPerStep: j.RequestsPerStep, Pid: pid, OutDir: j.Out,
		Sections: sessionSections(), Readiness: readinessChecks, Logger: logger,
		ServerMetrics: sm.url, ServerMetricsPeriod: sm.period, Manifest: runManifest(),
		Before: func(side string, try int, s *sweep.Step) {
			what := map[string]string{"pass": "highest level that passed every run", "fail": "lowest level that failed every run"}[side]
			again := ""
			if try > 1 {
				again = fmt.Sprintf(" again (try %d)", try)
			}
			if s.Phase == "follow" {
				// knee.KneeConfig.Moves: no run at the sweep's level
				// reproduced its verdict.
				what = map[string]string{"pass": "next level down", "fail": "next level up"}[side]
				again = fmt.Sprintf(" (try %d: the sweep's level did not reproduce its verdict)", try)
			}
			if side == "pass" && try == 1 {
				fmt.Fprintln(stdout)
			}
			fmt.Fprintf(stdout, "following pid %d at the %s (%s)%s ...\n", pid, what, knee.StepAt(res.Mode, s), again)
		},
		After: func(side string, r *runjob.RunResult, f sweep.FollowedRun) {
			if eerr := exportSpans(ctx, j.OTLP, r); eerr != nil {
				logger.Warn("exporting spans", "err", eerr)
			}
			verdict := "passed"
			if !f.Pass {
				verdict = "FAILED: " + strings.Join(f.Violations, "; ")
			}
			if (side == "pass") != f.Pass {
				verdict += " (the sweep's verdict there was the other: not taken)"
			}
			fmt.Fprintf(stdout, "  %s: %s; %s\n", r.Dir, verdict, knee.StepExplanation(r))
		},
	})
}
