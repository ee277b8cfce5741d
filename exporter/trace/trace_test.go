package trace

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestTraceFormat(t *testing.T) {
	tr := New(1_000_000)
	tr.NameTrack(PidRequests, 7, "request 7")
	tr.Slice(PidRequests, 7, "token 1", "itl", 3_000_000, 5_500_000, map[string]any{"cpu_runqueue": 0.5})
	tr.Instant(PidNetwork, 50000, "retransmit", "tcp", 2_000_000, nil)
	tr.Counter(PidGPU, "gpu0 utilization", 1_500_000, map[string]float64{"ratio": 0.9})
	var buf bytes.Buffer
	if _, err := tr.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	var f struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(buf.Bytes(), &f); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, buf.String())
	}
	var slice map[string]any
	lastTs := -1.0
	seenData := false
	for _, e := range f.TraceEvents {
		if e["ph"] == "M" {
			if seenData {
				t.Error("metadata after data events")
			}
			continue
		}
		seenData = true
		ts := e["ts"].(float64)
		if ts < lastTs {
			t.Error("events not in time order")
		}
		lastTs = ts
		if e["ph"] == "X" {
			slice = e
		}
	}
	if slice == nil || slice["ts"].(float64) != 2000 || slice["dur"].(float64) != 2500 || slice["tid"].(float64) != 7 {
		t.Errorf("slice %v: want ts 2000 µs, dur 2500 µs", slice)
	}
	rf, err := Read(&buf)
	if err == nil && len(rf.TraceEvents) == 0 {
		t.Error("Read found no events")
	}
}
