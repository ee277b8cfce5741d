package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/bpfbench/bpfbench/correlate"
)

func TestDocumentRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "json")
	d := &Document{
		Load: map[string]json.RawMessage{
			"completed": json.RawMessage("10"), "mean_ttft_ms": json.RawMessage("12.5"), "itls": json.RawMessage("[0.01,0.02]"),
		},
		Attribution: &correlate.Summary{Model: correlate.ModelCriticalPath, BaselineITLMs: 10, TopCause: "cpu_runqueue"},
		Activity:    &correlate.Summary{Model: correlate.ModelActivity, BaselineITLMs: 10, TopCause: "unexplained"},
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
	if back.Legacy() || back.Activity == nil || back.Activity.TopCause != "unexplained" || back.Attribution.Model != correlate.ModelCriticalPath {
		t.Errorf("attribution or activity changed on the way back: %+v", back)
	}
	if _, ok := back.Load["attribution"]; ok {
		t.Error("attribution left in Load")
	}
}

// WriteFile streams the document key by key: the same JSON value as
// MarshalJSON, and a load field that is not JSON is refused, not written.
func TestWriteFileMatchesMarshal(t *testing.T) {
	d := &Document{
		Load: map[string]json.RawMessage{
			"completed": json.RawMessage("10"), "bpfbench": json.RawMessage(`{"records":[{"a":1},{"b":[1,2]}]}`),
			"diagnosis": json.RawMessage(`"shadowed by the document's own key"`),
		},
		Collection: &Collection{Pid: 7},
		Diagnosis:  []string{"mine"},
	}
	p := filepath.Join(t.TempDir(), "json")
	if err := d.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatalf("json is not JSON: %v\n%s", err, got)
	}
	json.Unmarshal(want, &b)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("WriteFile wrote\n%s\nMarshalJSON gives\n%s", got, want)
	}
	d.Load["broken"] = json.RawMessage("{")
	if err := d.WriteFile(p); err == nil {
		t.Error("a load field that is not JSON was written")
	}
}
