// Package sweep is the SLO search: the highest request rate (or
// concurrency) at which every SLO holds, found by a saturation probe and a
// bisection whose every step is a load run (a Runner: loadgen.Sweep runs
// loadgen.Run), ended early once an SLO can no longer be met or a limit
// signal (the engine's, the kernel's, the load generator's own) is past
// its limit.
package sweep

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bpfbench/bpfbench/loadgen/metrics"
	"github.com/bpfbench/bpfbench/loadgen/transport"
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

// Search modes.
const (
	ModeRate        = "rate"
	ModeConcurrency = "concurrency"
)

// Load is what the search asks of one step: the rate, the concurrency and
// the number of measured requests, and the hook its records go through.
type Load struct {
	Rate        float64 // requests/s; +Inf sends everything at once
	Concurrency int     // most requests in flight; 0: no cap
	Requests    int     // measured requests
	// OnRecord is called as each request finishes, from the request's
	// goroutine: the search's early stop and its own signals.
	OnRecord func(*transport.Record)
}

// Outcome is what one step measured: its metrics and the number of its
// measured requests.
type Outcome struct {
	Metrics  *metrics.Metrics
	Requests int
}

// A Runner runs one step's load within ctx. When the search itself ended
// the step (ctx canceled), it returns what was measured with the error.
type Runner func(ctx context.Context, l Load) (*Outcome, error)

// Config configures an SLO search.
type Config struct {
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
	// Concurrency caps the requests in flight of the rate search's steps
	// (0: no cap): the base load's.
	Concurrency int
	// MaxFailedFraction of failed requests makes a step fail (default 0.01).
	MaxFailedFraction float64
	// Signals, when set, are the engine's and the kernel's limit signals,
	// polled while every step runs (but the rate search's saturation
	// probe, which fills every queue on purpose): a verdict past its
	// limit ends the step, which then fails.
	Signals Signals
	// SignalPeriod is how often the signals are polled (default 250 ms).
	SignalPeriod time.Duration
	// MaxErrorRate is the load generator's own signal: a step ends once
	// more than this fraction of its finished requests failed, counted
	// from MinSignalRequests finished requests on (default 0.05; negative:
	// off).
	MaxErrorRate float64
	// MaxResets is the other one: a step ends once more than this many of
	// its requests failed on a connection reset or refused (default 0:
	// the first; negative: off).
	MaxResets int
	// Repeats is how many runs with one verdict settle a level at the
	// knee (default DefaultRepeats; 1: every level is run once, as the
	// bisection left it). RepeatBudget bounds the steps run to settle
	// them (default DefaultRepeatBudget; negative: none).
	Repeats      int
	RepeatBudget int
	// OnStep is called after every step.
	OnStep func(*Step)
}

// MinSignalRequests is how many finished requests of a step the error
// rate signal waits for (fewer when the step has fewer).
const MinSignalRequests = 10

// Verdict is what one limit signal says: its name ("requests_waiting",
// "kv_cache_usage", "preemptions", "error_rate", "connection_resets",
// "cuda_alloc_failures", "ring_buffer_lost"), its reading in words, to
// follow "at 16 req/s" ("the KV cache is 98% full (limit 95%)"), and
// whether it is past its limit.
type Verdict struct {
	Name   string `json:"signal"`
	Detail string `json:"detail"`
	Limit  bool   `json:"-"`
}

// Signals are limit signals read while a sweep step runs.
type Signals interface {
	// Begin is called before a step starts sending; it may wait, within
	// ctx, for what the previous step left behind to drain.
	Begin(ctx context.Context, step *Step)
	// Check is polled every SignalPeriod while the step runs and once
	// after it; a verdict with Limit set ends the step. It is called from
	// one goroutine at a time.
	Check() []Verdict
}

// SignalNotes is a Signals that says what it cannot watch ("the engine
// exports no kv_cache_usage: that signal is off"), once each.
type SignalNotes interface {
	Notes() []string
}

