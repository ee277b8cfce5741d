package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/exporter/report"
	runjob "github.com/bpfbench/bpfbench/job/run"
	"github.com/bpfbench/bpfbench/live"
	"github.com/bpfbench/bpfbench/result"
	"github.com/bpfbench/bpfbench/session"

	"github.com/bpfbench/bpfbench/internal/caps"
	"github.com/bpfbench/bpfbench/internal/clock"
)

func init() { register(newAttachCmd) }

func newAttachCmd() *cobra.Command {
	var (
		duration, interval time.Duration
		output             string
		port               int
		cudaLibs           []string
		logs               logFlags
		cpus               *string
		cgroup             string
		noLive             bool
		baseline           string
		walkTarget         float64
	)
	cmd := &cobra.Command{
		Use:   "attach (PID | --cgroup PATH)",
		Short: "Follow a running process: scheduler, IO, network, CUDA and GPU, every interval and at the end",
		Long: `Follows every thread of a process and of the processes below it, including
threads and processes created later; with --cgroup, every process of a cgroup
(a systemd service, a container) and what they fork. Every
interval a compact line per collector; at the end a summary (table), or one
JSON object with --output json. Without --duration it runs until Ctrl-C or
until the target exits, and then prints what it recorded.

With no load generator, it explains the server's own traffic (live): the
server's writes to each connection are grouped into response streams, and
each gap between two writes (and each time to first byte) is walked back
from the send along the critical path, as run walks its reads. Every
interval a "live" line: streams, gaps/s, the server-side ITL and TTFB, the
p99 gap's excess by cause against the server's own recent quiet window (or
--baseline DIR, a recorded run), and the top noisy neighbour; at the end the
critical path and the slowest gaps. --no-live leaves it out (it streams the
server's scheduler events, which costs more). The walk aims at
--live-walk-target percent of a CPU: over it, the gaps below the running p90
(and then those to the lower end of the p99's 95% interval) are walked as a
uniform sample and the cause
totals become estimates with a 95% bound (said in the summary); 0 walks
every gap.`,
		Example: `  bpfbench attach $(pgrep -f vllm) --duration 30s
  bpfbench attach 1234 -o json --cpus 0
  bpfbench attach --cgroup /system.slice/vllm.service --duration 1m`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cgroup != "" {
				if len(args) != 0 {
					return usageError{"give a pid or --cgroup, not both"}
				}
				return nil
			}
			if len(args) != 1 {
				return usageError{"attach needs exactly one pid: bpfbench attach <pid> (find it with pgrep -f <server>), or --cgroup PATH"}
			}
			return nil
		},
		ValidArgsFunction: pidCompletion,
		RunE: func(cmd *cobra.Command, args []string) error {
			pidArg := ""
			if len(args) == 1 {
				pidArg = args[0]
			}
			return runAttach(cmd, pidArg, attachOptions{duration, interval, output, port, cudaLibs, logs, *cpus, cgroup, !noLive, baseline, walkTarget})
		},
	}
	fs := cmd.Flags()
	fs.DurationVar(&duration, "duration", 0, "stop after this long (default: until Ctrl-C or the target exits)")
	fs.DurationVar(&interval, "interval", time.Second, "period of the interval table (table output)")
	outputFlag(cmd, &output)
	fs.IntVar(&port, "port", 0, "restrict TCP to connections on this local port")
	fs.StringArrayVar(&cudaLibs, "cuda-lib", nil, "CUDA library to probe instead of those the target maps (repeatable)")
	fs.StringVar(&cgroup, "cgroup", "", cgroupUsage)
	fs.BoolVar(&noLive, "no-live", false, "leave out the live view of the server's token gaps (the critical path of its own traffic)")
	fs.Float64Var(&walkTarget, "live-walk-target", 100*live.DefaultWalkTarget, "percent of a CPU the live view's walk aims at: over it, the gaps below the running p90 are walked as a uniform sample (estimated totals); 0 walks every gap")
	fs.StringVar(&baseline, "baseline", "", "a recorded run's directory (or result.json): its normal gap is the live view's baseline, instead of the server's quiet window")
	logs.add(fs, "warn", true)
	cpus = cpusFlag(fs)
	return cmd
}

type attachOptions struct {
	duration, interval time.Duration
	output             string
	port               int
	cudaLibs           []string
	logs               logFlags
	cpus               string
	cgroup             string
	live               bool
	baseline           string
	walkTarget         float64 // percent of a CPU (live.Options.WalkTarget)
}

