package transport

import (
	"strings"
	"testing"
)

const benchChunk = `{"id":"cmpl-bench-000000000042","object":"text_completion","created":1764570000,"model":"llmsim","choices":[{"index":0,"text":" lorem","logprobs":null,"finish_reason":null}]}`

// The client's work per chunk besides the system calls: cut the SSE event,
// scan the JSON, timestamp it.
func BenchmarkStreamFeed(b *testing.B) {
	ev := []byte("data: " + benchChunk + "\n\n")
	var rec Record
	var s streamState
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if i%4096 == 0 {
			rec.ChunkNs = rec.ChunkNs[:0]
			s.reset(&rec, false)
		}
		s.feed(ev, int64(i))
	}
}

func BenchmarkParseChunk(b *testing.B) {
	data := []byte(benchChunk)
	var ci ChunkInfo
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := ParseChunk(data, &ci); err != nil || ci.Choices != 1 {
			b.Fatal(err)
		}
	}
}

// Events cut at every byte boundary give the same records as whole ones.
func TestStreamFeedSplitAnywhere(t *testing.T) {
	body := strings.Repeat("data: "+benchChunk+"\n\n", 3) + "data: [DONE]\n\n"
	for cut := 0; cut <= len(body); cut++ {
		var rec Record
		var s streamState
		s.reset(&rec, false)
		s.feed([]byte(body[:cut]), 1)
		s.feed([]byte(body[cut:]), 2)
		s.complete()
		if !rec.Success || len(rec.ChunkNs) != 3 || rec.TextBytes != 3*len(" lorem") {
			t.Fatalf("cut at %d: success %v, %d chunks, %d text bytes: %s", cut, rec.Success, len(rec.ChunkNs), rec.TextBytes, rec.Error)
		}
	}
}

// A chunk as llama.cpp's server sends it, long strings included.
const benchLlamaChunk = `{"choices":[{"text":" follo","index":0,"logprobs":null,"finish_reason":null}],"created":1796110206,"model":"/var/cache/bpfbench/llama/tiny-llama.gguf","system_fingerprint":"b1-de3ff81","object":"text_completion","id":"chatcmpl-IvNcB4Zb0vbU9tGi9gsR0FjfKrCsm8xz"}`

func BenchmarkParseChunkLlama(b *testing.B) {
	data := []byte(benchLlamaChunk)
	var ci ChunkInfo
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := ParseChunk(data, &ci); err != nil || ci.Choices != 1 || ci.TextBytes != 6 {
			b.Fatal(err)
		}
	}
}

// Strings with every byte value at every position against the eight-byte scan.
func TestParseChunkStringBytes(t *testing.T) {
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 17; pos++ {
			text := []byte(strings.Repeat("a", 20))
			text[pos] = byte(c)
			in := `{"choices":[{"text":"` + string(text) + `"}]}`
			var ci ChunkInfo
			err := ParseChunk([]byte(in), &ci)
			bad := c < 0x20 || c == '"' || c == '\\'
			if (err != nil) != bad {
				t.Fatalf("byte %#x at %d: error %v", c, pos, err)
			}
			if !bad && ci.TextBytes != 20 {
				t.Fatalf("byte %#x at %d: %d text bytes", c, pos, ci.TextBytes)
			}
		}
	}
}

// With per-chunk usage (continuous usage stats), an empty-text chunk that
// adds a token is a token; a last one that adds none is not.
func TestFinalUsageWithContinuousUsage(t *testing.T) {
	var rec Record
	var s streamState
	s.reset(&rec, false)
	evs := []string{
		`{"choices":[{"text":"a","finish_reason":null}],"usage":{"prompt_tokens":4,"completion_tokens":1}}`,
		`{"choices":[{"text":"","finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":2}}`,
		`{"choices":[{"text":"","finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":2}}`,
		`[DONE]`,
	}
	for i, ev := range evs {
		s.feed([]byte("data: "+ev+"\n\n"), int64(i+1))
	}
	s.complete()
	if !rec.Success || len(rec.ChunkNs) != 2 || rec.OutputTokens != 2 || rec.LastNs != 2 {
		t.Fatalf("got %d chunks, %d tokens, last %d, success %v; want 2, 2, 2", len(rec.ChunkNs), rec.OutputTokens, rec.LastNs, rec.Success)
	}

	// vLLM's own last chunk with an empty text but a text field is a
	// token, as vLLM's client counts it; a chat "delta": {} is not.
	for _, tc := range []struct {
		chat   bool
		last   string
		chunks int
	}{
		{false, `{"choices":[{"text":"","finish_reason":"stop"}]}`, 2},
		{true, `{"choices":[{"delta":{"content":""},"finish_reason":"stop"}]}`, 2},
		{true, `{"choices":[{"delta":{},"finish_reason":"stop"}]}`, 1},
		{true, `{"choices":[{"delta":{"role":"assistant"},"finish_reason":"stop"}]}`, 1},
	} {
		rec = Record{}
		s.reset(&rec, tc.chat)
		first := `{"choices":[{"text":"a","finish_reason":null}]}`
		if tc.chat {
			first = `{"choices":[{"delta":{"content":"a"},"finish_reason":null}]}`
		}
		s.feed([]byte("data: "+first+"\n\ndata: "+tc.last+"\n\ndata: [DONE]\n\n"), 1)
		s.complete()
		if !rec.Success || len(rec.ChunkNs) != tc.chunks {
			t.Errorf("%s: %d chunks (success %v), want %d", tc.last, len(rec.ChunkNs), rec.Success, tc.chunks)
		}
	}
}

// The chunks of one stream through its chunk reader: after the first, the
// bytes around the output string are compared instead of scanned.
func BenchmarkChunkShape(b *testing.B) {
	texts := [][]byte{[]byte(strings.Replace(benchChunk, " lorem", " a", 1)), []byte(benchChunk)}
	var p chunkShape
	var ci ChunkInfo
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := p.parse(texts[i&1], &ci); err != nil || ci.Choices != 1 {
			b.Fatal(err)
		}
	}
}
