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
