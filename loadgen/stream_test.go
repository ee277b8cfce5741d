package loadgen

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
