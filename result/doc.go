// Package result is the layout of a run's files: result.json (Document),
// validation.json and the gaps file, their reader and writer, and the
// migrations that keep files of earlier versions loading. It is the one
// definition of these types: the job writes them, the report renders
// them, diff compares them, the collectors' summaries are its section
// types.
package result

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/bpfbench/bpfbench/internal/atomicfile"
	"github.com/bpfbench/bpfbench/internal/manifest"
	"github.com/bpfbench/bpfbench/internal/overhead"
)

// SchemaVersion is the version of result.json this package writes.
// Version 1 is every file written before the field existed (untyped
// sections, the activity model's attribution in the oldest); version 2
// adds schema_version and is otherwise the same keys.
const SchemaVersion = 2

// Document is a parsed result.json.
type Document struct {
	// SchemaVersion is the version of this layout (SchemaVersion); a
	// file without one is version 1.
	SchemaVersion int `json:"schema_version"`
	// Loadgen is the load generator's vLLM-compatible fields and its
	// "bpfbench" records, at the top level of result.json.
	Loadgen
	// Percentiles are the load generator's percentile fields
	// (p99_ttft_ms, ...: those of the run's --percentiles), by name.
	Percentiles map[string]float64 `json:"-"`
	// Manifest is what ran where: versions, environment, files.
	Manifest *manifest.Manifest `json:"manifest,omitempty"`
	// Validation is validation.json's content, for a `validate` run.
	Validation *Validation `json:"validation,omitempty"`
	// Attribution is the run's answer: each interval's excess over the
	// baseline split over the critical path's causes (Model
	// "critical_path"), per band, request and (Timeline, Phases) second
	// and phase. A result.json written before the critical path became
	// the attribution has the activity model here, with no model: Read
	// moves it to Activity (RebuildAttribution, in job, rebuilds this
	// from the run's gaps file).
	Attribution *Summary `json:"attribution,omitempty"`
	// Activity is the union of overlapping activity (correlate's model):
	// which causes were active during the intervals, not what delayed
	// them. It is never a cause stated to the user; the report shows it
	// as "what else was active".
	Activity *Summary `json:"activity,omitempty"`
	// Collectors holds each section's summary, as `attach --output json` has it.
	Collectors *Collectors     `json:"collectors,omitempty"`
	Collection *Collection     `json:"collection,omitempty"`
	Timeline   []TimelinePoint `json:"timeline,omitempty"`
	Phases     []Phase         `json:"phases,omitempty"`
	// Diagnosis is a short plain-language reading of the run.
	Diagnosis []string `json:"diagnosis,omitempty"`
	// Overhead is what bpfbench cost the machine and the target while it
	// collected (its own measure).
	Overhead *overhead.Report `json:"overhead,omitempty"`
	// ServerMetrics is the server's own Prometheus metrics over the run,
	// in one vocabulary; ServerQueue the time requests waited in its
	// queue, and that time's share of the TTFT.
	ServerMetrics *ServerMetrics `json:"server_metrics,omitempty"`
	ServerQueue   *ServerQueue   `json:"server_queue,omitempty"`
	// CriticalPath is each gap's critical path, beside Attribution.
	CriticalPath *CriticalPath `json:"critical_path,omitempty"`
	// Incident is what the daemon's flight recorder captured: the
	// trigger, the window and its verdict (an incident bundle).
	Incident *Incident `json:"incident,omitempty"`
	// Gateway is the time per hop through a proxy in front of the engine
	// (run --via-pid/--via-port).
	Gateway *Gateway `json:"gateway,omitempty"`
	// Agents is each remote agent's collection and clock, for a run that
	// followed the server through the daemons of its nodes (run --agent).
	Agents []Agent `json:"agents,omitempty"`
	// ClockBoundNs is the widest agent clock bound: spans shorter than it
	// were kept out of the attribution and the critical path.
	ClockBoundNs int64 `json:"clock_bound_ns,omitempty"`
	// Other holds the top-level keys this version does not know (those of
	// a newer bpfbench, or a load generator field not typed here), as
	// read; they are written back unchanged.
	Other map[string]json.RawMessage `json:"-"`
	// present: the top-level keys of the file read that were not null
	// (nil for a document built in memory).
	present map[string]bool
	// legacy: read from a file whose attribution was the activity model.
	legacy bool
}

// Collectors are each section's summary, as `attach --output json` has it.
type Collectors struct {
	Sched   *Sched   `json:"sched,omitempty"`
	BlockIO *BlockIO `json:"blockio,omitempty"`
	TCP     *TCP     `json:"tcp,omitempty"`
	CUDA    *CUDA    `json:"cuda,omitempty"`
	GPU     *GPU     `json:"gpu,omitempty"`
	// Other holds the sections this version does not know (a newer
	// bpfbench's), as read; they are written back unchanged and the
	// report shows them as they are.
	Other map[string]json.RawMessage `json:"-"`
}

type plainCollectors Collectors

