package daemon

// Incidents: every live target's flight recorder (live.Recorder) is
// watched by its rule after each walk (incident.Manager); a rule that
// fires, a request through the session API (`bpfbench capture`) or
// SIGUSR1 writes an incident bundle into the spool, logged with its
// verdict and counted in bpfbench_incidents_total.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/bpfbench/bpfbench/incident"
	"github.com/bpfbench/bpfbench/internal/manifest"
	"github.com/bpfbench/bpfbench/live"
)

// PathCapture is the session API's route that asks for an incident of a
// target (`bpfbench capture`): POST {"target": NAME}.
const PathCapture = "/api/v1/incidents"

// CaptureRequest is PathCapture's body; CaptureResponse its answer.
type CaptureRequest struct {
	Target string `json:"target"`
}

// CaptureResponse says what was asked and where the bundle will be.
type CaptureResponse struct {
	Targets []string `json:"targets"`
	// AfterSeconds: the bundle is written this long after the request
	// (the window goes on past it), into Dir.
	AfterSeconds float64 `json:"after_seconds"`
	Dir          string  `json:"dir"`
}

func (r IncidentRule) trigger() live.Trigger {
	return live.Trigger{P99Ms: r.P99Ms, P99Times: r.P99TimesNormal, Cause: r.Cause, Share: r.Share,
		For: int64(r.For), Over: int64(r.Over), MinGaps: r.MinGaps}
}

func (r IncidentRule) check() error {
	if r.For < 0 || r.Over < 0 {
		return fmt.Errorf("for and over must not be negative")
	}
	t := r.trigger()
	if t.Empty() {
		return fmt.Errorf("no criterion: set p99_ms, p99_times_normal, or cause with share")
	}
	return t.Validate()
}

// newIncidents is the daemon's incident manager, nil when incidents or
// the live view are off.
func newIncidents(cfg Config, d *Daemon) *incident.Manager {
	in := cfg.Incidents
	if !in.Enabled || !cfg.Live.Enabled {
		return nil
	}
	tr := live.DefaultTrigger()
	if in.Rule != nil {
		tr = in.Rule.trigger()
	}
	per := map[string]live.Trigger{}
	for name, r := range in.Targets {
		per[name] = r.trigger()
	}
	return incident.NewManager(incident.Options{
		Spool:   incident.Spool{Dir: cmp.Or(in.Dir, incident.DefaultDir), Keep: in.Keep, MaxBytes: in.MaxBytes},
		Trigger: tr, Triggers: per, After: in.After, Cooldown: in.Cooldown, MaxPerHour: in.MaxPerHour,
		Before: in.RecorderWindow,
		Manifest: func(pid int) *manifest.Manifest {
			m, _ := manifest.Collect(pid, manifest.Options{ProcDir: d.proc})
			return m
		},
		Logger: d.log,
	})
}

// newRecorder is a live target's flight recorder, nil without incidents.
func (d *Daemon) newRecorder() *live.Recorder {
	if d.inc == nil {
		return nil
	}
	return live.NewRecorder(int64(d.cfg.Incidents.RecorderWindow), d.cfg.Incidents.RecorderBytes)
}

// Capture asks for an incident of target ("": of every target with a live
// view) at its live view's next walk; it returns the targets asked.
func (d *Daemon) Capture(target, trigger string) ([]string, error) {
	if d.inc == nil {
		return nil, fmt.Errorf("incidents are off (incidents.enabled and live.enabled in the configuration)")
	}
	names := d.views.names()
	if target != "" {
		if !slices.Contains(names, target) {
			return nil, fmt.Errorf("target %q has no live view now (configured and with a process?)", target)
		}
		names = []string{target}
	}
	for _, n := range names {
		d.inc.Request(n, trigger)
	}
	d.log.Info("incident requested", "targets", names, "trigger", trigger)
	return names, nil
}

// serveCapture is PathCapture: a target the session API's allow-list
// names (agent.allow.targets) may be captured.
func (d *Daemon) serveCapture(w http.ResponseWriter, r *http.Request) {
	var req CaptureRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10)).Decode(&req); err != nil || req.Target == "" {
		http.Error(w, `the body must be {"target": NAME}`, http.StatusBadRequest)
		return
	}
	d.mu.Lock()
	allowed := slices.Contains(d.cfg.Agent.Allow.Targets, req.Target)
	d.mu.Unlock()
	if !allowed {
		http.Error(w, fmt.Sprintf("target %q is not in agent.allow.targets", req.Target), http.StatusForbidden)
		return
	}
	names, err := d.Capture(req.Target, incident.TriggerAPI)
	if err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(CaptureResponse{Targets: names, AfterSeconds: cmp.Or(d.cfg.Incidents.After, incident.DefaultAfter).Seconds(),
		Dir: cmp.Or(d.cfg.Incidents.Dir, incident.DefaultDir)})
}

// sweepSpool removes the half-written bundles of a daemon that died while
// writing one.
func (d *Daemon) sweepSpool() {
	if d.inc == nil {
		return
	}
	s := incident.Spool{Dir: cmp.Or(d.cfg.Incidents.Dir, incident.DefaultDir)}
	if stale, err := s.Sweep(); err != nil {
		d.log.Warn("incident spool: removing half-written bundles", "dir", s.Dir, "err", err)
	} else if len(stale) > 0 {
		d.log.Info("incident spool: removed bundles a stopped daemon left half-written", "dir", s.Dir, "removed", stale)
	}
}
