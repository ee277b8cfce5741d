package critpath

import (
	"reflect"
	"testing"
)

// The chain test's sender, as the scheduler collector reports it: three
// switch-ins make its segments, and the last Runnable's tail rule the
// Running segment still open at the send.
func TestSwitchesSegments(t *testing.T) {
	var w Switches
	var segs []Segment
	for _, r := range []SwitchIn{
		{Thread: thA, Ts: 0, Left: Runnable},
		{Thread: thA, Ts: 75 * ms, OffCPU: 65 * ms, Runq: 5 * ms, Left: Sleep, Wake: Wake{Kind: WakeThread, Waker: thB}, Holder: stress},
		{Thread: thB, Ts: 100 * ms, OffCPU: 20 * ms, Left: IOWait},
		{Thread: thB, Ts: 130 * ms, OffCPU: 10 * ms, Left: Runnable, Holder: stress, IRQ: IRQTime{Block: 3 * ms, Net: ms},
			Folded: Folded{Sleep: 4 * ms, Runq: ms}},
	} {
		segs = w.Segments(r, segs)
	}
	blk := seg(thB, Running, 100, 120)
	blk.IRQ = IRQTime{Block: 3 * ms, Net: ms} // the running stretch's, carried by the next switch-in
	blk.Folded = Folded{Sleep: 4 * ms, Runq: ms}
	want := []Segment{
		seg(thA, Running, 0, 10),
		sleepBy(thA, 10, 70, Wake{Kind: WakeThread, Waker: thB}),
		runq(thA, 70, 75, Holder{stress, 5 * ms}),
		seg(thB, IOWait, 80, 100),
		blk,
		runq(thB, 120, 130, Holder{stress, 10 * ms}),
	}
	if !reflect.DeepEqual(segs, want) {
		t.Errorf("got %+v\nwant %+v", segs, want)
	}
}

// A thread that left its CPU stopped: Stopped until it was resumed, the
// resumer kept as its wake, then Runnable.
func TestSwitchesStopped(t *testing.T) {
	var w Switches
	var segs []Segment
	kill := Thread{Tid: 900, Tgid: 900, Comm: "kill"}
	for _, r := range []SwitchIn{
		{Thread: thA, Ts: 0, Left: Runnable},
		{Thread: thA, Ts: 60 * ms, OffCPU: 50 * ms, Runq: 2 * ms, Left: Stopped, Wake: Wake{Kind: WakeThread, Waker: kill}},
	} {
		segs = w.Segments(r, segs)
	}
	stop := seg(thA, Stopped, 10, 58)
	stop.Wake = Wake{Kind: WakeThread, Waker: kill}
	want := []Segment{seg(thA, Running, 0, 10), stop, runq(thA, 58, 60)}
	if !reflect.DeepEqual(segs, want) {
		t.Errorf("got %+v\nwant %+v", segs, want)
	}
}
