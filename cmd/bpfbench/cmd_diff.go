package main

import (
	"github.com/spf13/cobra"

	"github.com/bpfbench/bpfbench/job/diff"
)

func init() { register(newDiffCmd) }

func newDiffCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "diff A B",
		Short: "Compare two runs: metric deltas with a significance test, attribution per cause, manifest differences",
		Long: `Compares run B against run A (run directories or result.json files): the p50,
p99 and mean of TTFT, TPOT, ITL and E2EL and the throughputs; a Mann-Whitney U
test (two-sided, p < 0.01) on the per-request figures, which says whether B
is slower or faster; each cause's share of the excess latency; and every
difference of the runs' manifests (binary, command line, environment, model
files, CUDA libraries, GPUs and driver, kernel, CPU and governor, cgroup
limits, bpfbench's version and arguments, dataset). Runs of different
bpfbench versions, or lacking a part, are compared on what both have.`,
		Example: `  bpfbench diff runs/before runs/after
  bpfbench diff before/result.json after/result.json --output json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageError{"diff needs two runs: bpfbench diff A B"}
			}
			return nil
		},
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return nil, cobra.ShellCompDirectiveFilterDirs
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			a, err := diff.Load(args[0])
			if err != nil {
				return err
			}
			b, err := diff.Load(args[1])
			if err != nil {
				return err
			}
			d := diff.Compare(a, b)
			if output == "json" {
				return d.WriteJSON(cmd.OutOrStdout())
			}
			return d.WriteText(cmd.OutOrStdout())
		},
	}
	outputFlag(cmd, &output)
	return cmd
}
