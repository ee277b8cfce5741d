// Package demo is the job of `bpfbench demo`: validate's phased scenario,
// a fixed list of injections, on the simulated server (llmsim/launch).
package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/job/run"
	"github.com/bpfbench/bpfbench/job/validate"
	"github.com/bpfbench/bpfbench/llmsim/launch"
	"github.com/bpfbench/bpfbench/result"

	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/internal/manifest"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/dataset"
	"github.com/bpfbench/bpfbench/perturb"
	"github.com/bpfbench/bpfbench/readiness"
	"github.com/bpfbench/bpfbench/session"
)

// The demo's settings: the simulated server's slowed-down GPU step (from
// launch.DemoKernelUS) and how long its slow-reading clients stop reading.
const (
	DemoSlowKernelUS = 20000
	DemoSlowPause    = 4 * time.Second
)

// DemoPhases are the demo's phases, in order.
var DemoPhases = []string{"baseline", "cpu contention", "disk contention", "gpu slowdown", "slow-reading client"}

// demoSettles counts the settling periods: after the cpu, disk and gpu
// phases.
const demoSettles = 3

// DemoRequests is the number of requests the demo sends at rate over
// phases of length phase, settling included.
func DemoRequests(rate float64, phase time.Duration) int {
	total := time.Duration(len(DemoPhases))*phase + demoSettles*validate.Settle(phase)
	return int(math.Ceil(rate * total.Seconds()))
}

// DemoSlowReaders are the requests of the last phase that read slowly: a
// quarter and half way into it, at rate over phases of length phase.
func DemoSlowReaders(rate float64, phase time.Duration) []int {
	start := time.Duration(len(DemoPhases)-1)*phase + demoSettles*validate.Settle(phase)
	at := func(d time.Duration) int { return int(math.Floor(rate*(start+d).Seconds() + 1e-6)) }
	return []int{at(phase / 4), at(phase / 2)}
}

// DemoConfig configures the demo: the whole job on the simulated server.
type DemoConfig struct {
	// Load is the base load (endpoint, model, timeouts, headers, output
	// length, percentiles, ...); the demo sets its target, rate, arrivals
	// and requests.
	Load loadgen.Config
	// Sim is the running simulated server (launch.StartSim).
	Sim *launch.Sim
	// ServerCPUs are the CPUs the server runs on (nil: not pinned); the
	// cpu phase's busy threads run there, every other injection and
	// bpfbench elsewhere.
	ServerCPUs []int
	// OutDir receives result.json, trace.json and report.html.
	OutDir string
	// Phase is the length of each phase; Rate the fixed request rate.
	Phase time.Duration
	Rate  float64
	// Sections, Readiness and Logger are those of RunConfig.
	Sections  []session.SectionFactory
	Readiness func() []readiness.Check
	Logger    *slog.Logger
	// Manifest is RunConfig's.
	Manifest manifest.Options
}

// DemoPerPhase is the number of requests in each phase.
func DemoPerPhase(rate float64, phase time.Duration) int { return int(rate * phase.Seconds()) }

// CheckDemo says what is wrong with a demo's phase length and rate.
func CheckDemo(rate float64, phase time.Duration) error {
	if phase < 2*time.Second || rate <= 0 {
		return errors.New("--phase must be at least 2s and --rate positive")
	}
	if n := DemoPerPhase(rate, phase); n < 4 {
		return fmt.Errorf("%v phases at %g req/s make %d requests a phase; give at least 4 (a longer --phase or a higher --rate)", phase, rate, n)
	}
	return nil
}

// DemoCauses are the causes each phase of the demo injects, the critical
// path's names (the baseline injects none).
var DemoCauses = map[string]string{
	"cpu contention": "cpu_runqueue", "disk contention": "io_block",
	"gpu slowdown": "gpu_sync", "slow-reading client": "net_backpressure",
}

// DemoResult is a demo's run and what each phase injected.
type DemoResult struct {
	*run.RunResult
	// Injected says, per phase after the baseline, what its injection
	// achieved and what the critical path named.
	Injected []string
	// Named counts the phases whose critical-path top cause is the one
	// injected; Weak those whose injection achieved too little to judge.
	Named, Weak int
}

