package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/job"

	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/internal/caps"
	"github.com/bpfbench/bpfbench/job/load"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/perturb"
)

func init() {
	register("demo", command{
		summary: "run the whole job on the built-in simulated server: phased contention, attribution per phase",
		run:     runDemo,
	})
}

// demoSlowPause is how long the demo's slow-reading clients stop reading.
const demoSlowPause = 4 * time.Second

// demoSlowReaders are the requests of the last phase that read slowly:
// a quarter and half way into it, perPhase requests a phase.
func demoSlowReaders(perPhase int) []int {
	return []int{4*perPhase + perPhase/4, 4*perPhase + perPhase/2}
}

// demo settings: the simulated server's GPU step and its slowed-down one.
const (
	demoKernelUS     = 2000
	demoSlowKernelUS = 9000
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", stderr, "demo [--out DIR] [--phase 10s] [--rate 4]")
	out := fs.String("out", "bpfbench-demo", "run directory (result.json, trace.json, report.html)")
	phase := fs.Duration("phase", 10*time.Second, "length of each phase")
	rate := fs.Float64("rate", 4, "requests per second")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *phase < 2*time.Second || *rate <= 0 {
		return usageError{"--phase must be at least 2s and --rate positive"}
	}
	perPhase := int(*rate * phase.Seconds())
	if perPhase < 4 {
		return usageError{fmt.Sprintf("%v phases at %g req/s make %d requests a phase; give at least 4 (a longer --phase or a higher --rate)", *phase, *rate, perPhase)}
	}
	if !caps.CanTrace() {
		return fmt.Errorf("the demo follows the simulated server with eBPF: %s", caps.Hint)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("cannot create --out %s: %w", *out, err)
	}
	logger, _ := newLogger(stderr, "warn", "text")
	if err := bpfutil.EnsureFilesystems(); err != nil {
		logger.Warn("preparing kernel file systems", "err", err)
	}
	simLog, err := os.Create(filepath.Join(*out, "llmsim.log"))
	if err != nil {
		return fmt.Errorf("cannot write to --out %s: %w", *out, err)
	}
	defer simLog.Close()
	sim, err := startSim(ctx, *out, simLog)
	if err != nil {
		return err
	}
	defer sim.stop()
	defer os.Remove(sim.ioFile)

	names := []string{"baseline", "cpu contention", "disk contention", "gpu slowdown", "slow-reading client"}
	n := perPhase * len(names)
	reqs, err := loadgen.LoadDataset(loadgen.DatasetConfig{Name: loadgen.DatasetRandom, InputLen: 64, OutputLen: 64}, n, 1)
	if err != nil {
		return err
	}
	slow := demoSlowReaders(perPhase)
	for i := range reqs {
		reqs[i].OffsetNs = -1
	}
	for _, i := range slow {
		reqs[i].OutputLen = 200
		reqs[i].SlowRead = demoSlowPause
	}

	cfg := loadgen.DefaultConfig()
	cfg.Target = sim.url
	cfg.Rate = *rate
	cfg.Constant = true
	cfg.Requests = reqs
	cfg.NumRequests = n
	cfg.IgnoreEOS = true
	cfg.Timeout = 2 * time.Minute
	var finish func()
	cfg.Progress, finish = load.Progress(stderr)

	fmt.Fprintf(stdout, "bpfbench demo: llmsim (pid %d) at %s with the CUDA stub; %d phases of %v at %.0f req/s\n",
		sim.cmd.Process.Pid, sim.url, len(names), *phase, *rate)
	var reports []string
	scenario := func(ctx context.Context, marks *job.PhaseMarks) {
		wait := func() bool {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(*phase):
				return true
			}
		}
		during := func(fn func(context.Context) string) bool {
			pctx, cancel := context.WithCancel(ctx)
			done := make(chan string, 1)
			go func() { done <- fn(pctx) }()
			ok := wait()
			cancel()
			reports = append(reports, <-done)
			return ok
		}
		marks.Begin(names[0])
		if !wait() {
			return
		}
		marks.Begin(names[1])
		if !during(func(c context.Context) string {
			r, err := perturb.CPU{Threads: 2 * runtime.NumCPU()}.RunProcess(c)
			if err != nil {
				return "cpu: " + err.Error()
			}
			return fmt.Sprintf("cpu contention: %d busy threads burnt %.1f CPU-s", r.Threads, r.CPUSeconds)
		}) {
			return
		}
		marks.Begin(names[2])
		if !during(func(c context.Context) string {
			r, err := perturb.IO{Path: sim.ioFile, BlockSize: 1 << 20, Depth: 8}.Run(c)
			if err != nil {
				return "disk: " + err.Error()
			}
			return fmt.Sprintf("disk contention: %.0f O_DIRECT reads/s of 1 MiB, %.1f ms each", r.IOPS, r.MeanLatency*1e3)
		}) {
			return
		}
		marks.Begin(names[3])
		_ = sim.setGPUKernel(demoSlowKernelUS)
		reports = append(reports, fmt.Sprintf("gpu slowdown: the stub's step kernel from %d to %d µs", demoKernelUS, demoSlowKernelUS))
		ok := wait()
		_ = sim.setGPUKernel(demoKernelUS)
		if !ok {
			return
		}
		marks.Begin(names[4])
		reports = append(reports, fmt.Sprintf("slow-reading client: requests %v stop reading for %v after their first token", slow, demoSlowPause))
	}
	res, err := job.Run(ctx, job.RunConfig{
		Load: cfg, Pid: sim.cmd.Process.Pid, OutDir: *out, Logger: logger,
		Sections: sessionSections(), Phases: scenario, Readiness: readinessChecks,
	})
	finish()
	if res == nil {
		return err
	}
	fmt.Fprintln(stdout, "\nWhat each phase injected:")
	for _, r := range reports {
		fmt.Fprintln(stdout, "  - "+r)
	}
	fmt.Fprintln(stdout)
	report.WriteTerminal(stdout, res.Doc)
	fmt.Fprintf(stdout, "\nwrote %s/{result.json,trace.json,report.html}; open report.html in a browser, trace.json in ui.perfetto.dev\n", *out)
	return err
}
