package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/result"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/internal/engine"
	"github.com/bpfbench/bpfbench/internal/manifest"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// The real engine end to end: llama-server (-t 1 -np 2 --metrics) pinned to
// CPU 0, bpfbench on CPU 1. A baseline run, then the same run with two busy
// threads of another process on the server's CPU from 60% of its tokens
// on; each run's load figures are checked against the engine's own
// timings (the per-request timings of its stream, its /metrics), the
// manifest against the model file, the contention run's tail against
// cpu_runqueue, diff against both; a run contended from start to end
// against the baseline run (--baseline), whose critical path must name
// cpu_runqueue and the busy process; then validate's slow-reading client,
// whose excess must be its own connection's net_backpressure. After every
// command nothing of bpfbench is left: no process, no BPF program or link,
// no probe event, no file in the source tree.
func TestRealEngineEndToEnd(t *testing.T) {
	privtest.Require(t)
	paths, err := engine.Find()
	if err != nil {
		privtest.SkipOptional(t, "%v", err)
	}
	if runtime.NumCPU() < 2 {
		privtest.SkipOptional(t, "needs 2 CPUs (the server's and bpfbench's), have %d", runtime.NumCPU())
	}
	taskset := privtest.RequireTool(t, "taskset", "apt-get install util-linux")
	up, _ := os.ReadFile("/proc/loadavg")
	t.Logf("load average at start: %s", strings.TrimSpace(string(up)))

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// One compute thread: two on one CPU wait for each other all the
	// time, so that the union of their run-queue waits covers a whole gap
	// already without contention and cannot grow with it. No prompt
	// cache: the two runs send the same prompts, and the second would
	// find them cached (a TTFT "faster" under contention).
	srv, err := engine.Start(ctx, engine.Options{Paths: paths, Threads: 1, Slots: 2, CtxSize: 1024, Metrics: true, CPUs: "0",
		Args: []string{"--no-cache-prompt"}})
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
	pid := strconv.Itoa(srv.Pid)
	// Short prompts: a prefill runs in the other slot's gap, and with
	// long ones those gaps are the p99 band whatever else happens.
	load := []string{"--target", srv.URL, "--pid", pid, "--model", "tiny-llama", "--input-len", "4", "--output-len", strconv.Itoa(e2eOutLen),
		"--num-requests", strconv.Itoa(e2eRequests), "--max-concurrency", "2", "--warmup", "0", "--no-progress"}
	e := &e2eRunner{ctx: ctx, srv: srv, paths: paths, taskset: taskset, load: load, leftovers: snapshotLeftovers(t)}

	for n := 1; ; n++ {
		judged := e.attempt(t, n)
		if len(judged) == 0 {
			break
		}
		up, _ := os.ReadFile("/proc/loadavg")
		if n == 3 {
			for _, j := range judged {
				t.Error(j)
			}
			break
		}
		t.Logf("%s (load average %s): once more", strings.Join(judged, "; "), strings.TrimSpace(string(up)))
	}
	e.slowReader(t)
}

// The end-to-end test's load: requests of e2eOutLen tokens, two at a time.
const (
	e2eRequests = 32
	e2eOutLen   = 48
)

// e2eRunner runs bpfbench's commands against the engine, each checked for
// what it left behind.
type e2eRunner struct {
	ctx       context.Context
	srv       *engine.Server
	paths     engine.Paths
	taskset   string
	load      []string
	leftovers *leftovers
}

// e2eProc is a command started by e2eRunner.start; bpf follows the BPF
// programs and links it holds.
type e2eProc struct {
	cmd       *exec.Cmd
	out, errb bytes.Buffer
	done      chan error
	bpf       func() ownedBPF
}

// cli runs bpfbench (this test binary as the CLI) on CPU 1, away from
// the server and the busy threads.
func (e *e2eRunner) cli(args ...string) *exec.Cmd {
	cmd := exec.Command(e.taskset, append([]string{"--cpu-list", "1", os.Args[0]}, args...)...)
	cmd.Env = append(os.Environ(), envCLI+"=1")
	return cmd
}

