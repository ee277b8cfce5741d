package critpath

import (
	"math/rand/v2"
	"sort"
	"testing"
)

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

// insert keeps a history sorted by key, equal keys in their arrival order,
// whether an entry comes a place or a thousand out of order.
func TestInsertKeepsTheOrder(t *testing.T) {
	var s []Segment
	rng := uint64(7)
	for i := range 5000 {
		rng = rng*6364136223846793005 + 1442695040888963407
		back := int64(rng>>33) % 3
		switch {
		case i%97 == 0:
			back = int64(rng>>40) % 4000
		case i%13 == 0:
			back = 12
		}
		k := int64(i) - back
		s = insert(s, Segment{Start: k, End: int64(i)}, k, segStart)
	}
	for i := 1; i < len(s); i++ {
		a, b := s[i-1], s[i]
		if a.Start > b.Start || a.Start == b.Start && a.End > b.End {
			t.Fatalf("s[%d] %+v before s[%d] %+v", i-1, a, i, b)
		}
	}
}

// The active index reuses the arrays of the buckets it pruned: a server
// that runs for long adds segments without allocating anew for each bucket.
func TestActiveIndexReusesBuckets(t *testing.T) {
	var a activeIndex
	add := func(from, to int64) {
		for ts := from; ts < to; ts += 100e3 {
			a.add(Segment{Start: ts, End: ts + 50e3, State: Running})
		}
	}
	add(0, 1e9)
	a.prune(1e9)
	if len(a.free) == 0 {
		t.Fatal("no bucket kept for reuse after a prune")
	}
	base := int64(2e9)
	allocs := testing.AllocsPerRun(5, func() {
		add(base, base+40e6)
		a.prune(base + 40e6 + 2*longNs)
		base += 1e9
	})
	if allocs > 1 {
		t.Errorf("%.1f allocations for 10 buckets of reused arrays, want at most 1", allocs)
	}
	var n int
	a.each(0, 1<<62, func(*activeSeg) { n++ })
	if n != 0 {
		t.Errorf("%d entries left after pruning them all", n)
	}
}

// TestFromAgreesWithSearch: the hinted lookup of a thread's segments
// answers what a binary search does, for questions near its last answer
// and far from it, with starts that repeat.
func TestFromAgreesWithSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	h := &history{}
	at := int64(0)
	for range 500 {
		at += rng.Int64N(3) * 10 // some starts repeat
		h.segs = append(h.segs, Segment{Start: at, End: at + 10})
	}
	want := func(x int64) int {
		i := sort.Search(len(h.segs), func(j int) bool { return h.segs[j].Start > x })
		return max(i-1, 0)
	}
	x := int64(0)
	for n := range 20000 {
		if n%50 == 0 {
			x = rng.Int64N(at+40) - 20 // far
		} else {
			x += rng.Int64N(41) - 20 // near
		}
		if got, w := h.from(x), want(x); got != w {
			t.Fatalf("from(%d) = %d, want %d", x, got, w)
		}
	}
	h.segs = h.segs[:3] // pruned under the hint
	if got, w := h.from(at), want(at); got != w {
		t.Fatalf("from(%d) after a prune = %d, want %d", at, got, w)
	}
	h.segs = nil
	if got := h.from(5); got != 0 {
		t.Fatalf("from on no segments = %d", got)
	}
}