func runAttach(cmd *cobra.Command, pidArg string, o attachOptions) error {
	ctx, stdout, stderr := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	pid, roots, err := attachTarget(pidArg, o, stderr)
	if err != nil {
		return err
	}
	logger, err := o.logs.logger(cmd)
	if err != nil {
		return err
	}
	if err := bpfutil.EnsureFilesystems(); err != nil {
		logger.Warn("preparing kernel file systems", "err", err)
	}
	if err := applyCPUs(o.cpus); err != nil {
		return err
	}
	if o.walkTarget < 0 || o.walkTarget > 100 {
		return usageError{fmt.Sprintf("--live-walk-target %g: a percent of a CPU, 0 to 100 (0 walks every gap)", o.walkTarget)}
	}
	if o.baseline != "" && !o.live {
		return usageError{"--baseline is the live view's: drop --no-live, or --baseline"}
	}
	opts := collectors.Options{Pid: pid, Roots: roots, Port: o.port, CUDALibs: o.cudaLibs, Interval: o.interval, Logger: logger}
	tracker, err := attachTracker(o)
	if err != nil {
		return err
	}
	if tracker != nil {
		opts.Recorder, opts.Live = tracker, true
	}
	sess, err := session.NewSession(opts, sessionSections())
	if err != nil {
		return err
	}
	// The target's involuntary context switches before bpfbench attaches,
	// against which its cost is judged.
	sess.MeasureBefore = 500 * time.Millisecond
	if err := sess.Start(ctx); err != nil {
		return err
	}
	defer sess.Close()
	// Loaded and attached at normal priority (on a saturated machine nice
	// 19 would take seconds of it); from now on attach only observes, and
	// every thread of it yields to the target's.
	if err := bpfutil.NiceProcess(bpfutil.ReaderNice); err != nil {
		logger.Warn("lowering bpfbench's priority", "err", err)
	}
	logger.Info("attached", "pid", pid, "comm", sess.Comm())
	if ds := runningDaemons("/proc"); len(ds) > 0 {
		fmt.Fprintf(stderr, "bpfbench attach: a bpfbench daemon runs on this host (pid %s): attach runs beside it, two readers (each loads its own programs and reads its own ring buffers; the daemon's figures are unchanged)\n",
			strings.Trim(fmt.Sprint(ds), "[]"))
	}

	runErr := runAttached(ctx, sess, tracker, pid, o, stdout, stderr)
	if err := sess.Close(); err != nil {
		logger.Warn("closing", "err", err)
	}
	if err := writeAttachSummary(stdout, sess, tracker, pid, o.output); err != nil {
		return err
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return runErr
	}
	return nil
}

// attachTarget checks attach's options and resolves its target: the pid
// given, or the cgroup's first process and the other roots of its trees.
func attachTarget(pidArg string, o attachOptions, stderr io.Writer) (pid int, roots []int, err error) {
	if o.cgroup != "" {
		if pid, roots, err = resolveCgroup(o.cgroup, stderr); err != nil {
			return 0, nil, err
		}
	} else if pid, err = strconv.Atoi(pidArg); err != nil {
		return 0, nil, usageError{fmt.Sprintf("%q is not a process id: give the numeric pid of the server (find it with pgrep -f <server>)", pidArg)}
	}
	if err := checkOutput(o.output); err != nil {
		return 0, nil, err
	}
	if o.interval <= 0 {
		return 0, nil, usageError{fmt.Sprintf("--interval %v: give a period above 0, e.g. --interval 1s", o.interval)}
	}
	if o.duration < 0 {
		return 0, nil, usageError{fmt.Sprintf("--duration %v: give 0 (until Ctrl-C or the target exits) or more", o.duration)}
	}
	if o.port < 0 || o.port > 65535 {
		return 0, nil, usageError{fmt.Sprintf("--port %d is out of range: use 1-65535", o.port)}
	}
	if _, err := session.CheckPid(pid); err != nil {
		return 0, nil, err
	}
	if !caps.CanTrace() {
		return 0, nil, fmt.Errorf("attaching eBPF probes needs privileges: %s", caps.Hint)
	}
	return pid, roots, nil
}

// maxBound is the widest of the causes' bounds (ms), the gaps' total left
// out.
func maxBound(b map[string]float64) float64 {
	var m float64
	for k, v := range b {
		if k != "gaps" {
			m = max(m, v)
		}
	}
	return m
}

