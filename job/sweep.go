package job

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/internal/clock"
	"github.com/bpfbench/bpfbench/internal/manifest"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/enginemetrics"
	"github.com/bpfbench/bpfbench/loadgen/sweep"
	"github.com/bpfbench/bpfbench/loadgen/transport"
	"github.com/bpfbench/bpfbench/readiness"
	"github.com/bpfbench/bpfbench/session"
)

// KneeConfig configures `sweep --pid`: the highest passing and the first
// failing step of a finished sweep are run again while the collectors
// follow the server, and the attribution of the failing one says what
// breaks the SLO.
type KneeConfig struct {
	// Load is the sweep's load; each step's rate or concurrency replaces
	// its own, and RequestsPerStep its count.
	Load            loadgen.Config
	Sweep           *sweep.Result
	RequestsPerStep int
	Pid             int
	// OutDir receives the two runs, OutDir/pass and OutDir/fail.
	OutDir    string
	Sections  []session.SectionFactory
	Readiness func() []readiness.Check
	Logger    *slog.Logger
	// Manifest is RunConfig's.
	Manifest manifest.Options
	// ServerMetrics and ServerMetricsPeriod are RunConfig's.
	ServerMetrics       string
	ServerMetricsPeriod time.Duration
	// Before, when set, is called before each step is run again ("pass"
	// or "fail"); After with its run.
	Before func(side string, step *sweep.Step)
	After  func(side string, run *RunResult)
}

// Knee is the explained knee of a sweep.
type Knee struct {
	Mode       string
	Pass, Fail *sweep.Step
	// PassRun and FailRun are the two runs; PassRun is nil when no step
	// passed, and both are nil when every step passed.
	PassRun, FailRun *RunResult
	// Cause is the top cause of the broken objective's excess in the
	// failing run, Share its share, TTFT whether the objective is TTFT
	// (else the p99 ITL).
	Cause string
	Share float64
	TTFT  bool
}

