package critpath

import (
	"math/rand/v2"
	"testing"
)

// paintThreads is a sleep of 100 ms and the claims over it of n threads,
// each running three short stretches at random (a server of a thread per
// connection, most of them idle): the timed-wait rule's paint.
func paintThreads(n int) (*Engine, Step) {
	rng := rand.New(rand.NewPCG(3, 4))
	e := New(Options{})
	st := Step{Start: 0, End: 100 * ms}
	for tid := range n {
		at := int64(0)
		for k := range 3 {
			at += rng.Int64N(30 * ms)
			d := 20_000 + rng.Int64N(200_000)
			r := rng.IntN(int(numRanks))
			e.claims[r] = append(e.claims[r], claim{start: at, end: at + d, tid: uint32(tid + 1), i: int32(3*tid + k)})
			at += d
		}
	}
	return e, st
}

// Painting covers the sleep exactly once: the painted stretches, in
// order, tile it whatever the number of threads.
func TestPaintClaimsTiles(t *testing.T) {
	for _, n := range []int{1, 10, 1000} {
		e, st := paintThreads(n)
		out := e.paintClaims(st)
		at := st.Start
		for _, p := range out {
			if p.start != at || p.end <= p.start {
				t.Fatalf("%d threads: a stretch [%d, %d] where %d was next", n, p.start, p.end, at)
			}
			at = p.end
		}
		if at != st.End {
			t.Fatalf("%d threads: painted to %d, want %d", n, at, st.End)
		}
	}
}

// BenchmarkPaintClaims is the paint of one sleep over 10,000 threads'
// claims (ns/thread).
func BenchmarkPaintClaims(b *testing.B) {
	const n = 10000
	e, st := paintThreads(n)
	var saved [numRanks][]claim
	for r := range e.claims {
		saved[r] = append([]claim(nil), e.claims[r]...)
	}
	for b.Loop() {
		for r := range e.claims {
			e.claims[r] = append(e.claims[r][:0], saved[r]...)
		}
		e.paintClaims(st)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/thread")
}
