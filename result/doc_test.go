package result

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestDocumentRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "json")
	d := &Document{
		Loadgen:     Loadgen{Completed: 10, MeanTTFTMs: 12.5, ITLs: ITLs{{0.01, 0.02}}},
		Percentiles: map[string]float64{"p99_itl_ms": 20},
		Attribution: &Summary{Model: ModelCriticalPath, BaselineITLMs: 10, TopCause: "cpu_runqueue"},
		Activity:    &Summary{Model: ModelActivity, BaselineITLMs: 10, TopCause: "unexplained"},
		Collection:  &Collection{Pid: 42, StoppedReason: "load finished"},
		Collectors:  &Collectors{Sched: &Sched{Folded: 3}},
		Diagnosis:   []string{"fine"},
	}
	if err := d.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	back, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if back.SchemaVersion != SchemaVersion || back.Float("completed") != 10 || back.Float("mean_ttft_ms") != 12.5 ||
		back.Float("p99_itl_ms") != 20 || len(back.ITLs) != 1 || len(back.ITLs[0]) != 2 {
		t.Errorf("load fields lost: %+v %v", back.Loadgen, back.Percentiles)
	}
	if back.Attribution == nil || back.Attribution.TopCause != "cpu_runqueue" || back.Collection.Pid != 42 ||
		back.Diagnosis[0] != "fine" || back.Collectors.Sched == nil || back.Collectors.Sched.Folded != 3 {
		t.Errorf("added keys lost: %+v", back)
	}
	if back.Legacy() || back.Activity == nil || back.Activity.TopCause != "unexplained" || back.Attribution.Model != ModelCriticalPath {
		t.Errorf("attribution or activity changed on the way back: %+v", back)
	}
	if len(back.Other) != 0 || len(back.Collectors.Other) != 0 {
		t.Errorf("keys of its own read as unknown: %v %v", back.Other, back.Collectors.Other)
	}
}

// WriteFile streams the document key by key: the same JSON value as
// json.Marshal of the whole document, and a key kept from a newer file
// that is not JSON is refused, not written.
func TestWriteFileMatchesMarshal(t *testing.T) {
	d := &Document{
		Loadgen: Loadgen{Completed: 10, TTFTs: []float64{0.1, 0.2}, Errors: []string{"", "x"},
			BPFBench: &LoadDetail{Records: []Request{{Index: 1, ChunkNs: []int64{1, 2}}, {Index: 2}}}},
		Percentiles: map[string]float64{"p50_ttft_ms": 150},
		Collection:  &Collection{Pid: 7},
		Diagnosis:   []string{"mine <b>"},
		Other:       map[string]json.RawMessage{"future": json.RawMessage(`{"a":[1,2]}`), "diagnosis": json.RawMessage(`"shadowed by the document's own key"`)},
	}
	p := filepath.Join(t.TempDir(), "json")
	if err := d.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	type whole Document
	want, err := json.Marshal((*whole)(d))
	if err != nil {
		t.Fatal(err)
	}
	var a, b map[string]any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatalf("result.json is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal(want, &b); err != nil {
		t.Fatal(err)
	}
	b["p50_ttft_ms"], b["future"] = 150.0, map[string]any{"a": []any{1.0, 2.0}}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("WriteFile wrote\n%s\nencoding/json gives\n%s", got, want)
	}
	d.Other["broken"] = json.RawMessage("{")
	if err := d.WriteFile(p); err == nil || !strings.Contains(err.Error(), "broken") {
		t.Errorf("a kept key that is not JSON: %v", err)
	}
}

// A file of a newer bpfbench: its unknown keys (top level and sections)
// are kept and written back; broken JSON is a clear error.
func TestReadNewerAndBroken(t *testing.T) {
	in := `{"schema_version": 3, "completed": 2, "p90_e2el_ms": 5, "quantum": {"spin": [1, 2]},
		"collectors": {"sched": {"folded_intervals": 4}, "future": {"widgets": 3}}}`
	d, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if d.SchemaVersion != 3 || d.Completed != 2 || d.Float("p90_e2el_ms") != 5 || d.Collectors.Sched.Folded != 4 {
		t.Errorf("known keys: %+v", d)
	}
	if string(d.Other["quantum"]) != `{"spin": [1, 2]}` || string(d.Collectors.Other["future"]) != `{"widgets": 3}` {
		t.Errorf("unknown keys not kept: %v, %v", d.Other, d.Collectors.Other)
	}
	if got := d.Collectors.Names(); !reflect.DeepEqual(got, []string{"sched", "future"}) {
		t.Errorf("sections %v", got)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"quantum":{"spin": [1, 2]}`)) && !bytes.Contains(b, []byte(`"quantum":{"spin":[1,2]}`)) ||
		!bytes.Contains(b, []byte(`"future":{"widgets`)) {
		t.Errorf("unknown keys not written back:\n%s", b)
	}
	for _, tc := range []struct{ in, want string }{
		{`{"completed": 2,`, "unexpected end of JSON input"},
		{`{"collectors": {"sched": {"folded_intervals": "many"}}}`, "sched"},
		{`{"collectors": {"future": {"oops"}}}`, "invalid character"},
		{`{"p99_ttft_ms": "slow"}`, "p99_ttft_ms"},
	} {
		if _, err := Read(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Read(%s): %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

// A version 1 run with several agents held each agent's sections in
// collectors as "AGENT/section": they move to the agent's summary.
func TestReadVersion1AgentSections(t *testing.T) {
	in := `{"completed": 1,
		"agents": [{"agent": "a", "summary": {"sched": {"folded_intervals": 1}}}, {"agent": "b"}],
		"collectors": {"a/sched": {"folded_intervals": 9}, "b/tcp": {"connections": [{"local": "1.2.3.4:80"}]},
			"b/gpu": {"available": true}, "c/sched": {"folded_intervals": 5}}}`
	d, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if d.SchemaVersion != SchemaVersion {
		t.Errorf("version %d", d.SchemaVersion)
	}
	a, b := d.Agents[0].Summary, d.Agents[1].Summary
	if a.Sched == nil || a.Sched.Folded != 1 {
		t.Errorf("agent a's own summary replaced: %+v", a.Sched)
	}
	if b == nil || b.TCP == nil || len(b.TCP.Connections) != 1 || b.TCP.Connections[0].Local != "1.2.3.4:80" || b.GPU == nil || !b.GPU.Available {
		t.Errorf("agent b's sections not moved to its summary: %+v", b)
	}
	if got := d.Collectors.Names(); !reflect.DeepEqual(got, []string{"c/sched"}) {
		t.Errorf("collectors left %v, want only the section of an agent not in agents[]", got)
	}
}
