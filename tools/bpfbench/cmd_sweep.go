package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/job"
	"github.com/bpfbench/bpfbench/session"

	"github.com/bpfbench/bpfbench/exporter/otlp"
	"github.com/bpfbench/bpfbench/internal/caps"
	"github.com/bpfbench/bpfbench/job/load"
	"github.com/bpfbench/bpfbench/loadgen"
)

func init() {
	register("sweep", command{
		summary: "find the highest request rate (or concurrency) a server sustains within latency SLOs; with --pid, explain what breaks them",
		run:     runSweep,
	})
}

// cutFlag removes --name VALUE (or --name=VALUE, one dash or two) from
// args and returns its value.
func cutFlag(args []string, name string) (rest []string, value string, found bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		n := strings.TrimLeft(a, "-")
		if !strings.HasPrefix(a, "-") || (n != name && !strings.HasPrefix(n, name+"=")) {
			rest = append(rest, a)
			continue
		}
		found = true
		if v, ok := strings.CutPrefix(n, name+"="); ok {
			value = v
		} else if i+1 < len(args) {
			value = args[i+1]
			i++
		}
	}
	return rest, value, found
}

// runSweep is `bpfbench sweep`: without --pid exactly the load generator's
// SLO search; with --pid it then runs the highest passing and the first
// failing step again while following the server and says what breaks the
// SLO there.
func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	rest, pidText, withPid := cutFlag(args, "pid")
	if !withPid {
		return load.RunSweep(ctx, args, stdout, stderr)
	}
	rest, kneeDir, _ := cutFlag(rest, "knee-out")
	if kneeDir == "" {
		kneeDir = "bpfbench-sweep"
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil {
		return usageError{fmt.Sprintf("--pid %q is not a process id", pidText)}
	}
	if _, err := session.CheckPid(pid); err != nil {
		return err
	}
	if !caps.CanTrace() {
		return fmt.Errorf("explaining the knee follows the server with eBPF: %s", caps.Hint)
	}
	// The load flags, to run the two steps again; the sweep's own flags
	// are parsed by the sweep.
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg := loadgen.DefaultConfig()
	cfg.RegisterFlags(fs)
	var oo otlp.Options
	oo.RegisterFlags(fs)
	out := fs.String("out", "", "")
	perStep := fs.Int("requests-per-step", 200, "")
	fs.Bool("no-progress", false, "")
	for _, name := range []string{"slo", "mode", "precision", "step", "max-rate", "max-search-concurrency"} {
		fs.String(name, "", "")
	}
	if err := fs.Parse(rest); err != nil {
		return load.RunSweep(ctx, rest, stdout, stderr) // let the sweep say what is wrong
	}
	stepsFile := *out
	if stepsFile == "" {
		f, err := os.CreateTemp("", "bpfbench-sweep-*.json")
		if err != nil {
			return err
		}
		f.Close()
		defer os.Remove(f.Name())
		stepsFile = f.Name()
		rest = append(rest, "--out", stepsFile)
	}
	if err := load.RunSweep(ctx, rest, stdout, stderr); err != nil {
		return err
	}
	b, err := os.ReadFile(stepsFile)
	if err != nil {
		return err
	}
	var res loadgen.SweepResult
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("reading the sweep's steps: %w", err)
	}
	pass, fail := knee(&res)
	if fail == nil {
		fmt.Fprintln(stdout, "every step met the SLOs: no knee to explain")
		return nil
	}
	logger, _ := newLogger(stderr, "warn", "text")
	if err := bpfutil.EnsureFilesystems(); err != nil {
		logger.Warn("preparing kernel file systems", "err", err)
	}
	runStep := func(s *loadgen.SweepStep, name string, baseITL, baseTTFT float64) (*job.RunResult, error) {
		c := cfg
		c.NumRequests = *perStep
		c.Duration = 0
		c.Rate = s.Rate
		if s.Rate == 0 {
			c.Rate = cfg.Rate
		}
		if s.Concurrency > 0 {
			c.MaxConcurrency = s.Concurrency
		}
		rc := job.RunConfig{Load: c, Pid: pid, OutDir: filepath.Join(kneeDir, name), Logger: logger,
			Sections: sessionSections(), Readiness: readinessChecks}
		rc.BaselineITL = msDuration(baseITL)
		rc.BaselineTTFT = msDuration(baseTTFT)
		return job.Run(ctx, rc)
	}
	at := func(s *loadgen.SweepStep) string {
		if s.Concurrency > 0 && res.Mode == loadgen.SweepConcurrency {
			return fmt.Sprintf("%d requests in flight", s.Concurrency)
		}
		return fmt.Sprintf("%.3g req/s", s.Rate)
	}
	var baseITL, baseTTFT float64
	if pass != nil {
		fmt.Fprintf(stdout, "\nfollowing pid %d at the highest passing step (%s) ...\n", pid, at(pass))
		pr, err := runStep(pass, "pass", 0, 0)
		if pr == nil {
			return err
		}
		baseITL, baseTTFT = pr.Doc.Attribution.BaselineITLMs, pr.Doc.Attribution.BaselineTTFTMs
		explain(stdout, "passing", pr)
	}
	fmt.Fprintf(stdout, "following pid %d at the first failing step (%s) ...\n", pid, at(fail))
	fr, err := runStep(fail, "fail", baseITL, baseTTFT)
	if fr == nil {
		return err
	}
	explain(stdout, "failing", fr)
	cause, share, ttft := kneeCause(fr, fail)
	fmt.Fprintf(stdout, "\nthe SLO breaks at %s, and what breaks it is %s (%.0f%% of the p99 %s excess)\n",
		at(fail), describeCause(cause, fr), share*100, map[bool]string{true: "TTFT", false: "ITL"}[ttft])
	fmt.Fprintf(stdout, "runs written to %s/{pass,fail}\n", kneeDir)
	return err
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * 1e6) }

// knee returns the highest passing step and the lowest failing step above it.
func knee(r *loadgen.SweepResult) (pass, fail *loadgen.SweepStep) {
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
func kneeCause(r *job.RunResult, s *loadgen.SweepStep) (string, float64, bool) {
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

// describeCause says the cause in words, naming the server's threads that
// waited most for a CPU when it is cpu_runqueue.
func describeCause(cause string, r *job.RunResult) string {
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

func topRunqueueThreads(r *job.RunResult) string {
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
	sort.Slice(list, func(i, j int) bool { return list[i].v > list[j].v })
	if len(list) == 0 || total == 0 {
		return ""
	}
	names := list[0].k
	if len(list) > 1 && list[1].v > 0.3*total {
		names += " and " + list[1].k
	}
	return names
}

// explain prints one step's p99 attribution.
func explain(w io.Writer, what string, r *job.RunResult) {
	a := r.Doc.Attribution
	if a == nil {
		return
	}
	fmt.Fprintf(w, "  %s step: p99 ITL %s, TTFT %s\n", what, shareText(a.ITL["p99"]), shareText(a.TTFT))
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
