package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/bpfbench/bpfbench/readiness"
)

func init() {
	register("check", command{
		summary: "say whether this kernel and machine can run bpfbench, and how to fix what is missing",
		run:     runCheck,
	})
}

func runCheck(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("check", stderr, "check [--output table|json]")
	output := fs.String("output", "table", "table or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	checks := readiness.Readiness(tracepointSets())
	if *output == "json" {
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
		if *output != "json" {
			fmt.Fprintln(stderr, "bpfbench check: the daemon cannot run here; fix the lines marked fail")
		}
		return exitError{1}
	}
	return nil
}

// readiness runs the checks of `bpfbench check` for a run's result.
func readinessChecks() []readiness.Check { return readiness.Readiness(tracepointSets()) }
