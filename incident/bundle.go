// Package incident is the daemon's flight recorder turned into evidence:
// when a live target's trigger fires (a rule on its token gaps, a request
// through the daemon's API, SIGUSR1), the gaps its recorder kept around
// the trigger become an incident bundle — result.json (the window's
// critical path, its slowest gaps step by step, the noisy neighbours, the
// normal gap it was judged against, the manifest), report.html and
// trace.json — written atomically into a spool with retention by count and
// bytes, and listed by `bpfbench incidents`.
package incident

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/exporter/trace"
	"github.com/bpfbench/bpfbench/internal/manifest"
	"github.com/bpfbench/bpfbench/live"
	"github.com/bpfbench/bpfbench/result"
)

// The triggers of an incident.
const (
	TriggerRule   = "rule"
	TriggerAPI    = "api"
	TriggerSignal = "signal"
)

// Capture is what a bundle is built from: a target's recorded window
// around a trigger.
type Capture struct {
	Target  string
	Pid     int
	Trigger string
	Rule    string
	At      time.Time
	// AtNs is the trigger (CLOCK_MONOTONIC), FromNs and ToNs the window.
	AtNs, FromNs, ToNs int64
	// Reading is the trigger's check (a request's too: the rule's figures
	// at that moment), Recent the rule's recent window (ns).
	Reading live.Reading
	Recent  int64
	Gaps    []live.Recorded
	Stats   live.RecorderStats
	// Origin is the live session's first span; Targets its processes.
	Origin   int64
	Targets  map[uint32]bool
	Name     func(uint32) string
	Manifest *manifest.Manifest
}

// slowestKept bounds the slowest gaps a bundle lists with their steps.
const slowestKept = 20

// Build is the bundle's result.json.
func Build(c Capture) *result.Document {
	base := c.Reading.Normal.Base
	// agg is the window's, breach the breach's: from when the rule's
	// recent gaps began to hold (a request: the last 10 s before it).
	var agg, breach critpath.Aggregate
	recent := cmp.Or(c.Recent, int64(10e9))
	from := c.AtNs - recent
	if c.Reading.Since > 0 {
		from = c.Reading.Since - recent
	}
	var paths []critpath.Gap
	compact := make([]live.Gap, 0, len(c.Gaps))
	for _, r := range c.Gaps {
		compact = append(compact, r.Gap)
		g := critpath.Gap{Read: critpath.Read{Request: int(r.Gap.Request), Index: int(r.Gap.Index), Start: r.Gap.Start, End: r.Gap.End}, Ns: r.Gap.Ns}
		if r.Path != nil {
			g = *r.Path
			paths = append(paths, g)
		}
		agg.Add(g)
		if g.End >= from {
			breach.Add(g)
		}
	}
	var later []live.Gap
	for _, g := range compact {
		if g.Index > 1 {
			later = append(later, g)
		}
	}
	cp := &result.CriticalPath{Rule: live.Rule, Baseline: c.Reading.Normal.Name, Causes: critpath.CauseNames(),
		Gaps: agg.Gaps, GapMs: live.Ms(agg.GapNs), TotalsMs: live.CausesMs(agg.Ns),
		UnexplainedFraction: agg.Fraction(critpath.Unexplained),
		NormalITLMs:         live.CausesMs(base.ITL), NormalTTFTMs: live.CausesMs(base.TTFT),
		ITLP99: live.Band(slices.Values(later), base, false),
		TTFTP99: live.Band(func(yield func(live.Gap) bool) {
			for _, g := range compact {
				if g.Index <= 1 {
					g.Index = 0
					if !yield(g) {
						return
					}
				}
			}
		}, base, true),
		Slowest: []result.CriticalGap{}}
	cp.NoisyNeighbours, cp.SelfContention = live.NeighboursOf(&agg, c.Targets, 10)
	slices.SortFunc(paths, func(a, b critpath.Gap) int { return cmp.Compare(b.Duration(), a.Duration()) })
	for _, g := range paths[:min(len(paths), slowestKept)] {
		cp.Slowest = append(cp.Slowest, live.CriticalGap(g, base, c.AtNs, c.Name))
	}
	inc := &result.Incident{Target: c.Target, Pid: c.Pid, Trigger: c.Trigger, Rule: c.Rule, At: c.At.UTC(),
		WindowStartS: float64(c.FromNs-c.AtNs) / 1e9, WindowEndS: float64(c.ToNs-c.AtNs) / 1e9,
		FromNs: c.FromNs, ToNs: c.ToNs, TriggerNs: c.AtNs,
		Gaps: len(c.Gaps), Paths: len(paths), Evicted: c.Stats.Evicted,
		PathQuantile: c.Stats.PathQuantile, PathsShed: c.Stats.PathsShed,
		P99Ms: live.Ms(c.Reading.P99Ns), NormalP99Ms: live.Ms(c.Reading.Normal.P99Ns),
		NormalMedianMs: live.Ms(c.Reading.Normal.MedianNs), Baseline: c.Reading.Normal.Name}
	if c.Reading.Since > 0 {
		inc.HeldSeconds = float64(c.AtNs-c.Reading.Since) / 1e9
	}
	inc.BreachStartS = float64(from-c.AtNs) / 1e9
	inc.BreachNeighbours, _ = live.NeighboursOf(&breach, c.Targets, 5)
	inc.Verdict = verdict(inc, cp)
	doc := &result.Document{SchemaVersion: result.SchemaVersion, Manifest: c.Manifest, CriticalPath: cp, Incident: inc}
	doc.Diagnosis = []string{"incident: " + inc.Verdict}
	if c.Stats.PathsShed > 0 || c.Stats.PathQuantile > live.PathQuantiles[0] {
		doc.Diagnosis = append(doc.Diagnosis, fmt.Sprintf("the recorder dropped the paths of its %d shortest slow gaps to hold its window in its byte bound, and takes new ones above their p%.0f now (the p%.0f when its bytes allow): the slowest gaps' paths are kept (raise incidents.recorder_bytes for more)",
			c.Stats.PathsShed, 100*c.Stats.PathQuantile, 100*live.PathQuantiles[0]))
	}
	if c.Stats.Evicted > 0 {
		doc.Diagnosis = append(doc.Diagnosis, fmt.Sprintf("the recorder's byte bound dropped %d gaps before its window ended: the window kept is shorter than asked (raise incidents.recorder_bytes)", c.Stats.Evicted))
	}
	return doc
}

