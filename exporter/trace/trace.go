// Package trace writes a run's timeline as Chrome trace event JSON
// ({"traceEvents":[...]}), which ui.perfetto.dev and chrome://tracing open:
// one track per request with its token intervals as slices, and tracks for
// the server's threads, block requests, CUDA calls, GPU counters and TCP
// episodes. Timestamps are CLOCK_MONOTONIC ns relative to the run's origin,
// written in microseconds as the format wants.
package trace

import (
	"encoding/json"
	"io"
	"sort"
)

// Event is one trace event in the Chrome trace event format.
type Event struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  *float64       `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	S    string         `json:"s,omitempty"`
	Args map[string]any `json:"args,omitempty"`
}

// Process ids of the trace's track groups.
const (
	PidRequests = 1 // one thread track per request
	PidServer   = 2 // one thread track per server thread
	PidBlock    = 3 // block requests, one track per device
	PidCUDA     = 4 // CUDA calls, one track per server thread
	PidGPU      = 5 // NVML counters
	PidNetwork  = 6 // TCP episodes, one track per client port
)

// Trace accumulates events; it is not safe for concurrent use.
type Trace struct {
	origin int64
	events []Event
	named  map[[2]int]bool
}

// New returns a trace whose time zero is origin (CLOCK_MONOTONIC ns).
func New(origin int64) *Trace {
	t := &Trace{origin: origin, named: map[[2]int]bool{}}
	for pid, name := range map[int]string{
		PidRequests: "Requests (client)", PidServer: "Server threads", PidBlock: "Block IO",
		PidCUDA: "CUDA calls", PidGPU: "GPU (NVML)", PidNetwork: "TCP connections",
	} {
		t.events = append(t.events,
			Event{Name: "process_name", Ph: "M", Pid: pid, Args: map[string]any{"name": name}},
			Event{Name: "process_sort_index", Ph: "M", Pid: pid, Args: map[string]any{"sort_index": pid}})
	}
	return t
}

func (t *Trace) us(ns int64) float64 { return float64(ns-t.origin) / 1e3 }

// NameTrack names the track (pid, tid) once.
func (t *Trace) NameTrack(pid, tid int, name string) {
	k := [2]int{pid, tid}
	if t.named[k] {
		return
	}
	t.named[k] = true
	t.events = append(t.events, Event{Name: "thread_name", Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"name": name}})
}

// Slice adds a complete event [startNs, endNs) on track (pid, tid).
func (t *Trace) Slice(pid, tid int, name, cat string, startNs, endNs int64, args map[string]any) {
	if endNs < startNs {
		endNs = startNs
	}
	d := float64(endNs-startNs) / 1e3
	t.events = append(t.events, Event{Name: name, Cat: cat, Ph: "X", Ts: t.us(startNs), Dur: &d, Pid: pid, Tid: tid, Args: args})
}

// Instant adds a point event on track (pid, tid).
func (t *Trace) Instant(pid, tid int, name, cat string, ns int64, args map[string]any) {
	t.events = append(t.events, Event{Name: name, Cat: cat, Ph: "i", S: "t", Ts: t.us(ns), Pid: pid, Tid: tid, Args: args})
}

// Counter adds counter values at ns on process pid (one track per name).
func (t *Trace) Counter(pid int, name string, ns int64, values map[string]float64) {
	args := make(map[string]any, len(values))
	for k, v := range values {
		args[k] = v
	}
	t.events = append(t.events, Event{Name: name, Ph: "C", Ts: t.us(ns), Pid: pid, Args: args})
}

// Len is the number of events.
func (t *Trace) Len() int { return len(t.events) }

// WriteTo writes {"traceEvents":[...]} with events in time order
// (metadata first).
func (t *Trace) WriteTo(w io.Writer) (int64, error) {
	sort.SliceStable(t.events, func(i, j int) bool {
		mi, mj := t.events[i].Ph == "M", t.events[j].Ph == "M"
		if mi != mj {
			return mi
		}
		return t.events[i].Ts < t.events[j].Ts
	})
	cw := &countWriter{w: w}
	enc := json.NewEncoder(cw)
	if _, err := io.WriteString(cw, `{"displayTimeUnit":"ms","traceEvents":[`); err != nil {
		return cw.n, err
	}
	for i := range t.events {
		if i > 0 {
			if _, err := io.WriteString(cw, ","); err != nil {
				return cw.n, err
			}
		}
		if err := enc.Encode(&t.events[i]); err != nil {
			return cw.n, err
		}
	}
	_, err := io.WriteString(cw, "]}\n")
	return cw.n, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// File is the decoded form of a trace file, for readers such as
// `bpfbench report`.
type File struct {
	TraceEvents []Event `json:"traceEvents"`
}

// Read decodes a trace file.
func Read(r io.Reader) (*File, error) {
	var f File
	if err := json.NewDecoder(r).Decode(&f); err != nil {
		return nil, err
	}
	return &f, nil
}
