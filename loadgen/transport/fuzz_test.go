package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http/httputil"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// Fuzz targets of the transport's outside input: the server's streamed
// chunks and HTTP framing (the dataset, trace and length files' are in
// loadgen/dataset). FuzzSSEParser is in sse_test.go. `make fuzz` runs each
// for a bounded time; `make test` runs their seeds.

// Chunks as servers send them: llmsim/vLLM completions, llama.cpp, chat
// deltas, usage, errors, timings, logprobs.
var chunkSeeds = []string{
	benchChunk,
	benchLlamaChunk,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
	`{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":" hi\n\"x\""},"finish_reason":null}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`,
	`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
	`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":96}}`,
	`{"choices":[{"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":1.5e3,"completion_tokens":null},"timings":{"prompt_n":3,"prompt_ms":1.5,"predicted_n":4,"predicted_ms":9.25}}`,
	`{"error":{"message":"boom","type":"internal"}}`,
	`{"object":"error","message":"The model does not exist.","code":404}`,
	`{"error":"overloaded"}`,
	`{"choices":[{"text":" a","logprobs":{"top_logprobs":[{" a":-0.1," b":-2.5}]}}]}`,
	`{"choices":[{"delta":{"content":"a"},"logprobs":{"content":[{"token":"a","logprob":-0.2,"top_logprobs":[{"token":"a","logprob":-0.2},{"token":"b","logprob":-1.9}]}]}}]}`,
	`{"choices":[{"text":"a"},{"text":"b","finish_reason":"stop"}]}`,
	` { "choices" : null , "usage" : null , "error" : null } `,
	`{"a":[[[[{"b":-0.0e+1}]]]],"s":"\u00e9\/\b"}`,
}

// FuzzParseChunk checks the hand-written JSON scanner of the stream
// against encoding/json: what it accepts is valid JSON, and on an object
// without duplicate or \u-escaped keys it reads what encoding/json reads.
// The meta and logprobs scans of an accepted chunk do not panic.
func FuzzParseChunk(f *testing.F) {
	for _, s := range chunkSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"choices":[{"text":"\u0061"`))
	f.Add([]byte(`{"usage":{"prompt_tokens":1e400}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var ci ChunkInfo
		err := ParseChunk(data, &ci)
		if err != nil && !errors.Is(err, ErrMalformedChunk) {
			t.Fatalf("error %v is not ErrMalformedChunk", err)
		}
		if err == nil && !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		want, verdict := refChunk(data)
		switch verdict {
		case refAccept:
			if err != nil {
				t.Fatalf("refused %q, encoding/json reads %+v", data, want)
			}
			if !reflect.DeepEqual(normChunk(ci), normChunk(want)) {
				t.Fatalf("chunk %q:\n got %+v\nwant %+v", data, ci, want)
			}
		case refReject:
			if err == nil {
				t.Fatalf("accepted %q as %+v; encoding/json says it is not a chunk", data, ci)
			}
		}
		if err == nil {
			var rec Record
			scanMeta(data, &rec, true)
			if top := parseFirstTokenLogprobs(data); top != nil {
				for i := 1; i < len(top); i++ {
					if top[i] > top[i-1] {
						t.Fatalf("logprobs not sorted: %v", top)
					}
				}
			}
		}
	})
}

func normChunk(ci ChunkInfo) ChunkInfo {
	if len(ci.ErrorMessage) == 0 {
		ci.ErrorMessage = nil
	}
	return ci
}

type refVerdict int

const (
	refSkip refVerdict = iota
	refAccept
	refReject
)

// refChunk is ParseChunk's definition written with encoding/json.
func refChunk(data []byte) (ChunkInfo, refVerdict) {
	var ci ChunkInfo
	if !json.Valid(data) {
		return ci, refReject
	}
	if bytes.Contains(data, []byte(`\u`)) || nestingOrDupKeys(data) {
		return ci, refSkip
	}
	top, ok := orderedObject(data)
	if !ok {
		return ci, refReject
	}
	for _, kv := range top {
		raw := kv.v
		switch kv.k {
		case "choices":
			if string(raw) != "null" && !refChoices(raw, &ci) {
				return ci, refReject
			}
		case "usage":
			if string(raw) != "null" && !refUsage(raw, &ci) {
				return ci, refReject
			}
		case "error":
			if string(raw) != "null" {
				refError(raw, &ci)
			}
		case "object":
			if s, ok := refStr(raw); ok && string(s) == "error" {
				ci.Error = true
			}
		case "message":
			if s, ok := refStr(raw); ok {
				ci.ErrorMessage = s
			}
		}
	}
	if !ci.Error {
		ci.ErrorMessage = nil
	}
	return ci, refAccept
}

// refNum reads a JSON number (or null, 0) as the scanner does: an int, or
// a float truncated.
func refNum(raw json.RawMessage) (int, bool) {
	s := string(raw)
	if s == "null" {
		return 0, true
	}
	if s == "" || !(s[0] == '-' || s[0] >= '0' && s[0] <= '9') {
		return 0, false
	}
	if n, err := strconv.Atoi(s); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, false
	}
	return int(f), true
}

