package result

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// field is one key of a JSON object and where its value is in the Go
// struct.
type field struct {
	name      string
	index     []int
	omitEmpty bool
	// loadOmitEmpty: omitted when empty in the load generator's own
	// layout too (tagged load:"omitempty"); loadIf: there only when the
	// field of that key is not empty (load:"if=KEY"). Its other keys are
	// always there.
	loadOmitEmpty bool
	loadIf        string
	// load: a field of the load generator's (written as encoded, not
	// indented).
	load bool
}

// docFields are result.json's top-level keys; docField finds one by name.
var (
	docFields = fieldsOf(reflect.TypeFor[plain](), nil, false)
	docField  = func() map[string]field {
		m := make(map[string]field, len(docFields))
		for _, f := range docFields {
			m[f.name] = f
		}
		return m
	}()
	detailFields = fieldsOf(reflect.TypeFor[LoadDetail](), nil, false)
	loadFields   = fieldsOf(reflect.TypeFor[Loadgen](), nil, true)
)

// fieldsOf lists the JSON fields of struct type t as encoding/json
// writes them, an embedded struct's fields in line.
func fieldsOf(t reflect.Type, prefix []int, load bool) []field {
	var out []field
	for i := range t.NumField() {
		sf := t.Field(i)
		index := append(append([]int(nil), prefix...), i)
		if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
			out = append(out, fieldsOf(sf.Type, index, sf.Type == reflect.TypeFor[Loadgen]())...)
			continue
		}
		tag := sf.Tag.Get("json")
		if !sf.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = sf.Name
		}
		loadIf, _ := strings.CutPrefix(sf.Tag.Get("load"), "if=")
		if loadIf == sf.Tag.Get("load") {
			loadIf = ""
		}
		out = append(out, field{name: name, index: index, omitEmpty: strings.Contains(","+opts+",", ",omitempty,"),
			loadOmitEmpty: sf.Tag.Get("load") == "omitempty", loadIf: loadIf, load: load})
	}
	return out
}

// empty is encoding/json's omitempty test.
func empty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

// value writes v compactly, the per-request lists element by element.
func (e *encoder) value(v reflect.Value) {
	if e.err != nil {
		return
	}
	switch v.Type() { // the plain scalars, by hand (a named type may marshal itself)
	case reflect.TypeFor[float64]():
		e.float(v.Float())
		return
	case reflect.TypeFor[int](), reflect.TypeFor[int64]():
		e.b = strconv.AppendInt(e.b, v.Int(), 10)
		return
	case reflect.TypeFor[string]():
		e.string(v.String())
		return
	}
	switch x := v.Interface().(type) {
	case []Request:
		e.records(x)
	case ITLs:
		if x == nil && e.derive {
			e.gapITLs(e.gaps)
			break
		}
		e.itls(x)
	case []float64:
		e.floats(x)
	case []int:
		e.ints(x)
	case []string:
		e.strings(x)
	case []*Timings:
		if x == nil {
			e.b = append(e.b, "null"...)
			break
		}
		e.b = append(e.b, '[')
		for i, t := range x {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.marshal(t)
		}
		e.b = append(e.b, ']')
	case *LoadDetail:
		if x != nil {
			e.object(v.Elem(), detailFields, nil, false)
			break
		}
		e.marshal(x)
	default:
		e.marshal(x)
	}
	e.maybeFlush()
}

// indented writes v indented under a top-level key.
func (e *encoder) indented(v reflect.Value) {
	b, err := json.MarshalIndent(v.Interface(), " ", " ")
	if err != nil {
		e.fail(err)
		return
	}
	e.b = append(e.b, b...)
	e.maybeFlush()
}

// member is one key of an object being written: a field of the struct,
// or a value already encoded (extra).
type member struct {
	name string
	f    *field
	raw  json.RawMessage
}

