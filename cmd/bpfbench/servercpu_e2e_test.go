package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/result"
)

// `run`'s server CPU a token against work the test knows: llmsim's two
// processes (the engine burns each decode step's time in CPU, one
// sequence a step), 4 ms a step, then 8 ms (its step control file) with
// the first run as --baseline. Each run's figure is at least the steps'
// CPU over its tokens and at most the test's own reading of the server's
// tree around the command, within the stated error; both processes are
// counted; the ratio is over 1.5 within its bounds; and the terminal says the p99 band's server_compute is the same tokens
// costing more CPU.
func TestRunServerCPUATokenOfKnownWork(t *testing.T) {
	privtest.Require(t)
	privtest.RequireTool(t, "taskset", "apt-get install util-linux")
	simBinaries(t)
	dir := t.TempDir()
	ctl := filepath.Join(dir, "step")
	if err := os.WriteFile(ctl, []byte("4000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	url, frontend, _ := startTwoProcessSim(t, dir, false, "--itl", "4ms", "--step-control", ctl, "--jitter", "0")
	const requests, outLen = 8, 24
	var outer [2]float64 // the test's own reading, ms a token
	var got [2]*result.ServerCPU
	var stdout string
	for i, stepMs := range []float64{4, 8} {
		if err := os.WriteFile(ctl, []byte(strconv.Itoa(int(stepMs*1000))+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		waitStepRead(t)
		out := filepath.Join(dir, "run"+strconv.Itoa(i))
		args := []string{"run", "--target", url, "--pid", strconv.Itoa(frontend), "--num-requests", strconv.Itoa(requests),
			"--max-concurrency", "1", "--output-len", strconv.Itoa(outLen), "--input-len", "16", "--warmup", "0", "--out", out}
		if i == 1 {
			args = append(args, "--baseline", filepath.Join(dir, "run0"))
		}
		tree := collectors.Tree(frontend, nil)
		ns0, _ := collectors.TreeCPU("/proc", tree)
		code, so, se := runCLIChild(args...)
		ns1, _ := collectors.TreeCPU("/proc", collectors.Tree(frontend, nil))
		if code != 0 {
			t.Fatalf("run %d: exit %d: %s\n%s", i, code, se, so)
		}
		doc, err := result.Load(filepath.Join(out, "result.json"))
		if err != nil {
			t.Fatal(err)
		}
		c := doc.CriticalPath.ServerCPU
		if c == nil {
			t.Fatalf("run %d: no critical_path.server_cpu:\n%s", i, so)
		}
		got[i], stdout = c, so
		tokens := int(doc.Float("total_output_tokens"))
		outer[i] = float64(ns1-ns0) / 1e6 / float64(tokens)
		floor := stepMs * float64(tokens-requests) / float64(tokens) // a step a token after the first
		t.Logf("run %d (step %.0f ms): %.3f ms a token ±%.3f over %d tokens, %d processes; the steps' CPU %.3f; the test's reading %.3f",
			i, stepMs, c.MsPerToken, c.ErrorMs, c.Tokens, c.Processes, floor, outer[i])
		if c.Tokens != tokens || len(tree) != 2 || c.Processes != 2 {
			t.Errorf("run %d: %d tokens over %d processes; want %d over 2 (the tree has %d)", i, c.Tokens, c.Processes, tokens, len(tree))
		}
		if c.MsPerToken < floor-c.ErrorMs || c.MsPerToken > outer[i]+c.ErrorMs {
			t.Errorf("run %d: %.3f ms a token, want between the steps' %.3f and the test's reading %.3f (±%.3f)", i, c.MsPerToken, floor, outer[i], c.ErrorMs)
		}
	}
	c := got[1]
	t.Logf("ratio %.3f (%.3f-%.3f), the test's %.3f", c.Ratio, c.RatioLow, c.RatioHigh, outer[1]/outer[0])
	if c.BaselineMsPerToken != got[0].MsPerToken || c.Ratio < 1.5 || c.RatioLow > c.Ratio || c.RatioHigh < c.Ratio {
		t.Errorf("against the baseline: %+v; want its %.3f ms and a ratio over 1.5 inside its bounds", c, got[0].MsPerToken)
	}
	if !strings.Contains(stdout, "the same tokens costing more CPU") {
		t.Errorf("the terminal does not say server_compute is the same tokens costing more CPU:\n%s", stdout)
	}
}

// waitStepRead waits for llmsim to read its step control file again (it
// reads it every 50 ms).
func waitStepRead(t *testing.T) {
	t.Helper()
	time.Sleep(250 * time.Millisecond)
}
