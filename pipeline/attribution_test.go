package pipeline

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/result"
)

// The attribution is the critical path's: a quiet phase and a phase whose
// gaps each waited 15 ms for a CPU give, against the quiet phase's normal
// gap, every band's, request's, second's and phase's excess to
// cpu_runqueue, in the critical path's causes.
func TestAttributionFromCriticalPath(t *testing.T) {
	gs := gapsOf(10, 50, 9, 0, 2e12)
	gs = append(gs, gapsOf(10, 50, 9, 15, 3e12)...)
	phases := []critPhase{{name: "baseline", from: 2e12, to: 3e12}, {name: "cpu", from: 3e12, to: 4e12}}
	base := baselineOf(slices.Values(inPhase(slices.Values(gs), phases[0])))
	cp := &result.CriticalPath{Baseline: "baseline", Causes: critpath.CauseNames(), Gaps: len(gs), Slowest: []result.CriticalGap{}}
	rebase(cp, slices.Values(gs), phases, base, nil)
	doc := &result.Document{CriticalPath: cp,
		Timeline: make([]result.TimelinePoint, 2001),
		Phases:   []result.Phase{{Name: "baseline"}, {Name: "cpu"}}}
	attribute(doc, slices.Values(gs), phases, base, 2e12, []float64{50, 99})

	a := doc.Attribution
	if a == nil || a.Model != correlate.ModelCriticalPath || a.TopCause != "cpu_runqueue" {
		t.Fatalf("attribution %+v, want the critical path's with cpu_runqueue on top", a)
	}
	if want := 10.0; math.Abs(a.BaselineITLMs-want) > 1e-9 {
		t.Errorf("normal gap %.3f ms, want %.0f (9 ms compute, 1 ms client)", a.BaselineITLMs, want)
	}
	if s := a.ITL["p99"]["cpu_runqueue"]; math.Abs(s-1) > 1e-9 {
		t.Errorf("p99 band: cpu_runqueue %.3f of the excess (%v), want all of it", s, a.ITL["p99"])
	}
	for _, r := range a.Requests {
		if r.Request >= 0 && r.ITLExcessMs > 0 && r.TopCause != "cpu_runqueue" {
			t.Errorf("request %d: top %s (%v)", r.Request, r.TopCause, r.ITLShares)
		}
	}
	// The timeline's seconds hold every gap's excess once: 10 requests of
	// 49 gaps 15 ms over normal, all in the contended phase's seconds.
	var sum, quiet float64
	for i, pt := range doc.Timeline {
		for c, v := range pt.CausesMs {
			if c != "cpu_runqueue" {
				t.Errorf("second %d: %.3f ms of %s", i, v, c)
			}
			if i < 1000 {
				quiet += v
			}
			sum += v
		}
	}
	if math.Abs(sum-10*49*15) > 1e-6 || quiet != 0 {
		t.Errorf("timeline: %.3f ms of excess, %.3f in the quiet phase; want %d and 0", sum, quiet, 10*49*15)
	}
	p := doc.Phases[1]
	if p.TopCause != "cpu_runqueue" || math.Abs(p.TopShare-1) > 1e-9 || p.TopCauseBasis == "" {
		t.Errorf("phase cpu: top %s %.3f (%s)", p.TopCause, p.TopShare, p.TopCauseBasis)
	}
	if got := p.AttributedMsPerInterval["cpu_runqueue"]; math.Abs(got-15*49.0/50) > 1e-6 {
		t.Errorf("phase cpu: %.3f ms of cpu_runqueue per interval, want %.3f", got, 15*49.0/50)
	}
	if math.Abs(cp.Phases[1].TailAddedMs-15) > 1e-9 {
		t.Errorf("phase cpu added %.3f ms per tail gap, want 15", cp.Phases[1].TailAddedMs)
	}
}

// A result.json of a bpfbench whose attribution was the activity model is
// read with that model as activity, and its attribution is rebuilt from
// the run's gaps.
func TestRebuildLegacyAttribution(t *testing.T) {
	gs := gapsOf(10, 50, 9, 0, 2e12)
	gs = append(gs, gapsOf(10, 50, 9, 15, 3e12)...)
	phases := []critPhase{{name: "baseline", from: 2e12, to: 3e12}, {name: "cpu", from: 3e12, to: 4e12}}
	dir := writeRun(t, gs, phases)
	// As an older bpfbench wrote it: the activity model under
	// "attribution", with no model, blaming what was merely active.
	b, err := os.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["attribution"] = map[string]any{"top_cause": "unexplained", "itl_bands": map[string]any{"p50": map[string]any{}, "p99": map[string]any{}},
		"itl": map[string]any{"all": map[string]float64{"unexplained": 1}}}
	m["phases"] = []map[string]any{{"name": "baseline", "top_cause": "unexplained"}, {"name": "cpu", "top_cause": "io_block"}}
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	doc, err := result.Load(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !doc.Legacy() || doc.Attribution != nil || doc.Activity == nil || doc.Activity.Model != correlate.ModelActivity {
		t.Fatalf("legacy %v, attribution %+v, activity %+v", doc.Legacy(), doc.Attribution, doc.Activity)
	}
	if err := RebuildAttribution(doc, dir); err != nil {
		t.Fatal(err)
	}
	if a := doc.Attribution; a == nil || a.Model != correlate.ModelCriticalPath {
		t.Fatalf("rebuilt attribution %+v", a)
	}
	if _, ok := doc.Attribution.ITLBands["p99"]; !ok {
		t.Errorf("bands %v, want the activity model's percentiles", doc.Attribution.ITLBands)
	}
	if p := doc.Phases[1]; p.TopCause != "cpu_runqueue" {
		t.Errorf("phase cpu: top %s, want the critical path's cpu_runqueue", p.TopCause)
	}
	// Without the gaps file: the activity model's causes leave the phases.
	doc, err = result.Load(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, GapsFile))
	if err := RebuildAttribution(doc, dir); err == nil {
		t.Fatal("rebuilt without a gaps file")
	}
	doc.ForgetActivityCauses()
	if p := doc.Phases[1]; p.TopCause != "cpu_runqueue" {
		t.Errorf("phase cpu without gaps: top %s, want the critical path phases' cpu_runqueue", p.TopCause)
	}
}
