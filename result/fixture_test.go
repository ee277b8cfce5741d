package result_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/result"
)

// testdata/v1-llmsim.result.json.gz is the result.json of a 3-second run
// against llmsim by the bpfbench before schema_version (version 1): it
// loads, every key into a typed field, and renders on the terminal and
// as a page.
func TestVersion1FixtureLoadsAndRenders(t *testing.T) {
	d, err := result.Load("testdata/v1-llmsim.result.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	if d.SchemaVersion != result.SchemaVersion || d.Legacy() {
		t.Errorf("schema_version %d, legacy %v", d.SchemaVersion, d.Legacy())
	}
	if d.Completed != 24 || d.BPFBench == nil || len(d.BPFBench.Records) != 24 || d.Float("p99_itl_ms") == 0 {
		t.Errorf("load part: completed %d, p99_itl_ms %v", d.Completed, d.Float("p99_itl_ms"))
	}
	if d.Attribution == nil || d.CriticalPath == nil || d.Manifest == nil || d.Collection == nil || d.Overhead == nil {
		t.Errorf("sections lost: %+v", d)
	}
	if got := strings.Join(d.Collectors.Names(), ","); got != "sched,blockio,tcp" {
		t.Errorf("collectors %s", got)
	}
	if len(d.Other) != 0 || len(d.Collectors.Other) != 0 {
		t.Errorf("keys of version 1 with no typed field: %v %v", d.Other, d.Collectors.Other)
	}
	var term, page bytes.Buffer
	if err := report.WriteTerminal(&term, d); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Diagnosis", "critical path", "Collection: pid"} {
		if !strings.Contains(term.String(), want) {
			t.Errorf("terminal lacks %q:\n%s", want, term.String())
		}
	}
	if err := report.WriteHTML(&page, d); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`id="section-sched"`, `id="section-tcp"`, "llmsim"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// Written again, it is version 2: it validates and reads back the
	// same.
	p := filepath.Join(t.TempDir(), "result.json")
	if err := d.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	validate(t, schema(t), p)
	back, err := result.Load(p)
	if err != nil || back.Completed != d.Completed || back.CriticalPath.Gaps != d.CriticalPath.Gaps {
		t.Errorf("written again: %v", err)
	}
}
