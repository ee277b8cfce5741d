package feed

import (
	"testing"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/correlate/critpath"
)

// What woke a sleep, as the sched collector names it, becomes the walk's
// wake kind: a hard interrupt outside any device handler is a timer, a
// device handler's wakeup is its device's, and an unnamed hard interrupt
// (no interrupt time) is a timer for S and a device for D.
func TestWakeOfContexts(t *testing.T) {
	for _, c := range []struct {
		ctx, state string
		want       critpath.WakeKind
	}{
		{"task", "sleep", critpath.WakeThread},
		{"hardirq", "sleep", critpath.WakeTimer},
		{"hardirq", "io_wait", critpath.WakeHardIRQ},
		{"hardirq:timer", "sleep", critpath.WakeTimer},
		{"hardirq:timer", "io_wait", critpath.WakeTimer},
		{"hardirq:block", "sleep", critpath.WakeBlock},
		{"hardirq:net", "sleep", critpath.WakeNetRx},
		{"hardirq:device", "sleep", critpath.WakeHardIRQ},
		{"softirq:net_rx", "sleep", critpath.WakeNetRx},
		{"softirq:block", "sleep", critpath.WakeBlock},
		{"softirq:timer", "sleep", critpath.WakeSoftIRQTimer},
		{"softirq:hrtimer", "sleep", critpath.WakeTimer},
		{"nmi", "sleep", critpath.WakeUnknown},
		{"", "sleep", critpath.WakeUnknown},
	} {
		sp := collectors.Span{Kind: collectors.SpanOffCPU, Detail: c.state, WakeCtx: c.ctx}
		if got := WakeOf(sp).Kind; got != c.want {
			t.Errorf("%s ending %s: %v, want %v", c.ctx, c.state, got, c.want)
		}
	}
}

// A switch-in's run-queue span is paired with its off-CPU span whether it
// comes right before it (held apart) or with another thread's spans, or
// a send, between them (parked by thread): the same segments either way.
func TestSwitchInPairsAnyOrder(t *testing.T) {
	const ms = int64(1e6)
	spans := func(tid uint32, at int64) (rq, off collectors.Span) {
		rq = collectors.Span{Kind: collectors.SpanRunqueue, Tid: tid, Tgid: 1, Start: at - ms, End: at, HolderTid: 9, HolderTgid: 9, HolderComm: "busy"}
		off = collectors.Span{Kind: collectors.SpanOffCPU, Tid: tid, Tgid: 1, Start: at - 5*ms, End: at, Detail: "sleep",
			WakeTs: at - ms, WakeCtx: "task", WakerTid: 3, WakerTgid: 1}
		return rq, off
	}
	send := collectors.Span{Kind: collectors.SpanSend, Tid: 2, Tgid: 1, Start: 30 * ms, End: 30 * ms, Port: 5000, Bytes: 10}
	feedAll := func(order func(a1, a2, b1, b2, c1, c2 collectors.Span) []collectors.Span) FeedStats {
		f := NewFeed(critpath.New(critpath.Options{}), 1<<20)
		for at := int64(10); at <= 60; at += 10 {
			a1, a2 := spans(1, at*ms)
			b1, b2 := spans(2, at*ms+ms/2)
			c1, c2 := spans(1, at*ms+5*ms)
			for _, sp := range order(a1, a2, b1, b2, c1, c2) {
				f.Record(sp)
			}
		}
		return f.Stats
	}
	adjacent := feedAll(func(a1, a2, b1, b2, c1, c2 collectors.Span) []collectors.Span {
		return []collectors.Span{a1, a2, b1, b2, c1, c2}
	})
	mixed := feedAll(func(a1, a2, b1, b2, c1, c2 collectors.Span) []collectors.Span {
		return []collectors.Span{a1, b1, send, a2, c1, b2, c2}
	})
	if adjacent.Segments == 0 || mixed.Segments != adjacent.Segments {
		t.Errorf("segments: %d with each pair adjacent, %d interleaved", adjacent.Segments, mixed.Segments)
	}
	// Paired, a switch-in is a sleep and a run-queue wait (a run-queue
	// span alone would be one more: a wait of its own), and thread 2's
	// runs between its switch-ins 5 more (thread 1 sleeps from its last
	// switch-in on).
	if want := uint64(2*18 + 5); adjacent.Segments != want {
		t.Errorf("%d segments for 18 paired switch-ins of two threads, want %d", adjacent.Segments, want)
	}
}
