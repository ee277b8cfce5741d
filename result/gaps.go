package result

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"

	"github.com/bpfbench/bpfbench/result/cause"
)

// GapsFile is the run directory's file of every walked gap, compactly
// (gzip'd JSON lines: a GapsHeader, then a Gap a line, each a JSON
// array): what `report DIR --baseline DIR2` recomputes the critical
// path's excess from, and what a later run's `--baseline DIR` takes its
// tail from. docs/gaps.schema.json is the schema of its lines.
const GapsFile = "gaps.jsonl.gz"

// GapsFormat names the line layout this version writes: request, index,
// start and end (ns), no_arrival (0 or 1), then each cause's ns in the
// header's Causes order, then the hypervisor's steal (ns).
const GapsFormat = "bpfbench-gaps/2: [request, index, start_ns, end_ns, no_arrival, ns per cause..., hypervisor_steal_ns]"

// GapsFormat1 is the layout before the steal column (read as steal 0).
const GapsFormat1 = "bpfbench-gaps/1: [request, index, start_ns, end_ns, no_arrival, ns per cause...]"

// GapsHeader is the gaps file's first line.
type GapsHeader struct {
	// Format is the lines' layout: GapsFormat, or GapsFormat1 in an
	// older file.
	Format string `json:"format"`
	// Causes name the lines' per-cause columns, in order.
	Causes []string `json:"causes"`
	// RunStartNs is the run's start (CLOCK_MONOTONIC ns, as the gaps').
	RunStartNs int64       `json:"run_start_ns"`
	Phases     []GapsPhase `json:"phases,omitempty"`
}

// GapsPhase is a phase of the run (a scenario's), from and to in ns.
type GapsPhase struct {
	Name   string `json:"name"`
	FromNs int64  `json:"from_ns"`
	ToNs   int64  `json:"to_ns"`
}

// Gap is one walked token gap: a line of the gaps file after its header,
// the JSON array [request, index, start_ns, end_ns, no_arrival, ns per
// cause..., hypervisor_steal_ns] (GapsFormat).
type Gap struct {
	Request, Index int32
	StartNs, EndNs int64
	// NoArrival: the gap ended with no token's arrival seen.
	NoArrival bool
	// Ns is the gap's time per cause on its critical path.
	Ns [cause.NumCauses]int64
	// StealNs is the part of Ns[CPURunqueue] the hypervisor held.
	StealNs int64
}

// GapsWriter writes a gaps file, gzip'd: the header, then a line a gap.
type GapsWriter struct {
	zw  *gzip.Writer
	enc *json.Encoder
	row []int64
}

// NewGapsWriter writes the header of a gaps file in this version's
// layout (GapsFormat, critpath's causes) to w.
func NewGapsWriter(w io.Writer, runStartNs int64, phases []GapsPhase) (*GapsWriter, error) {
	// BestSpeed: a tenth of a run's own CPU went to compressing this at
	// the default level.
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	gw := &GapsWriter{zw: zw, enc: json.NewEncoder(zw), row: make([]int64, 6+cause.NumCauses)}
	h := GapsHeader{Format: GapsFormat, Causes: cause.Names(), RunStartNs: runStartNs, Phases: phases}
	if err := gw.enc.Encode(h); err != nil {
		return nil, err
	}
	return gw, nil
}

// Write writes g's line.
func (w *GapsWriter) Write(g Gap) error {
	row := w.row
	row[0], row[1], row[2], row[3], row[4] = int64(g.Request), int64(g.Index), g.StartNs, g.EndNs, 0
	if g.NoArrival {
		row[4] = 1
	}
	copy(row[5:], g.Ns[:])
	row[len(row)-1] = g.StealNs
	return w.enc.Encode(row)
}

// Close ends the compressed stream; it does not close the writer under it.
func (w *GapsWriter) Close() error { return w.zw.Close() }

// GapsReader reads a gaps file: its header, then a gap at a time.
type GapsReader struct {
	Header GapsHeader
	path   string
	f      *os.File
	dec    *json.Decoder
	idx    []cause.Cause // the columns' causes
	extra  int           // 1: the steal column
	line   int
	n      int // the gaps read
}

