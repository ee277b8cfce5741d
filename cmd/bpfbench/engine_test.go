package main

import (
	"context"
	"encoding/json"
	"github.com/bpfbench/bpfbench/result"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/engine"
	"github.com/bpfbench/bpfbench/internal/privtest"
)

// A real inference engine (llama.cpp's llama-server on the CPU, serving a
// tiny random-weight llama built by tools/bench/engine/build.sh): attach
// sees its threads under load, and run measures every request exactly and
// attributes it.
func TestRealEngineRunAndAttach(t *testing.T) {
	privtest.Require(t)
	paths, err := engine.Find()
	if err != nil {
		privtest.Skip(t, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := engine.Start(ctx, engine.Options{Paths: paths, Threads: 2, Slots: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Stop()
		if t.Failed() {
			out := srv.Output()
			if len(out) > 8000 {
				out = out[len(out)-8000:]
			}
			t.Logf("llama-server output (tail):\n%s", out)
		}
	})
	pid := strconv.Itoa(srv.Pid)
	load := []string{"--target", srv.URL, "--model", "tiny-llama", "--input-len", "32", "--output-len", strconv.Itoa(engineOutLen)}

	t.Run("attach", func(t *testing.T) { checkEngineAttach(t, srv, load) })
	t.Run("run", func(t *testing.T) { checkEngineRunRecords(t, pid, load) })
}

// engineOutLen is every request's output length against the real engine.
const engineOutLen = 96

// checkEngineAttach attaches to the engine for 3 s while load, in a child
// process, overlaps the window: the engine's own threads wait on the run
// queue and off the CPU.
func checkEngineAttach(t *testing.T, srv *engine.Server, load []string) {
	pid := strconv.Itoa(srv.Pid)
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		c, o, e := runCLIChild("attach", pid, "--duration", "3s", "--output", "json")
		done <- result{c, o, e}
	}()
	// The load, in a child process, overlaps the attach window.
	lcmd := cliCmd(append([]string{"load", "--duration", "4s", "--max-concurrency", "4", "--no-progress",
		"--result", filepath.Join(t.TempDir(), "load.json")}, load...)...)
	lout := &strings.Builder{}
	lcmd.Stdout, lcmd.Stderr = lout, lout
	if err := lcmd.Start(); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("attach --duration 3s did not end")
	}
	if err := lcmd.Wait(); err != nil {
		t.Errorf("load: %v\n%s", err, lout)
	}
	if r.code != 0 {
		t.Fatalf("attach exit %d: %s", r.code, r.stderr)
	}
	var out struct {
		Pid   int    `json:"pid"`
		Comm  string `json:"comm"`
		Sched *struct {
			Error string `json:"error"`
			Runq  struct {
				Count uint64  `json:"count"`
				Sum   float64 `json:"sum"`
			} `json:"runqueue_latency_seconds"`
			OffCPU  map[string]float64 `json:"offcpu_seconds"`
			Threads []struct {
				Tid   int     `json:"tid"`
				Comm  string  `json:"comm"`
				Runq  float64 `json:"runqueue_seconds"`
				Count uint64  `json:"runqueue_count"`
			} `json:"threads"`
		} `json:"sched"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, r.stdout)
	}
	if out.Pid != srv.Pid || !strings.Contains(out.Comm, "llama") {
		t.Errorf("pid %d comm %q, want llama-server's %d", out.Pid, out.Comm, srv.Pid)
	}
	s := out.Sched
	if s == nil || s.Error != "" {
		t.Fatalf("no sched section: %+v\n%s", s, r.stdout)
	}
	t.Logf("sched: %d run-queue waits (%.3f s), off-CPU %v, %d threads", s.Runq.Count, s.Runq.Sum, s.OffCPU, len(s.Threads))
	for _, th := range s.Threads {
		t.Logf("  tid %d %s: run queue %.3f s in %d waits", th.Tid, th.Comm, th.Runq, th.Count)
	}
	for _, k := range []string{"preempted", "io_wait", "sleep"} {
		if _, ok := s.OffCPU[k]; !ok {
			t.Errorf("offcpu_seconds has no %q", k)
		}
	}
	if s.Runq.Count == 0 || s.Runq.Sum <= 0 {
		t.Errorf("runqueue_latency_seconds %+v: an engine under load waits on the run queue", s.Runq)
	}
	if s.OffCPU["preempted"]+s.OffCPU["sleep"] <= 0 {
		t.Errorf("offcpu_seconds %v all zero", s.OffCPU)
	}
	// The threads are the engine's own (llama-server runs a main thread,
	// HTTP workers and OpenMP compute threads).
	tasks, err := os.ReadDir("/proc/" + pid + "/task")
	if err != nil {
		t.Fatal(err)
	}
	tids := map[int]bool{}
	for _, e := range tasks {
		n, _ := strconv.Atoi(e.Name())
		tids[n] = true
	}
	own := 0
	for _, th := range s.Threads {
		if tids[th.Tid] {
			own++
		} else {
			t.Errorf("thread %d (%s) is not one of llama-server's", th.Tid, th.Comm)
		}
	}
	if own < 2 {
		t.Errorf("%d of llama-server's %d threads reported, want its compute threads", own, len(tids))
	}
}

// checkEngineRunRecords runs 8 requests against the engine: every one
// measured exactly (ignore_eos: max_tokens each), attributed, with the
// sched collector's summary.
func checkEngineRunRecords(t *testing.T, pid string, load []string) {
	const outLen = engineOutLen
	dir := t.TempDir()
	args := append([]string{"run", "--pid", pid, "--num-requests", "8", "--max-concurrency", "4", "--out", dir}, load...)
	code, stdout, stderr := runCLI(args...)
	t.Logf("\n%s", stdout)
	if code != 0 {
		t.Fatalf("run exit %d: %s", code, stderr)
	}
	doc, err := result.Load(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if doc.Float("completed") != 8 || doc.Float("failed") != 0 {
		t.Errorf("completed %v failed %v, want 8 and 0", doc.Float("completed"), doc.Float("failed"))
	}
	var bb struct {
		Records []struct {
			Success      bool   `json:"success"`
			OutputTokens int    `json:"output_tokens"`
			ChunkNs      []int  `json:"chunk_ns"`
			TokenSource  string `json:"token_source"`
			Error        string `json:"error"`
			LocalPort    int    `json:"local_port"`
			ConnReused   bool   `json:"conn_reused"`
		} `json:"records"`
	}
	if err := json.Unmarshal(jsonOf(t, doc.BPFBench), &bb); err != nil {
		t.Fatal(err)
	}
	if len(bb.Records) != 8 {
		t.Fatalf("%d records, want 8", len(bb.Records))
	}
	for i, r := range bb.Records {
		if !r.Success || r.Error != "" {
			t.Errorf("request %d failed: %s", i, r.Error)
		}
		// ignore_eos: llama-server generates exactly max_tokens.
		if r.OutputTokens != outLen {
			t.Errorf("request %d: %d output tokens (%s, %d chunks), want %d", i, r.OutputTokens, r.TokenSource, len(r.ChunkNs), outLen)
		}
	}
	if doc.Attribution == nil {
		t.Error("result.json has no attribution")
	}
	if doc.Collectors == nil || doc.Collectors.Sched == nil {
		t.Fatalf("collectors has no sched: %v", doc.Collectors.Names())
	}
}
