package perturb

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bpfbench/bpfbench/internal/spawn"
)

// SelfCommand builds the command that runs `bpfbench ARGS...` in a child
// process: this executable. Tests that run the CLI from a test binary
// replace it.
var SelfCommand = func(args ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this executable: %w", err)
	}
	return exec.Command(exe, args...), nil
}

// RunProcess runs the CPU perturbation in a child process (`bpfbench
// perturb cpu --json`) until ctx is done. Busy threads of the caller's own
// Go process would compete for more than CPUs: each needs one of the Go
// scheduler's Ps, so they would also starve the caller's goroutines (a load
// generator timing tokens), a delay no kernel event shows. In a process of
// their own they contend for the CPUs only, like a noisy neighbour.
func (c CPU) RunProcess(ctx context.Context) (CPUReport, error) {
	if err := c.Validate(); err != nil {
		return CPUReport{}, err
	}
	cpus := make([]string, len(c.CPUs))
	for i, n := range c.CPUs {
		cpus[i] = strconv.Itoa(n)
	}
	var rep CPUReport
	err := runChild(ctx, "CPU", &rep, "perturb", "cpu", "--output", "json",
		"--threads", strconv.Itoa(c.Threads), "--cpus", strings.Join(cpus, ","),
		"--duty", strconv.FormatFloat(c.Duty, 'f', -1, 64), "--nice", strconv.Itoa(c.Nice))
	return rep, err
}

// RunProcess runs the IO perturbation in a child process (`bpfbench
// perturb io --json`) until ctx is done, for the reason CPU.RunProcess
// gives: its threads block in O_DIRECT reads for milliseconds at a time,
// and each holds one of the Go scheduler's Ps while it does, so in the
// caller's process (a load generator pinned to one CPU has one P) the
// caller's goroutines would wait for a P until the scheduler's monitor
// takes it back: a client delay of milliseconds per chunk that the kernel
// sees as nothing.
func (p IO) RunProcess(ctx context.Context) (IOReport, error) {
	if err := p.Validate(); err != nil {
		return IOReport{}, err
	}
	args := []string{"perturb", "io", "--output", "json", "--file", p.Path,
		"--block-size", strconv.Itoa(p.BlockSize), "--depth", strconv.Itoa(p.Depth)}
	if p.Write {
		args = append(args, "--write")
	}
	var rep IOReport
	err := runChild(ctx, "IO", &rep, args...)
	return rep, err
}

// ChildDeadline bounds a perturbation child whose context has no
// deadline: it stops by itself after this long (and the parent reports it
// ended early) if nothing stopped it before.
const ChildDeadline = time.Hour

// childDeadlineSlack is what a child's own deadline adds to its context's.
const childDeadlineSlack = 30 * time.Second

// runChild runs `bpfbench ARGS...` until ctx is done, stops it with SIGTERM
// and reads the "report" of its JSON output into rep. The child ends with
// this process however it ends (SIGTERM as its parent-death signal: it
// undoes what it did, a qdisc restored) and carries a deadline of its own
// (--duration: the context's and 30 s, or ChildDeadline).
func runChild(ctx context.Context, what string, rep any, args ...string) error {
	limit := ChildDeadline
	if d, ok := ctx.Deadline(); ok {
		limit = max(time.Until(d), 0) + childDeadlineSlack
	}
	cmd, err := SelfCommand(append(args, "--duration", limit.Round(time.Second).String())...)
	if err != nil {
		return err
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := spawn.Start(cmd, spawn.Options{Signal: syscall.SIGTERM}); err != nil {
		return fmt.Errorf("starting the %s perturbation: %w", what, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return fmt.Errorf("the %s perturbation exited early: %v: %s", what, err, strings.TrimSpace(stderr.String()))
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("the %s perturbation: %v: %s", what, err, strings.TrimSpace(stderr.String()))
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("the %s perturbation did not stop on SIGTERM; killed", what)
	}
	out := struct {
		Report any `json:"report"`
	}{rep}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return fmt.Errorf("reading the %s perturbation's report %q: %w", what, stdout.String(), err)
	}
	return nil
}
