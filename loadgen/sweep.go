package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
)

// SLO is one service level objective on a metric of the result, by its vLLM
// field name: "p99_ttft_ms<=500", "mean_itl_ms<50", "request_goodput>=2".
type SLO struct {
	Metric string
	Op     string // <=, <, >=, >
	Value  float64
}

func (s SLO) String() string {
	return s.Metric + s.Op + strconv.FormatFloat(s.Value, 'g', -1, 64)
}

// Met reports whether v meets the objective.
func (s SLO) Met(v float64) bool {
	switch s.Op {
	case "<=":
		return v <= s.Value
	case "<":
		return v < s.Value
	case ">=":
		return v >= s.Value
	case ">":
		return v > s.Value
	}
	return false
}

// ParseSLOs parses "p99_ttft_ms<=200,p99_itl_ms<=50".
func ParseSLOs(s string) ([]SLO, error) {
	var out []SLO
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		var slo SLO
		for _, op := range []string{"<=", ">=", "<", ">"} {
			if i := strings.Index(part, op); i > 0 {
				slo.Metric = strings.TrimSpace(part[:i])
				slo.Op = op
				v, err := strconv.ParseFloat(strings.TrimSpace(part[i+len(op):]), 64)
				if err != nil {
					return nil, fmt.Errorf("SLO %q: the bound is not a number", part)
				}
				slo.Value = v
				break
			}
		}
		if slo.Op == "" {
			return nil, fmt.Errorf("SLO %q: want METRIC<=VALUE, e.g. p99_ttft_ms<=500", part)
		}
		out = append(out, slo)
	}
	if len(out) == 0 {
		return nil, errors.New("no SLO given: pass --slo \"p99_ttft_ms<=X,p99_itl_ms<=Y\"")
	}
	return out, nil
}

// Sweep modes.
const (
	SweepRate        = "rate"
	SweepConcurrency = "concurrency"
)

// SweepConfig configures an SLO search.
type SweepConfig struct {
	// Load is the base load: target, dataset, arrival shape. Its rate,
	// concurrency and request count are set by the sweep at every step.
	Load Config
	SLOs []SLO
	// Mode searches over the request rate (open loop, default) or the
	// concurrency (closed loop).
	Mode string
	// RequestsPerStep is the number of measured requests at every step.
	RequestsPerStep int
	// Precision is the search step: the answer is within Precision of the
	// true limit, relative to the measured capacity (rate mode, default 0.05).
	Precision float64
	// Step, when positive, is the rate search resolution in req/s instead
	// of Precision × capacity.
	Step float64
	// MaxRate bounds the rate search (0: 1.25 × the probed capacity);
	// MaxConcurrency the concurrency search (0: 1024).
	MaxRate        float64
	MaxConcurrency int
	// MaxFailedFraction of failed requests makes a step fail (default 0.01).
	MaxFailedFraction float64
	// OnStep is called after every step.
	OnStep func(*SweepStep)
}

// SweepStep is one measured point of the search.
type SweepStep struct {
	N           int      `json:"step"`
	Phase       string   `json:"phase"` // probe or search
	Rate        float64  `json:"rate,omitempty"`
	Concurrency int      `json:"concurrency,omitempty"`
	Pass        bool     `json:"pass"`
	Violations  []string `json:"violations,omitempty"`
	// StoppedEarly is set when the step was ended as soon as an SLO could
	// no longer be met (over-saturation), without waiting for every request.
	StoppedEarly bool               `json:"stopped_early,omitempty"`
	Values       map[string]float64 `json:"values"`
	Metrics      *Metrics           `json:"-"`
}

// SweepResult is the outcome of a search.
type SweepResult struct {
	Mode string   `json:"mode"`
	SLOs []string `json:"slos"`
	// Capacity is the request throughput measured by the saturation probe.
	Capacity float64 `json:"capacity_req_s"`
	// StepSize is the search resolution (req/s or requests in flight).
	StepSize float64 `json:"step_size"`
	// Answer is the highest rate (or concurrency) that met every SLO; 0
	// when none did. Best is the step measured there.
	Answer float64      `json:"answer"`
	Best   *SweepStep   `json:"best,omitempty"`
	Steps  []*SweepStep `json:"steps"`
}

