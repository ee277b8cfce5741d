package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/bpfbench/bpfbench/host"
	"github.com/bpfbench/bpfbench/perturb"
	"github.com/bpfbench/bpfbench/readiness"
)

func init() { register(newCheckCmd) }

func newCheckCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Say whether this kernel and machine can run bpfbench, and how to fix what is missing",
		Long: `One line per check (ok, warn or fail; name, detail, fix): kernel version, BTF,
privileges, the bpf syscall, ring buffers, task storage, tracefs, each
tracepoint the collectors use (loaded and attached for real), the kernel's
run-queue stamps, uprobes and what a uprobe hit costs here, how the tcp
collector reads a server's sockets (in this network namespace and in
others, tried on a connection of its own), NVML and libcuda. A check the
kernel refuses (EPERM) names the capability it needs. Exit status 0 when
the daemon can run.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			return runCheck(cmd.OutOrStdout(), cmd.ErrOrStderr(), output)
		},
	}
	outputFlag(cmd, &output)
	return cmd
}

func runCheck(stdout, stderr io.Writer, output string) error {
	checks := append(readiness.Readiness(tracepointSets()), leftoverChecks(perturb.DefaultStateDir)...)
	if output == "json" {
		if err := json.NewEncoder(stdout).Encode(checks); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		for _, c := range checks {
			line := fmt.Sprintf("%s\t%s\t%s", c.Status, c.Name, c.Detail)
			if c.Fix != "" && c.Status != readiness.OK {
				line += "\tfix: " + c.Fix
			}
			fmt.Fprintln(tw, line)
		}
		tw.Flush()
	}
	if !readiness.Ready(checks) {
		if output != "json" {
			fmt.Fprintln(stderr, "bpfbench check: the daemon cannot run here; fix the lines marked fail")
		}
		return exitError{1}
	}
	return nil
}

// readiness runs the checks of `bpfbench check` for a run's result.
func readinessChecks() []readiness.Check { return readiness.Readiness(tracepointSets()) }

// leftoverChecks are check's lines on what bpfbench processes created on
// the machine (a network namespace, a shaped interface): in use by a
// running one (ok), or left by a dead one (warn: the next bpfbench command
// run as root removes it, as its reaper would have).
func leftoverChecks(stateDir string) []readiness.Check {
	var out []readiness.Check
	for _, l := range host.Leftovers(stateDir) {
		c := readiness.Check{Status: readiness.OK, Name: "leftovers",
			Detail: fmt.Sprintf("%s: in use by bpfbench (%s)", l.What, l.Owner)}
		if !l.Alive {
			c.Status = readiness.Warn
			c.Detail = fmt.Sprintf("%s: left by a dead bpfbench (%s, started %s)", l.What, l.Owner, l.Started.Format("2006-01-02 15:04:05"))
			c.Fix = "run any bpfbench command that changes the machine as root (bpfbench perturb net --restore IFACE for a qdisc), which removes it; state in " + l.State
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		out = append(out, readiness.Check{Status: readiness.OK, Name: "leftovers", Detail: "nothing a bpfbench process created is left on the machine (" + stateDir + ")"})
	}
	return out
}
