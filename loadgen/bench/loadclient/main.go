// Command loadclient runs `bpfbench load` (loadgen/cli.RunLoad) as its own
// process, so the client's CPU can be measured apart from the server's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/bpfbench/bpfbench/loadgen/cli"
)

func main() {
	if err := cli.RunLoad(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "loadclient:", err)
		os.Exit(1)
	}
}
