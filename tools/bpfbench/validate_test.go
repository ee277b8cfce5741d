package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/bpfbench/bpfbench/job"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

// The validation matrix against llmsim: each injected cause (CPU
// contention, O_DIRECT reads of the server's KV file, the CUDA stub
// slowed, a slow-reading client) must be the top cause of the excess it
// added to its phase's slowest 10% of gaps, with at least 60% of it. On a shared
// host a run can be spoilt by other work; one retry is allowed.
func TestValidateMatrixOnLLMSim(t *testing.T) {
	privtest.Require(t)
	simBinaries(t)
	var last []string
	for attempt := 1; attempt <= 2; attempt++ {
		dir := t.TempDir()
		code, stdout, stderr := runCLI("validate", "--sim", "--phase", "4s", "--rate", "4", "--out", dir, "--min-share", "0.6")
		t.Logf("attempt %d:\n%s", attempt, stdout)
		b, err := os.ReadFile(filepath.Join(dir, "validation.json"))
		if err != nil {
			t.Fatalf("exit %d, no validation.json: %v\n%s", code, err, stderr)
		}
		var v job.Validation
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		if len(v.Rows) != 4 {
			t.Fatalf("%d rows, want cpu, io, gpu and client", len(v.Rows))
		}
		last = nil
		for _, r := range v.Rows {
			if r.Attributed != r.Injected || r.Share < 0.6 {
				last = append(last, r.Injection+": top "+r.Attributed+" "+pct(r.Share)+" of the added tail excess")
			}
		}
		if len(last) == 0 {
			if code != 0 {
				t.Errorf("every injection named, but exit %d: %s", code, stderr)
			}
			return
		}
		if code == 0 {
			t.Errorf("exit 0 with injections not named: %v", last)
		}
	}
	t.Errorf("attribution not validated: %v", last)
}

func pct(f float64) string { return fmt.Sprintf("%.0f%%", f*100) }