// evaluate checks the SLOs against m.
func evaluate(slos []SLO, m *Metrics, maxFailed float64, n int) (bool, []string, map[string]float64) {
	values := map[string]float64{}
	var viol []string
	for _, s := range slos {
		v, ok := m.Value(s.Metric)
		if !ok {
			viol = append(viol, s.Metric+": unknown metric")
			continue
		}
		values[s.Metric] = v
		if !s.Met(v) {
			viol = append(viol, fmt.Sprintf("%s=%.3f (want %s)", s.Metric, v, s.String()))
		}
	}
	for _, k := range []string{"request_throughput", "output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms", "median_e2el_ms"} {
		if v, ok := m.Value(k); ok {
			values[k] = v
		}
	}
	values["failed"] = float64(m.Failed)
	if n > 0 && float64(m.Failed) > maxFailed*float64(n) {
		viol = append(viol, fmt.Sprintf("%d of %d requests failed", m.Failed, n))
	}
	return len(viol) == 0, viol, values
}

// earlyStop returns an OnRecord hook that cancels the step once a
// percentile SLO on a per-request metric (ttft, tpot, e2el) can no longer
// be met whatever the remaining requests measure.
func earlyStop(slos []SLO, n int, cancel context.CancelFunc, stopped *bool) func(*Record) {
	type watch struct {
		slo   SLO
		p     float64
		get   func(*Record) (float64, bool)
		limit float64
	}
	var ws []*watch
	for _, s := range slos {
		p, metric, ok := MetricPercentile(s.Metric)
		if !ok || (s.Op != "<=" && s.Op != "<") {
			continue
		}
		var get func(*Record) (float64, bool)
		switch metric {
		case "ttft":
			get = func(r *Record) (float64, bool) { return float64(r.TTFTNs()) / 1e6, true }
		case "e2el":
			get = func(r *Record) (float64, bool) { return float64(r.LatencyNs()) / 1e6, true }
		case "tpot":
			get = func(r *Record) (float64, bool) {
				if r.OutputTokens < 2 {
					return 0, false
				}
				return float64(r.LatencyNs()-r.TTFTNs()) / 1e6 / float64(r.OutputTokens-1), true
			}
		default:
			continue
		}
		// With at most n values, more than (1-p)(n-1)+1 values above the
		// bound put the interpolated percentile above it.
		ws = append(ws, &watch{slo: s, p: p, get: get, limit: (1-p/100)*float64(n-1) + 1})
	}
	if len(ws) == 0 {
		return nil
	}
	var mu sync.Mutex
	over := make([]int, len(ws))
	return func(r *Record) {
		if !r.Success || r.Warmup {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for i, w := range ws {
			v, ok := w.get(r)
			if ok && !w.slo.Met(v) {
				over[i]++
				if float64(over[i]) > w.limit && !*stopped {
					*stopped = true
					cancel()
				}
			}
		}
	}
}

// Sweep finds the highest request rate (or concurrency) that meets every
// SLO: a saturation probe (everything at once) measures the capacity, then
// a bisection over [0, 1.25 × capacity] narrows the limit down to the
// precision; a step ends early once an SLO can no longer be met.
func Sweep(ctx context.Context, sc SweepConfig) (*SweepResult, error) {
	if len(sc.SLOs) == 0 {
		return nil, errors.New("no SLO given")
	}
	if sc.Mode == "" {
		sc.Mode = SweepRate
	}
	if sc.Mode != SweepRate && sc.Mode != SweepConcurrency {
		return nil, fmt.Errorf("sweep mode %q: use rate or concurrency", sc.Mode)
	}
	if sc.RequestsPerStep <= 0 {
		sc.RequestsPerStep = 200
	}
	if sc.Precision <= 0 {
		sc.Precision = 0.05
	}
	if sc.MaxFailedFraction <= 0 {
		sc.MaxFailedFraction = 0.01
	}
	res := &SweepResult{Mode: sc.Mode}
	for _, s := range sc.SLOs {
		res.SLOs = append(res.SLOs, s.String())
	}
	run := func(phase string, rate float64, conc int) (*SweepStep, error) {
		cfg := sc.Load
		cfg.NumRequests = sc.RequestsPerStep
		cfg.Duration = 0
		cfg.Rate = rate
		cfg.MaxConcurrency = conc
		cfg.Progress = nil
		step := &SweepStep{N: len(res.Steps) + 1, Phase: phase, Rate: rate, Concurrency: conc}
		if math.IsInf(rate, 1) {
			step.Rate = 0
		}
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if phase == "search" {
			if hook := earlyStop(sc.SLOs, cfg.NumRequests, cancel, &step.StoppedEarly); hook != nil {
				prev := cfg.OnRecord
				cfg.OnRecord = func(r *Record) {
					if prev != nil {
						prev(r)
					}
					hook(r)
				}
			}
		}
		r, err := Run(sctx, cfg)
		if err != nil && !(step.StoppedEarly && ctx.Err() == nil && r != nil) {
			return nil, err
		}
		step.Metrics = r.Metrics
		step.Pass, step.Violations, step.Values = evaluate(sc.SLOs, r.Metrics, sc.MaxFailedFraction, len(r.Records))
		if step.StoppedEarly {
			step.Pass = false
			step.Violations = append([]string{"stopped early: an SLO could no longer be met"}, step.Violations...)
		}
		res.Steps = append(res.Steps, step)
		if sc.OnStep != nil {
			sc.OnStep(step)
		}
		return step, nil
	}
	better := func(s *SweepStep, v float64) {
		if s.Pass && v >= res.Answer {
			res.Answer = v
			res.Best = s
		}
	}

	if sc.Mode == SweepConcurrency {
		res.StepSize = 1
		hiCap := sc.MaxConcurrency
		if hiCap <= 0 {
			hiCap = 1024
		}
		lo, hi := 0, 0
		for c := 1; ; c *= 2 {
			c = min(c, hiCap)
			s, err := run("probe", math.Inf(1), c)
			if err != nil {
				return nil, err
			}
			res.Capacity = math.Max(res.Capacity, s.Metrics.RequestThroughput)
			if !s.Pass {
				hi = c
				break
			}
			lo = c
			better(s, float64(c))
			if c == hiCap {
				return res, nil
			}
		}
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			s, err := run("search", math.Inf(1), mid)
			if err != nil {
				return nil, err
			}
			if s.Pass {
				lo = mid
				better(s, float64(mid))
			} else {
				hi = mid
			}
		}
		return res, nil
	}

	probe, err := run("probe", math.Inf(1), sc.Load.MaxConcurrency)
	if err != nil {
		return nil, err
	}
	res.Capacity = probe.Metrics.RequestThroughput
	if res.Capacity <= 0 {
		return res, fmt.Errorf("saturation probe completed no request: %s", strings.Join(probe.Violations, "; "))
	}
	hi := sc.MaxRate
	if hi <= 0 {
		hi = 1.25 * res.Capacity
	}
	res.StepSize = sc.Precision * res.Capacity
	if sc.Step > 0 {
		res.StepSize = sc.Step
	}
	lo := 0.0
	// The top of the range first. The probe only estimates the capacity:
	// while the top passes (and no --max-rate bounds it), double it.
	for {
		top, err := run("search", hi, sc.Load.MaxConcurrency)
		if err != nil {
			return nil, err
		}
		if !top.Pass {
			break
		}
		better(top, hi)
		if sc.MaxRate > 0 || hi > 16*res.Capacity {
			return res, nil
		}
		lo, hi = hi, 2*hi
	}
	for hi-lo > res.StepSize {
		mid := (lo + hi) / 2
		s, err := run("search", mid, sc.Load.MaxConcurrency)
		if err != nil {
			return nil, err
		}
		if s.Pass {
			lo = mid
			better(s, mid)
		} else {
			hi = mid
		}
	}
	return res, nil
}
