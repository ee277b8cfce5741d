package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/session"

	"github.com/bpfbench/bpfbench/internal/caps"
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
	)
	cmd := &cobra.Command{
		Use:   "attach (PID | --cgroup PATH)",
		Short: "Follow a running process: scheduler, IO, network, CUDA and GPU, every interval and at the end",
		Long: `Follows every thread of a process and of the processes below it, including
threads and processes created later; with --cgroup, every process of a cgroup
(a systemd service, a container) and what they fork. Every
interval a compact line per collector; at the end a summary (table), or one
JSON object with --output json. Without --duration it runs until Ctrl-C or
until the target exits, and then prints what it recorded.`,
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
			return runAttach(cmd, pidArg, attachOptions{duration, interval, output, port, cudaLibs, logs, *cpus, cgroup})
		},
	}
	fs := cmd.Flags()
	fs.DurationVar(&duration, "duration", 0, "stop after this long (default: until Ctrl-C or the target exits)")
	fs.DurationVar(&interval, "interval", time.Second, "period of the interval table (table output)")
	outputFlag(cmd, &output)
	fs.IntVar(&port, "port", 0, "restrict TCP to connections on this local port")
	fs.StringArrayVar(&cudaLibs, "cuda-lib", nil, "CUDA library to probe instead of those the target maps (repeatable)")
	fs.StringVar(&cgroup, "cgroup", "", cgroupUsage)
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
}

func runAttach(cmd *cobra.Command, pidArg string, o attachOptions) error {
	ctx, stdout, stderr := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	var pid int
	var roots []int
	var err error
	if o.cgroup != "" {
		if pid, roots, err = resolveCgroup(o.cgroup, stderr); err != nil {
			return err
		}
	} else if pid, err = strconv.Atoi(pidArg); err != nil {
		return usageError{fmt.Sprintf("%q is not a process id: give the numeric pid of the server (find it with pgrep -f <server>)", pidArg)}
	}
	if err := checkOutput(o.output); err != nil {
		return err
	}
	if o.interval <= 0 {
		return usageError{fmt.Sprintf("--interval %v: give a period above 0, e.g. --interval 1s", o.interval)}
	}
	if o.duration < 0 {
		return usageError{fmt.Sprintf("--duration %v: give 0 (until Ctrl-C or the target exits) or more", o.duration)}
	}
	if o.port < 0 || o.port > 65535 {
		return usageError{fmt.Sprintf("--port %d is out of range: use 1-65535", o.port)}
	}
	if _, err := session.CheckPid(pid); err != nil {
		return err
	}
	if !caps.CanTrace() {
		return fmt.Errorf("attaching eBPF probes needs privileges: %s", caps.Hint)
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
	opts := collectors.Options{Pid: pid, Roots: roots, Port: o.port, CUDALibs: o.cudaLibs, Interval: o.interval, Logger: logger}
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
	runErr := sess.Run(runCtx, o.interval, tick)
	if exitedMsg != "" {
		fmt.Fprintf(stderr, "bpfbench attach: %s; summary of what was recorded follows\n", exitedMsg)
	}
	if err := sess.Close(); err != nil {
		logger.Warn("closing", "err", err)
	}
	if o.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(sess.Summary()); err != nil {
			return err
		}
	} else {
		sess.WriteSummary(stdout)
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return runErr
	}
	return nil
}

func untilText(d time.Duration) string {
	if d > 0 {
		return fmt.Sprintf(" for %v", d)
	}
	return "; Ctrl-C to stop"
}