// verdict is the incident in one line: "llama: p99 gap 84 ms (normal p99
// 12 ms) for 95 s; 71% cpu_runqueue of the slowest gaps' excess, behind
// busy[4242]".
func verdict(inc *result.Incident, cp *result.CriticalPath) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: p99 gap %s", inc.Target, msText(inc.P99Ms))
	if inc.NormalP99Ms > 0 {
		fmt.Fprintf(&b, " (normal p99 %s)", msText(inc.NormalP99Ms))
	} else {
		b.WriteString(" (no normal gap known yet: the excess is over none)")
	}
	if inc.HeldSeconds > 0 {
		fmt.Fprintf(&b, " for %.0f s", inc.HeldSeconds)
	}
	band := cp.ITLP99
	if band == nil || band.ExcessMs <= 0 {
		b.WriteString("; no excess over the normal gap in the window's slowest gaps")
		return b.String()
	}
	fmt.Fprintf(&b, "; %.0f%% %s of the slowest gaps' excess", 100*band.ExcessShares[band.Top], band.Top)
	if band.Top == critpath.CPURunqueue.String() && len(inc.BreachNeighbours) > 0 {
		fmt.Fprintf(&b, ", behind %s", inc.BreachNeighbours[0].Process)
	}
	return b.String()
}

func msText(ms float64) string {
	if ms >= 10 {
		return fmt.Sprintf("%.0f ms", ms)
	}
	return fmt.Sprintf("%.1f ms", ms)
}

// Trace is the window's slow gaps step by step for Perfetto: a track per
// connection, each gap a slice and each of its steps a slice under it.
func Trace(c Capture) *trace.Trace {
	tr := trace.New(c.FromNs)
	tr.NameTrack(trace.PidRequests, 0, "incident "+c.Target)
	tr.Instant(trace.PidRequests, 0, "trigger: "+c.Trigger, "incident", c.AtNs, map[string]any{"rule": c.Rule})
	for _, r := range c.Gaps {
		p := r.Path
		if p == nil {
			continue
		}
		tid := int(p.Port) + 1
		tr.Slice(trace.PidRequests, tid, fmt.Sprintf("gap %d", p.Index), "gap", p.Start, p.End,
			map[string]any{"request": p.Request, "ms": live.Ms(p.Duration())})
		for _, s := range p.Steps {
			args := map[string]any{"thread": s.Thread.String()}
			if s.Other != (critpath.Thread{}) {
				args["other"] = s.Other.String()
			}
			tr.Slice(trace.PidCriticalPath, tid, s.Cause.String(), "critical_path", s.Start, s.End, args)
		}
	}
	return tr
}
