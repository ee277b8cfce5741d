// Package trace writes a run's timeline as Chrome trace event JSON
// ({"traceEvents":[...]}), which ui.perfetto.dev and chrome://tracing open:
// one track per request with its token intervals as slices, and tracks for
// the server's threads, block requests, CUDA calls, GPU counters and TCP
// episodes. Timestamps are CLOCK_MONOTONIC ns relative to the run's origin,
// written in microseconds as the format wants.
//
// A Trace either holds its events and writes them sorted (New, WriteTo),
// or streams each event to a writer as it is added (NewStream, Close), so
// that a long run's timeline costs disk, not memory. The format does not
// ask for events in time order; readers sort them.
package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"sort"
	"strconv"
)

// Event is one trace event in the Chrome trace event format.
type Event struct {
	Name string   `json:"name"`
	Cat  string   `json:"cat,omitempty"`
	Ph   string   `json:"ph"`
	Ts   float64  `json:"ts"`
	Dur  *float64 `json:"dur,omitempty"`
	Pid  int      `json:"pid"`
	Tid  int      `json:"tid"`
	S    string   `json:"s,omitempty"`
	// ID and Bp tie flow events ("s", "t", "f") together and to the
	// enclosing slice.
	ID   string         `json:"id,omitempty"`
	Bp   string         `json:"bp,omitempty"`
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
	// PidServerMetrics holds the server's own /metrics, one counter track
	// per vocabulary name (per raw series for an unknown engine).
	PidServerMetrics = 7
	// PidCriticalPath holds the slowest gaps' critical paths: a track
	// per thread on the path, flow arrows from step to step.
	PidCriticalPath = 8
)

// Trace accumulates events, or streams them (NewStream); it is not safe
// for concurrent use.
type Trace struct {
	origin int64
	events []Event
	named  map[[2]int]bool
	n      int
	// Streaming: events go to out as they are added; err is the first
	// write error, which Close returns.
	out    *bufio.Writer
	enc    *json.Encoder
	err    error
	closed bool
}

var processNames = map[int]string{
	PidRequests: "Requests (client)", PidServer: "Server threads", PidBlock: "Block IO",
	PidCUDA: "CUDA calls", PidGPU: "GPU (NVML)", PidNetwork: "TCP connections",
	PidServerMetrics: "Server metrics (/metrics)",
	PidCriticalPath:  "Critical paths of the slowest gaps",
}

// New returns a trace whose time zero is origin (CLOCK_MONOTONIC ns).
func New(origin int64) *Trace {
	t := &Trace{origin: origin, named: map[[2]int]bool{}}
	t.header()
	return t
}

// NewStream returns a trace that writes {"traceEvents":[...]} to w as
// events are added, in the order they are added; Close ends the JSON.
func NewStream(w io.Writer, origin int64) *Trace {
	t := &Trace{origin: origin, named: map[[2]int]bool{}, out: bufio.NewWriterSize(w, 256<<10)}
	t.enc = json.NewEncoder(t.out)
	_, t.err = t.out.WriteString(`{"displayTimeUnit":"ms","traceEvents":[`)
	t.header()
	return t
}

func (t *Trace) header() {
	for pid := PidRequests; pid <= PidCriticalPath; pid++ {
		t.add(Event{Name: "process_name", Ph: "M", Pid: pid, Args: map[string]any{"name": processNames[pid]}})
		t.add(Event{Name: "process_sort_index", Ph: "M", Pid: pid, Args: map[string]any{"sort_index": pid}})
	}
}

func (t *Trace) add(e Event) {
	t.n++
	if t.out == nil {
		t.events = append(t.events, e)
		return
	}
	if t.err != nil || t.closed {
		return
	}
	if t.n > 1 {
		t.err = t.out.WriteByte(',')
	}
	if t.err == nil {
		t.err = t.enc.Encode(&e)
	}
}

// Close ends a streamed trace and flushes it; it returns the first write
// error. Events added after Close are dropped.
func (t *Trace) Close() error {
	if t.out == nil {
		return errors.New("trace: Close on a trace that is not streamed")
	}
	if t.closed {
		return t.err
	}
	t.closed = true
	if t.err == nil {
		_, t.err = t.out.WriteString("]}\n")
	}
	if t.err == nil {
		t.err = t.out.Flush()
	}
	return t.err
}

// Err is the first write error of a streamed trace.
func (t *Trace) Err() error { return t.err }

func (t *Trace) us(ns int64) float64 { return float64(ns-t.origin) / 1e3 }

// NameTrack names the track (pid, tid) once.
func (t *Trace) NameTrack(pid, tid int, name string) {
	k := [2]int{pid, tid}
	if t.named[k] {
		return
	}
	t.named[k] = true
	t.add(Event{Name: "thread_name", Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"name": name}})
}

// Slice adds a complete event [startNs, endNs) on track (pid, tid).
func (t *Trace) Slice(pid, tid int, name, cat string, startNs, endNs int64, args map[string]any) {
	if endNs < startNs {
		endNs = startNs
	}
	d := float64(endNs-startNs) / 1e3
	t.add(Event{Name: name, Cat: cat, Ph: "X", Ts: t.us(startNs), Dur: &d, Pid: pid, Tid: tid, Args: args})
}

// Flow adds one end of a flow arrow: phase "s" starts flow id inside the
// slice enclosing ns on track (pid, tid), "f" ends it in the slice that
// encloses ns there (Perfetto draws the arrow between the two slices).
func (t *Trace) Flow(pid, tid int, name, cat string, id int, phase string, ns int64) {
	e := Event{Name: name, Cat: cat, Ph: phase, Ts: t.us(ns), Pid: pid, Tid: tid, ID: strconv.Itoa(id)}
	if phase == "f" {
		e.Bp = "e"
	}
	t.add(e)
}

// Instant adds a point event on track (pid, tid).
func (t *Trace) Instant(pid, tid int, name, cat string, ns int64, args map[string]any) {
	t.add(Event{Name: name, Cat: cat, Ph: "i", S: "t", Ts: t.us(ns), Pid: pid, Tid: tid, Args: args})
}

// Counter adds counter values at ns on process pid (one track per name).
func (t *Trace) Counter(pid int, name string, ns int64, values map[string]float64) {
	args := make(map[string]any, len(values))
	for k, v := range values {
		args[k] = v
	}
	t.add(Event{Name: name, Ph: "C", Ts: t.us(ns), Pid: pid, Args: args})
}

// Len is the number of events.
func (t *Trace) Len() int { return t.n }

// WriteTo writes {"traceEvents":[...]} with events in time order
// (metadata first). A streamed trace has nothing to write again.
func (t *Trace) WriteTo(w io.Writer) (int64, error) {
	if t.out != nil {
		return 0, errors.New("trace: WriteTo on a streamed trace")
	}
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
