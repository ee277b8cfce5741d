package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The committed samples still read as results and render.
func TestSamplesRender(t *testing.T) {
	ins, err := filepath.Glob("testdata/*.json")
	if err != nil || len(ins) != 3 {
		t.Fatalf("samples %v (%v), want full, empty and failed", ins, err)
	}
	out := t.TempDir()
	if err := run(append([]string{"-o", out}, ins...), io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".json")
		for _, ext := range []string{".html", ".txt"} {
			b, err := os.ReadFile(filepath.Join(out, name+ext))
			if err != nil {
				t.Fatal(err)
			}
			if len(b) == 0 {
				t.Errorf("%s%s is empty", name, ext)
			}
		}
	}
	full, err := os.ReadFile(filepath.Join(out, "full.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(full), "<html") {
		t.Errorf("full.html is not a page")
	}
}

func TestBadInput(t *testing.T) {
	if err := run([]string{"-o", t.TempDir()}, io.Discard); err == nil {
		t.Error("no input accepted")
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"-o", t.TempDir(), bad}, io.Discard); err == nil {
		t.Error("a broken result accepted")
	}
}
