package tcp

import (
	"testing"

	"github.com/bpfbench/bpfbench/collectors"
)

type spans []collectors.Span

func (s *spans) Record(sp collectors.Span) { *s = append(*s, sp) }

// TestSendFullIsAHold: a non-blocking server's send that found the buffer
// full starts a hold of the connection that the next send through ends;
// the sends folded into the SendFull record still reach the timeline.
func TestSendFullIsAHold(t *testing.T) {
	var got spans
	d := &dataSpans{r: &got, last: map[uint64]lastData{}}
	d.record(&Event{Kind: uint8(Send), Cookie: 7, Ts: 100, Tid: 3, Sport: 8000, Dport: 40001, Bytes: 50})
	d.record(&Event{Kind: uint8(SendFull), Cookie: 7, Ts: 200, Tid: 3, Sport: 8000, Dport: 40001, FoldN: 1, FoldBytes: 20, FoldLastTs: 150})
	d.record(&Event{Kind: uint8(Send), Cookie: 7, Ts: 900, Tid: 3, Sport: 8000, Dport: 40001, Bytes: 60})
	var hold, sends int
	for _, sp := range got {
		switch sp.Kind {
		case collectors.SpanTCP:
			hold++
			if sp.Start != 200 || sp.End != 900 || sp.Port != 40001 || !sp.Blocking || sp.Detail != SendBufferFull {
				t.Errorf("hold %+v, want 200-900 on port 40001, blocking, %s", sp, SendBufferFull)
			}
		case collectors.SpanSend:
			sends++
		}
	}
	if hold != 1 || sends != 3 {
		t.Errorf("%d holds and %d send spans (%+v), want 1 and 3 (two sends and the folded burst)", hold, sends, got)
	}
}
