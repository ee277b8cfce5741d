package metrics

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// msOfNs gives the list sort.Float64s gives of the ns in ms, bit for bit.
func TestMsOfNs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	special := []int64{0, 1, 1 << 62, math.MaxInt64, 1<<53 + 1, 2047, 2048}
	for i := range 2000 {
		n := rng.IntN(3 * radixMin)
		ns := make([]int64, n)
		for j := range ns {
			switch rng.IntN(10) {
			case 0:
				ns[j] = special[rng.IntN(len(special))]
			case 1:
				ns[j] = rng.Int64N(4) // ties
			case 2:
				ns[j] = rng.Int64()
			default:
				ns[j] = rng.Int64N(1e10)
			}
		}
		if i%10 == 0 && n > 0 {
			ns[rng.IntN(n)] = -rng.Int64N(1e6)
		}
		want := make([]float64, n)
		for j, x := range ns {
			want[j] = float64(x) / 1e6
		}
		sort.Float64s(want)
		got := msOfNs(ns)
		for j := range got {
			if math.Float64bits(got[j]) != math.Float64bits(want[j]) {
				t.Fatalf("list %d (%d values): at %d %v, sort.Float64s %v", i, n, j, got[j], want[j])
			}
		}
		if !slices.IsSorted(ns) {
			t.Fatalf("list %d: ns not sorted", i)
		}
	}
}

func itlSample() []int64 {
	rng := rand.New(rand.NewPCG(3, 4))
	ns := make([]int64, 25500)
	for i := range ns {
		ns[i] = 2e6 + rng.Int64N(3e5)
	}
	return ns
}

// The ITLs of 100 requests of 256 tokens.
func BenchmarkMsOfNs(b *testing.B) {
	ns, buf := itlSample(), make([]int64, 25500)
	for b.Loop() {
		copy(buf, ns)
		msOfNs(buf)
	}
}

// As Compute did before msOfNs: ms first, then sort.Float64s.
func BenchmarkMsSortFloat64s(b *testing.B) {
	ns := itlSample()
	for b.Loop() {
		ms := make([]float64, len(ns))
		for i, n := range ns {
			ms[i] = float64(n) / 1e6
		}
		sort.Float64s(ms)
	}
}
