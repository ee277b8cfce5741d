package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/engine"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/loadgen/sweep"
)

// The knee, reproduced and explained, on a real engine: three sweeps of
// one llama-server (-np 2, the queue signal off so that the TTFT SLO is
// the limit) each give the knee with its 95% interval, and the three agree
// over the capacity each measured (whether they share a rate is logged:
// see below); each sweep follows the server at the
// interval's bounds until the pass passes and the fail fails, and explains
// the breach on TTFT, the metric that broke, with a cause that holds at
// least half of what its slowest TTFTs added, or says that the followed
// runs did not reproduce the verdicts and explains nothing. Past the engine's capacity
// the requests wait for a slot behind other requests: the engine's queue.
func TestRealEngineSweepKneeReproduced(t *testing.T) {
	privtest.Require(t)
	paths, err := engine.Find()
	if err != nil {
		privtest.SkipOptional(t, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	srv, err := engine.Start(ctx, engine.Options{Paths: paths, Threads: 2, Slots: kneeSlots, CtxSize: 512 * kneeSlots, Metrics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Stop()
		if t.Failed() {
			out := srv.Output()
			if len(out) > 6000 {
				out = out[len(out)-6000:]
			}
			t.Logf("llama-server output (tail):\n%s", out)
		}
	})
	var got []answer
	explained := 0
	// Three sweeps agree within their stated intervals over the capacity
	// each measured around itself (Interval.Relative): asserted. In
	// req/s they agree when the server keeps its speed, which it does not
	// on a shared host: probes of 36.1 then 36.3 and 39.9 req/s gave
	// knees of 40.6, 46.4 and 46.9 req/s, whose intervals in req/s
	// shared none, over the capacities 1.13, 1.28 and 1.18, whose
	// intervals shared 1.15-1.23 (docs/measurements.md, "the knee's
	// drift term"): logged. When the three do not agree, a fourth sweep runs and any
	// three of the four must (a probe is a sample too).
	sweepOnce := func(i int) {
		dir := filepath.Join(t.TempDir(), "sweep")
		start := time.Now()
		code, stdout, stderr := runCLI(append([]string{"sweep", "--target", srv.URL, "--pid", strconv.Itoa(srv.Pid), "--out", dir}, kneeSweepArgs...)...)
		took := time.Since(start)
		// The whole output follows the checks, and only where they
		// failed: a failing run's log then opens with what failed.
		wasFailed := t.Failed()
		defer func() {
			if t.Failed() && !wasFailed {
				t.Logf("sweep %d (%.0f s), its output:\n%s", i+1, took.Seconds(), stdout)
			}
		}()
		if code != 0 {
			t.Fatalf("sweep %d exit %d: %s", i+1, code, stderr)
		}
		b, err := os.ReadFile(filepath.Join(dir, "sweep.json"))
		if err != nil {
			t.Fatal(err)
		}
		var res sweep.Result
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatal(err)
		}
		got = append(got, answer{i + 1, res, took})
		if checkKneeSweep(t, i+1, stdout, &res) {
			explained++
		}
	}
	for i := range 3 {
		sweepOnce(i)
	}
	kneesAgree(t, got)
	if !relativeKneesAgree(t, got) {
		sweepOnce(3)
		agree := false
		for skip := range got {
			three := append(append([]answer(nil), got[:skip]...), got[skip+1:]...)
			agree = agree || relativeKneesAgree(t, three)
		}
		if !agree {
			t.Errorf("no three of four sweeps agree within their 95%% intervals over the capacity each measured")
		}
	}
	t.Logf("%d of %d sweeps explained from runs that reproduced the verdicts", explained, len(got))
}

// kneesAgree logs sweeps' knees and intervals and says whether their 95%
// intervals of the knee share a rate.
func kneesAgree(t *testing.T, got []answer) bool {
	t.Helper()
	lo, hi := 0.0, math.Inf(1)
	clo, chi := 0.0, math.Inf(1)
	for i, a := range got {
		in := a.res.Interval
		if in == nil || in.FitRuns == 0 {
			t.Errorf("sweep %d: no 95%% interval of the knee: %+v", a.n, in)
			return false
		}
		t.Logf("sweep %d: knee %.2f req/s, 95%% interval [%.2f, %.2f] of %d runs, settled levels [%.2f, %.2f], capacity probes %.2f",
			a.n, in.Knee, in.CILow, in.CIHigh, in.FitRuns, in.Low, in.High, a.res.Capacities)
		lo, hi = max(lo, in.Low), min(hi, in.High)
		clo, chi = max(clo, in.CILow), min(chi, in.CIHigh)
		for j, b := range got {
			if i == j || b.res.Interval == nil || b.res.Interval.FitRuns == 0 {
				continue
			}
			if k, o := in.Knee, b.res.Interval; k < o.CILow || k > o.CIHigh {
				t.Logf("sweep %d's knee %.2f req/s is outside sweep %d's 95%% interval [%.2f, %.2f]", a.n, k, b.n, o.CILow, o.CIHigh)
			}
		}
	}
	t.Logf("the settled levels share [%.2f, %.2f] req/s (empty when the first is above the second)", lo, hi)
	if clo > chi {
		t.Logf("the 95%% intervals of the knee share no rate (the highest lower bound %.2f req/s is above the lowest upper bound %.2f)", clo, chi)
		return false
	}
	t.Logf("the 95%% intervals of the knee share [%.2f, %.2f] req/s", clo, chi)
	return true
}

// relativeKneesAgree logs the sweeps' knees over the capacity each
// measured around itself, with their 95% intervals, and says whether the
// intervals share a value.
func relativeKneesAgree(t *testing.T, got []answer) bool {
	t.Helper()
	lo, hi := 0.0, math.Inf(1)
	var ns []string
	for _, a := range got {
		k, l, h, ok := a.res.Interval.Relative()
		if !ok {
			t.Errorf("sweep %d: no knee over the capacity (probes %v then %.2f)", a.n, a.res.Capacities, a.res.CapacityAfter)
			return false
		}
		t.Logf("sweep %d: knee %.3fx the capacity around it (%.2f req/s), 95%% interval [%.3f, %.3f]", a.n, k, a.res.Interval.CapacityRef, l, h)
		lo, hi = max(lo, l), min(hi, h)
		ns = append(ns, strconv.Itoa(a.n))
	}
	if lo > hi {
		t.Logf("sweeps %s: the 95%% intervals over the capacity share no value (%.3f > %.3f)", strings.Join(ns, ", "), lo, hi)
		return false
	}
	t.Logf("sweeps %s: the 95%% intervals over the capacity share [%.3f, %.3f]", strings.Join(ns, ", "), lo, hi)
	return true
}

// answer is one sweep of TestRealEngineSweepKneeReproduced: its number,
// result and duration.
type answer struct {
	n    int
	res  sweep.Result
	took time.Duration
}

// The engine and the sweep of TestRealEngineSweepKneeReproduced.
const kneeSlots = 2

var kneeSweepArgs = []string{"--model", "tiny-llama", "--input-len", "32", "--output-len", "16",
	"--burstiness", "4", "--slo", "p99_ttft_ms<=300", "--requests-per-step", "80", "--precision", "0.1", "--max-waiting", "-1", "--no-progress"}

// checkKneeSweep checks sweep n's answer (its printed output and
// sweep.json) and reports whether it was explained from reproduced runs.
func checkKneeSweep(t *testing.T, n int, stdout string, res *sweep.Result) bool {
	t.Helper()
	in, ex := res.Interval, res.Explanation
	if in == nil || in.High == 0 || in.Low == 0 {
		t.Fatalf("sweep %d: interval %+v: want a knee between a passing and a failing level", n, in)
	}
	// The answer, printed and stored: the knee with its interval and
	// the runs behind it.
	if !strings.Contains(stdout, "knee: ") || !strings.Contains(res.Conclusion, "the knee is at ") || !strings.Contains(stdout, res.Conclusion) {
		t.Errorf("sweep %d: the knee is not printed with its interval: %q", n, res.Conclusion)
	}
	if ex == nil {
		t.Fatalf("sweep %d: no explanation in sweep.json", n)
	}
	// Near the knee on this shared 2-core machine a followed run
	// often lands on the other side (2 of 3 sweeps once, after three
	// tries a side): the answer then says so and names no cause,
	// which is what is asserted; the explained ones are checked below.
	if !ex.Reproduced {
		t.Logf("sweep %d: the followed runs did not reproduce the verdicts: %s", n, ex.Sentence)
		if ex.Cause != nil || !strings.Contains(ex.Sentence, "did not reproduce") || !strings.Contains(stdout, ex.Sentence) {
			t.Errorf("sweep %d: not reproduced, yet the answer names a cause or does not say so: %q", n, ex.Sentence)
		}
		return false
	}
	// The runs explained are a pass and a fail.
	if p, f := ex.PassRuns[len(ex.PassRuns)-1], ex.FailRuns[len(ex.FailRuns)-1]; !p.Pass || f.Pass {
		t.Errorf("sweep %d: explained runs pass %v fail %v", n, p.Pass, !f.Pass)
	}
	c := ex.Cause
	if c == nil {
		t.Errorf("sweep %d: no cause: %s", n, ex.Sentence)
		return false
	}
	t.Logf("sweep %d: knee %.2f req/s in [%.2f, %.2f] (stable %v, %d confirming steps); %s %s %.0f%% of %.0f ms added (queue %.0f ms, %d slots)",
		n, in.Knee, in.Low, in.High, in.Stable, in.ConfirmSteps, c.Metric, c.Cause, 100*c.Share, c.AddedMs, c.QueueMs, c.Slots)
	if c.Metric != "ttft" || !strings.Contains(ex.Sentence, "on p99 TTFT") {
		t.Errorf("sweep %d: explained on %q: %s; the TTFT SLO broke", n, c.Metric, ex.Sentence)
	}
	if c.Share < 0.5 {
		t.Errorf("sweep %d: the named cause %s holds %.0f%% of the added excess, want at least half: %s", n, c.Cause, 100*c.Share, ex.Sentence)
	}
	if !strings.Contains(stdout, ex.Sentence) {
		t.Errorf("sweep %d: the explanation is not printed", n)
	}
	// The report of the failing run leads with the knee.
	if b, err := os.ReadFile(filepath.Join(ex.FailRuns[len(ex.FailRuns)-1].Dir, "result.json")); err != nil || !strings.Contains(string(b), "sweep: the knee is at ") {
		t.Errorf("sweep %d: the failing run's result.json does not carry the knee (%v)", n, err)
	}
	return true
}