// ExplainKnee runs the two steps around the knee of cfg.Sweep under the
// collectors. With no failing step it returns a Knee with no runs.
func ExplainKnee(ctx context.Context, cfg KneeConfig) (*Knee, error) {
	k := &Knee{Mode: cfg.Sweep.Mode}
	k.Pass, k.Fail = kneeSteps(cfg.Sweep)
	if k.Fail == nil {
		return k, nil
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	runStep := func(s *sweep.Step, side string, prior *Prior) (*RunResult, error) {
		if cfg.Before != nil {
			cfg.Before(side, s)
		}
		c := cfg.Load
		if cfg.RequestsPerStep > 0 {
			c.Scenario.NumRequests = cfg.RequestsPerStep
		}
		c.Scenario.Duration = 0
		if s.Rate != 0 {
			c.Scenario.Rate = s.Rate
		}
		if s.Concurrency > 0 {
			c.Scenario.MaxConcurrency = s.Concurrency
		}
		r, err := Run(ctx, RunConfig{Load: c, Pid: cfg.Pid, OutDir: filepath.Join(cfg.OutDir, side), Logger: cfg.Logger,
			Sections: cfg.Sections, Readiness: cfg.Readiness,
			ServerMetrics: cfg.ServerMetrics, ServerMetricsPeriod: cfg.ServerMetricsPeriod, Manifest: cfg.Manifest,
			Prior: prior})
		if r != nil && cfg.After != nil {
			cfg.After(side, r)
		}
		return r, err
	}
	// The failing step's critical path against the passing step's normal
	// gaps: what the step past the knee added.
	var prior *Prior
	if k.Pass != nil {
		pr, err := runStep(k.Pass, "pass", nil)
		if pr == nil {
			return k, err
		}
		k.PassRun = pr
		if p, perr := LoadPrior(pr.Dir); perr == nil {
			prior = p
		} else {
			cfg.Logger.Warn("the passing step's run cannot be the failing step's baseline", "err", perr)
		}
	}
	fr, err := runStep(k.Fail, "fail", prior)
	if fr == nil {
		return k, err
	}
	k.FailRun = fr
	k.Cause, k.Share, k.TTFT = kneeCause(fr, k.Fail)
	return k, err
}

// kneeSteps returns the highest passing step and the lowest failing step
// above it.
func kneeSteps(r *sweep.Result) (pass, fail *sweep.Step) {
	pass = r.Best
	level := func(s *sweep.Step) float64 {
		if r.Mode == sweep.ModeConcurrency {
			return float64(s.Concurrency)
		}
		return s.Rate
	}
	steps := append([]*sweep.Step(nil), r.Steps...)
	sort.Slice(steps, func(i, j int) bool { return level(steps[i]) < level(steps[j]) })
	for _, s := range steps {
		if s.Pass || s.Phase == "probe" && r.Mode == sweep.ModeRate {
			continue
		}
		if pass == nil || level(s) > level(pass) {
			return pass, s
		}
	}
	return pass, nil
}

// kneeCause picks the broken objective's attribution: TTFT when a TTFT
// SLO failed, the p99 ITL band otherwise.
func kneeCause(r *RunResult, s *sweep.Step) (string, float64, bool) {
	a := r.Doc.Attribution
	if a == nil {
		return "unexplained", 0, false
	}
	b := a.ITL["p99"]
	ttft := false
	for _, v := range s.Violations {
		if strings.Contains(v, "ttft") {
			b, ttft = a.TTFT, true
			break
		}
	}
	best, bestV := "unexplained", -1.0
	for _, c := range critpath.CauseNames() {
		if b[c] > bestV {
			best, bestV = c, b[c]
		}
	}
	return best, bestV, ttft
}

// StepAt says where a step of a sweep in mode is: its rate, or its
// concurrency in a concurrency sweep.
func StepAt(mode string, s *sweep.Step) string {
	if s.Concurrency > 0 && mode == sweep.ModeConcurrency {
		return fmt.Sprintf("%d requests in flight", s.Concurrency)
	}
	return fmt.Sprintf("%.3g req/s", s.Rate)
}

// At says where a step of this knee's sweep is.
func (k *Knee) At(s *sweep.Step) string { return StepAt(k.Mode, s) }

// Explanation is the knee in one sentence: "the SLO breaks at 14 req/s,
// and what breaks it is run-queue wait on the tokenizer threads (..)".
func (k *Knee) Explanation() string {
	if k.Fail == nil {
		return "every step met the SLOs: no knee to explain"
	}
	if k.FailRun == nil {
		return fmt.Sprintf("the SLO breaks at %s; the run to explain it did not finish", k.At(k.Fail))
	}
	what := "ITL"
	if k.TTFT {
		what = "TTFT"
	}
	if len(k.Fail.StoppedBy) > 0 {
		// A limit signal ended the step, not the latency: say so first,
		// and the latency's cause only as what the step measured.
		var parts []string
		for _, v := range k.Fail.StoppedBy {
			parts = append(parts, v.Detail)
		}
		return fmt.Sprintf("the sweep stops at %s because %s; of that step's p99 %s excess, %.0f%% is %s",
			k.At(k.Fail), strings.Join(parts, " and "), what, k.Share*100, DescribeCause(k.Cause, k.FailRun))
	}
	return fmt.Sprintf("the SLO breaks at %s, and what breaks it is %s (%.0f%% of the p99 %s excess)",
		k.At(k.Fail), DescribeCause(k.Cause, k.FailRun), k.Share*100, what)
}

// DescribeCause says the cause in words, naming the server's threads that
// waited most for a CPU when it is cpu_runqueue.
func DescribeCause(cause string, r *RunResult) string {
	switch cause {
	case "cpu_runqueue":
		if names := topRunqueueThreads(r); names != "" {
			return "run-queue wait on the " + names + " threads"
		}
		return "run-queue wait (the server's threads waiting for a CPU)"
	case "io_block":
		return "waiting for the disk"
	case "gpu_sync":
		return "waiting on the GPU (blocking CUDA calls)"
	case "net_backpressure":
		return "network backpressure (clients' windows closed or retransmits)"
	}
	return "nothing bpfbench sees (unexplained)"
}

func topRunqueueThreads(r *RunResult) string {
	if r.Doc.Collectors == nil || r.Doc.Collectors.Sched == nil {
		return ""
	}
	by := map[string]float64{}
	var total float64
	for _, t := range r.Doc.Collectors.Sched.Threads {
		by[t.Comm] += t.RunqueueSeconds
		total += t.RunqueueSeconds
	}
	type kv struct {
		k string
		v float64
	}
	var list []kv
	for k, v := range by {
		list = append(list, kv{k, v})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].v > list[j].v || list[i].v == list[j].v && list[i].k < list[j].k })
	if len(list) == 0 || total == 0 {
		return ""
	}
	names := list[0].k
	if len(list) > 1 && list[1].v > 0.3*total {
		names += " and " + list[1].k
	}
	return names
}

