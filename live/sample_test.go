package live

import "testing"

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
