package report

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/bpfbench/bpfbench/result"
)

// FuzzReadResult: any result.json is read or refused with an error, never
// a panic; one that is read renders as the report's page, its terminal
// summary and its diagnosis, and (when it is not a legacy document)
// written out and read back it renders the same summary.
func FuzzReadResult(f *testing.F) {
	samples, _ := filepath.Glob("reportsample/testdata/*.json")
	for _, p := range samples {
		if b, err := os.ReadFile(p); err == nil && len(b) < 64<<10 {
			f.Add(b)
		}
	}
	for _, d := range []*result.Document{emptyDocument(), failedDocument()} {
		if b, err := json.Marshal(d); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"completed":3,"ttfts":[0.1,0.2,null],"itls":[[0.01],[],[1e308]],"attribution":{"itl_ms":{"cpu":1}}}`))
	f.Add([]byte(`{"critical_path":{"gaps":2,"totals_ms":{"cpu":-1},"phases":[{"name":"a"}]},"phases":[{"name":"a"}],"timeline":[{}]}`))
	f.Add([]byte(`{"collectors":{"sched":{"x":[{"a":1},{"b":[1,2]}]}},"server_metrics":{"samples":[{}]}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var d result.Document
		if err := json.Unmarshal(b, &d); err != nil {
			return
		}
		legacy := d.Legacy()
		if legacy {
			d.ForgetActivityCauses()
		}
		_ = Diagnose(&d)
		if err := WriteHTML(io.Discard, &d); err != nil {
			t.Fatalf("page: %v", err)
		}
		var term bytes.Buffer
		if err := WriteTerminal(&term, &d); err != nil {
			t.Fatalf("terminal summary: %v", err)
		}
		if legacy {
			return
		}
		out, err := json.Marshal(&d)
		if err != nil {
			// Only numbers encoding/json cannot write (none come from JSON).
			t.Fatalf("writing a read document: %v", err)
		}
		var back result.Document
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("reading a written document: %v", err)
		}
		var term2 bytes.Buffer
		if err := WriteTerminal(&term2, &back); err != nil || term.String() != term2.String() {
			t.Fatalf("written and read back, the summary differs (%v):\n%s\n----\n%s", err, term.String(), term2.String())
		}
	})
}
