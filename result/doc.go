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
	"regexp"
	"sort"
	"strings"

	"github.com/bpfbench/bpfbench/correlate"
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
	Validation json.RawMessage `json:"validation,omitempty"`
	// Attribution is the run's answer: each interval's excess over the
	// baseline split over the critical path's causes (Model
	// "critical_path"), per band, request and (Timeline, Phases) second
	// and phase. A result.json written before the critical path became
	// the attribution has the activity model here, with no model: Read
	// moves it to Activity (RebuildAttribution, in job, rebuilds this
	// from the run's gaps file).
	Attribution *correlate.Summary `json:"attribution,omitempty"`
	// Activity is the union of overlapping activity (correlate's model):
	// which causes were active during the intervals, not what delayed
	// them. It is never a cause stated to the user; the report shows it
	// as "what else was active".
	Activity *correlate.Summary `json:"activity,omitempty"`
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
	// Gateway is the time per hop through a proxy in front of the engine
	// (run --via-pid/--via-port).
	Gateway *Gateway `json:"gateway,omitempty"`
	// Agents is each remote agent's collection and clock, for a run that
	// followed the server through the daemons of its nodes (run --agent).
	Agents []Agent `json:"agents,omitempty"`
	// ClockBoundNs is the widest agent clock bound: spans shorter than it
	// were kept out of the attribution and the critical path.
	ClockBoundNs int64 `json:"clock_bound_ns,omitempty"`
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

// Names lists the sections present, in the order the report shows them.
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
	return out
}

// Section is the summary of a section by name (nil when absent).
func (c *Collectors) Section(name string) any {
	if c == nil {
		return nil
	}
	switch name {
	case "sched":
		return c.Sched
	case "blockio":
		return c.BlockIO
	case "tcp":
		return c.TCP
	case "cuda":
		return c.CUDA
	case "gpu":
		return c.GPU
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
// among the load generator's.
func (d *Document) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal((*plain)(d))
	if err != nil || len(d.Percentiles) == 0 {
		return b, err
	}
	keys := make([]string, 0, len(d.Percentiles))
	for k := range d.Percentiles {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	buf.Grow(len(b) + 32*len(keys))
	buf.Write(b[:len(b)-1])
	for _, k := range keys {
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(d.Percentiles[k])
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", k, err)
		}
		buf.WriteByte(',')
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(vb)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON reads a document of any version and migrates it to this
// one (migrate).
func (d *Document) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, (*plain)(d)); err != nil {
		return err
	}
	ps, err := percentiles(b)
	if err != nil {
		return err
	}
	d.Percentiles = ps
	d.migrate()
	return nil
}

// percentiles reads the top-level percentile fields of a document.
func percentiles(b []byte) (map[string]float64, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var out map[string]float64
	var skip struct{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := t.(string)
		if _, ok := PercentileKey(k); !ok {
			if err := dec.Decode(&skip); err != nil {
				return nil, err
			}
			continue
		}
		var f *float64
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("reading %s: %w", k, err)
		}
		if out == nil {
			out = map[string]float64{}
		}
		if f != nil {
			out[k] = *f
		}
	}
	return out, nil
}

// migrate brings a document of an earlier version to SchemaVersion.
func (d *Document) migrate() {
	if d.SchemaVersion == 0 {
		d.SchemaVersion = 1
	}
	if a := d.Attribution; a != nil && a.Model == "" {
		// Version 1 of a bpfbench that attributed by overlapping
		// activity: that is activity, not the answer.
		a.Model = correlate.ModelActivity
		if d.Activity == nil {
			d.Activity = a
		}
		d.Attribution = nil
		d.legacy = true
	}
	if d.SchemaVersion < SchemaVersion {
		d.SchemaVersion = SchemaVersion
	}
}

// Legacy reports whether the document was written before the critical path
// became the attribution: its timeline's and phases' causes are the
// activity model's until job.RebuildAttribution rebuilds them from the
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
		r = zr
	}
	d, err := Read(r)
	if err != nil {
		return nil, fmt.Errorf("%s is not a bpfbench result: %w", path, err)
	}
	return d, nil
}

// WriteFile writes d as result.json, atomically (a temporary file renamed
// over path once complete), with SchemaVersion.
func (d *Document) WriteFile(path string) error {
	d.SchemaVersion = SchemaVersion
	return atomicfile.Write(path, 0o644, func(w *bufio.Writer) error {
		enc := json.NewEncoder(w)
		return enc.Encode(d)
	})
}
