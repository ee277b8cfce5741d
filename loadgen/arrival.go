package loadgen

import (
	"context"
	"math"
	"math/rand/v2"
)

// Arrivals generates inter-arrival gaps, in seconds, following vLLM's
// request generator: with a finite rate, gaps are gamma-distributed with
// shape = burstiness and scale = 1/(rate*burstiness), so the mean gap is
// 1/rate and the coefficient of variation 1/sqrt(burstiness); burstiness 1
// is a Poisson process, +Inf (or Constant) a constant rate. An infinite rate
// gives zero gaps (everything at once, or closed-loop with a concurrency cap).
type Arrivals struct {
	Rate       float64
	Burstiness float64
	Constant   bool
	rng        *rand.Rand
}

// NewArrivals returns a generator seeded with seed.
func NewArrivals(rate, burstiness float64, constant bool, seed uint64) *Arrivals {
	if burstiness <= 0 {
		burstiness = 1
	}
	return &Arrivals{Rate: rate, Burstiness: burstiness, Constant: constant, rng: rand.New(rand.NewPCG(seed, 0x62706662656e6368))}
}

// Infinite reports whether every request is due at once.
func (a *Arrivals) Infinite() bool { return a.Rate <= 0 || math.IsInf(a.Rate, 1) }

// Next returns the next gap in seconds.
func (a *Arrivals) Next() float64 {
	switch {
	case a.Infinite():
		return 0
	case a.Constant || math.IsInf(a.Burstiness, 1):
		return 1 / a.Rate
	}
	return gamma(a.rng, a.Burstiness) / (a.Rate * a.Burstiness)
}

// Offsets returns n send times in nanoseconds from the start. Like vLLM, the
// cumulative times are rescaled so the last request is due at n/rate, which
// keeps the achieved rate independent of the seed.
func (a *Arrivals) Offsets(n int) []int64 {
	out := make([]int64, n)
	if n == 0 || a.Infinite() {
		return out
	}
	cum := make([]float64, n)
	t := 0.0
	for i := range cum {
		t += a.Next()
		cum[i] = t
	}
	scale := 1.0
	if t > 0 {
		scale = float64(n) / a.Rate / t
	}
	for i, c := range cum {
		out[i] = int64(c * scale * 1e9)
	}
	return out
}

// gamma draws from Gamma(shape, 1) (Marsaglia and Tsang, 2000).
func gamma(rng *rand.Rand, shape float64) float64 {
	if shape < 1 {
		u := rng.Float64()
		for u == 0 {
			u = rng.Float64()
		}
		return gamma(rng, shape+1) * math.Pow(u, 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		var x, v float64
		for {
			x = rng.NormFloat64()
			v = 1 + c*x
			if v > 0 {
				break
			}
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x {
			return d * v
		}
		if u > 0 && math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// pacer sends the i-th request or conversation of a run at its time: from
// the precomputed offsets, or drawn as it goes in duration mode; it waits
// for a slot under --max-concurrency and stops at the run's deadline or
// end (wait returns false, and then holds no slot).
type pacer struct {
	ctx          context.Context
	arr          *Arrivals
	offsets      []int64
	start        int64
	deadline     int64 // 0: none
	durationMode bool
	sem          chan struct{} // nil: no concurrency limit
	nextOffset   float64
	// slotWait is how long the last wait waited for a free slot under
	// --max-concurrency after the send was due.
	slotWait int64
}

// wait blocks until the i-th send is due and a slot is free; it returns
// the time it was due, or false when the run is over.
func (p *pacer) wait(i int) (int64, bool) {
	var at int64
	if p.durationMode {
		at = p.start + int64(p.nextOffset*1e9)
		p.nextOffset += p.arr.Next()
	} else {
		at = p.start + p.offsets[i]
	}
	if p.deadline > 0 && at >= p.deadline {
		return 0, false
	}
	if !sleepUntil(at, p.ctx.Done()) {
		return 0, false
	}
	p.slotWait = 0
	if p.sem != nil {
		t0 := Mono()
		select {
		case p.sem <- struct{}{}:
			p.slotWait = Mono() - t0
		case <-p.ctx.Done():
			return 0, false
		}
	}
	if p.deadline > 0 && Mono() >= p.deadline {
		if p.sem != nil {
			<-p.sem
		}
		return 0, false
	}
	return at, true
}
