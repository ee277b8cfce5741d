package result

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// secondsOfNs writes float64(ns)/1e9 as strconv's shortest 'f' format.
func TestSecondsOfNs(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ns := []int64{0, 1, 999, 1000, 1001, 1e9 - 1, 1e9, 1e9 + 1, 123456789, 2e9, 1e15 - 1, 1e15, 1e15 + 1, 1 << 53, math.MaxInt64}
	for range 1_000_000 {
		ns = append(ns[:15], rng.Int64N(1e6), rng.Int64N(1e10), rng.Int64N(1e16), rng.Int64N(1e4)*1e5, rng.Int64())
		for _, n := range ns {
			f := float64(n) / 1e9
			var want []byte
			if f < 1e-6 && f != 0 || f >= 1e21 {
				var w encoder
				w.float(f)
				want = w.b
			} else {
				want = strconv.AppendFloat(nil, f, 'f', -1, 64)
			}
			if got := appendSecondsOfNs(nil, n); !bytes.Equal(got, want) {
				t.Fatalf("%d ns: %s, want %s", n, got, want)
			}
		}
	}
}
