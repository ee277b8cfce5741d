package loadgen

import (
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

// records appends recs, each as json.Marshal writes a Record (field by
// field, in its order, omitempty as encoding/json reads it; the random
// records of TestWriteJSONMatchesEncoding set every field, so a field added
// to Record and not here fails it). json.Marshal itself reflects over
// every field of every record, and builds its encoders on first use: a
// twentieth of a 1-token run.
func (e *jsonWriter) records(recs []Record) {
	if recs == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '[')
	for i := range recs {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.record(&recs[i])
		e.maybeFlush()
	}
	e.b = append(e.b, ']')
}

// record appends r as encoding/json marshals a Record.
func (e *jsonWriter) record(r *Record) {
	e.int(`{"index":`, int64(r.Index))
	e.b = append(e.b, `,"request_id":`...)
	e.string(r.RequestID)
	if r.Warmup {
		e.b = append(e.b, `,"warmup":true`...)
	}
	e.int(`,"prompt_len":`, int64(r.PromptLen))
	e.int(`,"max_tokens":`, int64(r.MaxTokens))
	e.intOmit(`,"conversation":`, int64(r.Conversation))
	e.intOmit(`,"turn":`, int64(r.Turn))
	e.int(`,"scheduled_ns":`, r.ScheduledNs)
	e.int(`,"start_ns":`, r.StartNs)
	e.intOmit(`,"conn_ns":`, r.ConnNs)
	e.intOmit(`,"sent_ns":`, r.SentNs)
	e.intOmit(`,"first_byte_ns":`, r.FirstByteNs)
	e.intOmit(`,"headers_ns":`, r.HeadersNs)
	e.chunkTimes(r)
	e.intOmit(`,"last_ns":`, r.LastNs)
	e.int(`,"end_ns":`, r.EndNs)
	e.int(`,"output_tokens":`, int64(r.OutputTokens))
	e.intOmit(`,"usage_prompt_tokens":`, int64(r.UsagePromptTokens))
	e.stringOmit(`,"token_source":`, r.TokenSource)
	e.intOmit(`,"text_bytes":`, int64(r.TextBytes))
	e.int(`,"local_port":`, int64(r.LocalPort))
	if r.ConnReused {
		e.b = append(e.b, `,"conn_reused":true`...)
	}
	if r.RetriedStaleConn {
		e.b = append(e.b, `,"retried_stale_connection":true`...)
	}
	e.responseMeta(r)
	e.int(`,"status":`, int64(r.Status))
	e.b = append(e.b, `,"success":`...)
	e.b = strconv.AppendBool(e.b, r.Success)
	e.stringOmit(`,"failure":`, r.Failure)
	e.stringOmit(`,"error":`, r.Error)
	e.b = append(e.b, '}')
}

// chunkTimes appends r's chunk_ns, paused_ns and chunk_tokens.
func (e *jsonWriter) chunkTimes(r *Record) {
	e.b = append(e.b, `,"chunk_ns":`...)
	if r.ChunkNs == nil {
		e.b = append(e.b, "null"...)
	} else {
		e.b = append(e.b, '[')
		for j, t := range r.ChunkNs {
			if j > 0 {
				e.b = append(e.b, ',')
			}
			e.b = strconv.AppendInt(e.b, t, 10)
		}
		e.b = append(e.b, ']')
	}
	if r.PausedNs != nil {
		e.int(`,"paused_ns":[`, r.PausedNs[0])
		e.int(`,`, r.PausedNs[1])
		e.b = append(e.b, ']')
	}
	if len(r.ChunkTokens) > 0 {
		e.b = append(e.b, `,"chunk_tokens":[`...)
		for j, n := range r.ChunkTokens {
			if j > 0 {
				e.b = append(e.b, ',')
			}
			e.b = strconv.AppendInt(e.b, int64(n), 10)
		}
		e.b = append(e.b, ']')
	}
}

// responseMeta appends what r's response said of itself: its trace and
// response ids, model, finish reasons, server timings and first-token
// logprobs.
func (e *jsonWriter) responseMeta(r *Record) {
	e.stringOmit(`,"trace_id":`, r.TraceID)
	e.stringOmit(`,"span_id":`, r.SpanID)
	e.stringOmit(`,"response_id":`, r.ResponseID)
	e.stringOmit(`,"response_model":`, r.ResponseModel)
	if len(r.FinishReasons) > 0 {
		e.b = append(e.b, `,"finish_reasons":`...)
		e.value(r.FinishReasons)
	}
	if r.ServerTimings != nil {
		e.b = append(e.b, `,"server_timings":`...)
		e.marshal(r.ServerTimings)
	}
	if r.FirstToken != nil {
		e.b = append(e.b, `,"first_token_logprobs":`...)
		e.marshal(r.FirstToken)
	}
}

// int appends key (with its punctuation) and n.
func (e *jsonWriter) int(key string, n int64) {
	e.b = append(e.b, key...)
	e.b = strconv.AppendInt(e.b, n, 10)
}

// intOmit is int for an omitempty field: nothing for 0.
func (e *jsonWriter) intOmit(key string, n int64) {
	if n != 0 {
		e.int(key, n)
	}
}

// stringOmit appends key and s for an omitempty field: nothing for "".
func (e *jsonWriter) stringOmit(key, s string) {
	if s != "" {
		e.b = append(e.b, key...)
		e.string(s)
	}
}
