package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
	"github.com/bpfbench/bpfbench/llmsim/simtest"
	"github.com/bpfbench/bpfbench/result"
)

// generatedTokens reads llmsim's vllm:generation_tokens_total.
func generatedTokens(addr string) float64 {
	return testutil.Value("http://"+addr+"/metrics", "vllm:generation_tokens_total", "")
}

// A server stopped with SIGSTOP for 3 s in the middle of a run, then
// continued (a debugger's break, a paused container): the gaps that span
// the stop are the slowest, and the critical path blames their excess on
// server_stopped, naming who resumed it, not on a timer or the network;
// the diagnosis says the server was stopped.
func TestRunBlamesAStoppedServer(t *testing.T) {
	privtest.Require(t)
	simBinaries(t)
	dir := t.TempDir()
	// Requests of a second (100 tokens, 10 ms apart) at 4 a second: about
	// four in flight when the server stops, each with a gap of the stop's
	// length, among 2,400 gaps (24 in the p99 band).
	addr, pid := simtest.StartProcess(t, dir, "--itl", "10ms")
	out := filepath.Join(dir, "run")
	cmd := cliCmd("run", "--target", "http://"+addr, "--pid", strconv.Itoa(pid), "--num-requests", "24", "--rate", "4",
		"--output-len", "100", "--out", out)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Stop the server once the load is under way: a third of the tokens
	// streamed.
	if !testutil.Until(60*time.Second, func() bool { return generatedTokens(addr) >= 800 }) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the run streamed no 800 tokens in 60 s:\n%s\n%s", stdout.String(), stderr.String())
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the stop: the gap the run must blame on it
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	doc, err := result.Load(filepath.Join(out, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	cp := doc.CriticalPath
	if cp == nil || cp.ITLP99 == nil {
		t.Fatalf("no critical_path p99 band in result.json:\n%s", stdout.String())
	}
	b := cp.ITLP99
	t.Logf("p99 gaps from %.1f ms, excess %.1f ms, shares %v; stopped steps %d; unexplained %.4f", b.FromMs, b.ExcessMs, b.ExcessShares, cp.Stats.Stopped, cp.UnexplainedFraction)
	if b.Top != "server_stopped" || b.ExcessShares["server_stopped"] < 0.8 {
		t.Errorf("p99 gap excess: top %s, server_stopped %.3f of it; want server_stopped with at least 0.8", b.Top, b.ExcessShares["server_stopped"])
	}
	if cp.Stats.Stopped == 0 {
		t.Error("no stopped step counted")
	}
	if !strings.Contains(stdout.String(), "stopped") {
		t.Errorf("the terminal summary never says the server was stopped:\n%s", stdout.String())
	}
	var slow []string
	for _, g := range cp.Slowest {
		for _, s := range g.Steps {
			if s.Cause == "server_stopped" {
				slow = append(slow, s.Detail)
			}
		}
	}
	t.Logf("the slowest gaps' stopped steps: %s", fmt.Sprint(slow))
	if t.Failed() && len(cp.Slowest) > 0 {
		g := cp.Slowest[0]
		for _, o := range cp.Slowest {
			if o.DurationMs > g.DurationMs {
				g = o
			}
		}
		t.Logf("longest slow gap: %.1f ms %+v", g.DurationMs, g.CausesMs)
		for _, s := range g.Steps {
			if s.DurationMs >= 1 {
				t.Logf("  %+v", s)
			}
		}
	}
}
