package result_test

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/result"
)

// gzipFile writes parts, gzip'd, to a file in dir named name.
func gzipFile(t *testing.T, name string, parts ...[]byte) string {
	t.Helper()
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	for _, p := range parts {
		if _, err := zw.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A gaps file whose one line inflates to 20 MiB (from a few KiB) is
// refused with an error, not read into memory.
func TestGapsFileBomb(t *testing.T) {
	var h bytes.Buffer
	gw, err := result.NewGapsWriter(&h, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&h)
	if err != nil {
		t.Fatal(err)
	}
	var header bytes.Buffer
	if _, err := header.ReadFrom(zr); err != nil {
		t.Fatal(err)
	}
	p := gzipFile(t, "gaps.jsonl.gz", header.Bytes(), []byte(`{"request":1,"detail":"`), bytes.Repeat([]byte("a"), 20<<20), []byte("\"}\n"))
	st, _ := os.Stat(p)
	_, _, err = result.ReadGaps(p)
	if err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("a %d-byte file inflating to 20 MiB on one line: %v, want the line refused", st.Size(), err)
	}
	t.Logf("%d bytes: %v", st.Size(), err)
}

// A gzip'd result.json that inflates past its cap is refused.
func TestResultFileBomb(t *testing.T) {
	p := gzipFile(t, "result.json.gz", []byte(`{"x":"`), bytes.Repeat([]byte(" "), 300<<20), []byte(`"}`))
	_, err := result.Load(p)
	if err == nil || !strings.Contains(err.Error(), "expands past") {
		t.Fatalf("a result.json.gz inflating to 300 MiB: %v, want it refused", err)
	}
	t.Log(err)
}