// Demo drives the simulated server through its phases (a baseline, CPU
// contention, disk contention, a GPU slowdown, a slow-reading client)
// while the collectors follow it, and returns the run with what each phase
// injected, achieved and was named.
func Demo(ctx context.Context, cfg DemoConfig) (*DemoResult, error) {
	if cfg.Sim == nil {
		return nil, errors.New("the demo needs a running simulated server")
	}
	cfg.Rate = validate.PhaseRate(cfg.Rate)
	if err := CheckDemo(cfg.Rate, cfg.Phase); err != nil {
		return nil, err
	}
	n := DemoRequests(cfg.Rate, cfg.Phase)
	outLen := cfg.Load.Scenario.Dataset.OutputLen
	if outLen <= 0 {
		outLen = 64
	}
	reqs, err := dataset.Load(dataset.Config{Name: dataset.Random, InputLen: 64, OutputLen: outLen}, n, 1)
	if err != nil {
		return nil, err
	}
	slow := DemoSlowReaders(cfg.Rate, cfg.Phase)
	for i := range reqs {
		reqs[i].OffsetNs = -1
	}
	for _, i := range slow {
		reqs[i].OutputLen = max(200, 3*outLen)
		reqs[i].SlowRead = DemoSlowPause
	}
	lc := cfg.Load
	lc.Target.URL = cfg.Sim.URL
	lc.Scenario.Rate = cfg.Rate
	lc.Scenario.Constant = true
	lc.Scenario.Requests = reqs
	lc.Scenario.NumRequests = n
	lc.Scenario.Duration = 0
	lc.Target.IgnoreEOS = true
	if lc.Target.Timeout == 0 || lc.Target.Timeout > 10*time.Minute {
		lc.Target.Timeout = 2 * time.Minute
	}

	validate.FlushDirty(ctx, cfg.Logger)
	depth, calNote := validate.CalibrateIO(ctx, cfg.Sim.IOFile)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	var injErr error
	sc := validate.NewScenario(cfg.Phase, DemoPhases[0], demoInjections(cfg, depth, calNote, &injErr))
	res, err := run.Run(ctx, run.RunConfig{Load: lc, Pid: cfg.Sim.Pid(), OutDir: cfg.OutDir, Phases: sc.Run,
		Sections: cfg.Sections, Readiness: cfg.Readiness, Logger: cfg.Logger, Manifest: cfg.Manifest})
	if res == nil {
		return nil, err
	}
	achieved := append([]string{""}, sc.Achieved()...)
	achieved[4] = slowReaders(res, slow)
	out := &DemoResult{RunResult: res}
	if res.Doc != nil {
		out.Named, out.Weak = judgePhases(res.Doc, achieved, DemoCauses, sc.WritebackMiB)
		res.Doc.Diagnosis = report.Diagnose(res.Doc)
		if _, werr := run.WriteRunDir(cfg.OutDir, res.Doc); werr != nil && err == nil {
			err = werr
		}
		for _, p := range res.Doc.Phases[1:] {
			out.Injected = append(out.Injected, p.Name+": "+p.Injection+"; "+p.Verdict)
		}
	}
	if injErr == nil {
		injErr = sc.Err()
	}
	if err == nil && injErr != nil {
		err = fmt.Errorf("an injection failed: %w", injErr)
	}
	return out, err
}

// demoInjections are the demo's phases after the baseline, as
// validate's injections: CPU contention on the server's CPUs, O_DIRECT
// reads of depth on the simulator's file, its GPU kernel slowed, and the
// slow-reading clients (DemoSlowReaders, set on the requests). A failed
// injection is in *injErr.
func demoInjections(cfg DemoConfig, depth int, calNote string, injErr *error) []validate.Injection {
	while := func(fn func(context.Context) string) func(context.Context) (func() string, error) {
		return func(ctx context.Context) (func() string, error) { return validate.During(ctx, fn), nil }
	}
	cpu := func(c context.Context) string {
		p := perturb.CPU{CPUs: cfg.ServerCPUs}
		if err := p.Validate(); err != nil {
			*injErr = err
			return "failed: " + err.Error()
		}
		p.Threads = 2 * len(p.CPUs)
		r, err := p.RunProcess(c)
		if err != nil {
			*injErr = err
			return "failed: " + err.Error()
		}
		return fmt.Sprintf("%d busy threads on the server's CPUs %v burnt %.1f CPU-s (%.0f%% of a CPU each)", r.Threads, r.CPUs, r.CPUSeconds, r.Share*100)
	}
	disk := func(c context.Context) string {
		r, err := perturb.IO{Path: cfg.Sim.IOFile, BlockSize: validate.IOBlock, Depth: depth}.RunProcess(c)
		if err != nil {
			*injErr = err
			return "failed: " + err.Error()
		}
		return fmt.Sprintf("%.0f O_DIRECT reads/s of 1 MiB, %d in flight, %.1f ms each (%s)", r.IOPS, depth, r.MeanLatency*1e3, calNote)
	}
	gpu := func(context.Context) (func() string, error) {
		if err := cfg.Sim.SetGPUKernel(DemoSlowKernelUS); err != nil {
			*injErr = err
		}
		return func() string {
			_ = cfg.Sim.SetGPUKernel(launch.DemoKernelUS)
			return fmt.Sprintf("the CUDA stub's step kernel from %d to %d µs", launch.DemoKernelUS, DemoSlowKernelUS)
		}, nil
	}
	return []validate.Injection{
		{Name: DemoPhases[1], Cause: DemoCauses[DemoPhases[1]], Start: while(cpu)},
		{Name: DemoPhases[2], Cause: DemoCauses[DemoPhases[2]], Start: while(disk)},
		{Name: DemoPhases[3], Cause: DemoCauses[DemoPhases[3]], Start: gpu},
		{Name: DemoPhases[4], Cause: DemoCauses[DemoPhases[4]], SlowRead: DemoSlowPause},
	}
}