// start starts cmd and follows the BPF programs and links it holds.
func (e *e2eRunner) start(t *testing.T, cmd *exec.Cmd) *e2eProc {
	t.Helper()
	r := &e2eProc{cmd: cmd, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = &r.out, &r.errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.bpf = watchBPF(cmd.Process.Pid)
	go func() { r.done <- cmd.Wait() }()
	return r
}

// wait takes r's exit (err) and checks what it left; it returns its
// stdout.
func (e *e2eRunner) wait(t *testing.T, what string, r *e2eProc, err error) string {
	t.Helper()
	t.Logf("%s:\n%s", what, r.out.String())
	e.leftovers.check(t, what, r.bpf())
	if err != nil {
		t.Fatalf("%s: %v\n%s", what, err, r.errb.String())
	}
	return r.out.String()
}

func (e *e2eRunner) runCmd(t *testing.T, what string, cmd *exec.Cmd) string {
	t.Helper()
	r := e.start(t, cmd)
	return e.wait(t, what, r, <-r.done)
}

// tokens is the engine's count of the tokens it generated.
func (e *e2eRunner) tokens(t *testing.T) float64 {
	t.Helper()
	m, err := e.srv.Metrics(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return m["llamacpp:tokens_predicted_total"]
}

// attempt: a baseline run; the same run with --baseline-*-ms from the
// baseline and two busy threads of `bpfbench perturb cpu` on CPU 0 from
// 60% of its tokens (as the engine counts them) to its end, so that the
// run's own medians (each cause's normal activity) stay those of an
// uncontended gap; diff; a run contended throughout against the baseline.
// What other load on the host can blur (cpu_runqueue on top, diff's
// verdict, the share's rise) is returned, for another attempt, three in
// all; the rest fails t.
func (e *e2eRunner) attempt(t *testing.T, n int) (judged []string) {
	dir1 := filepath.Join(t.TempDir(), fmt.Sprintf("baseline-%d", n))
	tok0 := e.tokens(t)
	e.runCmd(t, "bpfbench run (baseline)", e.cli(append([]string{"run", "--out", dir1}, e.load...)...))
	base := checkEngineRun(t, "baseline", dir1, e.tokens(t)-tok0, e.srv, e.paths)

	dir2 := filepath.Join(t.TempDir(), fmt.Sprintf("contention-%d", n))
	cont := e.contendedLate(t, dir2, base)
	t.Logf("ITL mean %.2f → %.2f ms, p99 %.2f → %.2f ms; TTFT mean %.2f → %.2f ms, p99 %.2f → %.2f ms",
		base.doc.Float("mean_itl_ms"), cont.doc.Float("mean_itl_ms"), base.doc.Float("p99_itl_ms"), cont.doc.Float("p99_itl_ms"),
		base.doc.Float("mean_ttft_ms"), cont.doc.Float("mean_ttft_ms"), base.doc.Float("p99_ttft_ms"), cont.doc.Float("p99_ttft_ms"))
	for _, r := range []engineRun{base, cont} {
		t.Logf("%s: cpu_runqueue %.0f%% of the p99 ITL excess (top %s), %.0f%% of the TTFT excess (top %s), %.0f%% of all ITL excess",
			r.name, r.att.ITL["p99"]["cpu_runqueue"]*100, correlate.Top(r.att.ITL["p99"]), r.att.TTFT["cpu_runqueue"]*100, correlate.Top(r.att.TTFT),
			r.att.ITL["all"]["cpu_runqueue"]*100)
	}
	if !cont.cpuOnTop() {
		judged = append(judged, fmt.Sprintf("contention run: cpu_runqueue is the top cause of neither the p99 ITL excess (%v) nor the TTFT excess (%v)", cont.att.ITL["p99"], cont.att.TTFT))
	}
	manifest, j := e.diff(t, dir1, dir2)
	judged = append(judged, j...)
	judged = append(judged, e.contendedThroughout(t, dir1, n)...)
	for _, c := range manifest {
		t.Logf("diff: manifest: %s", c)
		if strings.Contains(c, "model file") || strings.Contains(c, "command line") {
			t.Errorf("diff: the same server reported changed: %s", c)
		}
	}
	return judged
}

// contendedLate is the run with the baseline's ITL and TTFT, two busy
// threads on the server's CPU from 60% of its tokens to its end.
func (e *e2eRunner) contendedLate(t *testing.T, dir string, base engineRun) engineRun {
	tok0 := e.tokens(t)
	run := e.start(t, e.cli(append([]string{"run", "--out", dir,
		"--baseline-itl-ms", fmt.Sprintf("%.3f", base.att.BaselineITLMs), "--baseline-ttft-ms", fmt.Sprintf("%.3f", base.att.BaselineTTFTMs)}, e.load...)...))
	from := tok0 + 0.6*e2eRequests*e2eOutLen
	var busy *e2eProc
	var runErr error
follow:
	for {
		select {
		case runErr = <-run.done:
			break follow
		case <-time.After(20 * time.Millisecond):
		}
		if busy == nil && e.tokens(t) >= from {
			busy = e.start(t, e.cli("perturb", "cpu", "--threads", "2", "--cpus", "0", "--duration", "90s"))
			t.Logf("busy threads on CPU 0 from %.0f of the run's %d tokens", e.tokens(t)-tok0, e2eRequests*e2eOutLen)
		}
	}
	if busy != nil {
		_ = busy.cmd.Process.Signal(syscall.SIGTERM)
		e.wait(t, "bpfbench perturb cpu", busy, <-busy.done)
	} else {
		t.Errorf("the run ended before 60%% of its tokens (%.0f of %d)", e.tokens(t)-tok0, e2eRequests*e2eOutLen)
	}
	e.wait(t, "bpfbench run (contention)", run, runErr)
	return checkEngineRun(t, "contention", dir, e.tokens(t)-tok0, e.srv, e.paths)
}

// diff names the contention run slower, with cpu_runqueue's share up; it
// returns the manifest's changes and what missed.
func (e *e2eRunner) diff(t *testing.T, dir1, dir2 string) (manifest, judged []string) {
	var d struct {
		Tests []struct {
			Metric      string  `json:"metric"`
			Unit        string  `json:"unit"`
			P           float64 `json:"p"`
			PBGreater   float64 `json:"p_b_greater"`
			Significant bool    `json:"significant"`
			Verdict     string  `json:"verdict"`
		} `json:"tests"`
		Attribution []struct {
			Scope, Cause string
			A, B, Points float64
		} `json:"attribution"`
		TopCause [2]string `json:"top_cause"`
		Manifest []struct {
			Text string `json:"text"`
		} `json:"manifest"`
	}
	out := e.runCmd(t, "bpfbench diff", e.cli("diff", dir1, dir2, "--output", "json"))
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("diff --output json: %v", err)
	}
	slower := map[string]bool{}
	for _, ts := range d.Tests {
		t.Logf("diff: %s (per %s): p = %.3g, P(B > A) = %.2f, %s", ts.Metric, ts.Unit, ts.P, ts.PBGreater, ts.Verdict)
		if ts.Significant && ts.Verdict == "slower" {
			slower[ts.Metric] = true
		}
	}
	if !slower["itl"] && !slower["tpot"] {
		judged = append(judged, fmt.Sprintf("diff does not name the contention run slower in ITL or TPOT: %+v", d.Tests))
	}
	rose := false
	for _, a := range d.Attribution {
		if a.Cause == "cpu_runqueue" {
			t.Logf("diff: cpu_runqueue in %s: %.0f%% → %.0f%% (%+.0f points)", a.Scope, a.A*100, a.B*100, a.Points)
			if (a.Scope == "itl_p99" || a.Scope == "ttft") && a.Points > 0 {
				rose = true
			}
		}
	}
	if !rose {
		judged = append(judged, fmt.Sprintf("diff: cpu_runqueue's share rose in neither the p99 band nor the TTFT: %+v", d.Attribution))
	}
	t.Logf("diff: top cause %s → %s; %d manifest changes", d.TopCause[0], d.TopCause[1], len(d.Manifest))
	for _, c := range d.Manifest {
		manifest = append(manifest, c.Text)
	}
	return manifest, judged
}

// contendedThroughout: contended from start to end, compared with the
// baseline run (--baseline): the run's own medians are contended, the
// quiet run's are not. The critical path names cpu_runqueue on top with
// at least 60% of the p99 gap's excess, leaves at most 10% of the gap
// time unexplained, and names the busy process.
func (e *e2eRunner) contendedThroughout(t *testing.T, dir1 string, n int) (judged []string) {
	dir3 := filepath.Join(t.TempDir(), fmt.Sprintf("contended-%d", n))
	busy3 := e.start(t, e.cli("perturb", "cpu", "--threads", "2", "--cpus", "0", "--duration", "90s"))
	// Twice the requests: the p99 band of 32 requests is 17 gaps, and a
	// few long ones swing its shares by 10 points from run to run.
	run3 := e.start(t, e.cli(append(append([]string{"run", "--out", dir3, "--baseline", dir1}, e.load...), "--num-requests", strconv.Itoa(2*e2eRequests))...))
	run3Err := <-run3.done
	_ = busy3.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(t, "bpfbench perturb cpu", busy3, <-busy3.done)
	e.wait(t, "bpfbench run --baseline (contended throughout)", run3, run3Err)
	doc3, err := result.Load(filepath.Join(dir3, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cp := doc3.CriticalPath; cp == nil || cp.ITLP99 == nil || cp.Baseline != "run "+dir1 {
		t.Errorf("contended run: no critical path against the baseline run: %+v", cp)
	} else {
		b := cp.ITLP99
		t.Logf("contended throughout, against the baseline run: critical path p99 gap %.1f ms (%d gaps), excess %.1f ms, top %s, shares %v; unexplained %.4f of gap time; neighbours %+v",
			b.FromMs, b.Gaps, b.ExcessMs, b.Top, b.ExcessShares, cp.UnexplainedFraction, cp.NoisyNeighbours)
		// The design asks for 60%. With 32-token prompts it was
		// 51-67% over fifteen attempts: every request's prefill ran in
		// the other slot's gap, those gaps were the whole p99 band,
		// and the prefill's compute (server_compute, rightly: it is
		// there without contention too) was a third of its excess.
		// With 4-token prompts the band is the contention's: 67-74%.
		if b.Top != "cpu_runqueue" || b.ExcessShares["cpu_runqueue"] < 0.6 {
			judged = append(judged, fmt.Sprintf("contended run against the baseline: the p99 gap's excess top %s, cpu_runqueue %.2f, want cpu_runqueue with at least 0.6", b.Top, b.ExcessShares["cpu_runqueue"]))
		} else {
			t.Logf("contended run against the baseline: cpu_runqueue %.2f of the p99 gap's excess (at least 0.6)", b.ExcessShares["cpu_runqueue"])
		}
		if cp.UnexplainedFraction > 0.1 {
			t.Errorf("contended run: unexplained %.3f of the gap time, want at most 0.1", cp.UnexplainedFraction)
		}
		named := false
		for _, nb := range cp.NoisyNeighbours {
			named = named || strings.HasPrefix(nb.Process, "bpfbench")
		}
		if !named {
			judged = append(judged, fmt.Sprintf("contended run: the busy process (bpfbench perturb cpu) is not among the noisy neighbours %+v", cp.NoisyNeighbours))
		}
	}

	return judged
}

// slowReader: a slow-reading client, validate's client injection (one
// request stops reading for 2 s after its first token, on its own
// connection with a 4 KiB receive buffer), the other injections skipped.
// --min-share 0: validate still exits 1 unless net_backpressure is the
// top cause; its share is logged, not judged against a nominal value.
// Once more if it is not on top (a busy host).
func (e *e2eRunner) slowReader(t *testing.T) {
	for try := 1; ; try++ {
		vdir := filepath.Join(t.TempDir(), "validate")
		r := e.start(t, e.cli("validate", "--target", e.srv.URL, "--pid", strconv.Itoa(e.srv.Pid), "--model", "tiny-llama",
			"--output-len", "96", "--rate", "4", "--phase", "3s", "--slow-read", slowPause.String(), "--min-share", "0",
			"--skip", "cpu,io,gpu,net,client-cpu", "--no-progress", "--out", vdir))
		err := <-r.done
		if err != nil && try == 1 {
			t.Logf("bpfbench validate (client):\n%s", r.out.String())
			e.leftovers.check(t, "bpfbench validate (client)", r.bpf())
			up, _ := os.ReadFile("/proc/loadavg")
			t.Logf("validate: %v: %s (load average %s): once more", err, strings.TrimSpace(r.errb.String()), strings.TrimSpace(string(up)))
			continue
		}
		e.wait(t, "bpfbench validate (client)", r, err)
		checkSlowReader(t, vdir)
		break
	}
}

// engineRun is one run's result.json, checked.
type engineRun struct {
	name string
	doc  *result.Document
	att  *correlate.Summary
}

// cpuOnTop reports whether cpu_runqueue is the top cause of the p99 band's
// excess or of the TTFT's.
func (r engineRun) cpuOnTop() bool {
	return r.att != nil && (correlate.Top(r.att.ITL["p99"]) == "cpu_runqueue" || correlate.Top(r.att.TTFT) == "cpu_runqueue")
}

// checkEngineRun checks a run's figures against the engine's own: its
// per-request timings and the increase of its tokens_predicted_total over
// the run (predicted); the server metrics section; the manifest's model.
func checkEngineRun(t *testing.T, name, dir string, predicted float64, srv *engine.Server, paths engine.Paths) engineRun {
	t.Helper()
	doc, err := result.Load(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	r := engineRun{name: name, doc: doc, att: doc.Attribution}
	if r.att == nil {
		t.Fatalf("%s: result.json has no attribution", name)
	}
	var bb struct {
		Records []loadgen.Record `json:"records"`
		Warmup  []loadgen.Record `json:"warmup"`
	}
	if err := json.Unmarshal(jsonOf(t, doc.BPFBench), &bb); err != nil {
		t.Fatal(err)
	}
	var perRequest []*transport.ServerTimings
	if err := json.Unmarshal(jsonOf(t, doc.ServerTimings), &perRequest); err != nil || len(perRequest) != len(bb.Records) {
		t.Errorf("%s: server_timings %d entries for %d requests (%v)", name, len(perRequest), len(bb.Records), err)
	}
	// Every request against its own timings. The client starts a request
	// before the engine takes its prompt and sees its first and last
	// tokens after the engine made them, so TTFT >= prompt_ms and E2EL >=
	// prompt_ms + predicted_ms, to the engine's millisecond rounding.
	const epsMs = 1.0
	var outTokens, predN, gaps int
	var spanMs, predMs, minTTFTMargin, minE2ELMargin float64 = 0, 0, math.Inf(1), math.Inf(1)
	for i, rec := range slices.Concat(bb.Warmup, bb.Records) {
		st := rec.ServerTimings
		if !rec.Success || st == nil {
			t.Errorf("%s: request %d: success %v, timings %v: %s", name, rec.Index, rec.Success, st, rec.Error)
			continue
		}
		if i >= len(bb.Warmup) && perRequest != nil && (perRequest[i-len(bb.Warmup)] == nil || *perRequest[i-len(bb.Warmup)] != *st) {
			t.Errorf("%s: request %d: server_timings %v, its record's %v", name, rec.Index, perRequest[i-len(bb.Warmup)], st)
		}
		if rec.OutputTokens != st.PredictedN || len(rec.ChunkNs) != st.PredictedN {
			t.Errorf("%s: request %d: %d output tokens in %d chunks, the engine predicted %d", name, rec.Index, rec.OutputTokens, len(rec.ChunkNs), st.PredictedN)
		}
		outTokens += rec.OutputTokens
		predN += st.PredictedN
		ttft := float64(rec.TTFTNs()) / 1e6
		e2el := float64(rec.LatencyNs()) / 1e6
		minTTFTMargin = math.Min(minTTFTMargin, ttft-st.PromptMs)
		minE2ELMargin = math.Min(minE2ELMargin, e2el-st.PromptMs-st.PredictedMs)
		if ttft < st.PromptMs-epsMs {
			t.Errorf("%s: request %d: TTFT %.2f ms below the engine's prompt time %.2f ms", name, rec.Index, ttft, st.PromptMs)
		}
		if e2el < st.PromptMs+st.PredictedMs-epsMs {
			t.Errorf("%s: request %d: E2EL %.2f ms below the engine's prompt %.2f + generation %.2f ms", name, rec.Index, e2el, st.PromptMs, st.PredictedMs)
		}
		if n := len(rec.ChunkNs); n > 1 && i >= len(bb.Warmup) {
			spanMs += float64(rec.ChunkNs[n-1]-rec.ChunkNs[0]) / 1e6
			predMs += st.PredictedMs
			gaps += n - 1
		}
	}
	if len(bb.Records) == 0 || gaps == 0 {
		t.Fatalf("%s: %d requests, %d gaps", name, len(bb.Records), gaps)
	}
	// The engine's count of the tokens it generated during the run is
	// the client's, exactly.
	t.Logf("%s: %d requests, %d output tokens; the engine's timings say %d, its tokens_predicted_total rose %.0f", name, len(bb.Records)+len(bb.Warmup), outTokens, predN, predicted)
	if float64(outTokens) != predicted || predN != outTokens {
		t.Errorf("%s: %d output tokens, the engine's timings %d, its tokens_predicted_total rose %.0f: want equal", name, outTokens, predN, predicted)
	}
	// The mean gap as the client saw it against the engine's mean time
	// per generated token: the same steps, timed at the two ends of the
	// connection.
	clientITL, serverITL := spanMs/float64(gaps), predMs/float64(gaps)
	t.Logf("%s: mean ITL %.3f ms (result %.3f), the engine's %.3f ms per token (ratio %.4f); TTFT - prompt_ms >= %.2f ms, E2EL - prompt_ms - predicted_ms >= %.2f ms",
		name, clientITL, doc.Float("mean_itl_ms"), serverITL, clientITL/serverITL, minTTFTMargin, minE2ELMargin)
	if clientITL < serverITL*0.95 || clientITL > serverITL*1.05 {
		t.Errorf("%s: the client's mean ITL %.3f ms is not within 5%% of the engine's %.3f ms per token", name, clientITL, serverITL)
	}
	if math.Abs(doc.Float("mean_itl_ms")-clientITL) > 1e-6*clientITL+1e-9 {
		t.Errorf("%s: mean_itl_ms %.6f, the records' %.6f", name, doc.Float("mean_itl_ms"), clientITL)
	}
	checkEngineServerMetrics(t, name, doc, predicted)
	checkEngineManifest(t, name, doc, srv, paths)
	return r
}

// checkEngineServerMetrics: the engine's metrics, scraped and mapped.
func checkEngineServerMetrics(t *testing.T, name string, doc *result.Document, predicted float64) {
	t.Helper()
	sm := doc.ServerMetrics
	if sm == nil {
		t.Fatalf("%s: result.json has no server_metrics", name)
	}
	t.Logf("%s: server_metrics: found %v engine %s matched %v, %d scrapes (%d failed), %d samples, peaks %v, overall %v",
		name, sm.Found, sm.Engine, sm.VocabularyMatched, sm.Scrapes, sm.ScrapeFailures, len(sm.Samples), sm.Peaks, sm.Overall)
	if !sm.Found || sm.Engine != "llamacpp" || !sm.VocabularyMatched || len(sm.Samples) == 0 || sm.ScrapeFailures != 0 {
		t.Errorf("%s: server_metrics found %v engine %q matched %v, %d samples, %d failures (%s): want llamacpp's, matched, sampled", name,
			sm.Found, sm.Engine, sm.VocabularyMatched, len(sm.Samples), sm.ScrapeFailures, sm.FirstError)
	}
	for k, v := range map[string]string{"generation_tokens_total": "llamacpp:tokens_predicted_total", "requests_running": "llamacpp:requests_processing", "requests_waiting": "llamacpp:requests_deferred"} {
		if sm.Sources[k] != v {
			t.Errorf("%s: server_metrics.sources[%s] = %q, want %s", name, k, sm.Sources[k], v)
		}
	}
	if p := sm.Peaks["requests_running"]; p < 1 || p > 2 {
		t.Errorf("%s: peak requests_running %v, want 1 or 2 (two slots, concurrency 2)", name, p)
	}
	if g := sm.Overall["generation_tokens_total"]; g <= 0 || g > predicted {
		t.Errorf("%s: server_metrics.overall generation_tokens_total %v, want within (0, %.0f]", name, g, predicted)
	}
}

// checkEngineManifest: the manifest names the model file the server has
// open, with its size and sampled hash, and the server's binary.
func checkEngineManifest(t *testing.T, name string, doc *result.Document, srv *engine.Server, paths engine.Paths) {
	t.Helper()
	var m manifest.Manifest
	if err := json.Unmarshal(jsonOf(t, doc.Manifest), &m); err != nil {
		t.Fatalf("%s: manifest: %v", name, err)
	}
	model, err := filepath.EvalSymlinks(paths.Model)
	if err != nil {
		t.Fatal(err)
	}
	sum, size, err := manifest.SampledFileSHA256(model)
	if err != nil {
		t.Fatal(err)
	}
	var found *manifest.File
	for i := range m.Models {
		if m.Models[i].Path == model {
			found = &m.Models[i]
		}
	}
	if m.Pid != srv.Pid || found == nil {
		t.Fatalf("%s: manifest of pid %d lists models %+v, want llama-server's (%d) %s", name, m.Pid, m.Models, srv.Pid, model)
	}
	t.Logf("%s: manifest: %s (%s) %d bytes sampled_sha256 %s", name, found.Path, found.Via, found.Size, found.SampledSHA256)
	if found.Size != size || found.SampledSHA256 != sum || found.Error != "" {
		t.Errorf("%s: manifest model %+v, want size %d sampled_sha256 %s", name, *found, size, sum)
	}
	if m.Binary == nil || filepath.Base(m.Binary.Path) != filepath.Base(paths.Server) || m.Binary.SHA256 == "" {
		t.Errorf("%s: manifest binary %+v, want %s hashed", name, m.Binary, paths.Server)
	}
}

// slowPause is how long validate's slow reader stops reading.
const slowPause = 2 * time.Second

// checkSlowReader checks validate's client row on the real engine: the
// slow request's excess is net_backpressure, and no other request's
// connection is blamed for any.
func checkSlowReader(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "validation.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Rows []struct {
			Injection  string  `json:"injection"`
			Achieved   string  `json:"achieved"`
			Attributed string  `json:"attributed_top_cause"`
			Share      float64 `json:"injected_share_of_tail_excess"`
			RawShare   float64 `json:"injected_share_of_p99_raw_excess"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Rows) != 1 || v.Rows[0].Injection != "client" {
		t.Fatalf("validation rows %+v, want the client's", v.Rows)
	}
	row := v.Rows[0]
	t.Logf("slow reader: %s; top cause %s with %.0f%% of the tail's added excess (%.0f%% of the p99 band's)", row.Achieved, row.Attributed, row.Share*100, row.RawShare*100)
	if row.Attributed != "net_backpressure" {
		t.Errorf("slow reader: top cause %s, want net_backpressure", row.Attributed)
	}
	mt := regexp.MustCompile(`request (\d+) stops reading`).FindStringSubmatch(row.Achieved)
	if mt == nil {
		t.Fatalf("validation does not say which request read slowly: %q", row.Achieved)
	}
	slow, _ := strconv.Atoi(mt[1])
	doc, err := result.Load(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if doc.Attribution == nil {
		t.Fatal("validate's result.json has no attribution")
	}
	var bb struct {
		Records []loadgen.Record `json:"records"`
	}
	if err := json.Unmarshal(jsonOf(t, doc.BPFBench), &bb); err != nil {
		t.Fatal(err)
	}
	port := map[int]string{}
	for _, r := range bb.Records {
		port[r.Index] = fmt.Sprintf("port %d, reused %v", r.LocalPort, r.ConnReused)
	}
	t.Logf("slow reader: request %d on %s", slow, port[slow])
	// The slow request's excess is its own connection's; another
	// request's connection may see a zero window of its own on a busy
	// host (its reader descheduled), never a share of the slow one's.
	seen := false
	var slowMs, othersMs float64
	for _, rb := range doc.Attribution.Requests {
		nb := rb.ITLShares["net_backpressure"]*rb.ITLExcessMs + rb.TTFTShares["net_backpressure"]*rb.TTFTMs
		if rb.Request == slow {
			slowMs = nb
			seen = true
			t.Logf("slow reader: request %d: top %s, ITL excess %.0f ms, net_backpressure %.0f%% of it", rb.Request, rb.TopCause, rb.ITLExcessMs, rb.ITLShares["net_backpressure"]*100)

		} else if nb > 0 {
			othersMs += nb
			t.Logf("request %d (%s; not the slow reader): net_backpressure %.2f ms of its own connection", rb.Request, port[rb.Request], nb)
		}
	}
	// The ground truth is the pause: the window closes once the 4 KiB
	// buffer is full and opens when reading resumes, so most of the 2 s
	// and never more (the request's own top cause can still be the CPU
	// on a busy host: its other gaps wait for the run queue).
	t.Logf("slow reader: net_backpressure %.0f ms on its connection (paused %v), %.2f ms on all the others'", slowMs, slowPause, othersMs)
	if slowMs < 0.5*float64(slowPause.Milliseconds()) || slowMs > float64(slowPause.Milliseconds())+50 {
		t.Errorf("slow reader: net_backpressure %.0f ms on its connection, want most of its %v pause and no more", slowMs, slowPause)
	}
	if othersMs > 0.05*slowMs {
		t.Errorf("net_backpressure on the other requests' connections (%.1f ms) is more than 5%% of the slow reader's (%.1f ms)", othersMs, slowMs)
	}
	if !seen {
		t.Errorf("the slow request %d has no blame", slow)
	}
	// The critical path names it on its own request: the run's slowest
	// gap is the slow reader's pause, spent on its connection (held back,
	// in flight) or in its client's socket.
	cp := doc.CriticalPath
	if cp == nil || len(cp.Slowest) == 0 {
		t.Fatalf("validate's result.json has no critical path")
	}
	g := cp.Slowest[0]
	conn := g.CausesMs["net_backpressure"] + g.CausesMs["client"]
	t.Logf("slow reader: the slowest gap is request %d token %d, %.0f ms: %.0f ms net_backpressure, %.0f ms client, causes %v",
		g.Request, g.Index, g.DurationMs, g.CausesMs["net_backpressure"], g.CausesMs["client"], g.CausesMs)
	if g.Request != slow || conn < 0.5*g.DurationMs {
		t.Errorf("critical path: the slowest gap is request %d's with %.0f of %.0f ms on its connection or client; want the slow reader's (%d), mostly there", g.Request, conn, g.DurationMs, slow)
	}
}

// leftovers is what the machine had before the first command: probe
// events and the package directory's untracked files.
type leftovers struct {
	events map[string]bool
	files  map[string]bool
}

func snapshotLeftovers(t *testing.T) *leftovers {
	return &leftovers{files: untracked(t), events: probeEvents()}
}

// ownedBPF are the BPF programs and links a process held.
type ownedBPF struct {
	progs []ebpf.ProgramID
	links []link.ID
}

// watchBPF follows the file descriptors of pid every 100 ms and collects
// the BPF programs and links among them (fdinfo's prog_id and link_id);
// the returned function stops and returns them.
func watchBPF(pid int) func() ownedBPF {
	stop, done := make(chan struct{}), make(chan ownedBPF, 1)
	go func() {
		progs, links := map[ebpf.ProgramID]bool{}, map[link.ID]bool{}
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		for {
			ents, err := os.ReadDir(dir)
			for _, e := range ents {
				target, _ := os.Readlink(filepath.Join(dir, e.Name()))
				if !strings.HasPrefix(target, "anon_inode:bpf") {
					continue
				}
				info, _ := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
				for _, line := range strings.Split(string(info), "\n") {
					k, v, _ := strings.Cut(line, ":")
					id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
					if err != nil {
						continue
					}
					switch {
					case k == "prog_id" && strings.HasPrefix(target, "anon_inode:bpf-prog"):
						progs[ebpf.ProgramID(id)] = true
					case k == "link_id":
						links[link.ID(id)] = true
					}
				}
			}
			select {
			case <-stop:
				done <- ownedBPF{slices.Sorted(maps.Keys(progs)), slices.Sorted(maps.Keys(links))}
				return
			case <-time.After(100 * time.Millisecond):
			}
			if err != nil && errors.Is(err, os.ErrNotExist) {
				<-stop
				done <- ownedBPF{slices.Sorted(maps.Keys(progs)), slices.Sorted(maps.Keys(links))}
				return
			}
		}
	}()
	return func() ownedBPF {
		close(stop)
		return <-done
	}
}

// check fails t when, 30 s after a command ended, a process runs bpfbench
// (this binary as the CLI), one of the BPF programs or links it held
// (bpf) still exists, a probe event appeared, or a file appeared in the
// package directory. The kernel releases a uprobe's perf link some
// seconds after the process that held it exited (the unregistration
// waits for an RCU grace period), so the wait is logged.
func (l *leftovers) check(t *testing.T, after string, bpf ownedBPF) {
	t.Helper()
	var problems, first []string
	start := time.Now()
	testutil.Until(30*time.Second, func() bool {
		problems = l.found(t, bpf)
		if first == nil {
			first = problems
		}
		return len(problems) == 0
	})
	held := fmt.Sprintf("%d BPF programs and %d links held", len(bpf.progs), len(bpf.links))
	switch {
	case len(problems) > 0:
		t.Errorf("after %s (%s): left behind %s", after, held, strings.Join(problems, "; "))
	case len(first) > 0:
		t.Logf("after %s (%s): nothing left behind %.1f s later (at first %d: %.300s)", after, held, time.Since(start).Seconds(), len(first), strings.Join(first, "; "))
	default:
		t.Logf("after %s (%s): nothing left behind", after, held)
	}
}

// found lists what is left behind now: bpfbench processes, the run's BPF
// programs and links, probe events and files that were not there before.
func (l *leftovers) found(t *testing.T, bpf ownedBPF) []string {
	problems := []string{}
	for _, p := range cliProcesses() {
		problems = append(problems, "bpfbench process "+p)
	}
	for _, id := range bpf.progs {
		if p, err := ebpf.NewProgramFromID(id); err == nil {
			info, _ := p.Info()
			p.Close()
			name := ""
			if info != nil {
				name = info.Name
			}
			problems = append(problems, fmt.Sprintf("BPF program %d (%s)", id, name))
		}
	}
	for _, id := range bpf.links {
		if lk, err := link.NewFromID(id); err == nil {
			lk.Close()
			problems = append(problems, fmt.Sprintf("BPF link %d", id))
		}
	}
	for e := range probeEvents() {
		if !l.events[e] {
			problems = append(problems, "probe event "+e)
		}
	}
	for f := range untracked(t) {
		if !l.files[f] {
			problems = append(problems, "file "+f)
		}
	}
	return problems
}

// cliProcesses lists the processes, other than this one, running this
// test binary (bpfbench as the CLI; taskset execs into it).
func cliProcesses() []string {
	self, _ := os.Executable()
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == os.Getpid() {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p))
		if err != nil {
			continue
		}
		if exe == self {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			out = append(out, fmt.Sprintf("%d (%s)", p, strings.ReplaceAll(strings.TrimSpace(string(cmd)), "\x00", " ")))
		}
	}
	return out
}

// probeEvents are the kprobe and uprobe events defined in tracefs.
func probeEvents() map[string]bool {
	out := map[string]bool{}
	for _, f := range []string{"/sys/kernel/tracing/kprobe_events", "/sys/kernel/tracing/uprobe_events"} {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				out[line] = true
			}
		}
	}
	return out
}

// untracked lists the files git does not track in this package's
// directory, ignored ones included.
func untracked(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command("git", "status", "--porcelain", "--ignored", "--untracked-files=all", "--", ".").Output()
	if err != nil {
		t.Fatalf("git status: %v", err)
	}
	files := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "??") || strings.HasPrefix(line, "!!") {
			files[strings.TrimSpace(line[2:])] = true
		}
	}
	return files
}
