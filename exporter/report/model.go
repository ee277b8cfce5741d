// Package report renders a run's result.json (package result) as
// report.html (one self-contained page), as a terminal summary and as a
// diagnosis in plain language.
package report

import (
	"bufio"

	"github.com/bpfbench/bpfbench/internal/atomicfile"
	"github.com/bpfbench/bpfbench/result"
)

// doc is the document the views read.
type doc struct{ *result.Document }

// WriteHTMLFile writes d as report.html (WriteHTML) to path, atomically.
func WriteHTMLFile(path string, d *result.Document) error {
	return atomicfile.Write(path, 0o644, func(w *bufio.Writer) error { return WriteHTML(w, d) })
}
