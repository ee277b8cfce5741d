package critpath

import "testing"

// A process's run-queue index searches back from a step by the longest
// wait it holds: once a long wait is pruned, the search narrows again.
func TestRunqIndexForgetsALongWait(t *testing.T) {
	const us = int64(1e3)
	var rq runqIndex
	long := Segment{Thread: Thread{Tid: 2, Tgid: 1}, State: Runnable, Start: 0, End: 1e9, Holders: []Holder{{Thread: Thread{Tid: 9}, Ns: 1e9}}}
	rq.add(long)
	for at := int64(0); at < 3e9; at += 1e6 {
		rq.add(Segment{Thread: Thread{Tid: 3, Tgid: 1}, State: Runnable, Start: at, End: at + 10*us, Holders: []Holder{{Thread: Thread{Tid: 9}, Ns: 10 * us}}})
	}
	if rq.maxLen != 1e9 {
		t.Fatalf("longest held %d ns, want the 1 s wait", rq.maxLen)
	}
	// The prune looks at the waits that started a longest wait before
	// the horizon (all of them ended by it): the long one and the first
	// 500 short ones.
	n := rq.prune(15e8)
	if rq.maxLen != 10*us {
		t.Errorf("after pruning to 1.5 s (%d pruned): longest held %d ns, want the 10 µs waits'", n, rq.maxLen)
	}
	// The next looks back 10 µs: every short one ended by 1.5 s goes.
	n += rq.prune(15e8)
	if n != 1501 || len(rq.segs) != 1500 {
		t.Errorf("%d pruned, %d held: want the long wait and the 1,500 short ones before 1.5 s pruned, 1,500 held", n, len(rq.segs))
	}
}
