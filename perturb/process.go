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
	cmd, err := SelfCommand("perturb", "cpu", "--output", "json",
		"--threads", strconv.Itoa(c.Threads), "--cpus", strings.Join(cpus, ","),
		"--duty", strconv.FormatFloat(c.Duty, 'f', -1, 64), "--nice", strconv.Itoa(c.Nice))
	if err != nil {
		return CPUReport{}, err
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return CPUReport{}, fmt.Errorf("starting the CPU perturbation: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return CPUReport{}, fmt.Errorf("the CPU perturbation exited early: %v: %s", err, strings.TrimSpace(stderr.String()))
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			return CPUReport{}, fmt.Errorf("the CPU perturbation: %v: %s", err, strings.TrimSpace(stderr.String()))
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return CPUReport{}, fmt.Errorf("the CPU perturbation did not stop on SIGTERM; killed")
	}
	var out struct {
		Report CPUReport `json:"report"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return CPUReport{}, fmt.Errorf("reading the CPU perturbation's report %q: %w", stdout.String(), err)
	}
	return out.Report, nil
}
