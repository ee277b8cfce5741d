package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/cli from the commands (go generate ./cmd/bpfbench)")

// cliDocsDir is the generated CLI reference, docs/cli at the repository root.
var cliDocsDir = filepath.Join("..", "..", "docs", "cli")

// genCLIDocs writes one markdown page per command into dir.
func genCLIDocs(t *testing.T, dir string) {
	t.Helper()
	root := newRoot(io.Discard, io.Discard)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.DisableAutoGenTag = true // no date: the pages change only with the commands
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	if err := doc.GenMarkdownTree(root, dir); err != nil {
		t.Fatal(err)
	}
}

func markdownFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, p := range m {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = b
	}
	return out
}

// docs/cli is what the commands generate: CI fails when a command or a
// flag changed and the reference was not regenerated.
func TestCLIDocs(t *testing.T) {
	if *updateDocs {
		for name := range markdownFiles(t, cliDocsDir) {
			if err := os.Remove(filepath.Join(cliDocsDir, name)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(cliDocsDir, 0o755); err != nil {
			t.Fatal(err)
		}
		genCLIDocs(t, cliDocsDir)
		return
	}
	tmp := t.TempDir()
	genCLIDocs(t, tmp)
	want, have := markdownFiles(t, tmp), markdownFiles(t, cliDocsDir)
	var stale []string
	for name, b := range want {
		if !bytes.Equal(have[name], b) {
			stale = append(stale, name)
		}
	}
	for name := range have {
		if _, ok := want[name]; !ok {
			stale = append(stale, name+" (no such command)")
		}
	}
	slices.Sort(stale)
	if len(stale) > 0 {
		t.Errorf("docs/cli is stale (%v): regenerate it with go generate ./cmd/bpfbench and commit it", stale)
	}
}
