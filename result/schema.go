package result

//go:generate go run ../tools/resultschema -dir ../docs

import (
	"bytes"
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"time"
)

// SchemaID is the $id of result.json's JSON Schema (docs/result.schema.json).
const SchemaID = "https://github.com/bpfbench/bpfbench/docs/result.schema.json"

// Schema is the JSON Schema (draft 2020-12) of the result.json this
// version writes, reflected from Document: each struct a definition, its
// fields without omitempty required, no key beyond its fields (the
// percentile fields by their pattern). A list, map or pointer may be null
// (Go writes a nil one so).
func Schema() ([]byte, error) {
	r := &reflector{defs: map[string]any{}}
	root := r.object(reflect.TypeFor[plain](), docFields)
	root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	root["$id"] = SchemaID
	root["title"] = "bpfbench result.json"
	root["description"] = "A run's result: the load generator's vLLM-compatible fields and records, and bpfbench's attribution, critical path and collector sections."
	root["patternProperties"] = map[string]any{percentileKey.String(): map[string]any{"type": []string{"number", "null"}}}
	root["$defs"] = r.defs
	return encodeSchema(root)
}

// Published is a JSON Schema of one of the run's files, published in
// docs/ as File: `go generate ./result` writes each, and a test fails
// when one is stale.
type Published struct {
	File   string
	Schema func() ([]byte, error)
}

// Schemas are the run's files' JSON Schemas.
var Schemas = []Published{
	{"result.schema.json", Schema},
	{"gaps.schema.json", GapsSchema},
	{"validation.schema.json", ValidationSchema},
}

// encodeSchema is root, indented.
func encodeSchema(root map[string]any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// reflector turns Go types into schemas, each named struct once in defs.
type reflector struct {
	defs map[string]any
}

// special are the types whose JSON is not what reflection gives.
var special = map[reflect.Type]map[string]any{
	reflect.TypeFor[Rate]():            {"anyOf": []any{map[string]any{"type": "number"}, map[string]any{"const": "inf"}}},
	reflect.TypeFor[ITLs]():            {"type": []string{"array", "null"}, "items": map[string]any{"type": []string{"array", "null"}, "items": map[string]any{"type": "number"}}},
	reflect.TypeFor[json.RawMessage](): {},
	reflect.TypeFor[time.Time]():       {"type": "string", "format": "date-time"},
	reflect.TypeFor[time.Duration]():   {"type": "integer"},
}

// schema is t's schema.
func (r *reflector) schema(t reflect.Type) map[string]any {
	if s, ok := special[t]; ok {
		return s
	}
	if t == reflect.TypeFor[Collectors]() {
		return r.ref(t, func() map[string]any {
			return r.object(t, fieldsOf(reflect.TypeFor[plainCollectors](), nil, false))
		})
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Marshaler]()) && t.Kind() != reflect.Struct {
		return map[string]any{}
	}
	switch t.Kind() {
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return map[string]any{"type": "integer", "minimum": 0}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Pointer:
		return nullable(r.schema(t.Elem()))
	case reflect.Interface:
		return map[string]any{}
	case reflect.Array:
		return map[string]any{"type": "array", "items": r.schema(t.Elem()), "minItems": t.Len(), "maxItems": t.Len()}
	case reflect.Slice:
		return map[string]any{"type": []string{"array", "null"}, "items": r.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": []string{"object", "null"}, "additionalProperties": r.schema(t.Elem())}
	case reflect.Struct:
		if t.Name() == "" {
			return r.object(t, fieldsOf(t, nil, false))
		}
		return r.ref(t, func() map[string]any { return r.object(t, fieldsOf(t, nil, false)) })
	}
	return map[string]any{}
}

// ref is a reference to t's definition, made by def the first time.
func (r *reflector) ref(t reflect.Type, def func() map[string]any) map[string]any {
	name := defName(t)
	if _, ok := r.defs[name]; !ok {
		r.defs[name] = map[string]any{} // (a recursive type refers to itself)
		r.defs[name] = def()
	}
	return map[string]any{"$ref": "#/$defs/" + name}
}

// defName names t's definition: its name, qualified by its package
// where that is not result.
func defName(t reflect.Type) string {
	pkg := t.PkgPath()
	if pkg == reflect.TypeFor[Document]().PkgPath() || pkg == "" {
		return t.Name()
	}
	return pkg[strings.LastIndex(pkg, "/")+1:] + "." + t.Name()
}

// object is the schema of struct t with fields.
func (r *reflector) object(t reflect.Type, fields []field) map[string]any {
	props := map[string]any{}
	var required []string
	for _, f := range fields {
		props[f.name] = r.schema(t.FieldByIndex(f.index).Type)
		if !f.omitEmpty {
			required = append(required, f.name)
		}
	}
	sort.Strings(required)
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// nullable is s that may also be null.
func nullable(s map[string]any) map[string]any {
	switch ty := s["type"].(type) {
	case string:
		out := make(map[string]any, len(s))
		for k, v := range s {
			out[k] = v
		}
		out["type"] = []string{ty, "null"}
		return out
	case []string:
		return s
	}
	if len(s) == 0 {
		return s
	}
	return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
}
