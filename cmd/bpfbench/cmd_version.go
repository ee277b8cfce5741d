package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/bpfbench/bpfbench/internal/version"
)

func init() { register(newVersionCmd) }

func newVersionCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print bpfbench's version, revision and Go version",
		Long: `Prints the version, the VCS revision and the Go toolchain of this build, as
bpfbench --version does; --output json prints them as one object. The daemon
exports the same on /metrics as bpfbench_build_info.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			info := version.Get()
			if output == "json" {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(info)
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), info)
			return err
		},
	}
	outputFlag(cmd, &output)
	return cmd
}
