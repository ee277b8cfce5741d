// Command resultschema writes the JSON Schemas of the run's files
// (result.Schemas: result.json's, gaps.jsonl.gz's lines') into a folder:
// `go generate ./result` publishes them in docs/.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/bpfbench/bpfbench/internal/atomicfile"
	"github.com/bpfbench/bpfbench/result"
)

func main() {
	dir := flag.String("dir", ".", "folder to write the schemas in")
	flag.Parse()
	for _, s := range result.Schemas {
		b, err := s.Schema()
		if err != nil {
			fmt.Fprintf(os.Stderr, "resultschema: reflecting %s: %v\n", s.File, err)
			os.Exit(1)
		}
		p := filepath.Join(*dir, s.File)
		if err := atomicfile.WriteFile(p, b, 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "resultschema: writing %s: %v\n", p, err)
			os.Exit(1)
		}
	}
}
