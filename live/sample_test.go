package live

import (
	"math"
	"slices"
	"testing"

	"github.com/bpfbench/bpfbench/collectors"
)

// A sample keeps at most n gaps, each of those added with the same chance:
// of 10,000 gaps in a sample of 1,000, about as many from the first half
// as from the second.
func TestSampleUniform(t *testing.T) {
	s := sample{n: 1000}
	for i := range 10000 {
		s.add(Gap{Request: int32(i)})
	}
	if len(s.gaps) != 1000 || !s.sampled() {
		t.Fatalf("%d kept of %d, sampled %v", len(s.gaps), s.seen, s.sampled())
	}
	first := 0
	for _, g := range s.gaps {
		if g.Request < 5000 {
			first++
		}
	}
	if first < 400 || first > 600 {
		t.Errorf("%d of 1000 kept from the first half, want about 500", first)
	}
	s.reset()
	if s.seen != 0 || len(s.gaps) != 0 || s.sampled() {
		t.Errorf("after reset: %+v", s)
	}
}

// The p99 interval of a sample covers the population's p99 about 95% of
// the time: 400 reservoir samples of 2,000 from 50,000 heavy-tailed gaps,
// each with its own generator state.
func TestQuantileBoundsCover(t *testing.T) {
	const pop = 50000
	durs := make([]int64, pop)
	x := uint64(12345)
	for i := range durs {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		u := float64(x%1_000_000+1) / 1e6
		durs[i] = int64(1e6 / (u * u)) // a Pareto-like tail
	}
	sorted := slices.Clone(durs)
	slices.Sort(sorted)
	truth := sorted[int(0.99*float64(pop))]
	covered, trials := 0, 400
	for k := range trials {
		s := sample{n: 2000, rng: uint64(k)*0x9e3779b97f4a7c15 + 1}
		for i, d := range durs {
			s.add(Gap{Index: 1, Start: 0, End: d, Request: int32(i)})
		}
		b := s.bandBounds(false)
		if b == nil {
			t.Fatal("a sample of 2,000 of 50,000 gaps has no bounds")
		}
		if b[0] > b[1] {
			t.Fatalf("bounds %v out of order", *b)
		}
		if Ms(truth) >= b[0] && Ms(truth) <= b[1] {
			covered++
		}
	}
	// 95% nominal: binomial(400, 0.95) is below 362 with a chance under
	// one in a million.
	if covered < 362 {
		t.Errorf("the 95%% interval covered the p99 in %d of %d samples", covered, trials)
	}
	t.Logf("covered %d of %d", covered, trials)
	if (&sample{n: 10}).bandBounds(false) != nil {
		t.Error("an empty sample has bounds")
	}
	whole := sample{n: 100}
	whole.add(Gap{Index: 1, End: 5})
	if whole.bandBounds(false) != nil {
		t.Error("a sample that kept every gap has bounds: its p99 is exact")
	}
}

// The intake cost's bound is 1.96 standard errors of the timed mean.
func TestRecordSecondsError(t *testing.T) {
	tr := &Tracker{records: 6400, timed: 4, recordNs: 4000, recordSq: 500*500 + 1500*1500 + 1000*1000 + 1000*1000}
	c := tr.cost(0)
	if c.RecordSeconds != 1000*6400/1e9 {
		t.Errorf("record seconds %g", c.RecordSeconds)
	}
	// mean 1000, sample variance (250000+250000)/3, standard error sqrt(v/4)
	want := 1.96 * math.Sqrt(500000.0/3/4) / 1000
	if math.Abs(c.RecordSecondsError-want) > 1e-12 {
		t.Errorf("error %g, want %g", c.RecordSecondsError, want)
	}
	if (&Tracker{records: 64, timed: 1, recordNs: 900, recordSq: 810000}).cost(0).RecordSecondsError != 0 {
		t.Error("one timed intake has a bound")
	}
}

// The clock's own cost, taken out of each timed intake, is read where
// the thread's CPU clock is there, and is less than the bound on one
// intake (1 ms).
func TestClockCost(t *testing.T) {
	if _, ok := threadCPU(); !ok {
		t.Fatal("no thread CPU clock (CLOCK_THREAD_CPUTIME_ID): the intake cost cannot be timed")
	}
	if c := clockCost(); c < 0 || c >= 1e6 {
		t.Errorf("clock cost %d ns", c)
	}
	tr := NewTracker(Options{})
	for range 64 * 4 {
		tr.Record(collectors.Span{Kind: collectors.SpanFork, End: 1})
	}
	if c := tr.cost(2); c.RecordsTimed == 0 || c.RecordClockNs < 0 {
		t.Errorf("cost %+v: no intake timed less the clock", c)
	}
}
