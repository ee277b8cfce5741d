package sweep

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Runs drawn from a known logistic curve: the fitted knee is near its
// half-way point, and the 95% interval covers it in about 95% of 200
// searches of 24 runs each (between 89% and 99%: the binomial spread of
// 200 searches, and the likelihood-ratio interval is approximate with few
// runs).
func TestFitKneeCoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const k, s = 14.0, 1.5
	covered, n := 0, 200
	var width float64
	for range n {
		var ts []trial
		for range 24 {
			x := 8 + 12*rng.Float64()
			p := 1 / (1 + math.Exp(s*(x-k)))
			ts = append(ts, trial{x, rng.Float64() < p})
		}
		knee, lo, hi, ok := fitKnee(ts)
		if !ok {
			continue
		}
		if lo > knee || knee > hi {
			t.Fatalf("knee %.2f outside its interval [%.2f, %.2f]", knee, lo, hi)
		}
		if lo <= k && k <= hi {
			covered++
		}
		width += hi - lo
	}
	share := float64(covered) / float64(n)
	t.Logf("the 95%% interval covered the knee %.1f in %d of %d searches; mean width %.2f", k, covered, n, width/float64(n))
	if share < 0.89 || share > 0.99 {
		t.Errorf("coverage %.3f, want about 0.95", share)
	}
}

// Separated runs (every pass below every fail) bound the knee between the
// highest pass and the lowest fail and beyond them, more narrowly the
// more runs settle each side; with no fail there is no knee.
func TestFitKneeSeparated(t *testing.T) {
	few := []trial{{10, true}, {12, true}, {13, true}, {14, false}, {15, false}, {16, false}}
	knee, lo, hi, ok := fitKnee(few)
	if !ok || knee < 13 || knee > 14 || lo >= 13 || hi <= 14 {
		t.Fatalf("few runs: knee %.2f in [%.2f, %.2f] (ok %v), want the knee in 13-14 and the interval past both", knee, lo, hi, ok)
	}
	var many []trial
	for range 5 {
		many = append(many, few...)
	}
	_, lo2, hi2, _ := fitKnee(many)
	if hi2-lo2 >= hi-lo || lo2 < lo || hi2 > hi {
		t.Errorf("five times the runs: [%.2f, %.2f], want it inside and narrower than [%.2f, %.2f]", lo2, hi2, lo, hi)
	}
	t.Logf("6 runs: knee %.2f in [%.2f, %.2f]; 30 runs: [%.2f, %.2f]", knee, lo, hi, lo2, hi2)
	if _, _, _, ok := fitKnee([]trial{{10, true}, {12, true}}); ok {
		t.Errorf("a knee from runs that all passed")
	}
}
