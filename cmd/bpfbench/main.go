// Command bpfbench is the bpfbench CLI: on-call views of a process
// (attach), the run that blames each token's latency on its causes, the
// host daemon, readiness checks, the load generator and the perturbations.
// Every command is a cobra command with pflag flags; `bpfbench help CMD`
// and `bpfbench CMD --help` show a command's flags, and docs/cli/ is the
// reference generated from them (TestCLIDocs checks it is current).
package main

//go:generate go test -run ^TestCLIDocs$ . -update-docs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/bpfbench/bpfbench/internal/atomicfile"
	"github.com/bpfbench/bpfbench/internal/owner"
	"github.com/bpfbench/bpfbench/internal/version"
	"github.com/bpfbench/bpfbench/job/load"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/perturb"
)

// commands build the subcommands; the cmd_*.go files register theirs in
// init. A fresh tree is built for every run, so no flag value outlives it.
var commands []func() *cobra.Command

func register(newCmd func() *cobra.Command) { commands = append(commands, newCmd) }

// The exit statuses (docs/usage.md, "exit status"): every command ends with one
// of these.
const (
	statusOK          = 0   // done, all good
	statusError       = 1   // an error: the message says which and why
	statusUsage       = 2   // a bad command line: a flag out of its range, a missing argument
	statusThreshold   = 3   // the run completed, its results written, but below a threshold (--max-failed-ratio)
	statusInterrupted = 130 // interrupted (SIGINT, SIGTERM): what was measured is written
)

// sweepsLeftovers says whether cmd, before it starts, removes what dead
// bpfbench processes left: the commands that change the machine or load
// programs, run as root.
func sweepsLeftovers(cmd *cobra.Command) bool {
	top := cmd
	for top.HasParent() && top.Parent().HasParent() {
		top = top.Parent()
	}
	switch top.Name() {
	case "run", "demo", "validate", "sweep", "perturb", "attach", "daemon":
		return os.Geteuid() == 0
	}
	return false
}

// exitError carries a specific exit status to main.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is a bad command line: one line saying what to do, exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// runMemoryLimit is the soft memory limit of the jobs that hold a run's
// results (GOMEMLIMIT overrides it): with Go's default of a heap twice the
// live data, an hour at 8 req/s (28,889 requests, ~200 MB live at the end)
// peaked at 964 MB RSS; under the limit the collector works harder
// instead, and the same run peaks at 410 MB.
const runMemoryLimit = 384 << 20

// memoryBound is the annotation of the commands that run under
// runMemoryLimit (run, demo, validate, sweep).
const memoryBound = "bpfbench/memory-bound"

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "bpfbench",
		Short: "Why an LLM inference server is slow, token by token",
		Long: `bpfbench follows an LLM inference server with eBPF (scheduler, block IO, TCP,
CUDA uprobes) and NVML, drives it with its own streaming load generator, and
blames every token's latency along its critical path on cpu_runqueue,
io_block, gpu_sync, net_backpressure, server_compute, server_sleep,
server_stopped, client or unexplained.

--log.level and --log.format are taken by every command.`,
		Version:       version.Get().String(),
		SilenceErrors: true,
		SilenceUsage:  true,
		// No command: the usage on stderr, exit 2.
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprint(stderr, cmd.UsageString())
			return exitError{statusUsage}
		},
	}
	addLogFlags(root.PersistentFlags())
	// A command that sets up no logger of its own logs, through the
	// packages it calls, with the default one: --log.level and
	// --log.format, when given, set it (run restores it).
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if sweepsLeftovers(cmd) {
			// What a killed bpfbench left and its reaper did not remove
			// (killed too, or none started): said, and removed.
			if err := sweepLeftovers(stderr, perturb.DefaultStateDir); err != nil {
				fmt.Fprintf(stderr, "bpfbench: %v\n", err)
			}
		}
		level, format, levelSet, formatSet := givenLogFlags(cmd)
		if !levelSet && !formatSet {
			return nil
		}
		if level == "" {
			level = "info"
		}
		lg, err := newLogger(cmd.ErrOrStderr(), level, format)
		if err != nil {
			return usageError{err.Error()}
		}
		slog.SetDefault(lg)
		return nil
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Sprintf("%v (see %s --help)", err, c.CommandPath())}
	})
	for _, newCmd := range commands {
		root.AddCommand(newCmd())
	}
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	usageOnBadArgs(root)
	// Deprecation warnings of flags go to stderr (cobra would print them
	// on the command's standard output, mixing them into JSON reports).
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().SetOutput(stderr)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return root
}

// usageOnBadArgs makes cobra's help and completion commands end a bad
// command line as every other command does, one line and exit 2: help
// with a topic that is no command, completion without a shell or with
// one it does not know (cobra prints a usage and exits 0).
func usageOnBadArgs(root *cobra.Command) {
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			run := c.Run
			c.Run = nil
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if t, _, err := root.Find(args); t == nil || err != nil {
					return usageError{fmt.Sprintf("unknown help topic %q (see %s --help)", strings.Join(args, " "), root.Name())}
				}
				run(cmd, args)
				return nil
			}
		case "completion":
			var shells []string
			for _, s := range c.Commands() {
				shells = append(shells, s.Name())
			}
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if len(args) == 0 {
					return usageError{fmt.Sprintf("completion needs a shell: %s completion %s", root.Name(), strings.Join(shells, "|"))}
				}
				return usageError{fmt.Sprintf("unknown shell %q: use %s", args[0], strings.Join(shells, ", "))}
			}
		}
	}
}

