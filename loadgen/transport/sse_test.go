package transport

import (
	"bytes"
	"strings"
	"testing"
)

// parseAll feeds the stream in the given pieces and returns every event's
// data, then what Flush gives at the end.
func parseAll(pieces [][]byte) (events []string, partial bool) {
	var p SSEParser
	for _, b := range pieces {
		p.Feed(b)
		for {
			ev, ok := p.Next()
			if !ok {
				break
			}
			events = append(events, string(ev.Data))
		}
	}
	ev, ok, partial := p.Flush()
	if ok {
		events = append(events, string(ev.Data)+"<eof>")
	}
	return events, partial
}

func split(s string, at ...int) [][]byte {
	var out [][]byte
	prev := 0
	for _, i := range at {
		out = append(out, []byte(s[prev:i]))
		prev = i
	}
	return append(out, []byte(s[prev:]))
}

func TestSSEParser(t *testing.T) {
	tests := []struct {
		name    string
		pieces  [][]byte
		want    []string
		partial bool
	}{
		{name: "one event", pieces: split("data: {\"a\":1}\n\n"), want: []string{`{"a":1}`}},
		{name: "split inside data", pieces: split("data: {\"a\":1}\n\n", 3, 9), want: []string{`{"a":1}`}},
		{name: "split between newlines", pieces: split("data: x\n\ndata: y\n\n", 8), want: []string{"x", "y"}},
		{name: "several in one read", pieces: split("data: 1\n\ndata: 2\n\ndata: [DONE]\n\n"), want: []string{"1", "2", "[DONE]"}},
		{name: "comments and pings", pieces: split(": ping\n\ndata: 1\n: keepalive\n\n:\n\n"), want: []string{"1"}},
		{name: "CRLF", pieces: split("data: 1\r\n\r\ndata: 2\r\n\r\n"), want: []string{"1", "2"}},
		{name: "CRLF split between CR and LF", pieces: split("data: 1\r\n\r\ndata: 2\r\n\r\n", 8, 9, 10), want: []string{"1", "2"}},
		{name: "bare CR", pieces: split("data: 1\r\rdata: 2\r\r"), want: []string{"1", "2"}},
		{name: "multi-line data", pieces: split("data: a\ndata: b\n\n"), want: []string{"a\nb"}},
		{name: "no space after colon", pieces: split("data:x\n\n"), want: []string{"x"}},
		{name: "event and id fields", pieces: split("event: error\nid: 7\nretry: 10\ndata: boom\n\n"), want: []string{"boom"}},
		{name: "event without data is dropped", pieces: split("event: ping\n\ndata: 1\n\n"), want: []string{"1"}},
		{name: "missing final blank line", pieces: split("data: 1\n\ndata: 2\n"), want: []string{"1", "2<eof>"}},
		{name: "cut mid-line", pieces: split("data: 1\n\ndata: {\"x"), want: []string{"1"}, partial: true},
		{name: "byte by byte", pieces: split("data: ab\r\n\r\n: c\n\ndata: d\n\n", 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19), want: []string{"ab", "d"}},
		{name: "empty data line", pieces: split("data:\n\n"), want: []string{""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, partial := parseAll(tc.pieces)
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || partial != tc.partial {
				t.Errorf("got %q partial=%v, want %q partial=%v", got, partial, tc.want, tc.partial)
			}
		})
	}
}

func TestSSEParserReuseNoAlloc(t *testing.T) {
	stream := []byte("data: {\"choices\":[{\"text\":\" the\"}]}\n\n")
	var p SSEParser
	p.Feed(stream)
	p.Next()
	allocs := testing.AllocsPerRun(1000, func() {
		p.Feed(stream[:10])
		p.Next()
		p.Feed(stream[10:])
		if _, ok := p.Next(); !ok {
			t.Fatal("no event")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per event, want 0", allocs)
	}
}

// checkSplitInvariance parses stream whole and in pieces cut at the
// positions drawn from cuts; both must give the same events.
func checkSplitInvariance(t *testing.T, stream, cuts []byte) {
	whole, wp := parseAll([][]byte{stream})
	var pieces [][]byte
	rest := stream
	for _, c := range cuts {
		if len(rest) == 0 {
			break
		}
		n := int(c) % (len(rest) + 1)
		pieces = append(pieces, rest[:n])
		rest = rest[n:]
	}
	pieces = append(pieces, rest)
	got, gp := parseAll(pieces)
	if strings.Join(whole, "\x00") != strings.Join(got, "\x00") || wp != gp {
		t.Fatalf("split changed the events:\nwhole %q (%v)\nsplit %q (%v)\npieces %q", whole, wp, got, gp, pieces)
	}
}

// checkRoundTrip builds a well-formed stream from payloads (one event each,
// with varied line endings and comments) and checks every payload comes
// back, in order, exactly once, however the stream is cut.
func checkRoundTrip(t *testing.T, payloads []string, cuts []byte) {
	var b bytes.Buffer
	endings := []string{"\n", "\r\n", "\r"}
	for i, p := range payloads {
		eol := endings[i%3]
		if i%4 == 1 {
			b.WriteString(": ping" + eol)
		}
		b.WriteString("data: " + p + eol + eol)
	}
	stream := b.Bytes()
	var pieces [][]byte
	rest := stream
	for _, c := range cuts {
		n := int(c) % (len(rest) + 1)
		pieces = append(pieces, rest[:n])
		rest = rest[n:]
	}
	pieces = append(pieces, rest)
	got, partial := parseAll(pieces)
	if partial || strings.Join(got, "\x00") != strings.Join(payloads, "\x00") || len(got) != len(payloads) {
		t.Fatalf("round trip: got %q (partial %v), want %q", got, partial, payloads)
	}
}

func FuzzSSEParser(f *testing.F) {
	seeds := []string{
		"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n",
		"data: 1\r\n\r\ndata: 2\r\n\r\n",
		": ping\n\ndata: a\ndata: b\n\n",
		"data: 1\r\rdata: 2\r\r",
		"event: error\ndata: {\"error\":{\"message\":\"x\"}}\n\n",
		"data: 1\n\ndata: {\"cut",
		"\r\n\r\n\n\r:\r\ndata\n\n",
	}
	for i, s := range seeds {
		f.Add([]byte(s), []byte{byte(i * 7), 3, 1, 250})
	}
	f.Fuzz(func(t *testing.T, stream, cuts []byte) {
		checkSplitInvariance(t, stream, cuts)
		// Payloads: the input's lines without CR/LF, as events.
		var payloads []string
		for _, l := range bytes.FieldsFunc(stream, func(r rune) bool { return r == '\n' || r == '\r' }) {
			payloads = append(payloads, string(l))
		}
		checkRoundTrip(t, payloads, cuts)
	})
}

func BenchmarkSSEParser(b *testing.B) {
	chunk := []byte("data: {\"id\":\"cmpl-bench-1\",\"object\":\"text_completion\",\"created\":1796000654,\"model\":\"llmsim\",\"choices\":[{\"index\":0,\"text\":\" the\",\"logprobs\":null,\"finish_reason\":null}]}\n\n")
	// 8 chunks per read, as under load, plus one chunk split across reads.
	read := bytes.Repeat(chunk, 8)
	var p SSEParser
	var ci ChunkInfo
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	for i := 0; i < b.N; {
		p.Feed(read)
		for {
			ev, ok := p.Next()
			if !ok {
				break
			}
			if err := ParseChunk(ev.Data, &ci); err != nil || ci.Choices != 1 {
				b.Fatal("bad chunk")
			}
			i++
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/chunk")
}