// MarshalJSON writes the typed sections and the others.
func (c *Collectors) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal((*plainCollectors)(c))
	if err != nil || len(c.Other) == 0 {
		return b, err
	}
	var buf bytes.Buffer
	buf.Write(b[:len(b)-1])
	keys := make([]string, 0, len(c.Other))
	for k := range c.Other {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if c.field(k) != nil {
			continue
		}
		if !json.Valid(c.Other[k]) {
			return nil, fmt.Errorf("encoding collectors.%s: not valid JSON", k)
		}
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(c.Other[k])
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON reads the typed sections and keeps the others in Other.
func (c *Collectors) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*c = Collectors{}
	for k, v := range m {
		dst := c.field(k)
		if dst == nil {
			if c.Other == nil {
				c.Other = map[string]json.RawMessage{}
			}
			c.Other[k] = v
			continue
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return fmt.Errorf("reading section %s: %w", k, err)
		}
	}
	return nil
}

// Set puts a section's summary (a collector's Summary(), or its JSON
// decoded as a map, from an agent) in its field; false for a name or a
// value it does not know.
func (c *Collectors) Set(name string, v any) bool {
	switch x := v.(type) {
	case Sched:
		c.Sched = &x
	case BlockIO:
		c.BlockIO = &x
	case TCP:
		c.TCP = &x
	case CUDA:
		c.CUDA = &x
	case GPU:
		c.GPU = &x
	default:
		// A summary that crossed the wire as JSON.
		dst := c.field(name)
		if dst == nil {
			return false
		}
		b, err := json.Marshal(v)
		if err != nil {
			return false
		}
		return json.Unmarshal(b, dst) == nil
	}
	return true
}

func (c *Collectors) field(name string) any {
	switch name {
	case "sched":
		return &c.Sched
	case "blockio":
		return &c.BlockIO
	case "tcp":
		return &c.TCP
	case "cuda":
		return &c.CUDA
	case "gpu":
		return &c.GPU
	}
	return nil
}

// Names lists the sections present, in the order the report shows them,
// then the others (Other) by name.
func (c *Collectors) Names() []string {
	if c == nil {
		return nil
	}
	var out []string
	for _, s := range []struct {
		name string
		ok   bool
	}{{"sched", c.Sched != nil}, {"blockio", c.BlockIO != nil}, {"tcp", c.TCP != nil}, {"cuda", c.CUDA != nil}, {"gpu", c.GPU != nil}} {
		if s.ok {
			out = append(out, s.name)
		}
	}
	others := make([]string, 0, len(c.Other))
	for k := range c.Other {
		if c.field(k) == nil {
			others = append(others, k)
		}
	}
	sort.Strings(others)
	return append(out, others...)
}

// Section is the summary of a section by name (nil when absent, not a
// typed nil); a section this version does not know is its JSON
// (json.RawMessage).
func (c *Collectors) Section(name string) any {
	if c == nil {
		return nil
	}
	if p := c.field(name); p != nil {
		if v := reflect.ValueOf(p).Elem(); !v.IsNil() {
			return v.Interface()
		}
		return nil
	}
	if v, ok := c.Other[name]; ok {
		return v
	}
	return nil
}

var percentileKey = regexp.MustCompile(`^p([0-9]+(?:\.[0-9]+)?)_(ttft|tpot|itl|e2el)_ms$`)

// PercentileKey reports whether key is a percentile field (p99_ttft_ms)
// and its percentile ("99").
func PercentileKey(key string) (string, bool) {
	m := percentileKey.FindStringSubmatch(key)
	if m == nil {
		return "", false
	}
	return m[1], true
}

type plain Document

// MarshalJSON writes the document as one object, the percentile fields
// among the load generator's (as WriteFile does).
func (d *Document) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	if err := d.encode(&buf); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// UnmarshalJSON reads a document of any version and migrates it to this
// one (migrate). Keys it does not know are kept in Other.
func (d *Document) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, (*plain)(d)); err != nil {
		return err
	}
	ps, other, present, err := extras(b)
	if err != nil {
		return err
	}
	d.Percentiles, d.Other, d.present = ps, other, present
	d.migrate()
	return nil
}

// extras reads the top-level keys of a document that are not fields of
// Document: the percentile fields, and the others; and which keys the
// document has (not null).
func extras(b []byte) (ps map[string]float64, other map[string]json.RawMessage, present map[string]bool, err error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		return nil, nil, nil, err
	}
	present = map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, nil, err
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, nil, fmt.Errorf("reading %s: %w", k, err)
		}
		if string(v) != "null" {
			present[k] = true
		}
		if _, ok := docField[k]; ok {
			continue
		}
		if _, ok := PercentileKey(k); ok {
			var f *float64
			if err := json.Unmarshal(v, &f); err != nil {
				return nil, nil, nil, fmt.Errorf("reading %s: %w", k, err)
			}
			if ps == nil {
				ps = map[string]float64{}
			}
			if f != nil {
				ps[k] = *f
			}
			continue
		}
		if other == nil {
			other = map[string]json.RawMessage{}
		}
		other[k] = v
	}
	return ps, other, present, nil
}