// slowReaders says how long the slow-reading requests actually stopped
// reading.
func slowReaders(res *run.RunResult, slow []int) string {
	var parts []string
	for _, i := range slow {
		for k := range res.Load.Records {
			r := &res.Load.Records[k]
			if r.Index != i {
				continue
			}
			if r.PausedNs == nil {
				parts = append(parts, fmt.Sprintf("request %d never paused", i))
			} else {
				parts = append(parts, fmt.Sprintf("request %d stopped reading for %.2f s", i, float64(r.PausedNs[1]-r.PausedNs[0])/1e9))
			}
		}
	}
	if len(parts) == 0 {
		return "the slow-reading requests did not run"
	}
	return strings.Join(parts, ", ") + " after its first token"
}

// judgePhases sets each phase's injection (achieved[i]), expected cause
// and verdict: the critical path's top cause of what the phase added to
// its slowest 10% of gaps, with its share, or "injection too weak" when
// the phase added less than MinAddedMs of the normal gap. It returns the
// phases named correctly and those too weak to judge. writeback is the
// host's page-cache writeback during a phase (Scenario.WritebackMiB),
// noted in its verdict.
func judgePhases(doc *result.Document, achieved []string, want map[string]string, writeback func(string) (float64, bool)) (named, weak int) {
	cp := doc.CriticalPath
	if cp == nil {
		return 0, 0
	}
	minAdded := validate.MinAddedMs(validate.SumMs(cp.NormalITLMs))
	for i := range doc.Phases {
		p := &doc.Phases[i]
		if i < len(achieved) {
			p.Injection = achieved[i]
		}
		p.Expected = want[p.Name]
		if i == 0 || p.Expected == "" || i >= len(cp.Phases) || cp.Phases[i].Name != p.Name {
			continue
		}
		c := cp.Phases[i]
		switch {
		case c.TailAddedMs < minAdded:
			p.Weak = true
			weak++
			p.Verdict = fmt.Sprintf("injection too weak: its slowest gaps took %.1f ms more than the baseline's (under %.1f ms), so no cause is named", c.TailAddedMs, minAdded)
		case c.TailTop == p.Expected:
			named++
			p.Verdict = fmt.Sprintf("the critical path names %s, %.0f%% of the %.1f ms its slowest gaps added", c.TailTop, 100*c.TailAddedShares[c.TailTop], c.TailAddedMs)
		default:
			p.Verdict = fmt.Sprintf("the critical path names %s, %.0f%% of the %.1f ms its slowest gaps added (%s injected: %.0f%%)", c.TailTop, 100*c.TailAddedShares[c.TailTop], c.TailAddedMs, p.Expected, 100*c.TailAddedShares[p.Expected])
		}
		if c.TailStealMs >= 0.05 {
			p.Verdict += fmt.Sprintf("; the hypervisor's steal, %.1f ms more, is left out", c.TailStealMs)
		}
		if mib, ok := writeback(p.Name); ok {
			if note := validate.WritebackNote(mib); note != "" {
				p.Verdict += "; " + note + ": its truth is not the injection alone"
			}
		}
	}
	return named, weak
}
