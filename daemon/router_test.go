package daemon

import (
	"testing"

	"github.com/bpfbench/bpfbench/collectors"
)

type spanCount struct{ n int }

func (c *spanCount) Record(collectors.Span) { c.n++ }

// The shared live session's spans reach their targets' trackers: by slot
// where the span has one, by its thread's slot (learnt from the
// scheduler's spans) where it has none, by the only target while there is
// one; the rest are counted.
func TestSpanRouter(t *testing.T) {
	r := newSpanRouter()
	a, b := &spanCount{}, &spanCount{}
	r.set(1, a)
	// One target: a span with no slot and a thread never seen is its.
	r.Record(collectors.Span{Kind: collectors.SpanCUDA, Tid: 7})
	if a.n != 1 {
		t.Fatalf("one target: %d spans routed to it, want 1", a.n)
	}
	r.set(4, b)
	r.Record(collectors.Span{Kind: collectors.SpanOffCPU, Tid: 11, Tgid: 10, Slot: 4})
	r.Record(collectors.Span{Kind: collectors.SpanSend, Tid: 11, Slot: 4})
	r.Record(collectors.Span{Kind: collectors.SpanCUDA, Tid: 11}) // b's thread
	r.Record(collectors.Span{Kind: collectors.SpanCUDA, Tid: 99}) // nobody's
	r.Record(collectors.Span{Kind: collectors.SpanRunqueue, Tid: 3, Tgid: 3, Slot: 1})
	r.Record(collectors.Span{Kind: collectors.SpanBlockIO, Tid: 3}) // a's thread
	if a.n != 3 || b.n != 3 {
		t.Errorf("a %d spans, b %d; want 3 and 3", a.n, b.n)
	}
	if u := r.unrouted.Load(); u != 1 {
		t.Errorf("%d spans unrouted, want 1 (the unknown thread's)", u)
	}
	// b taken out: its slot's spans are dropped and counted, a's still a's.
	r.set(4, nil)
	r.Record(collectors.Span{Kind: collectors.SpanSend, Tid: 11, Slot: 4})
	r.Record(collectors.Span{Kind: collectors.SpanCUDA, Tid: 11})
	if b.n != 3 || r.unrouted.Load() != 3 {
		t.Errorf("after b left: b %d spans (want 3), %d unrouted (want 3)", b.n, r.unrouted.Load())
	}
}
