// Command resultschema writes result.json's JSON Schema (result.Schema) to a
// file: `go generate ./result` publishes it at docs/result.schema.json.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/bpfbench/bpfbench/internal/atomicfile"
	"github.com/bpfbench/bpfbench/result"
)

func main() {
	out := flag.String("o", "result.schema.json", "file to write")
	flag.Parse()
	b, err := result.Schema()
	if err != nil {
		fmt.Fprintf(os.Stderr, "resultschema: reflecting result.Document: %v\n", err)
		os.Exit(1)
	}
	if err := atomicfile.WriteFile(*out, b, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "resultschema: writing %s: %v\n", *out, err)
		os.Exit(1)
	}
}
