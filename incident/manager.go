package incident

import (
	"cmp"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bpfbench/bpfbench/internal/manifest"
	"github.com/bpfbench/bpfbench/live"
	"github.com/bpfbench/bpfbench/result"
)

// Defaults of a Manager.
const (
	DefaultAfter      = 30 * time.Second
	DefaultCooldown   = 10 * time.Minute
	DefaultMaxPerHour = 6
)

// Options configure the incidents of a daemon.
type Options struct {
	Spool Spool
	// Trigger is every live target's rule, Triggers a target's own
	// instead (by name).
	Trigger  live.Trigger
	Triggers map[string]live.Trigger
	// Before and After bound the window kept around a trigger (Before
	// <= 0: the recorder's whole window; After <= 0: 30 s).
	Before, After time.Duration
	// Cooldown is the least time between two incidents of a target by
	// its rule (requests are not held back); MaxPerHour bounds the
	// incidents of every target in any hour, requests included.
	Cooldown   time.Duration
	MaxPerHour int
	// Manifest describes a target's process, or nil.
	Manifest func(pid int) *manifest.Manifest
	// Written is told of each bundle written (the daemon's OTLP event).
	Written func(inc *result.Incident, dir string)
	Logger  *slog.Logger
	// Now is the wall clock (tests); nil: time.Now.
	Now func() time.Time
}

// Source is a live target's view as the manager reads it.
type Source struct {
	Tracker  *live.Tracker
	Recorder *live.Recorder
	Pid      int
	Name     func(uint32) string
}

// Manager watches every live target's gaps with its rule, takes the
// requests of captures, holds incidents back by a cool-down per target
// and a cap per hour, and writes the bundles. Safe for concurrent use.
type Manager struct {
	opt Options
	log *slog.Logger

	mu      sync.Mutex
	targets map[string]*state
	fired   []time.Time // the wall times of the last hour's incidents
	written map[[2]string]uint64
	held    map[[2]string]uint64
	failed  uint64
	capped  bool // the cap's hold was logged
	wg      sync.WaitGroup
}

type state struct {
	watch     live.Watch
	last      int64 // the last incident's trigger (CLOCK_MONOTONIC; 0: none)
	pending   *Capture
	requested string // a request's trigger, taken at the next check
}

// NewManager returns a manager with opt's defaults filled in.
func NewManager(opt Options) *Manager {
	opt.After = cmp.Or(opt.After, DefaultAfter)
	opt.Cooldown = cmp.Or(opt.Cooldown, DefaultCooldown)
	opt.MaxPerHour = cmp.Or(opt.MaxPerHour, DefaultMaxPerHour)
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	return &Manager{opt: opt, log: opt.Logger.With("component", "incidents"), targets: map[string]*state{},
		written: map[[2]string]uint64{}, held: map[[2]string]uint64{}}
}

func (m *Manager) state(target string) *state {
	st := m.targets[target]
	if st == nil {
		tr, ok := m.opt.Triggers[target]
		if !ok {
			tr = m.opt.Trigger
		}
		st = &state{watch: live.Watch{Trigger: tr}}
		m.targets[target] = st
	}
	return st
}

// Request asks for an incident of target (trigger: TriggerAPI or
// TriggerSignal), taken at its live view's next check.
func (m *Manager) Request(target, trigger string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state(target).requested = trigger
}

// Forget drops a target's state (it was removed); a bundle being
// captured is written with what was recorded.
func (m *Manager) Forget(target string) {
	m.mu.Lock()
	delete(m.targets, target)
	m.mu.Unlock()
}

