package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bpfbench/bpfbench/host"
	"github.com/bpfbench/bpfbench/internal/owner"
	"github.com/bpfbench/bpfbench/perturb"
)

func init() { register(newReapCmd) }

// newReapCmd is the reaper a bpfbench process starts when it first
// records something on the machine (owner.Recorded): it waits for that
// process to exit, however it exits, and removes what it left.
func newReapCmd() *cobra.Command {
	var pid int
	var start uint64
	var stateDir string
	cmd := &cobra.Command{
		Use:    "reap --pid PID --pid-start TICKS --state-dir DIR",
		Short:  "Wait for a bpfbench process to exit and remove what it left on the machine (started by bpfbench itself)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if pid <= 0 {
				return usageError{"reap needs --pid"}
			}
			o := owner.Owner{Pid: pid, Start: start}
			if o.Alive() {
				if err := owner.WaitExit(pid); err != nil {
					return fmt.Errorf("waiting for pid %d: %w", pid, err)
				}
			}
			return sweepLeftovers(cmd.ErrOrStderr(), stateDir)
		},
	}
	cmd.Flags().IntVar(&pid, "pid", 0, "the process to wait for")
	cmd.Flags().Uint64Var(&start, "pid-start", 0, "its start time (clock ticks since boot, /proc/PID/stat)")
	cmd.Flags().StringVar(&stateDir, "state-dir", perturb.DefaultStateDir, "the state directory it records in")
	return cmd
}

// startReaper starts `bpfbench reap` for this process and stateDir: in a
// session of its own (a terminal's Ctrl-C goes to this process's group,
// not to it), from /, with no standard streams of ours (a caller reading
// our output to its end would wait for the reaper too), and not waited
// for.
func startReaper(stateDir string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	self := owner.Self()
	cmd := exec.Command(exe, "reap", "--pid", strconv.Itoa(self.Pid), "--pid-start", strconv.FormatUint(self.Start, 10), "--state-dir", stateDir)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the reaper: %w", err)
	}
	return cmd.Process.Release()
}

// sweepLeftovers removes what dead bpfbench processes left (their owner
// gone) and says so on w, one line each.
func sweepLeftovers(w io.Writer, stateDir string) error {
	removed, err := host.SweepLeftovers(stateDir)
	for _, l := range removed {
		fmt.Fprintf(w, "bpfbench: removed what a dead bpfbench (%s, started %s) left: %s\n", l.Owner, l.Started.Format("2006-01-02 15:04:05"), l.What)
	}
	if err != nil {
		return fmt.Errorf("removing what a dead bpfbench left: %w", err)
	}
	return nil
}
