package result_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/metrics"
	"github.com/bpfbench/bpfbench/loadgen/transport"
	"github.com/bpfbench/bpfbench/result"
)

// fill sets every field of v to a value that is not zero.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.String:
		v.SetString("s")
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		fill(v.Index(0))
		fill(v.Index(1))
	case reflect.Array:
		for i := range v.Len() {
			fill(v.Index(i))
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		v.SetMapIndex(k, e)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	}
}

// nonZero drops the null, false, zero and empty values of a decoded JSON
// value: what omitempty leaves out reads back the same.
func nonZero(x any) any {
	switch x := x.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, v := range x {
			if v = nonZero(v); v != nil {
				out[k] = v
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		if len(x) == 0 {
			return nil
		}
		out := make([]any, len(x))
		for i, v := range x {
			out[i] = nonZero(v)
		}
		return out
	case bool, float64, string:
		if reflect.ValueOf(x).IsZero() {
			return nil
		}
	}
	return x
}

// result.json's load part mirrors the load generator's JSON: every key of
// a result whose records have every field set is a typed field of
// Document (Request, LoadDetail, ...), and reads back with nothing lost.
// A field added to transport.Record or to Result.JSON() without its mirror
// here fails this test.
func TestLoadgenMirror(t *testing.T) {
	var rec transport.Record
	fill(reflect.ValueOf(&rec).Elem())
	recs := []transport.Record{rec, rec}
	res := &loadgen.Result{StartNs: 1, EndNs: 2e9, Records: recs, Warmup: recs[:1], Date: time.Unix(1.7e9, 0), ClientCPU: time.Second}
	c := &res.Config
	c.Metrics = metrics.Options{Percentiles: []float64{50, 99.9}, Goodput: metrics.Goodput{"ttft": 100}}
	c.Output.Label = "l"
	c.Target.Model, c.Target.URL, c.Target.Endpoint, c.Target.Protocol = "m", "http://h", "/v1/completions", "http/1.1"
	c.Scenario.Rate, c.Scenario.MaxConcurrency = 8, 4
	res.Metrics = metrics.Compute(recs, res.DurationS(), c.Metrics)
	fields := res.JSON()

	var d result.Document
	if err := d.SetLoad(fields); err != nil {
		t.Fatal(err)
	}
	if len(d.Other) != 0 {
		keys := make([]string, 0, len(d.Other))
		for k := range d.Other {
			keys = append(keys, k)
		}
		t.Errorf("load generator keys with no typed field in result.Loadgen: %v", keys)
	}
	b, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	var want, got map[string]any
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	back, err := json.Marshal(&d)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(back, &got); err != nil {
		t.Fatal(err)
	}
	for k, w := range want {
		if w, g := nonZero(w), nonZero(got[k]); !reflect.DeepEqual(w, g) {
			wb, _ := json.Marshal(w)
			gb, _ := json.Marshal(g)
			t.Errorf("%s: loadgen wrote\n%s\nresult reads back\n%s", k, wb, gb)
		}
	}
	// The records themselves, field by field.
	rb, _ := json.Marshal(rec)
	var r result.Request
	dec := json.NewDecoder(bytes.NewReader(rb))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Errorf("a transport.Record's field has no mirror in result.Request: %v", err)
	}
}

// The load generator fills result.json's load part typed (Result.Fill):
// it writes the bytes its fields (Result.JSON) read in by SetLoad do, for
// a result whose records set every field, a failed one and one with no
// chunk among them.
func TestLoadgenFillMatchesFields(t *testing.T) {
	var rec transport.Record
	fill(reflect.ValueOf(&rec).Elem())
	failed, empty := rec, transport.Record{Index: 3}
	failed.Success, failed.Error, failed.ResponseModel = false, "cut \xff <&>", "m\xfe\xfe"
	failed.FinishReasons = []string{"stop", "\xc3"}
	recs := []transport.Record{rec, failed, empty}
	for _, logprobs := range []int{0, 5} {
		res := &loadgen.Result{StartNs: 1, EndNs: 2e9, Records: recs, Warmup: recs[:1], Date: time.Unix(1.7e9, 0), ClientCPU: time.Second}
		c := &res.Config
		c.Target.Logprobs, c.Output.Label = logprobs, "l\xff"
		c.Metrics = metrics.Options{Percentiles: []float64{50, 99.9}, Goodput: metrics.Goodput{"ttft": 100}}
		c.Target.Model, c.Target.URL, c.Target.Endpoint, c.Target.Protocol = "m", "http://u:p@h", "/v1/completions", "http/1.1"
		c.Scenario.Rate, c.Scenario.Constant = 0, true
		res.Metrics = metrics.Compute(recs, res.DurationS(), c.Metrics)
		var viaFields, typed result.Document
		if err := viaFields.SetLoad(res.JSON()); err != nil {
			t.Fatal(err)
		}
		res.Fill(&typed)
		want, err := json.Marshal(&viaFields)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(&typed)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("logprobs %d: Fill writes\n%s\nthe fields read by SetLoad\n%s", logprobs, got, want)
		}
	}
}
