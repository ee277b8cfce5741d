package critpath

import (
	"reflect"
	"testing"
)

var seeds = []uint64{1, 2, 3, 4, 5, 6, 7, 8}

// two: every process has two CPUs (the crowded sibling rule on).
func two(uint32) int { return 2 }

// propertyOptions: an odd seed's processes have two CPUs (the crowded
// sibling rule on), an even seed's an unknown number.
func propertyOptions(seed uint64) Options {
	if seed%2 == 0 {
		return Options{}
	}
	return Options{CPUs: two}
}

// Random graphs: every gap's steps tile it and its causes sum to it.
func TestPropertyPartsSumToGap(t *testing.T) {
	var agg Aggregate
	var hops, crowded uint64
	for _, seed := range seeds {
		tl := genTimeline(seed, 2+int(seed%5), 1000*ms, 4+int(seed%9))
		gs, st := tl.batchStats(propertyOptions(seed))
		hops += st.Hops
		if len(gs) != len(tl.reads) {
			t.Fatalf("seed %d: %d gaps of %d reads", seed, len(gs), len(tl.reads))
		}
		for _, g := range gs {
			checkSums(t, g)
			agg.Add(g)
			for _, st := range g.Steps {
				if st.Note == NoteSiblingCrowded {
					crowded++
				}
			}
			x := g.Excess(Baseline{ITL: Normal{ServerCompute: 5 * ms}})
			var ns int64
			var sh float64
			for c := range NumCauses {
				ns += x.Ns[c]
				sh += x.Shares[c]
			}
			if ns != x.ExcessNs || (x.ExcessNs > 0 && (sh < 1-1e-9 || sh > 1+1e-9)) {
				t.Fatalf("seed %d: excess %d split into %d, shares sum to %v", seed, x.ExcessNs, ns, sh)
			}
		}
	}
	var sum int64
	for _, v := range agg.Ns {
		sum += v
	}
	if sum != agg.GapNs {
		t.Errorf("aggregate: %d of %d", sum, agg.GapNs)
	}
	t.Logf("%d gaps; unexplained %.1f%% of gap time (holes and lost wakers by construction), cpu_runqueue %.1f%%, net_backpressure %.1f%%; neighbours %d; hops %d; crowded sibling steps %d",
		agg.Gaps, 100*agg.Fraction(Unexplained), 100*agg.Fraction(CPURunqueue), 100*agg.Fraction(NetBackpressure), len(agg.Neighbours()), hops, crowded)
}

// Shifting every timestamp by a constant changes nothing.
func TestPropertyShift(t *testing.T) {
	const k = 7_777_777_777_777
	for _, seed := range seeds[:4] {
		tl := genTimeline(seed, 4, 500*ms, 5)
		a := tl.batch(Options{})
		b := tl.shift(k).batch(Options{})
		for i := range b {
			b[i].Start -= k
			b[i].End -= k
			b[i].Sent -= k
			b[i].Arrived -= k
			for j := range b[i].Steps {
				b[i].Steps[j].Start -= k
				b[i].Steps[j].End -= k
			}
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: shifted results differ", seed)
		}
	}
}

// Input order permutations within the lateness, flushed as the watermark
// passes, give what one batch gives.
func TestPropertyOrderWithinLateness(t *testing.T) {
	for _, seed := range seeds[:4] {
		tl := genTimeline(seed, 5, 500*ms, 6)
		want := tl.batch(propertyOptions(seed))
		for perm := uint64(1); perm <= 4; perm++ {
			opt := propertyOptions(seed)
			if perm == 4 {
				opt.Keep = 300 * ms // pruning as it goes: longer than any gap plus the lateness
			}
			got := tl.stream(opt, seed*10+perm, 30*ms)
			if len(got) != len(want) {
				t.Fatalf("seed %d perm %d: %d gaps, want %d", seed, perm, len(got), len(want))
			}
			for i := range want {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Fatalf("seed %d perm %d: gap %d/%d differs:\n got %s\nwant %s", seed, perm, want[i].Request, want[i].Index, dump(got[i].Steps), dump(want[i].Steps))
				}
			}
		}
	}
}

// A long stream keeps only the history its open gaps need.
func TestStreamMemoryBounded(t *testing.T) {
	tl := genTimeline(9, 6, 20_000*ms, 8)
	ev := tl.events()
	sortEvents(ev)
	e := New(Options{Keep: 400 * ms})
	peak, gaps := 0, 0
	for i, x := range ev {
		tl.add(e, x)
		if i%64 == 0 {
			e.SetFloor(x.at - 300*ms)
			gaps += len(e.Flush(x.at - maxSpan))
			peak = max(peak, e.Retained())
		}
	}
	gaps += len(e.Flush(maxNs))
	st := e.Stats()
	if gaps != len(tl.reads) {
		t.Errorf("%d gaps of %d reads", gaps, len(tl.reads))
	}
	// 20 s of history is ~len(ev) items; a window of ~0.5 s holds 1/40.
	if peak > len(ev)/20 || st.Pruned == 0 {
		t.Errorf("peak %d items held of %d events, %d pruned", peak, len(ev), st.Pruned)
	}
	t.Logf("%d events, peak %d held, %d pruned, stats %+v", len(ev), peak, st.Pruned, st)
}

func sortEvents(ev []event) {
	slicesSortStable(ev)
}

// The timed-wait rule's claims and the crowded sibling rule's parts from
// the active index are those of the search of every thread's history: the
// same gaps, step for step, in one batch and in a stream pruned as it goes.
func TestPropertyActiveIndex(t *testing.T) {
	var sleeps uint64
	for seed := uint64(1); seed <= 40; seed++ {
		tl := genTimeline(seed, 2+int(seed%7), 1000*ms, 3+int(seed%9))
		want, st := tl.batchStats(Options{scanThreads: true, CPUs: two})
		sleeps += st.NoEdgeSleeps
		got := tl.batch(Options{indexAlways: true, CPUs: two})
		for _, keep := range []int64{0, 300 * ms} {
			if keep > 0 {
				want = tl.stream(Options{scanThreads: true, Keep: keep, CPUs: two}, seed, 30*ms)
				got = tl.stream(Options{indexAlways: true, Keep: keep, CPUs: two}, seed, 30*ms)
			}
			if len(got) != len(want) {
				t.Fatalf("seed %d keep %d: %d gaps, want %d", seed, keep, len(got), len(want))
			}
			for i := range want {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Fatalf("seed %d keep %d: gap %d/%d differs:\n got %s\nwant %s", seed, keep, want[i].Request, want[i].Index, dump(got[i].Steps), dump(want[i].Steps))
				}
			}
		}
	}
	if sleeps == 0 {
		t.Fatal("no sleep without a wakeup edge in the random timelines: the rule was not exercised")
	}
	t.Logf("%d sleeps without a wakeup edge covered alike", sleeps)
}
