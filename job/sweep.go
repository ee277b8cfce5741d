package job

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/internal/manifest"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/readiness"
	"github.com/bpfbench/bpfbench/session"
)

// KneeConfig configures `sweep --pid`: the highest passing and the first
// failing step of a finished sweep are run again while the collectors
// follow the server, and the attribution of the failing one says what
// breaks the SLO.
type KneeConfig struct {
	// Load is the sweep's load; each step's rate or concurrency replaces
	// its own, and RequestsPerStep its count.
	Load            loadgen.Config
	Sweep           *loadgen.SweepResult
	RequestsPerStep int
	Pid             int
	// OutDir receives the two runs, OutDir/pass and OutDir/fail.
	OutDir    string
	Sections  []session.SectionFactory
	Readiness func() []readiness.Check
	Logger    *slog.Logger
	// Manifest is RunConfig's.
	Manifest manifest.Options
	// ServerMetrics and ServerMetricsPeriod are RunConfig's.
	ServerMetrics       string
	ServerMetricsPeriod time.Duration
	// Before, when set, is called before each step is run again ("pass"
	// or "fail"); After with its run.
	Before func(side string, step *loadgen.SweepStep)
	After  func(side string, run *RunResult)
}

// Knee is the explained knee of a sweep.
type Knee struct {
	Mode       string
	Pass, Fail *loadgen.SweepStep
	// PassRun and FailRun are the two runs; PassRun is nil when no step
	// passed, and both are nil when every step passed.
	PassRun, FailRun *RunResult
	// Cause is the top cause of the broken objective's excess in the
	// failing run, Share its share, TTFT whether the objective is TTFT
	// (else the p99 ITL).
	Cause string
	Share float64
	TTFT  bool
}

// ExplainKnee runs the two steps around the knee of cfg.Sweep under the
// collectors. With no failing step it returns a Knee with no runs.
func ExplainKnee(ctx context.Context, cfg KneeConfig) (*Knee, error) {
	k := &Knee{Mode: cfg.Sweep.Mode}
	k.Pass, k.Fail = kneeSteps(cfg.Sweep)
	if k.Fail == nil {
		return k, nil
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	runStep := func(s *loadgen.SweepStep, side string, baseITL, baseTTFT float64) (*RunResult, error) {
		if cfg.Before != nil {
			cfg.Before(side, s)
		}
		c := cfg.Load
		if cfg.RequestsPerStep > 0 {
			c.NumRequests = cfg.RequestsPerStep
		}
		c.Duration = 0
		if s.Rate != 0 {
			c.Rate = s.Rate
		}
		if s.Concurrency > 0 {
			c.MaxConcurrency = s.Concurrency
		}
		r, err := Run(ctx, RunConfig{Load: c, Pid: cfg.Pid, OutDir: filepath.Join(cfg.OutDir, side), Logger: cfg.Logger,
			Sections: cfg.Sections, Readiness: cfg.Readiness,
			ServerMetrics: cfg.ServerMetrics, ServerMetricsPeriod: cfg.ServerMetricsPeriod, Manifest: cfg.Manifest,
			BaselineITL: msDuration(baseITL), BaselineTTFT: msDuration(baseTTFT)})
		if r != nil && cfg.After != nil {
			cfg.After(side, r)
		}
		return r, err
	}
	var baseITL, baseTTFT float64
	if k.Pass != nil {
		pr, err := runStep(k.Pass, "pass", 0, 0)
		if pr == nil {
			return k, err
		}
		k.PassRun = pr
		if a := pr.Doc.Attribution; a != nil {
			baseITL, baseTTFT = a.BaselineITLMs, a.BaselineTTFTMs
		}
	}
	fr, err := runStep(k.Fail, "fail", baseITL, baseTTFT)
	if fr == nil {
		return k, err
	}
	k.FailRun = fr
	k.Cause, k.Share, k.TTFT = kneeCause(fr, k.Fail)
	return k, err
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * 1e6) }

