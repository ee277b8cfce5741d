// Command bpfbench is the bpfbench CLI: on-call views of a process
// (attach), the host daemon, readiness checks and the load generator.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"syscall"
)

// command is one subcommand of the CLI.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is filled by init functions in the cmd_*.go files.
var commands = map[string]command{}

func register(name string, c command) { commands[name] = c }

// exitError carries a specific exit status to main.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: bpfbench <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'bpfbench <command> -h' for the flags of a command.")
}

// runMemoryLimit is the soft memory limit of the jobs that hold a run's
// results (GOMEMLIMIT overrides it): with Go's default of a heap twice the
// live data, an hour at 8 req/s (28,889 requests, ~200 MB live at the end)
// peaked at 964 MB RSS; under the limit the collector works harder
// instead, and the same run peaks at 410 MB.
const runMemoryLimit = 384 << 20

var memoryBoundJobs = map[string]bool{"run": true, "demo": true, "validate": true, "sweep": true}

func main() {
	if len(os.Args) > 1 && memoryBoundJobs[os.Args[1]] && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(runMemoryLimit)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "bpfbench: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := c.run(ctx, args[1:], stdout, stderr)
	var ee exitError
	var ue usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "bpfbench %s: %v\n", args[0], err)
		return 2
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintf(stderr, "bpfbench %s: %v\n", args[0], err)
		return 1
	}
}