// MultiSignals polls every source in turn; nil ones are left out.
func MultiSignals(srcs ...Signals) Signals {
	var m multiSignals
	for _, s := range srcs {
		if s != nil {
			m = append(m, s)
		}
	}
	return m
}

type multiSignals []Signals

func (m multiSignals) Begin(ctx context.Context, step *Step) {
	for _, s := range m {
		s.Begin(ctx, step)
	}
}

func (m multiSignals) Check() []Verdict {
	var out []Verdict
	for _, s := range m {
		out = append(out, s.Check()...)
	}
	return out
}

func (m multiSignals) Notes() []string {
	var out []string
	for _, s := range m {
		if n, ok := s.(SignalNotes); ok {
			out = append(out, n.Notes()...)
		}
	}
	return out
}

// loadSignals are the load generator's own signals, counted from the
// step's records: its error rate and its connection resets.
type loadSignals struct {
	maxRate   float64 // <0: off
	maxResets int     // <0: off
	min       int     // finished requests before the rate counts

	mu                       sync.Mutex
	finished, failed, resets int
	firstReset               string
}

func (l *loadSignals) Begin(_ context.Context, _ *Step) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.finished, l.failed, l.resets, l.firstReset = 0, 0, 0, ""
}

// record counts a finished request (Load.OnRecord); the requests the
// sweep itself canceled are not the server's doing.
func (l *loadSignals) record(r *transport.Record) {
	if r.Warmup || r.Failure == transport.FailCanceled {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.finished++
	if r.Success {
		return
	}
	l.failed++
	if IsReset(r) {
		l.resets++
		if l.firstReset == "" {
			l.firstReset = r.Error
		}
	}
}

func (l *loadSignals) Check() []Verdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Verdict
	if l.maxRate >= 0 && l.finished >= l.min && l.finished > 0 && float64(l.failed) > l.maxRate*float64(l.finished) {
		out = append(out, Verdict{Name: "error_rate", Limit: true,
			Detail: fmt.Sprintf("%d of %d finished requests failed (%.0f%%, limit %.0f%%)", l.failed, l.finished, 100*float64(l.failed)/float64(l.finished), 100*l.maxRate)})
	}
	if l.maxResets >= 0 && l.resets > l.maxResets {
		out = append(out, Verdict{Name: "connection_resets", Limit: true,
			Detail: fmt.Sprintf("%d %s reset or refused by the server (limit %d; first: %s)", l.resets, plural(l.resets, "connection was", "connections were"), l.maxResets, l.firstReset)})
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// IsReset says whether a failed request was refused or reset by the
// server: a connection it could not make (refused) or one it cut with a
// reset or a broken pipe.
func IsReset(r *transport.Record) bool {
	if r.Success {
		return false
	}
	e := strings.ToLower(r.Error)
	return strings.Contains(e, "connection refused") || strings.Contains(e, "connection reset") ||
		strings.Contains(e, "broken pipe") || strings.Contains(e, "econnreset") || strings.Contains(e, "econnrefused")
}

// Step is one measured point of the search.
type Step struct {
	N           int      `json:"step"`
	Phase       string   `json:"phase"` // probe, search or confirm
	Rate        float64  `json:"rate,omitempty"`
	Concurrency int      `json:"concurrency,omitempty"`
	Pass        bool     `json:"pass"`
	Violations  []string `json:"violations,omitempty"`
	// StoppedEarly is set when the step was ended as soon as an SLO could
	// no longer be met (over-saturation), without waiting for every request.
	StoppedEarly bool `json:"stopped_early,omitempty"`
	// StoppedBy are the signals past their limit that ended the step (or
	// that were past it when the step ended): the step fails.
	StoppedBy []Verdict          `json:"stopped_by,omitempty"`
	Values    map[string]float64 `json:"values"`
	Metrics   *metrics.Metrics   `json:"-"`
}

// Result is the outcome of a search.
type Result struct {
	Mode string   `json:"mode"`
	SLOs []string `json:"slos"`
	// Capacity is the request throughput measured by the saturation probe
	// (the rate search's last: see WarmProbes).
	Capacity float64 `json:"capacity_req_s"`
	// Capacities is every saturation probe's throughput, in order, when
	// the rate search ran more than one.
	Capacities []float64 `json:"capacities_req_s,omitempty"`
	// CapacityAfter is the saturation probe's throughput after the
	// confirmation (drift.go): the rate search's when its runs gave a fit.
	CapacityAfter float64 `json:"capacity_after_req_s,omitempty"`
	// StepSize is the search resolution (req/s or requests in flight).
	StepSize float64 `json:"step_size"`
	// Answer is the highest rate (or concurrency) that met every SLO in
	// every run there (Interval.Low); 0 when none did. Best is a passing
	// step measured there.
	Answer float64 `json:"answer"`
	Best   *Step   `json:"best,omitempty"`
	// Interval is the knee with its confidence: the levels at the
	// boundary run again until their verdicts settle (Config.Repeats).
	Interval *Interval `json:"interval,omitempty"`
	// Limit is the lowest failing step above the answer, and LimitedBy
	// what failed it: the names of the signals that stopped it, or "slo".
	Limit     *Step    `json:"limit,omitempty"`
	LimitedBy []string `json:"limited_by,omitempty"`
	// Conclusion is the answer in a sentence naming the limit: "the SLO
	// holds up to 14 req/s; at 16 req/s the KV cache is 98% full".
	Conclusion string `json:"conclusion"`
	// SignalNotes say which limit signals could not be watched, and why.
	SignalNotes []string `json:"signal_notes,omitempty"`
	// Explanation is what following the server at the knee found (sweep
	// --pid), set after the search.
	Explanation *Explanation `json:"explanation,omitempty"`
	Steps       []*Step      `json:"steps"`
}

// evaluate checks the SLOs against m.
func evaluate(slos []SLO, m *metrics.Metrics, maxFailed float64, n int) (bool, []string, map[string]float64) {
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
func earlyStop(slos []SLO, n int, cancel context.CancelFunc, stopped *bool) func(*transport.Record) {
	type watch struct {
		slo   SLO
		p     float64
		get   func(*transport.Record) (float64, bool)
		limit float64
	}
	var ws []*watch
	for _, s := range slos {
		p, metric, ok := metrics.MetricPercentile(s.Metric)
		if !ok || (s.Op != "<=" && s.Op != "<") {
			continue
		}
		var get func(*transport.Record) (float64, bool)
		switch metric {
		case "ttft":
			get = func(r *transport.Record) (float64, bool) { return float64(r.TTFTNs()) / 1e6, true }
		case "e2el":
			get = func(r *transport.Record) (float64, bool) { return float64(r.LatencyNs()) / 1e6, true }
		case "tpot":
			get = func(r *transport.Record) (float64, bool) {
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
	return func(r *transport.Record) {
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

// Search finds the highest request rate (or concurrency) that meets every
// SLO, each step a load that run sends: a saturation probe (everything at
// once) measures the capacity, then a bisection over [0, 1.25 × capacity]
// narrows the limit down to the precision; a step ends early once an SLO
// can no longer be met.
func Search(ctx context.Context, sc Config, run Runner) (*Result, error) {
	if len(sc.SLOs) == 0 {
		return nil, errors.New("no SLO given")
	}
	if sc.Mode == "" {
		sc.Mode = ModeRate
	}
	if sc.Mode != ModeRate && sc.Mode != ModeConcurrency {
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
	if sc.MaxErrorRate == 0 {
		sc.MaxErrorRate = 0.05
	}
	if sc.SignalPeriod <= 0 {
		sc.SignalPeriod = 250 * time.Millisecond
	}
	if sc.Repeats <= 0 {
		sc.Repeats = DefaultRepeats
	}
	switch {
	case sc.RepeatBudget == 0:
		sc.RepeatBudget = DefaultRepeatBudget
	case sc.RepeatBudget < 0:
		sc.RepeatBudget = 0
	}
	res := &Result{Mode: sc.Mode}
	for _, s := range sc.SLOs {
		res.SLOs = append(res.SLOs, s.String())
	}
	own := &loadSignals{maxRate: sc.MaxErrorRate, maxResets: sc.MaxResets, min: min(MinSignalRequests, sc.RequestsPerStep)}
	se := &searcher{sc: sc, run: run, res: res, own: own, signals: MultiSignals(own, sc.Signals)}
	var (
		lo, hi float64
		err    error
	)
	if sc.Mode == ModeConcurrency {
		lo, hi, err = se.concurrency(ctx)
	} else {
		lo, hi, err = se.rate(ctx)
	}
	if err == nil && se.ended == nil && len(res.Steps) > 0 {
		err = se.confirm(ctx, lo, hi, res.StepSize)
	}
	if err == nil && se.ended == nil {
		err = se.closingProbe(ctx)
	}
	if err != nil {
		return nil, err
	}
	res.conclude()
	if n, ok := se.signals.(SignalNotes); ok {
		res.SignalNotes = n.Notes()
	}
	return res, se.ended
}

// searcher runs the steps of one search into res.
type searcher struct {
	sc      Config
	run     Runner
	res     *Result
	own     *loadSignals
	signals Signals
	// ended, when set, ended the search early; the result is returned
	// with it.
	ended error
}

// step runs and judges one step of the search: phase probe or search, at
// rate (+Inf: all at once) with at most conc requests in flight.
func (se *searcher) step(ctx context.Context, phase string, rate float64, conc int) (*Step, error) {
	sc := se.sc
	l := Load{Rate: rate, Concurrency: conc, Requests: sc.RequestsPerStep}
	step := &Step{N: len(se.res.Steps) + 1, Phase: phase, Rate: rate, Concurrency: conc}
	if math.IsInf(rate, 1) {
		step.Rate = 0
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if phase == "search" || phase == "confirm" {
		l.OnRecord = earlyStop(sc.SLOs, l.Requests, cancel, &step.StoppedEarly)
	}
	// The rate search's saturation probe sends everything at once:
	// its queue is full on purpose, so no signal watches it.
	watch := sc.Mode == ModeConcurrency || phase != "probe"
	var stopWatch func() []Verdict
	if watch {
		l.OnRecord = chain(l.OnRecord, se.own.record)
		se.signals.Begin(ctx, step)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		stopWatch = watchSignals(se.signals, sc.SignalPeriod, cancel)
	}
	out, err := se.run(sctx, l)
	if watch {
		step.StoppedBy = stopWatch()
		if len(step.StoppedBy) == 0 && ctx.Err() == nil {
			// A signal past its limit as the step ended fails it too.
			step.StoppedBy = limits(se.signals.Check())
		}
	}
	stopped := step.StoppedEarly || len(step.StoppedBy) > 0
	if err != nil && !(stopped && ctx.Err() == nil && out != nil) {
		return nil, err
	}
	se.judge(step, out)
	se.res.Steps = append(se.res.Steps, step)
	if sc.OnStep != nil {
		sc.OnStep(step)
	}
	return step, nil
}

// judge checks a step's outcome against the SLOs: it fails on a violation,
// when it was stopped early, or when a signal stopped it.
func (se *searcher) judge(step *Step, out *Outcome) {
	step.Metrics = out.Metrics
	step.Pass, step.Violations, step.Values = evaluate(se.sc.SLOs, out.Metrics, se.sc.MaxFailedFraction, out.Requests)
	if step.StoppedEarly {
		step.Pass = false
		step.Violations = append([]string{"stopped early: an SLO could no longer be met"}, step.Violations...)
	}
	if len(step.StoppedBy) > 0 {
		step.Pass = false
		var vs []string
		for _, v := range step.StoppedBy {
			vs = append(vs, "stopped by "+v.Name+": "+v.Detail)
		}
		step.Violations = append(vs, step.Violations...)
	}
}

// better takes s, measured at v, as the answer when it passed at or above
// the answer so far.
func (se *searcher) better(s *Step, v float64) {
	if s.Pass && v >= se.res.Answer {
		se.res.Answer = v
		se.res.Best = s
	}
}

// concurrency is the closed-loop search: the concurrency doubles from 1
// until a step fails (or MaxConcurrency passes), then a bisection. It
// returns the highest passing and the lowest failing concurrency (0:
// none).
func (se *searcher) concurrency(ctx context.Context) (float64, float64, error) {
	res := se.res
	res.StepSize = 1
	hiCap := se.sc.MaxConcurrency
	if hiCap <= 0 {
		hiCap = 1024
	}
	lo, hi := 0, 0
	for c := 1; ; c *= 2 {
		c = min(c, hiCap)
		s, err := se.step(ctx, "probe", math.Inf(1), c)
		if err != nil {
			return 0, 0, err
		}
		res.Capacity = math.Max(res.Capacity, s.Metrics.RequestThroughput)
		if !s.Pass {
			hi = c
			break
		}
		lo = c
		se.better(s, float64(c))
		if c == hiCap {
			return float64(lo), 0, nil
		}
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		s, err := se.step(ctx, "search", math.Inf(1), mid)
		if err != nil {
			return 0, 0, err
		}
		if s.Pass {
			lo = mid
			se.better(s, float64(mid))
		} else {
			hi = mid
		}
	}
	return float64(lo), float64(hi), nil
}

// rate is the open-loop search: the saturation probe, the top of the
// range (doubled while it passes), then a bisection to the step size. It
// returns the highest passing and the lowest failing rate (0: none).
func (se *searcher) rate(ctx context.Context) (float64, float64, error) {
	sc, res := se.sc, se.res
	probe, err := se.probe(ctx)
	if err != nil {
		return 0, 0, err
	}
	res.Capacity = probe.Metrics.RequestThroughput
	if res.Capacity <= 0 {
		se.ended = fmt.Errorf("saturation probe completed no request: %s", strings.Join(probe.Violations, "; "))
		return 0, 0, nil
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
		top, err := se.step(ctx, "search", hi, sc.Concurrency)
		if err != nil {
			return 0, 0, err
		}
		if !top.Pass {
			break
		}
		se.better(top, hi)
		if sc.MaxRate > 0 || hi > 16*res.Capacity {
			return hi, 0, nil
		}
		lo, hi = hi, 2*hi
	}
	for hi-lo > res.StepSize {
		mid := (lo + hi) / 2
		s, err := se.step(ctx, "search", mid, sc.Concurrency)
		if err != nil {
			return 0, 0, err
		}
		if s.Pass {
			lo = mid
			se.better(s, mid)
		} else {
			hi = mid
		}
	}
	return lo, hi, nil
}

// The rate search's saturation probe runs again until two probes in a row
// measure the same capacity, within WarmHold of each other, or WarmProbes
// have run. A server started moments before keeps getting faster: a
// llama-server's probes read 25, 38, 39, 41 and 45 req/s over its first
// 90 s (tools/bench/kneedrift.sh), and a search against a capacity that
// moves reads early fails that its later runs of the same level do not
// reproduce.
const (
	WarmProbes = 5
	WarmHold   = 0.10
)

// probe runs the saturation probe until the capacity holds (above) and
// returns the last; Result.Capacities keeps each probe's throughput when
// there was more than one.
func (se *searcher) probe(ctx context.Context) (*Step, error) {
	var caps []float64
	for {
		s, err := se.step(ctx, "probe", math.Inf(1), se.sc.Concurrency)
		if err != nil {
			return nil, err
		}
		c := s.Metrics.RequestThroughput
		caps = append(caps, c)
		n := len(caps)
		if c <= 0 || n >= WarmProbes || n > 1 && math.Abs(c-caps[n-2]) <= WarmHold*caps[n-2] {
			if n > 1 {
				se.res.Capacities = caps
			}
			return s, nil
		}
	}
}

// chain calls a, then b, for every record.
func chain(a, b func(*transport.Record)) func(*transport.Record) {
	if a == nil {
		return b
	}
	return func(r *transport.Record) {
		a(r)
		b(r)
	}
}

// limits keeps the verdicts past their limit.
func limits(vs []Verdict) []Verdict {
	var out []Verdict
	for _, v := range vs {
		if v.Limit {
			out = append(out, v)
		}
	}
	return out
}

// watchSignals polls s every period until one of its verdicts is past its
// limit, then calls cancel to end the step. The function it returns stops
// the polling and returns those verdicts (none when the step ended first).
func watchSignals(s Signals, period time.Duration, cancel context.CancelFunc) func() []Verdict {
	done := make(chan struct{})
	var got []Verdict
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if v := limits(s.Check()); len(v) > 0 {
				got = v
				cancel()
				return
			}
		}
	}()
	return func() []Verdict {
		close(done)
		<-finished
		return got
	}
}

// level is where a step of a sweep in mode is: its rate, or its
// concurrency.
func level(mode string, s *Step) float64 {
	if mode == ModeConcurrency {
		return float64(s.Concurrency)
	}
	return s.Rate
}

// StepLevel says where a step is: "16 req/s" or "8 requests in flight".
func StepLevel(mode string, s *Step) string {
	if mode == ModeConcurrency && s.Concurrency > 0 {
		return fmt.Sprintf("%d %s in flight", s.Concurrency, plural(s.Concurrency, "request", "requests"))
	}
	if s.Rate == 0 {
		return "an infinite rate"
	}
	return strconv.FormatFloat(s.Rate, 'g', 3, 64) + " req/s"
}

// conclude finds the limit, a failing step at the interval's High (else
// the lowest failing step above the answer, the rate search's probe
// aside), and says the answer in a sentence naming what failed there,
// then the knee with its interval: "the SLO holds up to 14 req/s; at 16
// req/s the KV cache is 98% full (limit 95%); the knee is at 15 req/s,
// between 14 req/s (3 of 3 runs passed) and 16 req/s (3 of 3 failed)".
func (r *Result) conclude() {
	var limit *Step
	for _, s := range r.Steps {
		if s.Pass || s.Phase == "probe" && r.Mode == ModeRate {
			continue
		}
		if r.Interval != nil && r.Interval.High > 0 {
			if levelKey(level(r.Mode, s)) == levelKey(r.Interval.High) && limit == nil {
				limit = s
			}
			continue
		}
		if r.Best != nil && level(r.Mode, s) <= level(r.Mode, r.Best) {
			continue
		}
		if limit == nil || level(r.Mode, s) < level(r.Mode, limit) {
			limit = s
		}
	}
	r.Limit = limit
	var b strings.Builder
	if r.Best != nil {
		fmt.Fprintf(&b, "the SLO holds up to %s", StepLevel(r.Mode, r.Best))
	} else {
		fmt.Fprintf(&b, "no %s met every SLO", r.Mode)
	}
	if limit == nil {
		if r.Best != nil {
			b.WriteString(", the top of the search: no step reached a limit")
		}
		r.Conclusion = b.String()
		return
	}
	fmt.Fprintf(&b, "; at %s ", StepLevel(r.Mode, limit))
	if len(limit.StoppedBy) > 0 {
		var parts []string
		for _, v := range limit.StoppedBy {
			r.LimitedBy = append(r.LimitedBy, v.Name)
			parts = append(parts, v.Detail)
		}
		b.WriteString(strings.Join(parts, " and "))
	} else {
		r.LimitedBy = []string{"slo"}
		b.WriteString(strings.Join(Broken(limit), " and "))
	}
	if t := r.Interval.Text(r.Mode); t != "" {
		b.WriteString("; " + t)
	}
	r.Conclusion = b.String()
}

// Broken are the violations of a failed step that name what broke: a
// step stopped early counts the requests it canceled as failed, and the
// error-rate signal names the server's failures.
func Broken(s *Step) []string {
	var parts []string
	for _, v := range s.Violations {
		if !strings.HasPrefix(v, "stopped early") && !(s.StoppedEarly && strings.HasSuffix(v, " requests failed")) {
			parts = append(parts, v)
		}
	}
	if len(parts) == 0 {
		parts = s.Violations
	}
	return parts
}
