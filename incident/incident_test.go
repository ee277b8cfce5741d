package incident

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/exporter/trace"
	"github.com/bpfbench/bpfbench/live"
	"github.com/bpfbench/bpfbench/result"
)

// gapAt is a later token's gap of d ns ending at end, runq of it behind
// busy[9] in the run queue.
func gapAt(req int, end, d, runq int64) critpath.Gap {
	g := critpath.Gap{Read: critpath.Read{Request: req, Index: 5, Port: uint16(1000 + req), Start: end - d, End: end}}
	g.Ns[critpath.ServerCompute] = d - runq
	g.Ns[critpath.CPURunqueue] = runq
	g.Steps = []critpath.Step{{Start: end - d, End: end - runq, Cause: critpath.ServerCompute, Thread: critpath.Thread{Tid: 7, Tgid: 7, Comm: "engine"}},
		{Start: end - runq, End: end, Cause: critpath.CPURunqueue, Thread: critpath.Thread{Tid: 7, Tgid: 7, Comm: "engine"}, Other: critpath.Thread{Tid: 9, Tgid: 9, Comm: "busy"}}}
	return g
}

// fill records 50 gaps a second from from to to: d ns each, runq of it
// in the run queue.
func fill(rec *live.Recorder, from, to, d, runq int64) {
	for now := from; now < to; now += 20e6 {
		rec.Add(gapAt(int(now/20e6)%4, now, d, runq))
	}
}

func capture(t *testing.T, at int64) Capture {
	t.Helper()
	rec := live.NewRecorder(0, 0)
	rec.SetPathAbove(func(float64) (int64, int64) { return 15e6, 15e6 })
	fill(rec, 1e9, 60e9, 10e6, 1e6)
	fill(rec, 60e9, at+5e9, 50e6, 40e6)
	base := critpath.Baseline{}
	base.ITL[critpath.ServerCompute] = 9e6
	base.ITL[critpath.CPURunqueue] = 1e6
	return Capture{Target: "llama", Pid: 7, Trigger: TriggerRule, Rule: "gap p99 over 30 ms", At: time.Unix(1_800_000_000, 0), AtNs: at,
		FromNs: 1e9, ToNs: at + 5e9, Gaps: rec.Window(1e9, at+5e9), Stats: rec.Stats(), Targets: map[uint32]bool{7: true},
		Reading: live.Reading{P99Ns: 50e6, Since: at - 31e9, Normal: live.Normal{Base: base, Name: "quiet window at +1s", MedianNs: 10e6, P99Ns: 10e6, OK: true}}}
}

// A bundle's result.json: the window's critical path against the normal
// gap, its slowest gaps with their steps, the neighbour, and a verdict
// that names the top cause, its share and the neighbour.
func TestBuild(t *testing.T) {
	c := capture(t, 90e9)
	doc := Build(c)
	in, cp := doc.Incident, doc.CriticalPath
	if in == nil || cp == nil {
		t.Fatalf("no incident or critical path: %+v", doc)
	}
	if cp.ITLP99 == nil || cp.ITLP99.Top != "cpu_runqueue" || cp.ITLP99.ExcessShares["cpu_runqueue"] < 0.9 {
		t.Errorf("p99 band %+v, want cpu_runqueue at 90%% and more", cp.ITLP99)
	}
	if len(cp.NoisyNeighbours) == 0 || cp.NoisyNeighbours[0].Process != "busy[9]" {
		t.Errorf("neighbours %+v, want busy[9] first", cp.NoisyNeighbours)
	}
	if len(cp.Slowest) != slowestKept || len(cp.Slowest[0].Steps) == 0 {
		t.Errorf("%d slowest gaps (steps %v), want %d with their steps", len(cp.Slowest), cp.Slowest, slowestKept)
	}
	for _, want := range []string{"llama: p99 gap 50 ms (normal p99 10 ms) for 31 s", "cpu_runqueue", "behind busy[9]"} {
		if !strings.Contains(in.Verdict, want) {
			t.Errorf("verdict %q does not say %q", in.Verdict, want)
		}
	}
	if in.WindowStartS != -89 || in.WindowEndS != 5 || in.Paths != 1750 || in.Gaps != c.Stats.Gaps {
		t.Errorf("window %+v: want -89 s to +5 s, the 1,750 slow gaps' paths, every gap held", in)
	}
	if in.PathQuantile != 0.9 || len(doc.Diagnosis) != 1 {
		t.Errorf("paths above the p%.0f, diagnosis %q: want the p90 and the verdict alone", 100*in.PathQuantile, doc.Diagnosis)
	}
	// A recorder that shed paths to hold its window says so.
	c.Stats.PathQuantile, c.Stats.PathsShed = 0.99, 120
	doc = Build(c)
	if in := doc.Incident; in.PathQuantile != 0.99 || in.PathsShed != 120 || len(doc.Diagnosis) != 2 || !strings.Contains(doc.Diagnosis[1], "above their p99") {
		t.Errorf("incident %+v, diagnosis %q: want the paths above the p99 and the 120 shed said", in, doc.Diagnosis)
	}
}