// StepExplanation is one run's p99 attribution in a line: "p99 ITL
// cpu_runqueue 80%, unexplained 20%, TTFT no excess".
func StepExplanation(r *RunResult) string {
	a := r.Doc.Attribution
	if a == nil {
		return "no attribution"
	}
	return fmt.Sprintf("p99 ITL %s, TTFT %s", shareText(a.ITL["p99"]), shareText(a.TTFT))
}

func shareText(b correlate.Breakdown) string {
	var parts []string
	for _, c := range critpath.CauseNames() {
		if b[c] >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", c, b[c]*100))
		}
	}
	if len(parts) == 0 {
		return "no excess"
	}
	return strings.Join(parts, ", ")
}

// SweepSignalsConfig configures the engine's and the kernel's limit
// signals of a sweep (sweep.Signals): the server's /metrics, scraped
// during the whole sweep, and, with a Pid, the CUDA probes on the server.
type SweepSignalsConfig struct {
	// Target is the load target: its /metrics is the default endpoint.
	Target string
	// ServerMetrics and ServerMetricsPeriod are RunConfig's: a URL, "" for
	// the target's /metrics when it answers, or "off".
	ServerMetrics       string
	ServerMetricsPeriod time.Duration
	// MaxKVUsage ends a step once the KV cache is fuller than this
	// fraction (0 or less: off).
	MaxKVUsage float64
	// MaxPreemptions ends a step once the engine preempted more requests
	// than this during it (negative: off).
	MaxPreemptions int
	// MaxWaiting ends a step once more than this many requests wait in
	// the engine's queue for WaitingFor (default 2 s): the queue signal.
	// 0 is twice the engine's slots, the peak of its running requests seen
	// in the sweep (the saturation probe fills them); negative is off.
	MaxWaiting int
	WaitingFor time.Duration
	// Pid, when set, is the server followed by the kernel's signals: the
	// CUDA allocations that failed for lack of device memory and the
	// events its ring buffer lost, from the section of Sections named
	// "cuda" (the only one attached during the sweep).
	Pid      int
	Sections []session.SectionFactory
	// Say, when set, is told once what cannot be watched and why.
	Say    func(note string)
	Logger *slog.Logger
}

// SweepSignals are the engine's and the kernel's limit signals of a
// sweep. Close it when the sweep ends.
type SweepSignals struct {
	cfg  SweepSignalsConfig
	sm   *serverMetrics
	sess *session.Session
	cuda collectors.Section
	stop context.CancelFunc
	done chan struct{}

	mu    sync.Mutex
	notes []string
	said  map[string]bool
	// The step: its start, the engine's preemptions and the kernel's
	// counts before it.
	startNs          int64
	preemptBase      float64
	preemptKnown     bool
	oomBase, lostBse uint64
	closeOnce        sync.Once
}

// queueDrain bounds how long a step waits for the engine's queue, left
// over by the step before, to empty.
const queueDrain = 15 * time.Second

// StartSweepSignals finds the server's metrics, starts scraping them and,
// with a Pid, attaches the CUDA probes. What cannot be watched is said
// (Notes, Say) and the sweep goes on without it.
func StartSweepSignals(ctx context.Context, cfg SweepSignalsConfig) (*SweepSignals, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.WaitingFor <= 0 {
		cfg.WaitingFor = 2 * time.Second
	}
	log := cfg.Logger.With("component", "sweep")
	s := &SweepSignals{cfg: cfg, said: map[string]bool{}}
	sm, err := newServerMetrics(ctx, RunConfig{Load: loadgen.Config{Target: transport.Options{URL: cfg.Target}}, ServerMetrics: cfg.ServerMetrics,
		ServerMetricsPeriod: cfg.ServerMetricsPeriod, Logger: cfg.Logger}, log)
	if err != nil {
		return nil, err
	}
	s.sm = sm
	switch {
	case sm.s != nil:
		sm.start(context.WithoutCancel(ctx))
	case cfg.ServerMetrics == "off":
		s.note("engine", "server metrics off: the engine's signals (requests waiting, KV cache, preemptions) are off")
	default:
		s.note("engine", sm.note+": the engine's signals (requests waiting, KV cache, preemptions) are off")
	}
	if cfg.Pid > 0 {
		if err := s.startKernel(ctx); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// startKernel attaches the cuda section alone to the server.
func (s *SweepSignals) startKernel(ctx context.Context) error {
	var fs []session.SectionFactory
	for _, f := range s.cfg.Sections {
		if f.Name == "cuda" {
			f.Required = false
			fs = append(fs, f)
		}
	}
	const off = "the kernel's signals (CUDA allocation failures, ring-buffer loss) are off"
	if len(fs) == 0 {
		s.note("kernel", "no cuda section: "+off)
		return nil
	}
	sess, err := session.NewSession(collectors.Options{Pid: s.cfg.Pid, Interval: time.Second, Logger: s.cfg.Logger}, fs)
	if err != nil {
		return err
	}
	if err := sess.Start(ctx); err != nil {
		sess.Close()
		return err
	}
	for _, sec := range sess.Sections() {
		if sec.Name() == "cuda" {
			s.cuda = sec
		}
	}
	if s.cuda == nil {
		why := "not started"
		if u := sess.Unavailable()["cuda"]; u != "" {
			why = u
		}
		sess.Close()
		s.note("kernel", "cuda: "+why+": "+off)
		return nil
	}
	s.sess = sess
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stop, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		if err := sess.Run(rctx, 0, nil); err != nil {
			s.cfg.Logger.Warn("sweep signals: the cuda section ended", "component", "sweep", "err", err)
		}
	}()
	return nil
}

// note records (and says) a note once per key.
func (s *SweepSignals) note(key, text string) {
	s.mu.Lock()
	if s.said[key] {
		s.mu.Unlock()
		return
	}
	s.said[key] = true
	s.notes = append(s.notes, text)
	s.mu.Unlock()
	if s.cfg.Say != nil {
		s.cfg.Say(text)
	}
}

// Notes says what could not be watched, and why.
func (s *SweepSignals) Notes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.notes...)
}

