package main

import (
	"fmt"
	"github.com/bpfbench/bpfbench/result"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
)

// startTwoProcessSim runs `llmsim --processes 2` (built by simBinaries)
// and returns its URL and the frontend's pid. lazy: the engine is forked at
// the first request, once bpfbench follows the frontend (followed through
// the scheduler's fork records); otherwise at once, before bpfbench starts
// (followed as a child the target already has, as vLLM's EngineCore).
// extra are more of llmsim's flags.
func startTwoProcessSim(t *testing.T, dir string, lazy bool, extra ...string) (url string, frontend, engine int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.Create(filepath.Join(dir, "llmsim.log"))
	if err != nil {
		t.Fatal(err)
	}
	// The frontend on CPU 1, beside the load generator; the engine is
	// moved to CPU 0 once it runs.
	args := []string{"-c", "1", "llmsim", "--processes", "2", "--addr", addr,
		"--work", "cpu", "--itl", "10ms", "--max-num-seqs", "32", "--eos-prob", "0"}
	if lazy {
		args = append(args, "--engine-lazy")
	}
	args = append(args, extra...) // a flag given again overrides
	cmd := exec.Command("taskset", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	url = "http://" + addr
	testutil.WaitHTTP(t, url+"/health", 10*time.Second, logf.Name())
	return url, cmd.Process.Pid, 0 // taskset execs llmsim in place
}

// enginePid finds the engine child of llmsim's frontend and pins it to CPU 0.
func enginePid(t *testing.T, frontend int) (engine int) {
	t.Helper()
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", frontend))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, c := range strings.Fields(string(b)) {
			engine, _ = strconv.Atoi(c)
		}
	}
	if engine == 0 {
		t.Fatalf("no engine child process of llmsim %d", frontend)
	}
	if out, err := exec.Command("taskset", "-a", "-p", "-c", "0", strconv.Itoa(engine)).CombinedOutput(); err != nil {
		t.Fatalf("pinning the engine process %d to CPU 0: %v: %s", engine, err, out)
	}
	return engine
}

// tgidOf returns the tgid of thread tid, 0 when it is gone.
func tgidOf(tid uint32) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// `bpfbench run --pid FRONTEND` against llmsim's two processes, with busy
// loops on the engine's CPU: the sched collector follows the engine (a
// forked child of the target), and the critical path walks from the
// frontend's sending thread over the socket's wakeup into the engine's
// step thread, where the run-queue wait behind the loops is the top cause
// of the p99 gap excess. A shared host can spoil a run; one retry.
func TestRunCriticalPathTwoProcesses(t *testing.T) {
	privtest.Require(t)
	privtest.RequireTool(t, "taskset", "apt-get install util-linux")
	simBinaries(t)
	for _, lazy := range []bool{true, false} {
		name := "engine started before the run"
		if lazy {
			name = "engine forked during the run"
		}
		t.Run(name, func(t *testing.T) { criticalPathTwoProcesses(t, lazy) })
	}
}

func criticalPathTwoProcesses(t *testing.T, lazy bool) {
	var problems []string
	for attempt := 1; attempt <= 2; attempt++ {
		dir := t.TempDir()
		url, frontend, _ := startTwoProcessSim(t, dir, lazy)
		var busy []*exec.Cmd
		for range 2 {
			c := exec.Command("taskset", "-c", "0", "sh", "-c", "while :; do :; done")
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			busy = append(busy, c)
		}
		// Pin the engine to the loops' CPU as soon as it is forked.
		go testutil.Until(2*time.Second, func() bool { return pinEngine(frontend) })
		out := filepath.Join(dir, "run")
		code, stdout, stderr := runCLIChild("run", "--target", url, "--pid", strconv.Itoa(frontend),
			"--num-requests", "24", "--rate", "4", "--output-len", "32", "--cpus", "1", "--out", out)
		for _, c := range busy {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		if code != 0 {
			t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
		}
		doc, err := result.Load(filepath.Join(out, "result.json"))
		if err != nil {
			t.Fatal(err)
		}
		cp := doc.CriticalPath
		if cp == nil || cp.ITLP99 == nil {
			t.Fatalf("no critical_path in result.json:\n%s", stdout)
		}
		// Which processes the slowest gaps' steps ran in (read while
		// llmsim still runs).
		engine := enginePid(t, frontend)
		engineSteps, frontendSteps := 0, 0
		var engineMs, runqEngineMs float64
		for _, g := range cp.Slowest {
			for _, s := range g.Steps {
				switch tgidOf(s.Tid) {
				case engine:
					engineSteps++
					engineMs += s.DurationMs
					if s.Cause == "cpu_runqueue" {
						runqEngineMs += s.DurationMs
					}
				case frontend:
					frontendSteps++
				}
			}
		}
		var spans uint64
		if doc.Collection != nil {
			spans = doc.Collection.Spans
		}
		t.Logf("attempt %d: frontend %d, engine %d; %d gaps, unexplained %.4f; p99 band top %s, excess shares %v; slowest gaps' steps: %d in the engine (%.1f ms, %.1f ms cpu_runqueue), %d in the frontend; spans %d; neighbours %+v; stats %+v",
			attempt, frontend, engine, cp.Gaps, cp.UnexplainedFraction, cp.ITLP99.Top, cp.ITLP99.ExcessShares,
			engineSteps, engineMs, runqEngineMs, frontendSteps, spans, cp.NoisyNeighbours, cp.Stats)
		problems = nil
		if engineSteps == 0 {
			problems = append(problems, "no step of the slowest gaps is on a thread of the engine process")
		}
		if runqEngineMs == 0 {
			problems = append(problems, "no cpu_runqueue step on the engine's threads")
		}
		if spans == 0 || cp.Stats.Segments == 0 {
			problems = append(problems, fmt.Sprintf("collection: %d spans, %d segments", spans, cp.Stats.Segments))
		}
		if cp.ITLP99.Top != "cpu_runqueue" {
			problems = append(problems, "p99 gap excess top cause "+cp.ITLP99.Top+", want cpu_runqueue")
		}
		if len(problems) == 0 {
			return
		}
	}
	t.Errorf("critical path across llmsim's two processes: %v", problems)
}

// pinEngine pins llmsim's engine child, once there, to CPU 0.
func pinEngine(frontend int) bool {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", frontend))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, c := range strings.Fields(string(b)) {
			return exec.Command("taskset", "-a", "-p", "-c", "0", c).Run() == nil
		}
	}
	return false
}