// The spool: bundles are written whole (a reader never sees a half one),
// kept by count and bytes with the oldest removed whole first and never
// the one just written, and listed oldest first; a half-written bundle a
// dead daemon left is swept.
func TestSpoolRetention(t *testing.T) {
	dir := t.TempDir()
	s := Spool{Dir: dir, Keep: 3}
	var written []string
	for i := range 5 {
		c := capture(t, 90e9)
		c.At = c.At.Add(time.Duration(i) * time.Minute)
		d, removed, err := s.Write(c, Build(c))
		if err != nil {
			t.Fatal(err)
		}
		written = append(written, d)
		if i >= 3 && (len(removed) != 1 || removed[0] != filepath.Base(written[i-3])) {
			t.Errorf("bundle %d removed %v, want the oldest, %s", i, removed, filepath.Base(written[i-3]))
		}
		for _, f := range []string{"result.json", "report.html", "trace.json"} {
			if _, err := os.Stat(filepath.Join(d, f)); err != nil {
				t.Errorf("bundle %d: %v", i, err)
			}
		}
	}
	list, err := List(dir)
	if err != nil || len(list) != 3 || list[0].Dir != written[2] || list[2].Incident == nil {
		t.Fatalf("list %+v (%v), want the last three, oldest first, with their incidents", list, err)
	}
	// The trace opens: a slice per slow gap and its steps.
	f, err := os.Open(filepath.Join(written[4], "trace.json"))
	if err != nil {
		t.Fatal(err)
	}
	tf, err := trace.Read(f)
	f.Close()
	if err != nil || len(tf.TraceEvents) < 1500 {
		t.Errorf("trace.json: %v, %d events", err, len(tf.TraceEvents))
	}
	// A byte bound below one bundle keeps only the newest, whole.
	s.MaxBytes = 1
	c := capture(t, 90e9)
	c.At = c.At.Add(time.Hour)
	d, removed, err := s.Write(c, Build(c))
	if err != nil || len(removed) != 3 {
		t.Fatalf("written %s, removed %v (%v), want the three others removed", d, removed, err)
	}
	if doc, err := result.Load(filepath.Join(d, "result.json")); err != nil || doc.Incident == nil {
		t.Errorf("the new bundle: %v", err)
	}
	// A half-written bundle is swept, and never listed.
	if err := os.Mkdir(filepath.Join(dir, tmpPrefix+"x"), 0o750); err != nil {
		t.Fatal(err)
	}
	if list, _ := List(dir); len(list) != 1 {
		t.Errorf("listed %d bundles, want 1 (the half-written one is not a bundle)", len(list))
	}
	if stale, err := s.Sweep(); err != nil || len(stale) != 1 {
		t.Errorf("swept %v (%v), want the half-written one", stale, err)
	}
}

// A flood of triggers writes at most the hourly cap; a rule that keeps
// firing is held back by its cool-down, requests are not.
func TestManagerCapAndCooldown(t *testing.T) {
	dir := t.TempDir()
	wall := time.Unix(1_800_000_000, 0)
	m := NewManager(Options{Spool: Spool{Dir: dir}, Trigger: live.Trigger{P99Ms: 30, For: 5e9},
		After: time.Second, Cooldown: time.Hour, MaxPerHour: 3, Now: func() time.Time { return wall }})
	rec := live.NewRecorder(0, 0)
	src := Source{Tracker: live.NewTracker(live.Options{}), Recorder: rec, Pid: 7}
	fill(rec, 1e9, 30e9, 10e6, 1e6)
	now := int64(30e9)
	step := func(until int64, request bool) {
		for ; now < until; now += 500e6 {
			fill(rec, now, now+500e6, 50e6, 40e6)
			if request {
				m.Request("llama", TriggerAPI)
			}
			m.Check("llama", src, now)
			wall = wall.Add(500 * time.Millisecond)
		}
	}
	step(120e9, false) // the rule fires once, then is held back
	m.Close()
	if list, _ := List(dir); len(list) != 1 || list[0].Incident.Trigger != TriggerRule {
		t.Fatalf("after 90 s of a breach: %d bundles, want one by the rule", len(list))
	}
	if n := m.held[[2]string{"llama", "cooldown"}]; n == 0 {
		t.Error("the rule's later firings were not held back by the cool-down")
	}
	step(300e9, true) // a request every check: the cap
	m.Close()
	list, _ := List(dir)
	if len(list) != 3 {
		t.Fatalf("%d bundles after a flood of requests, want the hourly cap, 3", len(list))
	}
	if n := m.held[[2]string{"llama", "hourly_cap"}]; n == 0 {
		t.Error("nothing held back by the hourly cap")
	}
	// An hour later the cap has room again.
	wall = wall.Add(time.Hour)
	step(now+2e9, true)
	m.Close()
	if list, _ := List(dir); len(list) != 4 {
		t.Errorf("%d bundles an hour later, want 4", len(list))
	}
}
