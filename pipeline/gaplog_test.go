package pipeline

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bpfbench/bpfbench/correlate/critpath"
)

// The log gives back every gap as it was added: packed when its parts
// are not negative and sum to it (a 5 s stall included), whole when not,
// across blocks.
func TestGapLogRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var want []critGap
	var l gapLog
	at, odd := int64(1e12), 0
	for i := range 40017 {
		g := critGap{request: int32(i / 64), index: int32(i % 64), start: at, noArrival: i%7 == 0}
		for c := range critpath.NumCauses {
			if r.IntN(3) == 0 {
				g.ns[c] = r.Int64N(20e6)
			}
		}
		if m := i % 1000; m == 6 || m == 7 {
			odd++
		}
		switch i % 1000 {
		case 5:
			g.ns[critpath.NetBackpressure] = 5e9 // a 5 s stall packs too
		case 6:
			g.ns[critpath.Client] = -1
		}
		var sum int64
		for _, v := range g.ns {
			sum += v
		}
		g.end = g.start + sum
		if r.IntN(4) == 0 {
			g.steal = g.ns[critpath.CPURunqueue] / 2
		}
		if i%1000 == 7 {
			g.end++ // parts that do not sum to the gap
		}
		at = g.end
		want = append(want, g)
		l.add(g)
	}
	got := slices.Collect(l.all())
	if l.len() != len(want) || len(got) != len(want) {
		t.Fatalf("len %d, %d gaps back, %d added", l.len(), len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("gap %d: got %+v, added %+v", i, got[i], want[i])
		}
	}
	t.Logf("%d gaps in %d bytes (%.1f a gap), %d blocks", l.len(), l.bytes(), float64(l.bytes())/float64(l.len()), len(l.blocks))
	if len(l.wide) != odd {
		t.Errorf("%d gaps kept whole, want the %d that do not pack", len(l.wide), odd)
	}
}

// tailMean's two passes take the same gaps as sorting them all: the
// slowest tenth, ties at its edge filled in order.
func TestTailMeanMatchesSort(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var gs []critGap
	for i := range 2000 {
		g := critGap{request: int32(i / 20), index: int32(i % 20), start: int64(i) * 1e7}
		g.ns[critpath.ServerCompute] = 5e6 + 1e6*r.Int64N(4) // many ties
		g.ns[critpath.CPURunqueue] = 1e6 * r.Int64N(3)
		g.end = g.start + g.ns[critpath.ServerCompute] + g.ns[critpath.CPURunqueue]
		gs = append(gs, g)
	}
	base := baselineOf(slices.Values(gs))
	got := tailMean(slices.Values(gs), base)

	var sel []critGap
	for _, g := range gs {
		if g.index > 0 {
			sel = append(sel, g)
		}
	}
	slices.SortStableFunc(sel, func(a, b critGap) int { return cmp.Compare(b.duration(), a.duration()) })
	n := len(sel) / 10
	var want [critpath.NumCauses]float64
	// Which of the tied gaps is taken changes each cause's part, not the
	// gap's length: compare the total.
	var gotSum, wantSum float64
	for i := range sel[:n] {
		for k, v := range sel[i].excess(base).Ns {
			want[k] += float64(v) / float64(n)
		}
	}
	for k := range want {
		gotSum += got.ns[k]
		wantSum += want[k]
	}
	if d := gotSum - wantSum; d > 1 || d < -1 {
		t.Errorf("tail mean excess %v ns a gap, sorting gives %v", gotSum, wantSum)
	}
	if base.ITL[critpath.ServerCompute] == 0 {
		t.Errorf("baseline %+v", base)
	}
}
