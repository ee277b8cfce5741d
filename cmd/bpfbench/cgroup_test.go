package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
	"github.com/bpfbench/bpfbench/result"
)

// `attach --cgroup`: a cgroup holding two process trees that the test
// started apart (two shells, both children of the test, moved into it),
// and a third shell outside it. Once attach follows them, each shell
// forks a known number of processes: the first 5, the second 7, the
// outsider 3. attach must name the first tree's root as its pid, the
// second as another root, and count exactly 12 forks. A cgroup with no
// process is an error that says what to give.
func TestAttachCgroup(t *testing.T) {
	privtest.Require(t)
	mnt := testutil.Cgroup2Mount()
	if mnt == "" {
		privtest.Skip(t, "no cgroup v2 hierarchy mounted")
	}
	dir := testutil.MkCgroup(t, mnt, fmt.Sprintf("bpfbench-attach-cgroup-%d", os.Getpid()))
	shells := startForkShells(t, 5, 7, 3)
	for _, s := range shells[:2] {
		testutil.MoveToCgroup(t, dir, s.cmd.Process.Pid)
	}
	a, b := shells[0].cmd.Process.Pid, shells[1].cmd.Process.Pid

	p := startCLI(t, "attach", "--cgroup", dir, "--duration", "4s", "--output", "json", "--log.level", "info")
	if _, ok := p.stderr.WaitFor("following the target's child processes", 60*time.Second); !ok {
		_ = p.cmd.Process.Kill()
		t.Fatalf("attach never followed the cgroup's second tree:\n%s", p.stderr)
	}
	for _, s := range shells {
		if err := os.WriteFile(s.fifo, []byte("go\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if code := p.wait(t, time.Minute, "attach --cgroup did not end"); code != 0 {
		t.Fatalf("attach --cgroup: exit %d\n%s", code, p.stderr)
	}
	var out struct {
		Pid        int   `json:"pid"`
		OtherRoots []int `json:"other_roots"`
		Sched      struct {
			Forks uint64 `json:"forks"`
			Exits uint64 `json:"exits"`
		} `json:"sched"`
	}
	if err := json.Unmarshal(p.stdout.Bytes(), &out); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, p.stdout.String())
	}
	wantPid, wantRoots := min(a, b), []int{max(a, b)}
	if out.Pid != wantPid || !slices.Equal(out.OtherRoots, wantRoots) {
		t.Errorf("pid %d, other roots %v; want %d and %v", out.Pid, out.OtherRoots, wantPid, wantRoots)
	}
	if !strings.Contains(p.stderr.String(), "server: cgroup /"+filepath.Base(dir)+": 2 processes") {
		t.Errorf("stderr does not say what the cgroup held:\n%s", p.stderr)
	}
	want := uint64(shells[0].forks + shells[1].forks)
	if out.Sched.Forks != want || out.Sched.Exits != want {
		t.Errorf("%d forks and %d exits followed, want %d of each (the outsider's %d are not the target's)", out.Sched.Forks, out.Sched.Exits, want, shells[2].forks)
	}
	t.Logf("cgroup %s: pid %d, other roots %v, %d forks, %d exits", dir, out.Pid, out.OtherRoots, out.Sched.Forks, out.Sched.Exits)

	code, _, e := runCLIChild("attach", "--cgroup", filepath.Join(mnt, "bpfbench-no-such-cgroup"), "--duration", "1s")
	if code == 0 || !strings.Contains(e, "holds no process") {
		t.Errorf("an empty cgroup: exit %d, stderr %q; want an error saying it holds no process", code, e)
	}
}

// forkShell is a shell blocked on its fifo (no fork) until told, then
// forking forks times, then asleep until killed.
type forkShell struct {
	cmd   *exec.Cmd
	fifo  string
	forks int
}

// startForkShells starts a shell for each count and waits until each is
// blocked on its fifo; they are killed at the test's end.
func startForkShells(t *testing.T, forks ...int) []*forkShell {
	t.Helper()
	tmp := t.TempDir()
	var shells []*forkShell
	t.Cleanup(func() {
		for _, s := range shells {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	})
	for i, n := range forks {
		fifo := filepath.Join(tmp, fmt.Sprintf("go%d", i))
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		list := strings.TrimSpace(strings.Repeat("x ", n))
		cmd := exec.Command("/bin/sh", "-c", fmt.Sprintf("read x < %s; for i in %s; do /bin/true; done; exec sleep 120", fifo, list))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		shells = append(shells, &forkShell{cmd, fifo, n})
	}
	for _, s := range shells {
		testutil.WaitBlocked(t, s.cmd.Process.Pid, 10*time.Second, "wait_for_partner", "fifo", "pipe")
	}
	return shells
}

// `run --cgroup`: llmsim's frontend and engine processes (the engine its
// child, as vLLM's EngineCore) in a cgroup of their own, selected by its
// directory; the run follows the frontend as its pid, and the critical
// path of the slowest gaps reaches the engine's threads.
func TestRunCgroup(t *testing.T) {
	privtest.Require(t)
	privtest.RequireTool(t, "taskset", "apt-get install util-linux")
	mnt := testutil.Cgroup2Mount()
	if mnt == "" {
		privtest.Skip(t, "no cgroup v2 hierarchy mounted")
	}
	simBinaries(t)
	dir := t.TempDir()
	url, frontend, _ := startTwoProcessSim(t, dir, false)
	engine := enginePid(t, frontend)
	cg := testutil.MkCgroup(t, mnt, fmt.Sprintf("bpfbench-run-cgroup-%d", os.Getpid()))
	for _, p := range []int{frontend, engine} {
		testutil.MoveToCgroup(t, cg, p)
	}
	out := filepath.Join(dir, "run")
	code, stdout, stderr := runCLIChild("run", "--target", url, "--cgroup", cg,
		"--num-requests", "12", "--rate", "4", "--output-len", "24", "--cpus", "1", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	if !strings.Contains(stderr, "server: cgroup /"+filepath.Base(cg)+": 2 processes") {
		t.Errorf("stderr does not say what the cgroup held:\n%s", stderr)
	}
	doc, err := result.Load(filepath.Join(out, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if doc.Collection == nil || doc.Collection.Pid != frontend {
		t.Fatalf("collection %+v, want pid %d (the frontend, the cgroup's root)", doc.Collection, frontend)
	}
	cp := doc.CriticalPath
	if cp == nil {
		t.Fatalf("no critical path:\n%s", stdout)
	}
	engineSteps := 0
	for _, g := range cp.Slowest {
		for _, s := range g.Steps {
			if tgidOf(s.Tid) == engine {
				engineSteps++
			}
		}
	}
	if engineSteps == 0 {
		t.Errorf("no step of the slowest gaps is on the engine's threads (pid %d)", engine)
	}
	t.Logf("run --cgroup %s: pid %d, %d gaps, %d steps of the slowest gaps in the engine, unexplained %.4f", cg, doc.Collection.Pid, cp.Gaps, engineSteps, cp.UnexplainedFraction)
}