// attachTracker is the live view's tracker (nil with --no-live), its
// baseline the recorded run --baseline names.
func attachTracker(o attachOptions) (*live.Tracker, error) {
	if !o.live {
		return nil, nil
	}
	lo := live.Options{ThreadClock: true, WalkBudget: live.DefaultWalkBudget, WalkTarget: o.walkTarget / 100}
	if o.baseline != "" {
		prior, err := runjob.LoadPrior(o.baseline)
		if err != nil {
			return nil, fmt.Errorf("--baseline: %w", err)
		}
		lo.Baseline, lo.BaselineName, lo.BaselineBand = &prior.Crit, prior.Name(), prior.Band()
	}
	return live.NewTracker(lo), nil
}

// runAttached runs the started session until --duration, Ctrl-C or the
// target's exit (said on stderr), writing the interval lines (table).
func runAttached(ctx context.Context, sess *session.Session, tracker *live.Tracker, pid int, o attachOptions, stdout, stderr io.Writer) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.duration > 0 {
		var c2 context.CancelFunc
		runCtx, c2 = context.WithTimeout(runCtx, o.duration)
		defer c2()
	}
	exitedMsg := ""
	go func() {
		select {
		case <-sess.Exited():
			exitedMsg = fmt.Sprintf("target pid %d (%s) exited", pid, sess.Comm())
			cancel()
		case <-runCtx.Done():
		}
	}()
	var tick func()
	if o.output == "table" {
		fmt.Fprintf(stdout, "attached to pid %d (%s); every %v%s\n", pid, sess.Comm(), o.interval, untilText(o.duration))
		tick = func() { sess.WriteInterval(stdout) }
	}
	if tracker != nil {
		stopAdvance := advanceLive(tracker, o.interval)
		defer stopAdvance()
		table := tick
		tick = func() {
			v := tracker.Interval(clock.Now(), o.interval.Seconds())
			if table != nil {
				table()
				fmt.Fprintln(stdout, v.Line())
			}
		}
	}
	runErr := sess.Run(runCtx, o.interval, tick)
	if exitedMsg != "" {
		fmt.Fprintf(stderr, "bpfbench attach: %s; summary of what was recorded follows\n", exitedMsg)
	}
	return runErr
}

// writeAttachSummary writes what the session recorded: one JSON object,
// or the summary table and the live view's block.
func writeAttachSummary(stdout io.Writer, sess *session.Session, tracker *live.Tracker, pid int, output string) error {
	var lr *live.Result
	if tracker != nil {
		tracker.Finish()
		r := tracker.Result(clock.Now(), threadComm(pid))
		lr = &r
	}
	if output == "json" {
		sum := sess.Summary()
		if lr != nil {
			sum["critical_path"], sum["live"] = lr.CriticalPath, lr.Live
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(sum)
	}
	sess.WriteSummary(stdout)
	if lr != nil {
		writeLive(stdout, lr)
	}
	return nil
}

func untilText(d time.Duration) string {
	if d > 0 {
		return fmt.Sprintf(" for %v", d)
	}
	return "; Ctrl-C to stop"
}

// advanceLive walks the tracker's gaps every quarter of the interval (at
// most every 250 ms), so that its history stays short between the lines.
func advanceLive(t *live.Tracker, interval time.Duration) (stop func()) {
	period := min(interval/4, 250*time.Millisecond)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		// The walk's cost is read on this thread's CPU clock
		// (live.Options.ThreadClock).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tk := time.NewTicker(period)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				t.Advance(clock.Now())
			}
		}
	}()
	return func() { close(done); <-finished }
}

