package report

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/bpfbench/bpfbench/correlate"
)

func TestDocumentRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "result.json")
	d := &Document{
		Load: map[string]json.RawMessage{
			"completed": json.RawMessage("10"), "mean_ttft_ms": json.RawMessage("12.5"), "itls": json.RawMessage("[0.01,0.02]"),
		},
		Attribution: &correlate.Summary{BaselineITLMs: 10, TopCause: "cpu_runqueue"},
		Collection:  &Collection{Pid: 42, StoppedReason: "load finished"},
		Diagnosis:   []string{"fine"},
	}
	if err := d.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	back, err := ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if back.Float("completed") != 10 || back.Float("mean_ttft_ms") != 12.5 || len(back.Floats("itls")) != 2 {
		t.Errorf("load fields lost: %v", back.Load)
	}
	if back.Attribution == nil || back.Attribution.TopCause != "cpu_runqueue" || back.Collection.Pid != 42 || back.Diagnosis[0] != "fine" {
		t.Errorf("added keys lost: %+v", back)
	}
	if _, ok := back.Load["attribution"]; ok {
		t.Error("attribution left in Load")
	}
}
