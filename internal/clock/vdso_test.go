package clock

import "testing"

// Fast and Now read one clock: Fast taken between two Now readings lies
// between them, and the other way round.
func TestFastIsNow(t *testing.T) {
	for i := 0; i < 1000; i++ {
		a := Now()
		f := Fast()
		b := Now()
		g := Fast()
		if f < a || f > b || b > g {
			t.Fatalf("Now %d, Fast %d, Now %d, Fast %d: not one clock", a, f, b, g)
		}
	}
}

func BenchmarkNow(b *testing.B) {
	for i := 0; i < b.N; i++ {
		Now()
	}
}

func BenchmarkFast(b *testing.B) {
	for i := 0; i < b.N; i++ {
		Fast()
	}
}
