// Command reportsample renders result documents as the report's HTML page
// and terminal summary, to look at them: `make report-sample` renders the
// samples in testdata/ (a run with every part filled, an empty result and
// a run whose every request failed) into report-samples/.
//
//	reportsample -o DIR result.json...
//
// For each NAME.json it writes DIR/NAME.html and DIR/NAME.txt.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"github.com/bpfbench/bpfbench/result"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/internal/atomicfile"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "reportsample:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("reportsample", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "report-samples", "directory for NAME.html and NAME.txt")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("usage: reportsample [-o DIR] RESULT_JSON [RESULT_JSON ...]")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	for _, in := range fs.Args() {
		d, err := result.Load(in)
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(filepath.Base(in), filepath.Ext(in))
		if err := write(filepath.Join(*out, name+".html"), func(w io.Writer) error { return report.WriteHTML(w, d) }); err != nil {
			return err
		}
		if err := write(filepath.Join(*out, name+".txt"), func(w io.Writer) error { return report.WriteTerminal(w, d) }); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "%s: %s.html, %s.txt\n", in, filepath.Join(*out, name), filepath.Join(*out, name))
	}
	return nil
}

func write(path string, render func(io.Writer) error) error {
	return atomicfile.Write(path, 0o644, func(w *bufio.Writer) error { return render(w) })
}