// members are struct v's fields to write, then extra's keys sorted; in
// the load layout, all of them sorted by key.
func (e *encoder) members(v reflect.Value, fields []field, extra map[string]json.RawMessage) []member {
	out := make([]member, 0, len(fields)+len(extra))
	for i := range fields {
		f := &fields[i]
		omit := f.omitEmpty
		if e.load {
			omit = f.loadOmitEmpty
		}
		if omit && empty(v.FieldByIndex(f.index)) || e.load && f.loadIf != "" && absent(v, fields, f.loadIf) {
			continue
		}
		out = append(out, member{name: f.name, f: f})
	}
	n := len(out)
	for k, raw := range extra {
		out = append(out, member{name: k, raw: raw})
	}
	sort.Slice(out[n:], func(i, j int) bool { return out[n+i].name < out[n+j].name })
	if e.load {
		sort.SliceStable(out, func(i, j int) bool { return out[i].name < out[j].name })
	}
	return out
}

// absent reports whether struct v's field of key name is empty.
func absent(v reflect.Value, fields []field, name string) bool {
	for _, f := range fields {
		if f.name == name {
			return empty(v.FieldByIndex(f.index))
		}
	}
	return true
}

// object writes struct v's fields and extra; top is result.json itself:
// one key a line, its own values indented, the load generator's compact.
func (e *encoder) object(v reflect.Value, fields []field, extra map[string]json.RawMessage, top bool) {
	e.b = append(e.b, '{')
	for i, m := range e.members(v, fields, extra) {
		if e.err != nil {
			return
		}
		if i > 0 {
			e.b = append(e.b, ',')
		}
		if top {
			e.b = append(e.b, "\n "...)
		}
		e.key = m.name
		e.string(m.name)
		e.b = append(e.b, ':')
		if top {
			e.b = append(e.b, ' ')
		}
		switch {
		case m.f == nil && !json.Valid(m.raw):
			e.fail(errors.New("not valid JSON"))
		case m.f == nil:
			e.b = append(e.b, m.raw...)
		case top && !m.f.load:
			e.indented(v.FieldByIndex(m.f.index))
		default:
			e.value(v.FieldByIndex(m.f.index))
		}
	}
	if top {
		e.b = append(e.b, '\n')
	}
	e.b = append(e.b, '}')
}

// extras are the percentile fields, encoded, and others' keys not
// fields of the document.
func (d *Document) extras(others bool) (map[string]json.RawMessage, error) {
	extra := make(map[string]json.RawMessage, len(d.Percentiles)+len(d.Other))
	for k, v := range d.Other {
		if _, known := docField[k]; others && !known {
			extra[k] = v
		}
	}
	for k, v := range d.Percentiles {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", k, err)
		}
		extra[k] = b
	}
	return extra, nil
}

// encode writes d as result.json: its keys one at a time, the percentile
// fields and the keys of a newer version (Other) among them.
func (d *Document) encode(w io.Writer) error {
	extra, err := d.extras(true)
	if err != nil {
		return err
	}
	e := newEncoder(w, false)
	e.object(reflect.ValueOf((*plain)(d)).Elem(), docFields, extra, true)
	e.b = append(e.b, '\n')
	return e.finish()
}

// WriteLoad writes d's load generator part (Loadgen, Percentiles) as the
// load generator's own file (`bpfbench load --output`): vLLM's result
// JSON, on one line, the keys sorted as encoding/json sorts a map's, HTML
// escaped as json.Marshal escapes it. On an error (a NaN or infinite
// number, which encoding/json refuses too) part of it may have been
// written. An ITLs left nil with the records there (LoadDetail) is
// written from the records as they are written, as the load generator
// fills it: each successful request's gaps between chunks.
func (d *Document) WriteLoad(w io.Writer) error {
	extra := make(map[string]json.RawMessage, len(d.Percentiles))
	for k, v := range d.Percentiles {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		extra[k] = b
	}
	e := newEncoder(w, true)
	if d.ITLs == nil && d.BPFBench != nil {
		e.gaps, e.derive = d.BPFBench.Records, true
	}
	e.object(reflect.ValueOf(&d.Loadgen).Elem(), loadFields, extra, false)
	e.b = append(e.b, '\n')
	return e.finish()
}

// finish writes what e holds, and flushes w when it is buffered.
func (e *encoder) finish() error {
	e.flush()
	if e.err != nil {
		return e.err
	}
	if bw, ok := e.w.(*bufio.Writer); ok {
		return bw.Flush()
	}
	return nil
}