// refStr is a JSON string's raw bytes, escapes left in.
func refStr(raw json.RawMessage) ([]byte, bool) {
	if len(raw) >= 2 && raw[0] == '"' {
		return raw[1 : len(raw)-1], true
	}
	return nil, false
}

// refChoices reads "choices" (not null) into ci: false when it is no array.
func refChoices(raw json.RawMessage, ci *ChunkInfo) bool {
	var elems []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &elems) != nil {
		return false
	}
	// Several "choices" keys are duplicates (skipped): one array.
	ci.Choices = len(elems)
	if len(elems) == 0 || elems[0][0] != '{' {
		return true
	}
	first, _ := orderedObject(elems[0])
	for _, c := range first {
		switch c.k {
		case "text":
			ci.OutputKey = true
			if s, ok := refStr(c.v); ok {
				ci.TextBytes += len(s)
			}
		case "delta", "message":
			if c.v[0] == '{' {
				refDelta(c.v, ci)
			}
		case "finish_reason":
			if string(c.v) != "null" {
				ci.Finished = true
			}
		}
	}
	return true
}

// refDelta reads a choice's delta or message object into ci.
func refDelta(raw json.RawMessage, ci *ChunkInfo) {
	inner, _ := orderedObject(raw)
	for _, d := range inner {
		switch d.k {
		case "content":
			ci.OutputKey = true
			if s, ok := refStr(d.v); ok {
				ci.TextBytes += len(s)
			}
		case "role":
		default:
			ci.OutputKey = true
		}
	}
}

// refUsage reads "usage" (not null) into ci: false when it is no object or
// a count is no number.
func refUsage(raw json.RawMessage, ci *ChunkInfo) bool {
	if raw[0] != '{' {
		return false
	}
	ci.HasUsage = true
	u, _ := orderedObject(raw)
	for _, c := range u {
		var n int
		var ok bool
		switch c.k {
		case "prompt_tokens":
			n, ok = refNum(c.v)
			ci.PromptTokens = n
		case "completion_tokens":
			n, ok = refNum(c.v)
			ci.CompletionTokens = n
		default:
			ok = true
		}
		if !ok {
			return false
		}
	}
	return true
}

// refError reads "error" (not null): a string, or an object's "message".
func refError(raw json.RawMessage, ci *ChunkInfo) {
	ci.Error = true
	if s, ok := refStr(raw); ok {
		ci.ErrorMessage = s
	} else if raw[0] == '{' {
		e, _ := orderedObject(raw)
		for _, c := range e {
			if s, ok := refStr(c.v); ok && c.k == "message" {
				ci.ErrorMessage = s
			}
		}
	}
}

type keyValue struct {
	k string
	v json.RawMessage
}

// orderedObject splits a JSON object into its keys and raw values, in order.
func orderedObject(b []byte) ([]keyValue, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var out []keyValue
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		out = append(out, keyValue{tok.(string), bytes.TrimSpace(v)})
	}
	return out, true
}

// nestingOrDupKeys reports valid JSON nested deeper than the scanner
// follows, or with an object holding a key twice.
func nestingOrDupKeys(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		keys   map[string]bool
		object bool
		expect bool // the next string is a key
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			return true
		}
		var top *frame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		isKey := top != nil && top.object && top.expect
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				if top != nil && top.object {
					top.expect = true
				}
				stack = append(stack, frame{keys: map[string]bool{}, object: v == '{', expect: v == '{'})
				if len(stack) > 60 {
					return true
				}
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		case string:
			if isKey {
				if top.keys[v] {
					return true
				}
				top.keys[v] = true
				top.expect = false
				continue
			}
		}
		if top != nil && top.object {
			top.expect = true
		}
	}
}