// Close stops the scrapes and detaches the probes; it is idempotent.
func (s *SweepSignals) Close() error {
	var err error
	s.closeOnce.Do(func() {
		if s.sm != nil {
			s.sm.stop()
		}
		if s.stop != nil {
			s.stop()
			<-s.done
		}
		if s.sess != nil {
			err = s.sess.Close()
		}
	})
	return err
}

func (s *SweepSignals) samples() (enginemetrics.Result, bool) {
	if s.sm == nil || s.sm.s == nil {
		return enginemetrics.Result{}, false
	}
	return s.sm.s.Result(), true
}

// Begin waits (at most queueDrain) for the queue a stopped step left in
// the engine to empty, then marks the step's start.
func (s *SweepSignals) Begin(ctx context.Context, _ *sweep.Step) {
	if r, ok := s.samples(); ok && s.cfg.MaxWaiting >= 0 {
		deadline := time.Now().Add(queueDrain)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			if n := len(r.Samples); n == 0 || r.Samples[n-1].Values[enginemetrics.RequestsWaiting] == 0 {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(r.Period):
			}
			r, _ = s.samples()
		}
	}
	r, _ := s.samples()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startNs = clock.Now()
	s.preemptBase, s.preemptKnown = 0, false
	if n := len(r.Samples); n > 0 {
		s.preemptBase, s.preemptKnown = r.Samples[n-1].Values[enginemetrics.Preemptions]
	}
	if s.cuda != nil {
		s.oomBase = s.allocFailures()
		s.lostBse = s.cuda.Lost()
	}
}

// Check reads the engine's samples since the step began and the kernel's
// counts.
func (s *SweepSignals) Check() []sweep.Verdict {
	var out []sweep.Verdict
	if r, ok := s.samples(); ok && len(r.Samples) > 0 {
		out = append(out, s.engine(r)...)
	}
	if s.cuda != nil {
		s.mu.Lock()
		oomBase, lostBase := s.oomBase, s.lostBse
		s.mu.Unlock()
		if n := s.allocFailures(); n > oomBase {
			d := n - oomBase
			out = append(out, sweep.Verdict{Name: "cuda_alloc_failures", Limit: true,
				Detail: fmt.Sprintf("%d CUDA %s for lack of device memory", d, pluralWord(int(d), "allocation failed", "allocations failed"))})
		}
		if n := s.cuda.Lost(); n > lostBase {
			out = append(out, sweep.Verdict{Name: "ring_buffer_lost", Limit: true,
				Detail: fmt.Sprintf("the kernel's ring buffer lost %d events of the CUDA probes (limit 0)", n-lostBase)})
		}
	}
	return out
}

