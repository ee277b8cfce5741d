// Command loadclient runs `bpfbench load` (job/load.RunLoad) as its own
// process, so the client's CPU can be measured apart from the server's.
// With --cpuprofile FILE as the first argument it writes a CPU profile of
// the run (go tool pprof FILE).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/spf13/pflag"

	"github.com/bpfbench/bpfbench/internal/atomicfile"
	"github.com/bpfbench/bpfbench/job/load"
)

func main() {
	args := os.Args[1:]
	finish := func() {}
	if len(args) >= 2 && args[0] == "--cpuprofile" {
		f, err := atomicfile.Create(args[1], 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadclient:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "loadclient:", err)
			os.Exit(1)
		}
		finish = func() {
			pprof.StopCPUProfile()
			if err := f.Commit(); err != nil {
				fmt.Fprintln(os.Stderr, "loadclient:", err)
			}
		}
		args = args[2:]
	}
	err := load.RunLoad(context.Background(), args, os.Stdout, os.Stderr)
	finish()
	if err != nil && !errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "loadclient:", err)
		os.Exit(1)
	}
}