var streamSeeds = []string{
	"data: " + benchChunk + "\n\ndata: " + benchChunk + "\n\ndata: [DONE]\n\n",
	"data: " + benchLlamaChunk + "\r\n\r\n: ping\r\n\r\ndata: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2},\"timings\":{\"predicted_n\":2}}\r\n\r\n",
	"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":{\"completion_tokens\":1}}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}],\"usage\":{\"completion_tokens\":3}}\n\ndata: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n",
	"data: {\"choices\":[{\"text\":\"a\",\"logprobs\":{\"top_logprobs\":[{\"a\":-0.5,\"b\":-1}]}}]}\n\ndata: {\"error\":{\"message\":\"boom\"}}\n\n",
	"event: error\ndata: {\"object\":\"error\",\"message\":\"x\"}\n\n",
	"data: {\"choices\":[{\"text\":\"a\"}]}\r\rdata: {\"choices\":[{\"text\":\"b\"}]}\r\rdata: [DONE]\r\r",
	"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choi",
	"data:{\"choices\":[{\"text\":\"a\"}]}\ndata: x\n\n",
	"data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":\"stop\"}]}\n",
}

// FuzzStreamState: a response body gives the same record however the
// reads cut it (whole, at the fuzzed cuts, byte by byte): the fast path
// for whole events and the general SSE parser agree.
func FuzzStreamState(f *testing.F) {
	for i, s := range streamSeeds {
		f.Add([]byte(s), []byte{byte(i*13 + 1), 7, 2, 90}, i%2 == 0)
	}
	f.Fuzz(func(t *testing.T, body, cuts []byte, chat bool) {
		whole := streamRecord([][]byte{body}, chat)
		var pieces [][]byte
		rest := body
		for _, c := range cuts {
			n := int(c) % (len(rest) + 1)
			pieces = append(pieces, rest[:n])
			rest = rest[n:]
		}
		pieces = append(pieces, rest)
		if got := streamRecord(pieces, chat); got != whole {
			t.Fatalf("cut at %v:\n got %s\nwant %s", cuts, got, whole)
		}
		if len(body) <= 512 {
			bytewise := make([][]byte, len(body))
			for i := range body {
				bytewise[i] = body[i : i+1]
			}
			if got := streamRecord(bytewise, chat); got != whole {
				t.Fatalf("byte by byte:\n got %s\nwant %s", got, whole)
			}
		}
	})
}

// streamRecord feeds the pieces as reads at one time and describes the
// record the stream completes.
func streamRecord(pieces [][]byte, chat bool) string {
	var rec Record
	var s streamState
	s.reset(&rec, chat)
	for _, p := range pieces {
		if !s.feed(p, 1) {
			break
		}
	}
	s.eof(2)
	s.complete()
	var ft, st string
	if rec.FirstToken != nil {
		ft = fmt.Sprint(*rec.FirstToken)
	}
	if rec.ServerTimings != nil {
		st = fmt.Sprint(*rec.ServerTimings)
	}
	rec.FirstToken, rec.ServerTimings = nil, nil
	return fmt.Sprintf("%+v first=%s timings=%s", rec, ft, st)
}

// FuzzRawChunked: the raw transport's chunked-body decoder gives the same
// data and end however the body is cut, and decodes what
// net/http/httputil's chunked writer encodes.
func FuzzRawChunked(f *testing.F) {
	f.Add([]byte("5\r\nhello\r\n0\r\n\r\n"), []byte{3, 9}, []byte("x"))
	f.Add([]byte("1a;ext=1\r\n"+strings.Repeat("z", 26)+"\r\n0\r\nTrailer: v\r\n\r\nleftover"), []byte{1, 1, 1}, []byte("data: {}\n\n"))
	f.Add([]byte("F\nabcdefghijklmno\n0\n\n"), []byte{5}, []byte(""))
	f.Add([]byte("fffffffffffffff\r\n"), []byte{}, []byte("a\r\nb"))
	f.Add([]byte("0x5\r\n"), []byte{2}, []byte{0})
	f.Fuzz(func(t *testing.T, body, cuts, payload []byte) {
		whole, wholeOK := chunkedDecode([][]byte{body})
		var pieces [][]byte
		rest := body
		for _, c := range cuts {
			n := int(c) % (len(rest) + 1)
			pieces = append(pieces, rest[:n])
			rest = rest[n:]
		}
		pieces = append(pieces, rest)
		if got, ok := chunkedDecode(pieces); ok != wholeOK || got != whole {
			t.Fatalf("cut at %v: %q (%v), whole: %q (%v)", cuts, got, ok, whole, wholeOK)
		}
		// The round trip: payload written in chunks of the cuts' sizes.
		var enc bytes.Buffer
		w := httputil.NewChunkedWriter(&enc)
		rest = payload
		for _, c := range cuts {
			n := int(c) % (len(rest) + 1)
			w.Write(rest[:n])
			rest = rest[n:]
		}
		w.Write(rest)
		w.Close()
		enc.WriteString("\r\n")
		got, ok := chunkedDecode([][]byte{enc.Bytes()})
		if want := fmt.Sprintf("%q end rest=\"\"", payload); !ok || got != want {
			t.Fatalf("round trip of %q: %s (%v)", payload, got, ok)
		}
	})
}

// chunkedDecode runs rconn.chunk over the pieces as the reactor does and
// describes the data, whether the end was reached and what followed it.
func chunkedDecode(pieces [][]byte) (string, bool) {
	c := &rconn{framing: fChunked}
	var data []byte
	for pi, b := range pieces {
		for len(b) > 0 {
			seg, rest, end, ok := c.chunk(b)
			if !ok {
				return fmt.Sprintf("%q malformed", data), false
			}
			if c.remain < 0 {
				return fmt.Sprintf("%q negative chunk size %d", data, c.remain), false
			}
			data = append(data, seg...)
			if end {
				// What follows the body is whatever remains of all pieces.
				tail := append([]byte(nil), rest...)
				for _, p := range pieces[pi+1:] {
					tail = append(tail, p...)
				}
				return fmt.Sprintf("%q end rest=%q", data, tail), true
			}
			b = rest
		}
	}
	return fmt.Sprintf("%q open", data), true
}

// FuzzRawHead: the raw transport's status line and header parser refuses
// or reads a response head; what it reads is a three-digit status and a
// framing it can follow.
func FuzzRawHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked",
		"HTTP/1.1 200 OK\r\ncontent-length: 42\r\nConnection: keep-alive",
		"HTTP/1.0 500 Internal Server Error\r\nContent-Length: 5\r\nConnection: close",
		"HTTP/1.1 100 Continue",
		"HTTP/1.1 +20 OK\r\nContent-Length: +5",
		"HTTP/1.1 200 OK\r\nContent-Length: -1",
		"HTTP/1.1 429\r\nTransfer-Encoding: gzip, CHUNKED\r\nContent-Length: 9",
		"HTTP/2 200",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		c := &rconn{}
		if !c.parseHead(head) {
			return
		}
		if c.status < 100 || c.status > 999 {
			t.Fatalf("status %d read from %q", c.status, head)
		}
		switch c.framing {
		case fLength:
			if c.remain < 0 {
				t.Fatalf("content length %d", c.remain)
			}
		case fChunked:
		case fClose:
			if c.keepAlive {
				t.Fatal("a body to the close kept alive")
			}
		default:
			t.Fatalf("framing %d", c.framing)
		}
	})
}

