package report

import (
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/result"
)

func has(lines []string, sub string) bool {
	for _, l := range lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

func TestDiagnoseFull(t *testing.T) {
	lines := Diagnose(fullDocument())
	for _, want := range []string{
		"3 of 240 requests failed (1%): 3 http_status; first error: HTTP 503",
		"inter-token gap is 407 ms (baseline 18.2 ms); 70% of its excess is the server's threads waiting for a CPU, 20% the disk, 10% unexplained.",
		"Time to first token: median 61.8 ms",
		`Phase "cpu contention": p99 inter-token gap 180 ms over 60 requests; against "baseline" its slowest gaps added most cpu_runqueue (90%`,
		`Phase "slow client"`, "net_backpressure (92%",
		"The kernel lost 12 events",
		"The gpu section could not run (NVML not found",
	} {
		if !has(lines, want) {
			t.Errorf("diagnosis lacks %q:\n%s", want, strings.Join(lines, "\n"))
		}
	}
	if has(lines, "stopped before") {
		t.Error("a normal stop reported as early")
	}
}

func TestDiagnoseShapes(t *testing.T) {
	if Diagnose(nil) != nil {
		t.Error("nil document")
	}
	if l := Diagnose(emptyDocument()); len(l) != 1 || !strings.Contains(l[0], "no load figures") {
		t.Errorf("empty: %q", l)
	}
	l := Diagnose(failedDocument())
	if !has(l, "All 20 requests failed, so no latency was measured: 20 http_status; first error: connection refused.") ||
		!has(l, "Collection stopped before the load ended (target pid 99 exited 1.2 s into the run)") || has(l, "inter-token gap") {
		t.Errorf("all failed: %q", l)
	}
	l = Diagnose(missingSections())
	for _, want := range []string{
		"The cuda section could not run (no libcudart.so in the target's maps), so gpu_sync is never blamed.",
		"The gpu section could not run (NVML not found).",
		"target pid 4242 exited 31.5 s into the run", "lost 1234 events", "50 of 182,395 spans were dropped",
	} {
		if !has(l, want) {
			t.Errorf("missing sections: lacks %q:\n%s", want, strings.Join(l, "\n"))
		}
	}
	// no attribution at all: the load figures alone
	d := fullDocument()
	d.Attribution, d.Collection, d.Phases = nil, nil, nil
	l = Diagnose(d)
	if !has(l, "there is no attribution because the kernel side did not run") {
		t.Errorf("load only: %q", l)
	}
	for _, line := range Diagnose(nanDocument()) {
		if strings.Contains(line, "NaN") || strings.Contains(line, "Inf") {
			t.Errorf("non-finite number: %q", line)
		}
	}
}

func TestDiagnoseNoExcess(t *testing.T) {
	d := fullDocument()
	zero := correlate.Breakdown{"cpu_runqueue": 0, "unexplained": 0}
	d.Attribution.ITL["p99"] = zero
	d.Attribution.TTFT = zero
	l := Diagnose(d)
	if !has(l, "no excess over the baseline was found in those gaps") || has(l, "Time to first token:") {
		t.Errorf("no excess: %q", l)
	}
	d.Attribution.TopCause = "unexplained"
	if l := Diagnose(d); !has(l, "no kernel event on its critical path") {
		t.Errorf("unexplained top cause: %q", l)
	}
}

// A phase whose injection was too weak names no cause.
func TestDiagnoseWeakPhase(t *testing.T) {
	d := fullDocument()
	d.Phases[2].Weak = true
	d.Phases[2].Verdict = "injection too weak: its slowest gaps took 0.4 ms more than the baseline's (under 1.0 ms), so no cause is named"
	l := Diagnose(d)
	if !has(l, `Phase "`+d.Phases[2].Name+`": p99 inter-token gap`) || !has(l, "injection too weak") || has(l, "added most "+d.Phases[2].TopCause) {
		t.Errorf("weak phase: %q", l)
	}
}

func TestBlameText(t *testing.T) {
	for _, c := range []struct {
		b    correlate.Breakdown
		want string
	}{
		{correlate.Breakdown{"io_block": 1}, "100% of its excess is the disk"},
		{correlate.Breakdown{"gpu_sync": 0.25, "net_backpressure": 0.75}, "75% of its excess is the network (a client reading slowly or a full send buffer), 25% waiting on the GPU (blocking CUDA calls)"},
		{correlate.Breakdown{"cpu_runqueue": 0.999, "io_block": 0.001}, "100% of its excess is the server's threads waiting for a CPU"},
		{correlate.Breakdown{}, ""},
		{correlate.Breakdown{"custom_cause": 2, "unexplained": 2}, "50% of its excess is unexplained, 50% custom cause"},
	} {
		if got := blameText(c.b); got != c.want {
			t.Errorf("blameText(%v) = %q, want %q", c.b, got, c.want)
		}
	}
	for in, want := range map[string]string{"p99": "99th", "p50": "50th", "p91": "91st", "p92": "92nd", "p93": "93rd", "p11": "11th", "p99.9": "99.9th"} {
		if got := ordinal(in); got != want {
			t.Errorf("ordinal(%s) = %s", in, got)
		}
	}
}

// With a critical path, the diagnosis speaks in its causes (which sum to
// the gap), not in the union of activities: a contended engine whose
// union table says "unexplained" is explained.
func TestDiagnoseCriticalPath(t *testing.T) {
	d := fullDocument()
	d.CriticalPath = &result.CriticalPath{
		Baseline: "run", Gaps: 3000, GapMs: 40000, UnexplainedFraction: 0.001,
		NormalITLMs:  map[string]float64{"server_compute": 7, "client": 1},
		NormalTTFTMs: map[string]float64{"server_compute": 60},
		ITLP99: &result.CriticalBand{FromMs: 14.2, Gaps: 32, ExcessMs: 200,
			ExcessShares: map[string]float64{"server_compute": 0.47, "client": 0.3, "cpu_runqueue": 0.23}},
		TTFTP99: &result.CriticalBand{FromMs: 900, Gaps: 2, ExcessMs: 1500,
			ExcessShares: map[string]float64{"cpu_runqueue": 1}},
		Phases: []result.CriticalPhase{
			{Name: "baseline", Gaps: 900, ITLP99: &result.CriticalBand{FromMs: 9, Gaps: 9, ExcessMs: 10, ExcessShares: map[string]float64{"server_compute": 1}, Top: "server_compute"}},
			{Name: "cpu contention", Gaps: 700, ITLP99: &result.CriticalBand{FromMs: 30, Gaps: 7}, TailTop: "cpu_runqueue", TailAddedShares: map[string]float64{"cpu_runqueue": 0.97, "client": 0.03}},
		},
	}
	lines := Diagnose(d)
	for _, want := range []string{
		"The 99th-percentile inter-token gap is 14.2 ms (normal 8.00 ms, baseline: run); on the critical path 47% of its excess is the server's threads running (its own work), 30% the load generator reading late (the client), 23% the server's threads waiting for a CPU.",
		"on the critical path 100% of its excess is the server's threads waiting for a CPU.",
		`Phase "baseline": p99 inter-token gap 9.00 ms over 900 gaps; top cause server_compute (100% of the slowest gaps' excess).`,
		`Phase "cpu contention": p99 inter-token gap 30.0 ms over 700 gaps; against "baseline" its slowest gaps added most cpu_runqueue (97% of what they added).`,
	} {
		if !has(lines, want) {
			t.Errorf("diagnosis lacks %q:\n%s", want, strings.Join(lines, "\n"))
		}
	}
	if has(lines, "unexplained") {
		t.Errorf("a critical path with 0.1%% unexplained diagnosed as unexplained:\n%s", strings.Join(lines, "\n"))
	}
	d.CriticalPath.UnexplainedFraction = 0.2
	if lines := Diagnose(d); !has(lines, "20% of all gap time has no kernel event") {
		t.Errorf("20%% unexplained not said:\n%s", strings.Join(lines, "\n"))
	}
}
