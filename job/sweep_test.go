package job

import (
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/correlate"
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

func TestKneeExplanation(t *testing.T) {
	sched := &result.Sched{Threads: []result.SchedThread{{Comm: "tokenizer", RunqueueSeconds: 0.8}, {Comm: "main", RunqueueSeconds: 0.1}}}
	run := &RunResult{Doc: &result.Document{
		Attribution: &correlate.Summary{
			ITL:  map[string]correlate.Breakdown{"p99": {"cpu_runqueue": 0.7, "unexplained": 0.3}},
			TTFT: correlate.Breakdown{"io_block": 0.9, "unexplained": 0.1},
		},
		Collectors: &result.Collectors{Sched: sched},
	}}
	fail := &sweep.Step{Rate: 14, Violations: []string{"p99_itl_ms=80 > 50"}}
	k := &Knee{Mode: sweep.ModeRate, Fail: fail, FailRun: run}
	k.Cause, k.Share, k.TTFT = kneeCause(run, fail)
	want := "the SLO breaks at 14 req/s, and what breaks it is run-queue wait on the tokenizer threads (70% of the p99 ITL excess)"
	if got := k.Explanation(); got != want {
		t.Errorf("explanation\n got %q\nwant %q", got, want)
	}
	fail.Violations = []string{"p99_ttft_ms=900 > 500"}
	if c, share, ttft := kneeCause(run, fail); c != "io_block" || share != 0.9 || !ttft {
		t.Errorf("a TTFT violation: cause %s %.2f ttft %v, want io_block from the TTFT breakdown", c, share, ttft)
	}
	if s := StepExplanation(run); !strings.Contains(s, "cpu_runqueue 70%") || !strings.Contains(s, "TTFT io_block 90%") {
		t.Errorf("step explanation %q", s)
	}
	// A limit signal that ended the step comes first; the latency's cause
	// is what the step measured.
	fail.Violations = []string{"p99_itl_ms=80 > 50"}
	fail.StoppedBy = []sweep.Verdict{{Name: "kv_cache_usage", Detail: "the KV cache is 98% full (limit 95%)", Limit: true}}
	k.Cause, k.Share, k.TTFT = kneeCause(run, fail)
	want = "the sweep stops at 14 req/s because the KV cache is 98% full (limit 95%); of that step's p99 ITL excess, 70% is run-queue wait on the tokenizer threads"
	if got := k.Explanation(); got != want {
		t.Errorf("explanation of a step a limit signal stopped\n got %q\nwant %q", got, want)
	}
	if s := (&Knee{}).Explanation(); !strings.Contains(s, "no knee") {
		t.Errorf("no failing step: %q", s)
	}
}
