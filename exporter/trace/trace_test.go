package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
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
	rf := readChecked(t, buf.Bytes())
	xs := 0
	for _, e := range rf.TraceEvents {
		if e.Ph != "X" {
			continue
		}
		xs++
		if e.Ts != 2000 || e.Dur == nil || *e.Dur != 2500 || e.Tid != 7 || e.Args["cpu_runqueue"] != 0.5 {
			t.Errorf("Read decoded the slice as %+v", e)
		}
	}
	if xs != 1 {
		t.Errorf("Read found %d slices, the file has 1", xs)
	}
}

// readChecked reads raw with Read and checks every event against the
// file's own JSON decoded generically (the ground truth): same count, same
// order, and each event re-encoded equal to the object in the file.
func readChecked(t *testing.T, raw []byte) *File {
	t.Helper()
	f, err := Read(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("Read: %v\n%s", err, raw)
	}
	var truth struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(raw, &truth); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, raw)
	}
	if len(truth.TraceEvents) == 0 {
		t.Fatal("the file holds no events")
	}
	if len(f.TraceEvents) != len(truth.TraceEvents) {
		t.Fatalf("Read found %d events, the file has %d", len(f.TraceEvents), len(truth.TraceEvents))
	}
	for i, e := range f.TraceEvents {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, truth.TraceEvents[i]) {
			t.Errorf("event %d: Read gives %v, the file has %v", i, got, truth.TraceEvents[i])
		}
	}
	return f
}

// Read fails on what is not a whole trace file.
func TestReadRejects(t *testing.T) {
	var whole bytes.Buffer
	tr := New(0)
	sample(tr)
	if _, err := tr.WriteTo(&whole); err != nil {
		t.Fatal(err)
	}
	var unclosed bytes.Buffer
	st := NewStream(&unclosed, 0)
	sample(st)
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string]string{
		"empty":     "",
		"not JSON":  "traceEvents",
		"truncated": whole.String()[:whole.Len()/2],
		"unclosed":  unclosed.String(), // a stream not yet closed
		"wrong ts":  `{"traceEvents":[{"name":"x","ph":"X","ts":"soon","pid":1,"tid":1}]}`,
	} {
		if f, err := Read(strings.NewReader(in)); err == nil {
			t.Errorf("%s: Read accepted it: %d events", name, len(f.TraceEvents))
		}
	}
}

func sample(tr *Trace) {
	tr.NameTrack(PidRequests, 7, "request 7")
	tr.Slice(PidRequests, 7, "token 1", "itl", 3_000_000, 5_500_000, map[string]any{"cpu_runqueue": 0.5})
	tr.NameTrack(PidRequests, 7, "request 7 again") // named once
	tr.Instant(PidNetwork, 50000, "retransmit", "tcp", 2_000_000, nil)
	tr.Counter(PidGPU, "gpu0 utilization", 1_500_000, map[string]float64{"ratio": 0.9})
}

// A streamed trace is the same JSON document, its events in the order
// they were added, and reads back with Read.
func TestStreamFormat(t *testing.T) {
	var mem, streamed bytes.Buffer
	tr := New(1_000_000)
	sample(tr)
	if _, err := tr.WriteTo(&mem); err != nil {
		t.Fatal(err)
	}
	st := NewStream(&streamed, 1_000_000)
	sample(st)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if st.Len() != tr.Len() {
		t.Errorf("streamed %d events, held %d", st.Len(), tr.Len())
	}
	a := readChecked(t, mem.Bytes())
	b := readChecked(t, streamed.Bytes())
	key := func(e Event) string { k, _ := json.Marshal(e); return string(k) }
	count := map[string]int{}
	for _, e := range a.TraceEvents {
		count[key(e)]++
	}
	for _, e := range b.TraceEvents {
		count[key(e)]--
	}
	for k, n := range count {
		if n != 0 {
			t.Errorf("event %s: %d more in the held trace than in the streamed one", k, n)
		}
	}
	if last := b.TraceEvents[len(b.TraceEvents)-1]; last.Ph != "C" {
		t.Errorf("streamed events not in the order added: last is %+v", last)
	}
	if _, err := st.WriteTo(&mem); err == nil {
		t.Error("WriteTo on a streamed trace succeeded")
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n += len(p); f.n > 1000 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

// A write error is kept and returned by Close.
func TestStreamWriteError(t *testing.T) {
	st := NewStream(&failWriter{}, 0)
	for i := range 100000 {
		st.Slice(PidServer, 1, "x", "sched", int64(i), int64(i)+5, nil)
	}
	if err := st.Close(); err == nil || err.Error() != "disk full" {
		t.Errorf("Close: %v, want disk full", err)
	}
}
