package cuda

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/uprobecost"
)

// launchLoop is the stub's decode-like loop started with -W: it waits for
// SIGUSR1 to start and for a second one to exit.
type launchLoop struct {
	cmd    *exec.Cmd
	stdout *bufio.Reader
}

func startLaunchLoop(t *testing.T, args ...string) *launchLoop {
	t.Helper()
	cmd := exec.Command(filepath.Join(stubDir, "launchloop"), append([]string{"-W"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errp, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting launchloop: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(errp).ReadString('\n')
	if err != nil || !strings.Contains(line, "ready") {
		t.Fatalf("launchloop did not get ready: %q %v", line, err)
	}
	return &launchLoop{cmd: cmd, stdout: bufio.NewReader(out)}
}

type launchLoopResult struct {
	Steps          uint64  `json:"steps"`
	StepsPerSecond float64 `json:"steps_per_second"`
	Launches       uint64  `json:"launches"`
}

func (l *launchLoop) run(t *testing.T) launchLoopResult {
	t.Helper()
	if err := l.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	line, err := l.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("reading launchloop's result: %v", err)
	}
	var r launchLoopResult
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("decoding %q: %v", line, err)
	}
	return r
}

// A launch-heavy loop drives the launch probes over budget: they are
// detached and sampled, the summary says so, and the launches counted plus
// those estimated between windows add up to what the loop made (within
// the sampling error), while a loop within budget keeps every probe.
func TestLaunchProbesOverBudgetAreSampled(t *testing.T) {
	privtest.Require(t)
	loop := startLaunchLoop(t, "-l", "2000", "-d", "3", "-k", "1")
	s, stop := runSection(t, loop.cmd.Process.Pid, SectionConfig{Budget: Budget{Period: 400 * time.Millisecond, Window: 40 * time.Millisecond}})
	res := loop.run(t)
	stop()
	lp := s.LaunchProbes()
	t.Logf("launchloop: %d launches, %.0f steps/s; probes: %+v", res.Launches, res.StepsPerSecond, lp)
	if lp.Mode != "sampled" || lp.Reason == "" {
		t.Fatalf("launch probes not sampled over budget: %+v", lp)
	}
	if lp.Windows == 0 || lp.UnprobedSeconds <= 0 {
		t.Errorf("no sample window or no detached time: %+v", lp)
	}
	total := float64(lp.MeasuredLaunches + lp.EstimatedLaunches)
	if !within(total, float64(res.Launches), 0.5) {
		t.Errorf("counted %d + estimated %d launches, the loop made %d", lp.MeasuredLaunches, lp.EstimatedLaunches, res.Launches)
	}
	sum := s.Summary().(Summary)
	c, ok := findCall(sum, "cuLaunchKernel")
	if !ok || c.EstimatedCount < c.Count || sum.LaunchProbes == nil {
		t.Errorf("summary lacks the estimate: %+v %+v", c, sum.LaunchProbes)
	}
	// Synchronizes keep their probes: every step's is counted.
	if sc, ok := findCall(sum, "cuStreamSynchronize"); !ok || sc.Count != res.Steps {
		t.Errorf("cuStreamSynchronize counted %d, the loop made %d steps", sc.Count, res.Steps)
	}
}

func TestLaunchProbesWithinBudgetStay(t *testing.T) {
	privtest.Require(t)
	loop := startLaunchLoop(t, "-l", "20", "-d", "1", "-k", "200")
	// A generous budget and a cheap hit: 20 launches per 4 ms step are
	// far within it.
	cost := uprobecost.Cost{EmulatedNs: 1000, SingleStepNs: 1000}
	s, stop := runSection(t, loop.cmd.Process.Pid, SectionConfig{Budget: Budget{Ratio: 0.5, Cost: &cost}})
	res := loop.run(t)
	stop()
	lp := s.LaunchProbes()
	if lp.Mode != "full" || lp.EstimatedLaunches != 0 {
		t.Fatalf("launch probes within budget were sampled: %+v", lp)
	}
	c, _ := findCall(s.Summary().(Summary), "cuLaunchKernel")
	if c.Count != res.Launches {
		t.Errorf("cuLaunchKernel counted %d, the loop made %d", c.Count, res.Launches)
	}
}