// writeLive is the live view's end-of-session block.
func writeLive(w io.Writer, r *live.Result) {
	l := r.Live
	fmt.Fprintln(w, "LIVE TOKEN GAPS (the server's writes; no load generator)")
	fmt.Fprintf(w, "  %d streams (%d requests seen), %d gaps, %d first bytes", l.Streams, l.Grouping.Requests, l.Gaps, l.FirstBytes)
	if l.ITL != nil {
		fmt.Fprintf(w, "; itl p50 %.1f ms p99 %.1f ms", l.ITL.P50Ms, l.ITL.P99Ms)
	}
	if l.TTFB != nil {
		fmt.Fprintf(w, "; ttfb p50 %.1f ms p99 %.1f ms", l.TTFB.P50Ms, l.TTFB.P99Ms)
	}
	fmt.Fprintln(w)
	if l.Streams == 0 {
		fmt.Fprintln(w, "  no response streams seen: the server wrote nothing on a TCP connection of its own while attached")
		return
	}
	for _, line := range report.CriticalPathLines(r.CriticalPath) {
		fmt.Fprintln(w, "  "+line)
	}
	for i, g := range r.CriticalPath.Slowest {
		if i == 0 || i >= 5 {
			continue // the first is in the lines above
		}
		fmt.Fprintf(w, "  slowest #%d: %s\n", i+1, report.GapLine(g))
	}
	for _, c := range l.Connections[:min(len(l.Connections), 3)] {
		fmt.Fprintf(w, "  connection from port %d: %d gaps, %.0f ms, most %s (%.0f ms)\n", c.Port, c.Gaps, c.GapMs, c.Top, c.CausesMs[c.Top])
	}
	fmt.Fprintf(w, "  the live view's own cost: %.3f CPU-s walking, %.3f s taking %d spans (%.3f s of it in batches, timed whole; their queueing estimated from %d timed, ±%.0f%% of the whole, less the clock's own %d ns each; %.2f%% of a CPU)\n",
		l.Cost.WalkSeconds, l.Cost.RecordSeconds, l.Cost.Records, l.Cost.TakeSeconds, l.Cost.RecordsTimed, 100*l.Cost.RecordSecondsError, l.Cost.RecordClockNs, 100*l.Cost.CPUFraction)
	if l.UnwalkedGaps > 0 {
		slow := ""
		if l.UnwalkedSlowGaps > 0 {
			slow = fmt.Sprintf(" but %d at or above it (overload: the walk at its ceiling, four times its budget; the p99 bands' causes cover their walked gaps)", l.UnwalkedSlowGaps)
		}
		fmt.Fprintf(w, "  (%d gaps, %.0f ms, were not walked: the walk was over its budget of a CPU; they are below the p90%s, in the distributions and not in the causes, whose totals cover the %d walked)\n",
			l.UnwalkedGaps, l.UnwalkedMs, slow, r.CriticalPath.Gaps)
	}
	if sm := l.Sampling; sm != nil {
		exact := "the p99 bands and slowest gaps exact"
		if n := bandUnwalked(r.CriticalPath); n > 0 {
			exact = fmt.Sprintf("the slowest gaps exact, the p99 bands' causes of their walked gaps (%d came below the p99's interval and were left out with the sample)", n)
		}
		fmt.Fprintf(w, "  (estimated: below the p90 the gaps were walked 1 in %d (up to 1 in %d), from the p90 to the p%.1f (the lower end of the running p99's 95%% interval) 1 in %d (up to %d), to keep the walk near %.2f%% of a CPU; %d gaps, %.0f ms, left out, %d walked for them; the cause totals are within ±%.0f ms of every gap's (95%%), %s)\n",
			sm.Stride, sm.StrideMax, 100*sm.ExactFrom[1], sm.StrideP90, sm.StrideP90Max, 100*sm.TargetCPU, sm.Out, sm.OutMs, sm.Walked, maxBound(sm.BoundsMs), exact)
	}
	if l.BandSampled {
		fmt.Fprintln(w, "  (the p99 bands are of a uniform sample: "+l.Accuracy+")")
		if b := l.ITLP99BoundsMs; b != nil {
			fmt.Fprintf(w, "  (the sampled p99 gap lies in %.2f-%.2f ms, 95%%)\n", b[0], b[1])
		}
	}
}

// bandUnwalked is the p99 bands' gaps the walk left out.
func bandUnwalked(cp *result.CriticalPath) int {
	n := 0
	if cp != nil {
		for _, b := range []*result.CriticalBand{cp.ITLP99, cp.TTFTP99} {
			if b != nil {
				n += b.Unwalked
			}
		}
	}
	return n
}

// threadComm names a thread from /proc (the engine knows only the
// comms of holders and wakers), "" once it has gone.
func threadComm(pid int) func(uint32) string {
	return func(tid uint32) string {
		for _, p := range []string{fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid), fmt.Sprintf("/proc/%d/comm", tid)} {
			if b, err := os.ReadFile(p); err == nil {
				return strings.TrimSpace(string(b))
			}
		}
		return ""
	}
}

// runningDaemons is the pids of the `bpfbench daemon` processes under proc
// (a program named bpfbench* with a "daemon" argument), this one aside.
func runningDaemons(proc string) []int {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(proc, e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if !strings.HasPrefix(filepath.Base(args[0]), "bpfbench") || !slices.Contains(args[1:], "daemon") {
			continue
		}
		out = append(out, pid)
	}
	return out
}