// Check runs after each walk of target's live view at now (CLOCK_MONOTONIC):
// a pending capture whose window has passed is written; else the rule is
// judged and a request taken.
func (m *Manager) Check(target string, src Source, now int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.state(target)
	if p := st.pending; p != nil {
		if now >= p.AtNs+int64(m.opt.After) {
			st.pending = nil
			m.write(p, src, now)
		}
		return
	}
	rd, fired := st.watch.Check(src.Recorder, src.Tracker.Normal, now)
	trigger := ""
	switch {
	case st.requested != "":
		trigger, st.requested = st.requested, ""
	case fired:
		trigger = TriggerRule
	default:
		return
	}
	if trigger == TriggerRule && st.last != 0 && now-st.last < int64(m.opt.Cooldown) {
		m.held[[2]string{target, "cooldown"}]++
		return
	}
	wall := m.opt.Now()
	m.fired = pruneHour(m.fired, wall)
	if len(m.fired) >= m.opt.MaxPerHour {
		m.held[[2]string{target, "hourly_cap"}]++
		if !m.capped {
			m.capped = true
			m.log.Warn("incidents held back: the hourly cap is reached (counted in bpfbench_incidents_held_back_total)", "target", target, "trigger", trigger, "cap", m.opt.MaxPerHour)
		}
		return
	}
	m.capped = false
	m.fired = append(m.fired, wall)
	st.last = now
	if !rd.Normal.OK {
		// The check asks for the normal gap only where a criterion
		// needs it; the bundle is always judged against it.
		rd.Normal = src.Tracker.Normal()
	}
	c := &Capture{Target: target, Pid: src.Pid, Trigger: trigger, At: wall, AtNs: now, Reading: rd, Recent: st.watch.Trigger.Recent(), Name: src.Name}
	if trigger == TriggerRule {
		c.Rule = st.watch.Trigger.String()
	}
	st.pending = c
	m.log.Info("incident: capturing", "target", target, "trigger", trigger, "rule", c.Rule,
		"p99_ms", live.Ms(rd.P99Ns), "normal_p99_ms", live.Ms(rd.Normal.P99Ns), "after", m.opt.After)
}

// Flush writes target's pending capture now (its live view ends).
func (m *Manager) Flush(target string, src Source, now int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st := m.targets[target]; st != nil && st.pending != nil {
		p := st.pending
		st.pending = nil
		m.write(p, src, now)
	}
}

func pruneHour(ts []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(ts) && now.Sub(ts[i]) >= time.Hour {
		i++
	}
	return ts[i:]
}

// write takes the window out of the recorder now and writes the bundle
// in the background (under m.mu).
func (m *Manager) write(c *Capture, src Source, now int64) {
	c.ToNs = now
	c.FromNs = now - int64(time.Hour)
	if m.opt.Before > 0 {
		c.FromNs = c.AtNs - int64(m.opt.Before)
	}
	c.Gaps = src.Recorder.Window(c.FromNs, c.ToNs)
	c.Stats = src.Recorder.Stats()
	if len(c.Gaps) > 0 {
		c.FromNs = max(c.FromNs, c.Gaps[0].Gap.Start)
	}
	c.Origin = src.Tracker.Origin()
	c.Targets = src.Tracker.Targets()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if m.opt.Manifest != nil {
			c.Manifest = m.opt.Manifest(c.Pid)
		}
		doc := Build(*c)
		dir, removed, err := m.opt.Spool.Write(*c, doc)
		m.mu.Lock()
		if err != nil {
			m.failed++
		} else {
			m.written[[2]string{c.Target, c.Trigger}]++
		}
		m.mu.Unlock()
		if err != nil {
			m.log.Error("incident bundle not written", "target", c.Target, "err", err)
			return
		}
		if len(removed) > 0 {
			m.log.Info("incident spool: removed the oldest bundles past its retention", "removed", removed)
		}
		m.log.Warn(fmt.Sprintf("incident: %s; %s", doc.Incident.Verdict, dir), "target", c.Target, "trigger", c.Trigger, "dir", dir)
		if m.opt.Written != nil {
			m.opt.Written(doc.Incident, dir)
		}
	}()
}

// Close waits for the bundles being written.
func (m *Manager) Close() { m.wg.Wait() }

var (
	incidentsDesc = prometheus.NewDesc("bpfbench_incidents_total",
		"Incident bundles written, by target and trigger (rule, api, signal): the evidence of a live target's token-gap breach, in the spool (bpfbench incidents).",
		[]string{"target", "trigger"}, nil)
	heldDesc = prometheus.NewDesc("bpfbench_incidents_held_back_total",
		"Incidents not captured, by target and reason: a rule firing within its cool-down, or any over the hourly cap.",
		[]string{"target", "reason"}, nil)
	failedDesc = prometheus.NewDesc("bpfbench_incident_write_failures_total",
		"Incident bundles that could not be written (the log says why).", nil, nil)
)

// Describe implements prometheus.Collector.
func (m *Manager) Describe(ch chan<- *prometheus.Desc) {
	ch <- incidentsDesc
	ch <- heldDesc
	ch <- failedDesc
}

// Collect implements prometheus.Collector.
func (m *Manager) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, n := range m.written {
		ch <- prometheus.MustNewConstMetric(incidentsDesc, prometheus.CounterValue, float64(n), k[0], k[1])
	}
	for k, n := range m.held {
		ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.CounterValue, float64(n), k[0], k[1])
	}
	ch <- prometheus.MustNewConstMetric(failedDesc, prometheus.CounterValue, float64(m.failed))
}
