package knee

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/job/run"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/metrics"
	"github.com/bpfbench/bpfbench/loadgen/sweep"
	"github.com/bpfbench/bpfbench/result"
)

func TestKneeSteps(t *testing.T) {
	probe := &sweep.Step{N: 1, Phase: "probe", Rate: 0, Pass: false}
	s4 := &sweep.Step{N: 2, Phase: "search", Rate: 4, Pass: true}
	s8 := &sweep.Step{N: 3, Phase: "search", Rate: 8, Pass: true}
	s12 := &sweep.Step{N: 4, Phase: "search", Rate: 12, Pass: false}
	s16 := &sweep.Step{N: 5, Phase: "search", Rate: 16, Pass: false}
	r := &sweep.Result{Mode: sweep.ModeRate, Best: s8, Steps: []*sweep.Step{probe, s16, s4, s12, s8}}
	if pass, fail := kneeSteps(r); pass != s8 || fail != s12 {
		t.Errorf("knee: pass %+v fail %+v, want 8 and 12 req/s", pass, fail)
	}
	// The interval's bounds when the sweep set them: its Limit.
	r.Limit = s16
	if pass, fail := kneeSteps(r); pass != s8 || fail != s16 {
		t.Errorf("knee with a limit: pass %+v fail %+v, want 8 and 16 req/s", pass, fail)
	}
	r = &sweep.Result{Mode: sweep.ModeRate, Best: s8, Steps: []*sweep.Step{probe, s4, s8}}
	if _, fail := kneeSteps(r); fail != nil {
		t.Errorf("every search step passed, but the knee fails at %+v", fail)
	}
	c2 := &sweep.Step{Concurrency: 2, Pass: false, Phase: "probe"}
	r = &sweep.Result{Mode: sweep.ModeConcurrency, Steps: []*sweep.Step{c2}}
	if pass, fail := kneeSteps(r); pass != nil || fail != c2 {
		t.Errorf("concurrency sweep with no passing step: pass %v fail %v", pass, fail)
	}
}

// gap is one gaps-file line: request, index, length, and the causes'
// time (the rest of the length is server_compute).
type gapSpec struct {
	req, idx int32
	ms       float64
	causes   map[critpath.Cause]float64
}

