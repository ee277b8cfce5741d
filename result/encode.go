package result

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
)

// field is one key of a JSON object and where its value is in the Go
// struct.
type field struct {
	name      string
	index     []int
	omitEmpty bool
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
		out = append(out, field{name: name, index: index, omitEmpty: strings.Contains(","+opts+",", ",omitempty,"), load: load})
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

// encoder writes a document one value at a time: the per-request lists
// of a long run (the load generator's records and per-token lists, about
// 100 MB for an hour) are encoded element by element straight into the
// output, never as one buffer beside the document.
type encoder struct {
	w   *bufio.Writer
	buf bytes.Buffer
}

// streamed are the lists written element by element: those with an
// element per request that is itself a list or an object (a list of
// numbers a request is encoded whole: element by element costs more
// time than it saves memory).
var streamed = map[reflect.Type]bool{
	reflect.TypeFor[[]Request](): true, reflect.TypeFor[ITLs](): true, reflect.TypeFor[[]*Timings](): true,
	reflect.TypeFor[[]string](): true,
}

// value writes v compactly, a streamed list element by element.
func (e *encoder) value(v reflect.Value, key string) error {
	if v.Kind() == reflect.Slice && !v.IsNil() && streamed[v.Type()] {
		e.w.WriteByte('[')
		for i := range v.Len() {
			if i > 0 {
				e.w.WriteByte(',')
			}
			if err := e.value(v.Index(i), key); err != nil {
				return err
			}
		}
		return e.w.WriteByte(']')
	}
	if v.Kind() == reflect.Pointer && !v.IsNil() && v.Type() == reflect.TypeFor[*LoadDetail]() {
		return e.object(v.Elem(), detailFields, nil, false)
	}
	e.buf.Reset()
	enc := json.NewEncoder(&e.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v.Interface()); err != nil {
		return fmt.Errorf("encoding %s: %w", key, err)
	}
	_, err := e.w.Write(bytes.TrimSuffix(e.buf.Bytes(), []byte("\n")))
	return err
}

// indented writes v indented under a top-level key.
func (e *encoder) indented(v reflect.Value, key string) error {
	b, err := json.MarshalIndent(v.Interface(), " ", " ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", key, err)
	}
	_, err = e.w.Write(b)
	return err
}

// object writes struct v's fields, then extra (sorted by key); top is
// the document itself: one key a line, its own values indented.
func (e *encoder) object(v reflect.Value, fields []field, extra map[string]json.RawMessage, top bool) error {
	e.w.WriteByte('{')
	n := 0
	key := func(k string) {
		if n > 0 {
			e.w.WriteByte(',')
		}
		if top {
			e.w.WriteString("\n ")
		}
		kb, _ := json.Marshal(k)
		e.w.Write(kb)
		e.w.WriteByte(':')
		if top {
			e.w.WriteByte(' ')
		}
		n++
	}
	for _, f := range fields {
		fv := v.FieldByIndex(f.index)
		if f.omitEmpty && empty(fv) {
			continue
		}
		key(f.name)
		var err error
		if top && !f.load {
			err = e.indented(fv, f.name)
		} else {
			err = e.value(fv, f.name)
		}
		if err != nil {
			return err
		}
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !json.Valid(extra[k]) {
			return fmt.Errorf("encoding %s: not valid JSON", k)
		}
		key(k)
		e.w.Write(extra[k])
	}
	if top {
		e.w.WriteByte('\n')
	}
	return e.w.WriteByte('}')
}

// encode writes d as result.json: its keys one at a time, the percentile
// fields and the keys of a newer version (Other) among them.
func (d *Document) encode(w io.Writer) error {
	bw, ok := w.(*bufio.Writer)
	if !ok {
		bw = bufio.NewWriter(w)
	}
	extra := make(map[string]json.RawMessage, len(d.Percentiles)+len(d.Other))
	for k, v := range d.Other {
		if _, known := docField[k]; !known {
			extra[k] = v
		}
	}
	for k, v := range d.Percentiles {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding %s: %w", k, err)
		}
		extra[k] = b
	}
	e := &encoder{w: bw}
	if err := e.object(reflect.ValueOf((*plain)(d)).Elem(), docFields, extra, true); err != nil {
		return err
	}
	bw.WriteByte('\n')
	return bw.Flush()
}
