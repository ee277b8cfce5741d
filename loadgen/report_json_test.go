package loadgen

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/loadgen/metrics"
	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// randomString is a string encoding/json may escape: quotes, backslashes,
// HTML, control bytes, non-ASCII, and the record's own chunk_ns key.
func randomString(rng *rand.Rand) string {
	parts := []string{"", "a", "bench-0", `"`, `\`, "<", ">", "&", "\n", "\x01", "é", "\u2028", `"chunk_ns":null`, "chunk_ns", " ", "null"}
	var b []byte
	for n := rng.IntN(5); n > 0; n-- {
		b = append(b, parts[rng.IntN(len(parts))]...)
	}
	return string(b)
}

// randomFloat covers both of encoding/json's formats and their cutoffs.
func randomFloat(rng *rand.Rand) float64 {
	switch rng.IntN(6) {
	case 0:
		return 0
	case 1:
		return math.Ldexp(rng.Float64(), rng.IntN(160)-80)
	case 2:
		return -rng.Float64() * 1e3
	case 3:
		return []float64{1e-6, 1e21, 9.999999e-7, 1e20, 1e-7, 5e-324, math.MaxFloat64}[rng.IntN(7)]
	default:
		return float64(rng.Int64N(1e10)) / 1e9
	}
}

// fillRandom sets every field reachable from v at random, nil and empty
// slices and pointers included.
func fillRandom(rng *rand.Rand, v reflect.Value) {
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(rng.IntN(2) == 0)
	case reflect.Int, reflect.Int32, reflect.Int64:
		if rng.IntN(3) > 0 { // else zero, for omitempty
			v.SetInt(rng.Int64N(1<<34) - 1<<20)
		}
	case reflect.Float32, reflect.Float64:
		v.SetFloat(randomFloat(rng))
	case reflect.String:
		v.SetString(randomString(rng))
	case reflect.Pointer:
		if rng.IntN(3) > 0 {
			v.Set(reflect.New(v.Type().Elem()))
			fillRandom(rng, v.Elem())
		}
	case reflect.Slice:
		switch rng.IntN(4) {
		case 0: // nil
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		default:
			v.Set(reflect.MakeSlice(v.Type(), rng.IntN(40), 40))
			for i := 0; i < v.Len(); i++ {
				fillRandom(rng, v.Index(i))
			}
		}
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			fillRandom(rng, v.Index(i))
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fillRandom(rng, v.Field(i))
			}
		}
	}
}

func randomResult(rng *rand.Rand) *Result {
	recs := make([]Record, rng.IntN(20))
	for i := range recs {
		fillRandom(rng, reflect.ValueOf(&recs[i]).Elem())
		if rng.IntN(2) == 0 {
			// A realistic record: rising chunk times.
			t := rng.Int64N(1 << 34)
			recs[i].StartNs = t
			recs[i].ChunkNs = make([]int64, rng.IntN(300))
			for j := range recs[i].ChunkNs {
				t += rng.Int64N(5e6)
				recs[i].ChunkNs[j] = t
			}
			recs[i].LastNs = t
		}
		recs[i].LastNs = max(recs[i].LastNs, recs[i].StartNs)
	}
	res := &Result{StartNs: 1, EndNs: 1 + rng.Int64N(1e11), Records: recs, Date: time.Unix(1.7e9, 0), ClientCPU: time.Duration(rng.Int64N(1e9))}
	if len(recs) > 0 {
		res.Warmup = recs[:rng.IntN(len(recs))]
	}
	c := &res.Config
	c.Metrics = metrics.Options{Percentiles: []float64{50, 90, 99.9}}
	if rng.IntN(2) == 0 {
		c.Metrics.Goodput = metrics.Goodput{"ttft": 100}
	}
	c.Output.Label = randomString(rng)
	c.Target.Model, c.Target.URL, c.Target.Endpoint, c.Target.Protocol = randomString(rng), "http://h?a=1&b=<2>", transport.EndpointChat, "openai"
	c.Target.Logprobs = rng.IntN(3)
	c.Scenario.Rate, c.Scenario.MaxConcurrency, c.Scenario.Burstiness = float64(rng.IntN(3)), rng.IntN(3), randomFloat(rng)
	c.Scenario.Constant = rng.IntN(2) == 0
	res.Metrics = metrics.Compute(recs, res.DurationS(), c.Metrics)
	return res
}

// WriteJSON writes what encoding/json's Encoder writes for JSON(), byte
// for byte.
func TestWriteJSONMatchesEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 500; i++ {
		res := randomResult(rng)
		var want, got bytes.Buffer
		werr := json.NewEncoder(&want).Encode(res.JSON())
		gerr := res.WriteJSON(&got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("result %d: encoding/json: %v, WriteJSON: %v", i, werr, gerr)
		}
		if werr != nil {
			continue
		}
		if !bytes.Equal(want.Bytes(), got.Bytes()) {
			w, g := want.Bytes(), got.Bytes()
			at := 0
			for at < len(w) && at < len(g) && w[at] == g[at] {
				at++
			}
			from := max(0, at-80)
			t.Fatalf("result %d differs at byte %d:\nencoding/json ...%s\nWriteJSON     ...%s", i, at, w[from:min(len(w), at+80)], g[from:min(len(g), at+80)])
		}
	}
}

// A NaN is refused, as encoding/json refuses it.
func TestWriteJSONNaN(t *testing.T) {
	res := randomResult(rand.New(rand.NewPCG(3, 4)))
	res.Config.Scenario.Burstiness, res.Config.Scenario.Constant = math.NaN(), false
	if err := res.WriteJSON(&bytes.Buffer{}); err == nil {
		t.Fatal("WriteJSON wrote a NaN")
	}
}

func benchResult() *Result {
	recs := make([]Record, 100)
	t := int64(1e12)
	for i := range recs {
		r := &recs[i]
		r.Index, r.RequestID, r.PromptLen, r.MaxTokens, r.Success, r.OutputTokens = i, "bench-0", 16, 256, true, 256
		r.StartNs, r.ConnNs, r.SentNs = t, t+1e5, t+2e5
		r.ChunkNs = make([]int64, 256)
		c := t + 3e6
		for j := range r.ChunkNs {
			c += 2e6 + int64(j*7919%100000)
			r.ChunkNs[j] = c
		}
		r.LastNs, r.EndNs = c, c+1e4
	}
	res := &Result{StartNs: 1e12, EndNs: 2e12, Records: recs, Date: time.Unix(1.7e9, 0)}
	res.Config.Metrics.Percentiles = []float64{50, 90, 99}
	res.Metrics = metrics.Compute(recs, res.DurationS(), res.Config.Metrics)
	return res
}

// The result JSON of 100 requests of 256 tokens.
func BenchmarkWriteJSON(b *testing.B) {
	res := benchResult()
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		if err := res.WriteJSON(&buf); err != nil {
			b.Fatal(err)
		}
	}
}

// The same with encoding/json, as WriteJSON was.
func BenchmarkWriteJSONEncoding(b *testing.B) {
	res := benchResult()
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		if err := json.NewEncoder(&buf).Encode(res.JSON()); err != nil {
			b.Fatal(err)
		}
	}
}
