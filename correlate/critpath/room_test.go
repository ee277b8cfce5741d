package critpath

import "testing"

// roomFor keeps a history that is pruned at its front as fast as it grows
// in one array, its order and contents intact, the slots it left cleared.
func TestRoomForReusesTheArray(t *testing.T) {
	var s, base []Segment
	next := int64(0)
	add := func() {
		s, base = roomFor(s, base)
		s = insert(s, Segment{Start: next, End: next + 1, Thread: Thread{Comm: "x"}}, next, segStart)
		next++
	}
	for range 1000 {
		add()
	}
	arrays := map[*Segment]bool{}
	for range 100_000 {
		add()
		if len(s) > 1000 {
			clear(s[:1])
			s = s[1:]
		}
		arrays[&base[:1][0]] = true
	}
	if len(arrays) > 2 {
		t.Errorf("%d arrays for a history of 1000, want at most 2", len(arrays))
	}
	for i := range s {
		if want := next - int64(len(s)) + int64(i); s[i].Start != want {
			t.Fatalf("s[%d].Start %d, want %d", i, s[i].Start, want)
		}
	}
	for i, sg := range s[len(s):cap(s)] {
		if sg.Thread.Comm != "" {
			t.Fatalf("slot %d past the history not cleared: %+v", len(s)+i, sg)
		}
	}
	// Shrunk to a tenth: the next move takes a smaller array.
	s = s[len(s)-100:]
	for range 2000 {
		add()
		if len(s) > 100 {
			s = s[1:]
		}
	}
	if cap(base) > 400 {
		t.Errorf("array of %d for a history of 100", cap(base))
	}
}