// engine is the engine's verdicts on the samples of the step.
func (s *SweepSignals) engine(r enginemetrics.Result) []sweep.Verdict {
	if !r.VocabularyMatched {
		s.note("engine", fmt.Sprintf("the server's metrics (engine %s) are not in the vocabulary: the engine's signals (requests waiting, KV cache, preemptions) are off", r.Engine))
		return nil
	}
	has := func(name string) bool { _, ok := r.Sources[name]; return ok }
	s.mu.Lock()
	start, base, baseKnown := s.startNs, s.preemptBase, s.preemptKnown
	s.mu.Unlock()
	var out []sweep.Verdict
	cfg := s.cfg

	if cfg.MaxWaiting >= 0 {
		switch {
		case !has(enginemetrics.RequestsWaiting):
			s.note("requests_waiting", fmt.Sprintf("the %s engine exports no requests_waiting: the queue signal is off", r.Engine))
		case cfg.MaxWaiting == 0 && !has(enginemetrics.RequestsRunning):
			s.note("requests_waiting", fmt.Sprintf("the %s engine exports no requests_running, so its slots are unknown: give --max-waiting for the queue signal", r.Engine))
		default:
			if v, ok := s.queue(r, start); ok {
				out = append(out, v)
			}
		}
	}
	if cfg.MaxKVUsage > 0 {
		if !has(enginemetrics.KVCacheUsage) {
			s.note("kv_cache_usage", fmt.Sprintf("the %s engine exports no kv_cache_usage: the KV-cache signal is off", r.Engine))
		} else {
			peak := -1.0
			for _, smp := range r.Samples {
				if v, ok := smp.Values[enginemetrics.KVCacheUsage]; ok && smp.Ns >= start && v > peak {
					peak = v
				}
			}
			if peak > cfg.MaxKVUsage {
				out = append(out, sweep.Verdict{Name: "kv_cache_usage", Limit: true,
					Detail: fmt.Sprintf("the KV cache was %.0f%% full (limit %.0f%%)", 100*peak, 100*cfg.MaxKVUsage)})
			}
		}
	}
	if cfg.MaxPreemptions >= 0 {
		if !has(enginemetrics.Preemptions) {
			s.note("preemptions_total", fmt.Sprintf("the %s engine exports no preemptions_total: the preemption signal is off", r.Engine))
		} else {
			last, ok := r.Samples[len(r.Samples)-1].Values[enginemetrics.Preemptions]
			if !baseKnown {
				// No sample before the step: its first one is the base.
				for _, smp := range r.Samples {
					if v, vok := smp.Values[enginemetrics.Preemptions]; vok && smp.Ns >= start {
						base, baseKnown = v, true
						break
					}
				}
			}
			if ok && baseKnown && last-base > float64(cfg.MaxPreemptions) {
				n := int(last - base)
				out = append(out, sweep.Verdict{Name: "preemptions", Limit: true,
					Detail: fmt.Sprintf("%d %s preempted (limit %d)", n, pluralWord(n, "request was", "requests were"), cfg.MaxPreemptions)})
			}
		}
	}
	return out
}

// queue is the queue signal: more than the limit of requests waiting in
// every sample for WaitingFor or longer, since the step began.
func (s *SweepSignals) queue(r enginemetrics.Result, start int64) (sweep.Verdict, bool) {
	limit := s.cfg.MaxWaiting
	why := fmt.Sprintf("limit %d", limit)
	if limit == 0 {
		slots := 0.0
		for _, smp := range r.Samples {
			slots = max(slots, smp.Values[enginemetrics.RequestsRunning])
		}
		if slots == 0 {
			return sweep.Verdict{}, false // no slot seen in use yet
		}
		limit = 2 * int(slots)
		why = fmt.Sprintf("limit %d: twice the engine's %d %s", limit, int(slots), pluralWord(int(slots), "slot", "slots"))
	}
	var runStart int64
	peak := 0.0
	for _, smp := range r.Samples {
		if smp.Ns < start {
			continue
		}
		w, ok := smp.Values[enginemetrics.RequestsWaiting]
		if !ok || w <= float64(limit) {
			runStart, peak = 0, 0
			continue
		}
		if runStart == 0 {
			runStart = smp.Ns
		}
		peak = max(peak, w)
		if d := time.Duration(smp.Ns - runStart); d >= s.cfg.WaitingFor {
			return sweep.Verdict{Name: "requests_waiting", Limit: true,
				Detail: fmt.Sprintf("up to %.0f requests were waiting in the engine's queue for %.1f s (%s)", peak, d.Seconds(), why)}, true
		}
	}
	return sweep.Verdict{}, false
}

// allocFailures is the cuda section's count of allocations that failed
// for lack of device memory (its summary's out_of_memory.count).
func (s *SweepSignals) allocFailures() uint64 {
	b, err := json.Marshal(s.cuda.Summary())
	if err != nil {
		return 0
	}
	var sum struct {
		OOM struct {
			Count uint64 `json:"count"`
		} `json:"out_of_memory"`
	}
	if json.Unmarshal(b, &sum) != nil {
		return 0
	}
	return sum.OOM.Count
}

func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