func main() {
	args := os.Args[1:]
	if c, _, err := newRoot(io.Discard, io.Discard).Find(args); err == nil && c.Annotations[memoryBound] != "" && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(runMemoryLimit)
	}
	processSetup()
	os.Exit(profiled(func() int { return run(args, os.Stdout, os.Stderr) }))
}

// processSetup readies this process as the CLI: what it creates on the
// machine is reaped if it is killed (owner.SetReaper: a `bpfbench reap`
// process started with the first record), including the temporary files
// of its atomic writes.
func processSetup() {
	owner.SetReaper(startReaper)
	if os.Geteuid() == 0 {
		atomicfile.SetOnTempDir(func(dir string) {
			if abs, err := filepath.Abs(dir); err == nil {
				_ = owner.Note(perturb.DefaultStateDir, owner.KindTempDir, abs)
			}
		})
	}
}

// profiled runs fn, writing a CPU profile of it to $BPFBENCH_CPUPROFILE
// when set, and its heap profile to $BPFBENCH_MEMPROFILE (a developer's view
// of bpfbench's own cost: go tool pprof). The reaper a session starts
// (bpfbench reap) inherits the environment and is not profiled: it would
// write over its parent's profile when it ends after it.
func profiled(fn func() int) int {
	if len(os.Args) > 1 && os.Args[1] == "reap" {
		return fn()
	}
	if p := os.Getenv("BPFBENCH_MEMPROFILE"); p != "" {
		// One sample every 4 KiB allocated, not every 512 KiB: the
		// profile is for finding what a run allocates, at some cost.
		// What a run holds shows while it runs (FILE, every 10 s); at
		// the end it has let go of it (FILE.end).
		runtime.MemProfileRate = 4096
		tk := time.NewTicker(10 * time.Second)
		defer tk.Stop()
		go func() {
			for range tk.C {
				writeHeapProfile(p)
			}
		}()
		defer writeHeapProfile(p + ".end")
	}
	p := os.Getenv("BPFBENCH_CPUPROFILE")
	if p == "" {
		return fn()
	}
	f, err := atomicfile.Create(p, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bpfbench: BPFBENCH_CPUPROFILE: %v\n", err)
		return fn()
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "bpfbench: BPFBENCH_CPUPROFILE: %v\n", err)
		return fn()
	}
	code := fn()
	pprof.StopCPUProfile()
	if err := f.Commit(); err != nil {
		fmt.Fprintf(os.Stderr, "bpfbench: BPFBENCH_CPUPROFILE: %v\n", err)
	}
	return code
}

// writeHeapProfile writes the allocation profile (alloc_space: what the
// command allocated over its life; inuse_space: what was live at the
// last collection) to path.
func writeHeapProfile(path string) {
	err := atomicfile.Write(path, 0o644, func(w *bufio.Writer) error { return pprof.Lookup("allocs").WriteTo(w, 0) })
	if err != nil {
		fmt.Fprintf(os.Stderr, "bpfbench: BPFBENCH_MEMPROFILE: %v\n", err)
	}
}

// run runs the CLI with args and returns its exit status: 0, 1 for an
// error, 2 for a bad command line, 3 for a run below its threshold, 130
// when interrupted, or a command's own (check).
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer slog.SetDefault(slog.Default())
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	c, err := root.ExecuteContextC(ctx)
	name := "bpfbench"
	if c != nil {
		name = c.CommandPath()
	}
	// A signal is how attach, the daemon and perturb end: for them it is
	// no interruption.
	interrupted := ctx.Err() != nil && c != nil && c.Annotations[planned] != ""
	return status(err, interrupted, name, stderr)
}

// planned is the annotation of the commands that end on their own (run,
// load, sweep, demo, validate): a signal interrupts them, exit 130.
const planned = "bpfbench/planned"

// status maps a command's error to its exit status, saying on stderr what
// went wrong; interrupted is whether a signal ended the command.
func status(err error, interrupted bool, name string, stderr io.Writer) int {
	var ee exitError
	var ue usageError
	var ce *loadgen.ConfigError
	var te *load.ThresholdError
	switch {
	case interrupted:
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
		}
		fmt.Fprintf(stderr, "%s: interrupted\n", name)
		return statusInterrupted
	case err == nil, errors.Is(err, pflag.ErrHelp):
		return statusOK
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue), errors.As(err, &ce):
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return statusUsage
	case strings.HasPrefix(err.Error(), "unknown command"):
		fmt.Fprintf(stderr, "%s: %v (see %s --help)\n", name, strings.ReplaceAll(err.Error(), "\n", " "), name)
		return statusUsage
	case errors.As(err, &te):
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return statusThreshold
	default:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return statusError
	}
}

// printWritten says which files were written whole ("wrote A, B and C").
func printWritten(w io.Writer, files []string) {
	switch len(files) {
	case 0:
	case 1:
		fmt.Fprintf(w, "wrote %s\n", files[0])
	default:
		fmt.Fprintf(w, "wrote %s and %s\n", strings.Join(files[:len(files)-1], ", "), files[len(files)-1])
	}
}