// kneeSteps returns the highest passing step and the lowest failing step
// above it.
func kneeSteps(r *loadgen.SweepResult) (pass, fail *loadgen.SweepStep) {
	pass = r.Best
	level := func(s *loadgen.SweepStep) float64 {
		if r.Mode == loadgen.SweepConcurrency {
			return float64(s.Concurrency)
		}
		return s.Rate
	}
	steps := append([]*loadgen.SweepStep(nil), r.Steps...)
	sort.Slice(steps, func(i, j int) bool { return level(steps[i]) < level(steps[j]) })
	for _, s := range steps {
		if s.Pass || s.Phase == "probe" && r.Mode == loadgen.SweepRate {
			continue
		}
		if pass == nil || level(s) > level(pass) {
			return pass, s
		}
	}
	return pass, nil
}

// kneeCause picks the broken objective's attribution: TTFT when a TTFT
// SLO failed, the p99 ITL band otherwise.
func kneeCause(r *RunResult, s *loadgen.SweepStep) (string, float64, bool) {
	a := r.Doc.Attribution
	if a == nil {
		return "unexplained", 0, false
	}
	b := a.ITL["p99"]
	ttft := false
	for _, v := range s.Violations {
		if strings.Contains(v, "ttft") {
			b, ttft = a.TTFT, true
			break
		}
	}
	best, bestV := "unexplained", -1.0
	for _, c := range correlate.CauseNames() {
		if b[c] > bestV {
			best, bestV = c, b[c]
		}
	}
	return best, bestV, ttft
}

// StepAt says where a step of a sweep in mode is: its rate, or its
// concurrency in a concurrency sweep.
func StepAt(mode string, s *loadgen.SweepStep) string {
	if s.Concurrency > 0 && mode == loadgen.SweepConcurrency {
		return fmt.Sprintf("%d requests in flight", s.Concurrency)
	}
	return fmt.Sprintf("%.3g req/s", s.Rate)
}

// At says where a step of this knee's sweep is.
func (k *Knee) At(s *loadgen.SweepStep) string { return StepAt(k.Mode, s) }

// Explanation is the knee in one sentence: "the SLO breaks at 14 req/s,
// and what breaks it is run-queue wait on the tokenizer threads (..)".
func (k *Knee) Explanation() string {
	if k.Fail == nil {
		return "every step met the SLOs: no knee to explain"
	}
	if k.FailRun == nil {
		return fmt.Sprintf("the SLO breaks at %s; the run to explain it did not finish", k.At(k.Fail))
	}
	what := "ITL"
	if k.TTFT {
		what = "TTFT"
	}
	return fmt.Sprintf("the SLO breaks at %s, and what breaks it is %s (%.0f%% of the p99 %s excess)",
		k.At(k.Fail), DescribeCause(k.Cause, k.FailRun), k.Share*100, what)
}

// DescribeCause says the cause in words, naming the server's threads that
// waited most for a CPU when it is cpu_runqueue.
func DescribeCause(cause string, r *RunResult) string {
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
	}
	return "nothing bpfbench sees (unexplained)"
}

func topRunqueueThreads(r *RunResult) string {
	raw, ok := r.Doc.Collectors["sched"]
	if !ok {
		return ""
	}
	var s struct {
		Threads []struct {
			Comm     string  `json:"comm"`
			Runqueue float64 `json:"runqueue_seconds"`
		} `json:"threads"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	by := map[string]float64{}
	var total float64
	for _, t := range s.Threads {
		by[t.Comm] += t.Runqueue
		total += t.Runqueue
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
func StepExplanation(r *RunResult) string {
	a := r.Doc.Attribution
	if a == nil {
		return "no attribution"
	}
	return fmt.Sprintf("p99 ITL %s, TTFT %s", shareText(a.ITL["p99"]), shareText(a.TTFT))
}

func shareText(b correlate.Breakdown) string {
	var parts []string
	for _, c := range correlate.CauseNames() {
		if b[c] >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", c, b[c]*100))
		}
	}
	if len(parts) == 0 {
		return "no excess"
	}
	return strings.Join(parts, ", ")
}
