package live

// sample is a uniform sample of at most n gaps (reservoir sampling): each
// gap added has the same chance to be in it.
type sample struct {
	n, seen int
	gaps    []Gap
	rng     uint64
}

func (s *sample) add(g Gap) {
	s.seen++
	if len(s.gaps) < s.n {
		s.gaps = append(s.gaps, g)
		return
	}
	if s.rng == 0 {
		s.rng = 0x9e3779b97f4a7c15
	}
	s.rng ^= s.rng << 13 // xorshift64
	s.rng ^= s.rng >> 7
	s.rng ^= s.rng << 17
	if i := int(s.rng % uint64(s.seen)); i < s.n {
		s.gaps[i] = g
	}
}

// sampled says whether gaps were left out.
func (s *sample) sampled() bool { return s.seen > len(s.gaps) }

func (s *sample) reset() { s.gaps, s.seen = s.gaps[:0], 0 }