// OpenGaps opens the gaps file at path and reads its header. A file of
// the layout before the steal column (GapsFormat1), or with other causes
// or in another order, reads; a file naming a cause this version does not
// know does not.
func OpenGaps(path string) (*GapsReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r := &GapsReader{path: path, f: f, line: 1}
	if err := r.readHeader(); err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

func (r *GapsReader) readHeader() error {
	zr, err := gzip.NewReader(bufio.NewReader(r.f))
	if err != nil {
		return fmt.Errorf("%s: %w", r.path, err)
	}
	r.dec = json.NewDecoder(&lineCap{r: zr, max: maxGapLine})
	h := &r.Header
	if err := r.dec.Decode(h); err != nil {
		return fmt.Errorf("%s: its header: %w", r.path, err)
	}
	switch h.Format {
	case GapsFormat:
		r.extra = 1
	case GapsFormat1:
	default:
		return fmt.Errorf("%s is in format %q; this bpfbench reads %q", r.path, h.Format, GapsFormat)
	}
	// The causes by name: a file from a version with other causes maps
	// what it can and refuses what it cannot.
	r.idx = make([]cause.Cause, len(h.Causes))
	for i, name := range h.Causes {
		c, ok := cause.ByName(name)
		if !ok {
			return fmt.Errorf("%s names a cause this bpfbench does not know: %q", r.path, name)
		}
		r.idx[i] = c
	}
	return nil
}

// Next is the next gap; io.EOF after the last.
func (r *GapsReader) Next() (Gap, error) {
	r.line++
	var row []int64
	if err := r.dec.Decode(&row); err != nil {
		if errors.Is(err, io.EOF) {
			return Gap{}, io.EOF
		}
		return Gap{}, fmt.Errorf("%s line %d: %w (the %d gaps before it are kept)", r.path, r.line, err, r.n)
	}
	if want := 5 + len(r.idx) + r.extra; len(row) != want {
		return Gap{}, fmt.Errorf("%s line %d: %d fields, want %d", r.path, r.line, len(row), want)
	}
	g := Gap{Request: int32(row[0]), Index: int32(row[1]), StartNs: row[2], EndNs: row[3], NoArrival: row[4] != 0}
	for i, c := range r.idx {
		g.Ns[c] = row[5+i]
	}
	if r.extra > 0 {
		g.StealNs = row[5+len(r.idx)]
	}
	r.n++
	return g, nil
}

// Close closes the file.
func (r *GapsReader) Close() error { return r.f.Close() }

// ReadGaps reads the gaps file at path whole. On a bad line it returns
// the gaps before it with the error.
func ReadGaps(path string) (GapsHeader, []Gap, error) {
	r, err := OpenGaps(path)
	if err != nil {
		return GapsHeader{}, nil, err
	}
	defer r.Close()
	var out []Gap
	for {
		g, err := r.Next()
		if errors.Is(err, io.EOF) {
			return r.Header, out, nil
		}
		if err != nil {
			return r.Header, out, err
		}
		out = append(out, g)
	}
}

// GapsSchemaID is the $id of the gaps file's JSON Schema
// (docs/gaps.schema.json).
const GapsSchemaID = "https://github.com/bpfbench/bpfbench/docs/gaps.schema.json"

// GapsSchema is the JSON Schema (draft 2020-12) of a line of the gaps
// file: the header (GapsHeader, reflected as result.json's types are) or
// a gap (Gap, an array of integers: its columns after no_arrival are as
// many as the header's causes, and the steal column in GapsFormat).
func GapsSchema() ([]byte, error) {
	r := &reflector{defs: map[string]any{}}
	header := r.schema(reflect.TypeFor[GapsHeader]())
	props := r.defs["GapsHeader"].(map[string]any)["properties"].(map[string]any)
	props["format"] = map[string]any{"enum": []string{GapsFormat, GapsFormat1}}
	integer := func(desc string) map[string]any { return map[string]any{"type": "integer", "description": desc} }
	r.defs["Gap"] = map[string]any{
		"type":        "array",
		"description": "a walked token gap: [request, index, start_ns, end_ns, no_arrival, ns per cause in the header's causes order..., hypervisor_steal_ns (format 2)]",
		"prefixItems": []any{
			integer("request"), integer("index: the gap's token"), integer("start_ns"), integer("end_ns"),
			map[string]any{"enum": []int{0, 1}, "description": "no_arrival: 1 when the gap ended with no token's arrival seen"},
		},
		"items":    integer("ns per cause, then the hypervisor's steal"),
		"minItems": 5,
	}
	root := map[string]any{
		"$schema":     "https://json-schema.org/draft/2020-12/schema",
		"$id":         GapsSchemaID,
		"title":       "bpfbench gaps.jsonl.gz line",
		"description": "gaps.jsonl.gz is gzip'd JSON lines: the first the header, each after it a gap. Each line validates against this schema.",
		"anyOf":       []any{header, map[string]any{"$ref": "#/$defs/Gap"}},
		"$defs":       r.defs,
	}
	return encodeSchema(root)
}
