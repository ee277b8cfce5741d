package load

import (
	"errors"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/metrics"
	"github.com/bpfbench/bpfbench/loadgen/sweep"
)

// More than --max-failed-ratio of the requests failed: a ThresholdError
// (exit 3); as many as it allows: none.
func TestCheckFailed(t *testing.T) {
	res := func(failed, completed int) *loadgen.Result {
		return &loadgen.Result{Metrics: &metrics.Metrics{Failed: failed, Completed: completed}}
	}
	var te *ThresholdError
	if err := CheckFailed(res(61, 39), 0.1); !errors.As(err, &te) || err.Error() != "61 of 100 requests failed (61%), more than --max-failed-ratio 0.1 allows" {
		t.Errorf("61%% failed: %v", err)
	}
	for _, r := range []*loadgen.Result{res(10, 90), res(0, 0), nil} {
		if err := CheckFailed(r, 0.1); err != nil {
			t.Errorf("%v: %v", r, err)
		}
	}
	if err := CheckFailed(res(5, 0), 1); err != nil {
		t.Errorf("--max-failed-ratio 1: %v", err)
	}
	j := NewSweepJob()
	sw := &sweep.Result{Mode: sweep.ModeRate, Best: &sweep.Step{Metrics: &metrics.Metrics{Failed: 3, Completed: 7}}}
	if err := j.CheckAnswer(sw); !errors.As(err, &te) || !strings.HasPrefix(err.Error(), "the answer's step: 3 of 10 requests failed") {
		t.Errorf("sweep answer with 30%% failed: %v", err)
	}
	if err := j.CheckAnswer(&sweep.Result{Mode: sweep.ModeRate}); err != nil {
		t.Errorf("no step met the SLOs: %v", err)
	}
}

// --max-failed-ratio and the search's numbers are checked like the load
// options: a *loadgen.ConfigError naming the flag.
func TestOptionRanges(t *testing.T) {
	o := NewOptions()
	o.Config.Target.URL = "http://127.0.0.1:1"
	var ce *loadgen.ConfigError
	for _, r := range []float64{-0.1, 1.5} {
		o.MaxFailedRatio = r
		if err := o.Validate(); !errors.As(err, &ce) || !strings.Contains(err.Error(), "--max-failed-ratio") {
			t.Errorf("--max-failed-ratio %v: %v", r, err)
		}
	}
	for name, mod := range map[string]func(*SweepJob){
		"--requests-per-step 0":      func(j *SweepJob) { j.RequestsPerStep = 0 },
		"--precision 0":              func(j *SweepJob) { j.Precision = 0 },
		"--step -1":                  func(j *SweepJob) { j.Step = -1 },
		"--max-rate -1":              func(j *SweepJob) { j.MaxRate = -1 },
		"--max-search-concurrency 0": func(j *SweepJob) { j.MaxSearchConcurrency = 0 },
		"--max-waiting-for -1s":      func(j *SweepJob) { j.MaxWaitingFor = -1e9 },
	} {
		j := NewSweepJob()
		j.Config.Target.URL, j.SLO = "http://127.0.0.1:1", "p99_ttft_ms<=5"
		mod(j)
		if _, _, err := j.LoadConfig(); !errors.As(err, &ce) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
