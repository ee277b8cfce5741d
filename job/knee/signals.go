package knee

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/clock"
	"github.com/bpfbench/bpfbench/job/run"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/enginemetrics"
	"github.com/bpfbench/bpfbench/loadgen/sweep"
	"github.com/bpfbench/bpfbench/loadgen/transport"
	"github.com/bpfbench/bpfbench/session"
)

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
	sm   *run.ServerMetrics
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
	sm, err := run.NewServerMetrics(ctx, run.RunConfig{Load: loadgen.Config{Target: transport.Options{URL: cfg.Target}}, ServerMetrics: cfg.ServerMetrics,
		ServerMetricsPeriod: cfg.ServerMetricsPeriod, Logger: cfg.Logger}, log)
	if err != nil {
		return nil, err
	}
	s.sm = sm
	switch {
	case sm.Scraper() != nil:
		sm.Start(context.WithoutCancel(ctx))
	case cfg.ServerMetrics == "off":
		s.note("engine", "server metrics off: the engine's signals (requests waiting, KV cache, preemptions) are off")
	default:
		s.note("engine", sm.Note()+": the engine's signals (requests waiting, KV cache, preemptions) are off")
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
			s.sm.Stop()
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
	if s.sm == nil || s.sm.Scraper() == nil {
		return enginemetrics.Result{}, false
	}
	return s.sm.Scraper().Result(), true
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