// FuzzChunkShape: a stream's chunk reader (chunkShape), which reads a chunk
// of the kept chunk's shape by comparing bytes, reads what ParseChunk
// reads: for any chunk after any other, and for the first chunk with
// another string spliced in as its output string (the fast path's case).
func FuzzChunkShape(f *testing.F) {
	for i, s := range chunkSeeds {
		f.Add([]byte(s), []byte(chunkSeeds[(i+1)%len(chunkSeeds)]), []byte(" x"))
	}
	f.Add([]byte(benchChunk), []byte(benchChunk), []byte(`\" a\u00e9`))
	f.Add([]byte(benchChunk), []byte(benchLlamaChunk), []byte(`"`))
	f.Add([]byte(`{"choices":[{"delta":{"content":"a"}}]}`), []byte(`{"choices":[{"delta":{"content":"bc"}}]}`), []byte(`",x":"`))
	f.Add([]byte(`{"choices":[{"text":"a"}]} `), []byte(`{"choices":[{"text":"a\"}]} `), []byte("\x01"))
	f.Add([]byte(`{"choices":[{"text":"a","text":"b"}]}`), []byte(`{"choices":[{"text":"a","text":"c"}]}`), []byte(`\`))
	f.Fuzz(func(t *testing.T, a, b, text []byte) {
		check := func(p *chunkShape, data []byte) {
			t.Helper()
			var got, want ChunkInfo
			gerr := p.parse(data, &got)
			werr := ParseChunk(data, &want)
			if gerr != werr || !reflect.DeepEqual(normChunk(got), normChunk(want)) {
				t.Fatalf("chunk %q after %q:\n got %+v, %v\nwant %+v, %v", data, a, got, gerr, want, werr)
			}
		}
		var p chunkShape
		check(&p, a)
		if !p.ok {
			return
		}
		at, end := p.at, p.end
		check(&p, b)
		p.reset()
		check(&p, a)
		spliced := append(append(append([]byte{}, a[:at+1]...), text...), a[end-1:]...)
		check(&p, spliced)
		check(&p, spliced)
	})
}
