package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/session"

	"github.com/bpfbench/bpfbench/internal/caps"
)

func init() {
	register("attach", command{
		summary: "follow a running process: scheduler, IO, network, CUDA and GPU, every interval and at the end",
		run:     runAttach,
	})
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// usageError is a bad command line: one line saying what to do, exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func newFlagSet(name string, stderr io.Writer, usageLine string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: bpfbench %s\n\nflags:\n", usageLine)
		fs.PrintDefaults()
	}
	return fs
}

func runAttach(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("attach", stderr, "attach <pid> [--duration D] [--interval I] [--output table|json] [--port P] [--cuda-lib PATH] [--cpus LIST]")
	duration := fs.Duration("duration", 0, "stop after this long (default: until Ctrl-C or the target exits)")
	interval := fs.Duration("interval", time.Second, "period of the interval table (table output)")
	output := fs.String("output", "table", "table, or json (one object at the end)")
	port := fs.Int("port", 0, "restrict TCP to connections on this local port")
	var cudaLibs stringList
	fs.Var(&cudaLibs, "cuda-lib", "CUDA library to probe instead of those the target maps (repeatable)")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	cpus := cpusFlag(fs)
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"attach needs exactly one pid: bpfbench attach <pid> (find it with pgrep -f <server>)"}
	}
	pid, err := strconv.Atoi(fs.Arg(0))
	if err != nil {
		return usageError{fmt.Sprintf("%q is not a process id: give the numeric pid of the server (find it with pgrep -f <server>)", fs.Arg(0))}
	}
	if *output != "table" && *output != "json" {
		return usageError{fmt.Sprintf("--output %q: use table or json", *output)}
	}
	if *interval <= 0 {
		return usageError{"--interval must be positive, e.g. --interval 1s"}
	}
	if *port < 0 || *port > 65535 {
		return usageError{fmt.Sprintf("--port %d is out of range: use 1-65535", *port)}
	}
	if _, err := session.CheckPid(pid); err != nil {
		return err
	}
	if !caps.CanTrace() {
		return fmt.Errorf("attaching eBPF probes needs privileges: %s", caps.Hint)
	}
	logger, err := newLogger(stderr, *logLevel, "text")
	if err != nil {
		return usageError{err.Error()}
	}
	if err := bpfutil.EnsureFilesystems(); err != nil {
		logger.Warn("preparing kernel file systems", "err", err)
	}
	if err := applyCPUs(*cpus); err != nil {
		return err
	}
	opts := collectors.Options{Pid: pid, Port: *port, CUDALibs: cudaLibs, Interval: *interval, Logger: logger}
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
	if *duration > 0 {
		var c2 context.CancelFunc
		runCtx, c2 = context.WithTimeout(runCtx, *duration)
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
	if *output == "table" {
		fmt.Fprintf(stdout, "attached to pid %d (%s); every %v%s\n", pid, sess.Comm(), *interval, untilText(*duration))
		tick = func() { sess.WriteInterval(stdout) }
	}
	runErr := sess.Run(runCtx, *interval, tick)
	if exitedMsg != "" {
		fmt.Fprintf(stderr, "bpfbench attach: %s; summary of what was recorded follows\n", exitedMsg)
	}
	if err := sess.Close(); err != nil {
		logger.Warn("closing", "err", err)
	}
	if *output == "json" {
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

// cpusFlag registers --cpus, the CPUs bpfbench may use.
func cpusFlag(fs *flag.FlagSet) *string {
	return fs.String("cpus", "", "CPUs bpfbench's own threads may run on, e.g. 0 or 0,2-3 (default: any); the others are kept free for the target")
}

// applyCPUs keeps bpfbench on the --cpus list, if one was given.
func applyCPUs(list string) error {
	if list == "" {
		return nil
	}
	cpus, err := bpfutil.ParseCPUList(list)
	if err != nil {
		return usageError{"--cpus: " + err.Error()}
	}
	return bpfutil.RestrictToCPUs(cpus)
}

func untilText(d time.Duration) string {
	if d > 0 {
		return fmt.Sprintf(" for %v", d)
	}
	return "; Ctrl-C to stop"
}

// parseInterspersed parses flags that may come after positional arguments
// (bpfbench attach 1234 --duration 5s).
func parseInterspersed(fs *flag.FlagSet, args []string) error {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return fs.Parse(append([]string{"--"}, pos...))
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: use debug, info, warn or error", level)
	}
	o := &slog.HandlerOptions{Level: l}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(w, o)), nil
	}
	return nil, fmt.Errorf("log format %q: use text or json", format)
}