// Has reports whether the file d was read from has key, not null; for a
// document built in memory, whether it has a field or a percentile of
// that name.
func (d *Document) Has(key string) bool {
	if d.present != nil {
		return d.present[key]
	}
	if _, ok := d.Percentiles[key]; ok {
		return true
	}
	_, ok := docField[key]
	return ok
}

// migrate brings a document of an earlier version to SchemaVersion.
func (d *Document) migrate() {
	if d.SchemaVersion == 0 {
		d.SchemaVersion = 1
	}
	if a := d.Attribution; a != nil && a.Model == "" {
		// Version 1 of a bpfbench that attributed by overlapping
		// activity: that is activity, not the answer.
		a.Model = ModelActivity
		if d.Activity == nil {
			d.Activity = a
		}
		d.Attribution = nil
		d.legacy = true
	}
	d.agentSections()
	if d.SchemaVersion < SchemaVersion {
		d.SchemaVersion = SchemaVersion
	}
}

// agentSections moves the sections of a version 1 run with several
// agents, which collectors held as "AGENT/section", to that agent's
// summary in agents[] (where version 2 has them), unless it has one.
// A section of an agent not in agents[] stays in Other.
func (d *Document) agentSections() {
	if d.Collectors == nil {
		return
	}
	for k, v := range d.Collectors.Other {
		agent, sec, ok := strings.Cut(k, "/")
		if !ok {
			continue
		}
		for i := range d.Agents {
			a := &d.Agents[i]
			if a.Agent != agent {
				continue
			}
			if a.Summary == nil {
				a.Summary = &Collectors{}
			}
			if a.Summary.Section(sec) == nil {
				dst := a.Summary.field(sec)
				if dst == nil || json.Unmarshal(v, dst) != nil {
					break
				}
			}
			delete(d.Collectors.Other, k)
			break
		}
	}
	if len(d.Collectors.Other) == 0 {
		d.Collectors.Other = nil
	}
}

// Legacy reports whether the document was written before the critical path
// became the attribution: its timeline's and phases' causes are the
// activity model's until run.RebuildAttribution (job/run) rebuilds them from the
// run's gaps file (or ForgetActivityCauses drops them).
func (d *Document) Legacy() bool { return d.legacy }

// ForgetActivityCauses removes the activity model's causes from a legacy
// document's timeline and phases, where they would read as blame, and
// takes each phase's top cause from the critical path's phases.
func (d *Document) ForgetActivityCauses() {
	if !d.legacy {
		return
	}
	for i := range d.Timeline {
		d.Timeline[i].CausesMs = nil
	}
	var cps []CriticalPhase
	if d.CriticalPath != nil {
		cps = d.CriticalPath.Phases
	}
	for i := range d.Phases {
		p := &d.Phases[i]
		p.TopCause, p.TopCauseBasis, p.TopShare = "", "", 0
		p.AttributedMsPerInterval, p.ITLP99, p.ITLAll, p.TTFT = nil, nil, nil, nil
		if i < len(cps) && cps[i].Name == p.Name {
			if i > 0 {
				p.TopCause, p.TopShare = cps[i].TailTop, cps[i].TailAddedShares[cps[i].TailTop]
				p.TopCauseBasis = "largest addition to the slowest 10% of gaps over " + cps[0].Name
			} else if b := cps[i].ITLP99; b != nil {
				p.TopCause, p.TopShare, p.TopCauseBasis = b.Top, b.ExcessShares[b.Top], "slowest 1% of gaps"
				p.ITLP99 = b.ExcessShares
			}
		}
	}
	d.legacy = false
}

// Float reads a vLLM metric by its field name: the load generator's
// numbers (completed, mean_ttft_ms, ...) and the percentile fields; 0
// when absent.
func (d *Document) Float(key string) float64 {
	if v, ok := d.Percentiles[key]; ok {
		return v
	}
	v, _ := d.Loadgen.Metric(key)
	return v
}

// Read reads a result.json of any version.
func Read(r io.Reader) (*Document, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var d Document
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// Load reads a result.json (gzip-compressed when its name ends in .gz).
func Load(path string) (*Document, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		defer zr.Close()
		var size int64
		if st, err := f.Stat(); err == nil {
			size = st.Size()
		}
		lim := resultCap(size)
		r = &capped{r: zr, left: lim, limit: lim}
	}
	d, err := Read(r)
	if err != nil {
		return nil, fmt.Errorf("%s is not a bpfbench result: %w", path, err)
	}
	return d, nil
}

// WriteFile writes d as result.json, atomically (a temporary file renamed
// over path once complete), with SchemaVersion. It writes one key at a
// time, the per-request lists one element at a time (encode): the lists
// of an hour-long run are about 100 MB, and encoding the whole document
// at once held another copy of them.
func (d *Document) WriteFile(path string) error {
	d.SchemaVersion = SchemaVersion
	return atomicfile.Write(path, 0o644, func(w *bufio.Writer) error { return d.encode(w) })
}
