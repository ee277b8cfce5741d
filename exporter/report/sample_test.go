package report

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteSamples writes the sample documents' pages and terminal
// summaries into $BPFBENCH_REPORT_SAMPLES, to look at them.
func TestWriteSamples(t *testing.T) {
	dir := os.Getenv("BPFBENCH_REPORT_SAMPLES")
	if dir == "" {
		t.Skip("set BPFBENCH_REPORT_SAMPLES=DIR to write the sample reports")
	}
	for name, d := range map[string]*Document{"full": fullDocument(), "empty": emptyDocument(), "failed": failedDocument()} {
		f, err := os.Create(filepath.Join(dir, name+".html"))
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteHTML(f, d); err != nil {
			t.Fatal(err)
		}
		f.Close()
		f, err = os.Create(filepath.Join(dir, name+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteTerminal(f, d); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}
