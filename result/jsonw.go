package result

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
)

// encoder writes JSON with the bytes encoding/json writes for the same
// value, the large lists (the records, every request's chunk_ns, the
// itls) by hand and element by element: encoding/json writes a list of
// numbers through reflection and holds a whole value in memory before it
// writes it (a 256-token run of 100 requests: 750 kB, 5% of the load
// generator's CPU and a fifth of its page faults). It holds at most
// jsonFlushAt before it writes to w. It is the one encoder of the load's
// result: result.json (Document.WriteFile) and the load generator's own
// file (Document.WriteLoad).
type encoder struct {
	w   io.Writer
	b   []byte
	err error
	// html escapes <, > and & in strings, as json.Marshal does (the load
	// generator's file); result.json's values are written as an Encoder
	// with SetEscapeHTML(false) writes them.
	html bool
	// load is the load generator's layout (vLLM's result file): one
	// line, each object's keys sorted as a map's are, every key present
	// but those tagged load:"omitempty" when empty.
	load bool
	// key is the key whose value is being written, for an error.
	key string
	// gaps: a nil ITLs is written from these records (gapITLs).
	gaps   []Request
	derive bool
}

func newEncoder(w io.Writer, load bool) *encoder {
	return &encoder{w: w, b: make([]byte, 0, jsonFlushAt+jsonFlushAt/2), html: load, load: load}
}

// marshal appends v as encoding/json writes it (HTML escaped when html).
func (e *encoder) marshal(v any) {
	if e.err != nil {
		return
	}
	var b []byte
	var err error
	if e.html {
		b, err = json.Marshal(v)
	} else {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		err = enc.Encode(v)
		b = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	if err != nil {
		e.fail(err)
		return
	}
	e.b = append(e.b, b...)
	e.maybeFlush()
}

// fail records err, naming the key being written in result.json's layout.
func (e *encoder) fail(err error) {
	if e.err != nil {
		return
	}
	if !e.load {
		err = fmt.Errorf("encoding %s: %w", e.key, err)
	}
	e.err = err
}

// gapITLs appends the itls of recs computed as they are written: every
// successful record's gaps between chunks in seconds, [] for a failed
// one (what the load generator fills ITLs with), not held as [][]float64
// (25,600 floats for 100 requests of 256 tokens).
func (e *encoder) gapITLs(recs []Request) {
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

// ints appends xs.
func (e *encoder) ints(xs []int) {
	if xs == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '[')
	for i, n := range xs {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.b = strconv.AppendInt(e.b, int64(n), 10)
	}
	e.b = append(e.b, ']')
	e.maybeFlush()
}

// strings appends xs.
func (e *encoder) strings(xs []string) {
	if xs == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '[')
	for i, s := range xs {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.string(s)
		e.maybeFlush()
	}
	e.b = append(e.b, ']')
}

// itls appends the inter-token gaps of every request, a list each.
func (e *encoder) itls(l ITLs) {
	if l == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '[')
	for i, xs := range l {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.floats(xs)
	}
	e.b = append(e.b, ']')
}

// jsonFlushAt is how much the writer holds before it writes to w.
const jsonFlushAt = 32 << 10

func (e *encoder) flush() {
	if e.err == nil && len(e.b) > 0 {
		_, e.err = e.w.Write(e.b)
	}
	e.b = e.b[:0]
}

func (e *encoder) maybeFlush() {
	if len(e.b) >= jsonFlushAt {
		e.flush()
	}
}

// string appends s quoted; a string with a byte encoding/json escapes
// (a quote, a backslash, a control byte, non-ASCII; <, > and & when html)
// goes through marshal.
func (e *encoder) string(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || e.html && (c == '<' || c == '>' || c == '&') {
			e.marshal(s)
			return
		}
	}
	e.b = append(e.b, '"')
	e.b = append(e.b, s...)
	e.b = append(e.b, '"')
}

// float appends f as encoding/json's floatEncoder does (ES6 number
// formatting); NaN and infinities go through marshal for its error.
func (e *encoder) float(f float64) {
	// Seconds of whole ns (the gaps, the TTFTs, the durations): the ns's
	// digits, when f is that many ns exactly (appendSecondsOfNs).
	if f >= 1e-6 && f < 1e6 {
		if ns := int64(f*1e9 + 0.5); ns >= 1000 && float64(ns)/1e9 == f {
			e.b = appendSecondsOfNs(e.b, ns)
			return
		}
	}
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

func (e *encoder) floats(xs []float64) {
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

// appendSecondsOfNs appends float64(ns)/1e9 as encoding/json writes it.
// From 1 µs (below, the exponent form) to 10^15 ns it is ns's digits with
// the decimal point put in, trailing zeros dropped: ns/1e9 has at most 15
// significant digits, and two decimals of at most 15 digits never round
// to the same float64, so the shortest decimal that reads back as the
// float (strconv's, encoding/json's) is ns/1e9 itself.
func appendSecondsOfNs(b []byte, ns int64) []byte {
	if ns < 1000 || ns >= 1e15 {
		var e encoder
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

// records appends recs, each as encoding/json writes a Request (field by
// field, in its order, omitempty as encoding/json reads it; the random
// records of TestWriteJSONMatchesEncoding set every field, so a field added
// to Request and not here fails it). json.Marshal itself reflects over
// every field of every record, and builds its encoders on first use: a
// twentieth of a 1-token run.
func (e *encoder) records(recs []Request) {
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

// record appends r as encoding/json writes a Request.
func (e *encoder) record(r *Request) {
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
	e.intOmit(`,"slot_wait_ns":`, r.SlotWaitNs)
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
func (e *encoder) chunkTimes(r *Request) {
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
func (e *encoder) responseMeta(r *Request) {
	e.stringOmit(`,"trace_id":`, r.TraceID)
	e.stringOmit(`,"span_id":`, r.SpanID)
	e.stringOmit(`,"response_id":`, r.ResponseID)
	e.stringOmit(`,"response_model":`, r.ResponseModel)
	if len(r.FinishReasons) > 0 {
		e.b = append(e.b, `,"finish_reasons":`...)
		e.strings(r.FinishReasons)
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
func (e *encoder) int(key string, n int64) {
	e.b = append(e.b, key...)
	e.b = strconv.AppendInt(e.b, n, 10)
}

// intOmit is int for an omitempty field: nothing for 0.
func (e *encoder) intOmit(key string, n int64) {
	if n != 0 {
		e.int(key, n)
	}
}

// stringOmit appends key and s for an omitempty field: nothing for "".
func (e *encoder) stringOmit(key, s string) {
	if s != "" {
		e.b = append(e.b, key...)
		e.string(s)
	}
}