// writeRun writes a run directory with gaps and the result.json parts
// the knee reads: the critical path's normal gaps and the queue's
// per-request waits.
func writeRun(t *testing.T, gaps []gapSpec, queueMs map[int]float64, slots int, p99TTFT, p99ITL float64) *run.RunResult {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, result.GapsFile))
	if err != nil {
		t.Fatal(err)
	}
	w, err := result.NewGapsWriter(f, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	var t0 int64
	for _, g := range gaps {
		dur := int64(g.ms * 1e6)
		var ns [critpath.NumCauses]int64
		rest := dur
		for c, v := range g.causes {
			ns[c] = int64(v * 1e6)
			rest -= ns[c]
		}
		ns[critpath.ServerCompute] += rest
		if err := w.Write(result.Gap{Request: g.req, Index: g.idx, StartNs: t0, EndNs: t0 + dur, Ns: ns}); err != nil {
			t.Fatal(err)
		}
		t0 += dur
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	doc := &result.Document{CriticalPath: &result.CriticalPath{Gaps: len(gaps),
		NormalTTFTMs: map[string]float64{"server_compute": 20}, NormalITLMs: map[string]float64{"server_compute": 10}}}
	if queueMs != nil {
		q := &result.ServerQueue{Available: true, Slots: slots}
		for i, ms := range queueMs {
			q.Requests = append(q.Requests, result.QueuedRequest{Index: i, QueueMs: ms})
		}
		doc.ServerQueue = q
	}
	m := &metrics.Metrics{Completed: 20,
		TTFT: metrics.Dist{Percentiles: []metrics.PV{{P: 99, Value: p99TTFT}}},
		ITL:  metrics.Dist{Percentiles: []metrics.PV{{P: 99, Value: p99ITL}}}}
	return &run.RunResult{Doc: doc, Dir: dir, Load: &loadgen.Result{Metrics: m}}
}

// twenty requests, each a TTFT and four token gaps; slow (TTFT ms, its
// queue ms, its run-queue ms) for the two slowest requests, the others
// at the normal gap.
func runGaps(slowTTFT, slowRunq float64, slowITL float64, itlRunq float64) []gapSpec {
	var gs []gapSpec
	for r := range int32(20) {
		ttft, runq, itl, irq := 20.0, 0.0, 10.0, 0.0
		if r >= 18 {
			ttft, runq, itl, irq = slowTTFT, slowRunq, slowITL, itlRunq
		}
		gs = append(gs, gapSpec{req: r, idx: 0, ms: ttft, causes: map[critpath.Cause]float64{critpath.CPURunqueue: runq}})
		for i := int32(1); i <= 4; i++ {
			gs = append(gs, gapSpec{req: r, idx: i, ms: itl, causes: map[critpath.Cause]float64{critpath.CPURunqueue: irq}})
		}
	}
	return gs
}

// The cause of a TTFT breach is read on the TTFTs: the two slowest
// requests' TTFT grew from 120 ms (all compute, 100 over the normal 20) to
// 620 ms, of which 450 ms waiting for a slot (the engine's queue) and 100
// ms run-queue wait. The queue is taken first; the critical path's causes
// share the other 150 ms of excess in their proportion (runq 100 :
// compute 500), 25 and 125 ms: added, queue 450, runq 25, compute 25 (of
// 500, 90%, 5%, 5%). A breach on the ITL is read on the token gaps.
func TestBreachCause(t *testing.T) {
	slos, _ := sweep.ParseSLOs("p99_ttft_ms<=500,p99_itl_ms<=40")
	pass := writeRun(t, runGaps(120, 0, 12, 0), map[int]float64{18: 0, 19: 0}, 4, 120, 12)
	fail := writeRun(t, runGaps(620, 100, 12, 0), map[int]float64{18: 450, 19: 450, 3: 2}, 4, 620, 12)
	bc, err := breachCause(slos, pass, fail)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", bc)
	if bc.Metric != "ttft" || bc.SLO != "p99_ttft_ms<=500" || bc.Cause != CauseServerQueue || bc.Tail != 2 || bc.Slots != 4 {
		t.Fatalf("breach %+v: want TTFT, the queue, the 2 slowest of 20", bc)
	}
	if math.Abs(bc.AddedMs-500) > 0.01 || math.Abs(bc.Share-0.9) > 1e-6 || math.Abs(bc.Shares["cpu_runqueue"]-0.05) > 1e-6 ||
		math.Abs(bc.Shares["server_compute"]-0.05) > 1e-6 || math.Abs(bc.QueueMs-450) > 0.01 {
		t.Errorf("added %.3f ms, queue %.3f (%.4f), run queue %.4f, compute %.4f: want 500, 450 (0.9), 0.05, 0.05",
			bc.AddedMs, bc.QueueMs, bc.Share, bc.Shares["cpu_runqueue"], bc.Shares["server_compute"])
	}
	// The ITL: the slowest gaps gained run-queue wait.
	pass = writeRun(t, runGaps(20, 0, 12, 1), nil, 0, 20, 12)
	fail = writeRun(t, runGaps(20, 0, 80, 60), nil, 0, 20, 80)
	if bc, err = breachCause(slos, pass, fail); err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", bc)
	// Pass: the 8 slowest gaps 12 ms, 1 ms run queue (excess: runq 1,
	// compute 1); fail: 80 ms, 60 run queue (runq 60, compute 10).
	if bc.Metric != "itl" || bc.Cause != "cpu_runqueue" || bc.Tail != 8 || math.Abs(bc.AddedMs-68) > 0.01 || math.Abs(bc.Share-59.0/68) > 1e-6 {
		t.Errorf("breach %+v: want the ITL's run-queue wait, 59 of the 68 ms its 8 slowest gaps added", bc)
	}
	// Nothing broke: no breach.
	if _, err := breachCause(slos, pass, pass); err == nil {
		t.Error("a run that broke no SLO has a breach")
	}
}

// The sentence names the breached metric, the cause and its share of the
// added excess; a cause that holds none is never named, and runs that did
// not reproduce the sweep's verdicts are said so instead.
func TestKneeExplanation(t *testing.T) {
	sched := &result.Sched{Threads: []result.SchedThread{{Comm: "tokenizer", RunqueueSeconds: 0.8}, {Comm: "main", RunqueueSeconds: 0.1}}}
	run := &run.RunResult{Doc: &result.Document{Collectors: &result.Collectors{Sched: sched}}}
	pass := &sweep.Step{Rate: 13.2, Pass: true}
	fail := &sweep.Step{Rate: 15, Violations: []string{"p99_ttft_ms=612.000 (want p99_ttft_ms<=500)"}}
	ttft := &sweep.BreachCause{Metric: "ttft", SLO: "p99_ttft_ms<=500", PassValue: 310, FailValue: 612, Cause: CauseServerQueue,
		Share: 0.78, AddedMs: 420, Slots: 4, QueueMs: 380, Tail: 5}
	k := &Knee{Mode: sweep.ModeRate, Pass: pass, Fail: fail, PassRun: run, FailRun: run,
		Result: sweep.Explanation{Reproduced: true, Cause: ttft}}
	want := "the SLO breaks at 15 req/s on p99 TTFT (612 ms, want p99_ttft_ms<=500; 310 ms at 13.2 req/s), and what breaks it is " +
		"waiting for one of the engine's 4 slots behind other requests (380 ms a request in the queue), 78% of the 420 ms the slowest 10% of TTFTs added over the passing run's"
	if got := k.Explanation(); got != want {
		t.Errorf("TTFT\n got %q\nwant %q", got, want)
	}
	k.Result.Cause = &sweep.BreachCause{Metric: "itl", SLO: "p99_itl_ms<=60", PassValue: 41, FailValue: 75, Cause: "cpu_runqueue", Share: 0.64, AddedMs: 12.4}
	want = "the SLO breaks at 15 req/s on p99 ITL (75 ms, want p99_itl_ms<=60; 41 ms at 13.2 req/s), and what breaks it is " +
		"run-queue wait on the tokenizer threads, 64% of the 12 ms the slowest 10% of token gaps added over the passing run's"
	if got := k.Explanation(); got != want {
		t.Errorf("ITL\n got %q\nwant %q", got, want)
	}
	// A limit signal that ended the step comes first.
	fail.StoppedBy = []sweep.Verdict{{Name: "requests_waiting", Detail: "up to 9 requests were waiting in the engine's queue for 2.0 s (limit 8)", Limit: true}}
	if got := k.Explanation(); !strings.HasPrefix(got, "the sweep stops at 15 req/s because up to 9 requests were waiting in the engine's queue for 2.0 s (limit 8), and the followed run broke p99 ITL (75 ms") {
		t.Errorf("a step a signal stopped: %q", got)
	}
	fail.StoppedBy = nil
	// Nothing added: no cause, and never a 0% one.
	k.Result.Cause = &sweep.BreachCause{Metric: "ttft", SLO: "p99_ttft_ms<=500", PassValue: 490, FailValue: 510, Cause: "", Share: 0, AddedMs: 0}
	if got := k.Explanation(); !strings.HasSuffix(got, "; its slowest 10% of TTFTs added nothing over the passing run's: no cause to name") || strings.Contains(got, " 0%") {
		t.Errorf("nothing added: %q", got)
	}
	// The runs did not reproduce the sweep's pass: no explanation.
	k = &Knee{Mode: sweep.ModeRate, Pass: pass, Fail: fail, Result: sweep.Explanation{PassRuns: []sweep.FollowedRun{
		{Level: 13.2, Violations: []string{"p99_ttft_ms=4273.000 (want p99_ttft_ms<=500)"}},
		{Level: 13.2, Violations: []string{"p99_ttft_ms=612.000 (want p99_ttft_ms<=500)"}},
	}}}
	want = "no explanation: the runs following the server did not reproduce the sweep's pass at 13.2 req/s: 2 runs failed " +
		"(p99_ttft_ms=4273.000 (want p99_ttft_ms<=500); p99_ttft_ms=612.000 (want p99_ttft_ms<=500))"
	if got := k.Explanation(); got != want {
		t.Errorf("pass not reproduced\n got %q\nwant %q", got, want)
	}
	// ... nor its fail.
	k = &Knee{Mode: sweep.ModeRate, Pass: pass, Fail: fail, PassRun: run, Result: sweep.Explanation{FailRuns: []sweep.FollowedRun{{Level: 15, Pass: true}}}}
	if got := k.Explanation(); got != "no explanation: the runs following the server did not reproduce the sweep's fail at 15 req/s: 1 run met every SLO" {
		t.Errorf("fail not reproduced: %q", got)
	}
	// ... nor further out.
	k.Result.FailRuns = append(k.Result.FailRuns, sweep.FollowedRun{Level: 16.5, Pass: true}, sweep.FollowedRun{Level: 18, Pass: true})
	if got := k.Explanation(); got != "no explanation: the runs following the server did not reproduce the sweep's fail at 15 req/s: 3 runs met every SLO, 2 of them further out (to 18 req/s)" {
		t.Errorf("fail not reproduced further out: %q", got)
	}
	// A fail reproduced a step further out is explained there, and says so.
	moved := &sweep.Step{Rate: 16.5, Phase: "follow"}
	k = &Knee{Mode: sweep.ModeRate, Pass: pass, Fail: moved, SweepFail: fail, PassRun: run, FailRun: run,
		Result: sweep.Explanation{Reproduced: true, Cause: ttft, FailRuns: []sweep.FollowedRun{{Level: 15, Pass: true}, {Level: 15, Pass: true}, {Level: 15, Pass: true}, {Level: 16.5}}}}
	want = "the SLO breaks at 16.5 req/s on p99 TTFT (612 ms, want p99_ttft_ms<=500; 310 ms at 13.2 req/s) (the sweep's fail at 15 req/s met every SLO in the 3 runs that followed it: explained at 16.5 req/s, further out), and what breaks it is "
	if got := k.Explanation(); !strings.HasPrefix(got, want) {
		t.Errorf("a fail reproduced further out\n got %q\nwant %q...", got, want)
	}
	// ... nor a signal's fail: the followed runs watch no signal.
	k = &Knee{Mode: sweep.ModeRate, Pass: pass, PassRun: run, Result: sweep.Explanation{FailRuns: []sweep.FollowedRun{{Level: 15, Pass: true}}}}
	k.Fail = &sweep.Step{Rate: 15, StoppedBy: []sweep.Verdict{{Name: "requests_waiting", Detail: "up to 9 requests were waiting", Limit: true}}}
	if got := k.Explanation(); got != "no explanation: the sweep's step at 15 req/s was stopped by a limit signal (requests_waiting: up to 9 requests were waiting), which the runs following the server do not watch, and the run met every SLO" {
		t.Errorf("a signal's fail not reproduced: %q", got)
	}
	if s := (&Knee{}).Explanation(); !strings.Contains(s, "no knee") {
		t.Errorf("no failing step: %q", s)
	}
}

// StepExplanation is one run's p99 attribution in a line.
func TestStepExplanation(t *testing.T) {
	run := &run.RunResult{Doc: &result.Document{}}
	if s := StepExplanation(run); s != "no attribution" {
		t.Errorf("%q", s)
	}
}
