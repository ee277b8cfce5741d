package loadgen

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"slices"
	"strconv"
)

// itlLists stands in the result's "itls" while it is written: every
// successful record's inter-token latencies in seconds, computed as they
// are written rather than held as [][]float64 (25,600 floats for 100
// requests of 256 tokens). Written, it is what JSON()'s "itls" is.
type itlLists []Record

// jsonWriter writes the result JSON with the bytes encoding/json's
// Encoder writes for the same value (TestWriteJSONMatchesEncoding checks
// it), but the large lists (itls, every record's chunk_ns) by hand and
// straight to w: encoding/json writes a list of numbers through reflection
// and holds the whole document in memory before it writes it (a 256-token
// run of 100 requests: 750 kB, 5% of the process's CPU and a fifth of its
// page faults). Values of other types go through json.Marshal.
type jsonWriter struct {
	w   io.Writer
	b   []byte
	err error
}

// jsonFlushAt is how much the writer holds before it writes to w.
const jsonFlushAt = 32 << 10

func (e *jsonWriter) flush() {
	if e.err == nil && len(e.b) > 0 {
		_, e.err = e.w.Write(e.b)
	}
	e.b = e.b[:0]
}

func (e *jsonWriter) maybeFlush() {
	if len(e.b) >= jsonFlushAt {
		e.flush()
	}
}

// marshal appends v as json.Marshal writes it.
func (e *jsonWriter) marshal(v any) {
	if e.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		e.err = err
		return
	}
	e.b = append(e.b, b...)
	e.maybeFlush()
}

// value appends v. Every value of the result map is one of the cases, or
// goes through json.Marshal.
func (e *jsonWriter) value(v any) {
	if e.err != nil {
		return
	}
	switch x := v.(type) {
	case nil:
		e.b = append(e.b, "null"...)
	case bool:
		e.b = strconv.AppendBool(e.b, x)
	case int:
		e.b = strconv.AppendInt(e.b, int64(x), 10)
	case int64:
		e.b = strconv.AppendInt(e.b, x, 10)
	case float64:
		e.float(x)
	case string:
		e.string(x)
	case map[string]any:
		e.object(x)
	case []int:
		if x == nil {
			e.b = append(e.b, "null"...)
			break
		}
		e.b = append(e.b, '[')
		for i, n := range x {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.b = strconv.AppendInt(e.b, int64(n), 10)
		}
		e.b = append(e.b, ']')
	case []float64:
		e.floats(x)
	case []string:
		if x == nil {
			e.b = append(e.b, "null"...)
			break
		}
		e.b = append(e.b, '[')
		for i, s := range x {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.string(s)
		}
		e.b = append(e.b, ']')
	case itlLists:
		e.itls(x)
	case []Record:
		e.records(x)
	default:
		e.marshal(v)
	}
	e.maybeFlush()
}

// object appends m with its keys sorted, as encoding/json writes a map.
func (e *jsonWriter) object(m map[string]any) {
	if m == nil {
		e.b = append(e.b, "null"...)
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	e.b = append(e.b, '{')
	for i, k := range keys {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.string(k)
		e.b = append(e.b, ':')
		e.value(m[k])
	}
	e.b = append(e.b, '}')
}

// string appends s quoted; a string with a byte encoding/json escapes
// (a quote, a backslash, a control byte, <, >, &, non-ASCII) goes
// through json.Marshal.
func (e *jsonWriter) string(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			e.marshal(s)
			return
		}
	}
	e.b = append(e.b, '"')
	e.b = append(e.b, s...)
	e.b = append(e.b, '"')
}

// float appends f as encoding/json's floatEncoder does (ES6 number
// formatting); NaN and infinities go through json.Marshal for its error.
func (e *jsonWriter) float(f float64) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		e.marshal(f)
		return
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	e.b = strconv.AppendFloat(e.b, f, format, -1, 64)
	if format == 'e' {
		// e-09 is written e-9.
		n := len(e.b)
		if n >= 4 && e.b[n-4] == 'e' && e.b[n-3] == '-' && e.b[n-2] == '0' {
			e.b[n-2] = e.b[n-1]
			e.b = e.b[:n-1]
		}
	}
}

func (e *jsonWriter) floats(xs []float64) {
	if xs == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '[')
	for i, f := range xs {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.float(f)
	}
	e.b = append(e.b, ']')
	e.maybeFlush()
}

// itls appends JSON()'s "itls" for recs: a list per record, empty for a
// failed one.
func (e *jsonWriter) itls(recs itlLists) {
	e.b = append(e.b, '[')
	for i := range recs {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		rec := &recs[i]
		e.b = append(e.b, '[')
		if rec.Success {
			for j := 1; j < len(rec.ChunkNs); j++ {
				if j > 1 {
					e.b = append(e.b, ',')
				}
				e.b = appendSecondsOfNs(e.b, rec.ChunkNs[j]-rec.ChunkNs[j-1])
			}
		}
		e.b = append(e.b, ']')
		e.maybeFlush()
	}
	e.b = append(e.b, ']')
}

// appendSecondsOfNs appends float64(ns)/1e9 as encoding/json writes it.
// From 1 µs (below, the exponent form) to 10^15 ns it is ns's digits with
// the decimal point put in, trailing zeros dropped: ns/1e9 has at most 15
// significant digits, and two decimals of at most 15 digits never round
// to the same float64, so the shortest decimal that reads back as the
// float (strconv's, encoding/json's) is ns/1e9 itself.
func appendSecondsOfNs(b []byte, ns int64) []byte {
	if ns < 1000 || ns >= 1e15 {
		var e jsonWriter
		e.b = b
		e.float(float64(ns) / 1e9)
		return e.b
	}
	b = strconv.AppendInt(b, ns/1e9, 10)
	frac := ns % 1e9
	if frac == 0 {
		return b
	}
	var d [9]byte
	for i := len(d) - 1; i >= 0; i-- {
		d[i] = byte('0' + frac%10)
		frac /= 10
	}
	n := len(d)
	for d[n-1] == '0' {
		n--
	}
	b = append(b, '.')
	return append(b, d[:n]...)
}

// chunkNsNull is how json.Marshal writes a record without its chunk_ns.
// The field is not omitempty, so it is always there, and only once: a
// string field's quotes are escaped (\"), so no string matches it.
var chunkNsNull = []byte(`"chunk_ns":null`)

// records appends recs, each as json.Marshal writes it but with its
// chunk_ns written here: the record is marshalled without it and the list
// put in the place of its null.
func (e *jsonWriter) records(recs []Record) {
	if recs == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '[')
	for i := range recs {
		if e.err != nil {
			return
		}
		if i > 0 {
			e.b = append(e.b, ',')
		}
		rec := recs[i]
		chunks := rec.ChunkNs
		rec.ChunkNs = nil
		b, err := json.Marshal(&rec)
		if err != nil {
			e.err = err
			return
		}
		at := bytes.Index(b, chunkNsNull)
		if chunks == nil || at < 0 {
			e.b = append(e.b, b...)
			e.maybeFlush()
			continue
		}
		at += len(chunkNsNull) - len("null")
		e.b = append(e.b, b[:at]...)
		e.b = append(e.b, '[')
		for j, t := range chunks {
			if j > 0 {
				e.b = append(e.b, ',')
			}
			e.b = strconv.AppendInt(e.b, t, 10)
		}
		e.b = append(e.b, ']')
		e.b = append(e.b, b[at+len("null"):]...)
		e.maybeFlush()
	}
	e.b = append(e.b, ']')
}
