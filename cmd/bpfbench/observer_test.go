package main

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/overhead"
	"github.com/bpfbench/bpfbench/internal/privtest"
)

// barrierPool builds tools/barrierpool (a thread pool like ggml's: workers
// compute, then spin and futex-wait for each other at every step).
func barrierPool(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "barrierpool")
	if out, err := exec.Command("gcc", "-O2", "-pthread", "-o", bin, "../../tools/barrierpool/barrierpool.c").CombinedOutput(); err != nil {
		t.Fatalf("building barrierpool: %v\n%s", err, out)
	}
	return bin
}

type poolResult struct {
	Steps          uint64  `json:"steps"`
	StepsPerSecond float64 `json:"steps_per_second"`
}

// startPool starts the pool with -W: it waits for SIGUSR1, runs, prints
// its JSON line and waits for a second SIGUSR1 before it exits.
func startPool(t *testing.T, bin string, seconds int) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(bin, "-t", "2", "-d", strconv.Itoa(seconds), "-W")
	out, _ := cmd.StdoutPipe()
	errp, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(errp).ReadString('\n'); err != nil || !strings.Contains(line, "ready") {
		t.Fatalf("barrierpool did not get ready: %q %v", line, err)
	}
	return cmd, bufio.NewReader(out)
}

func poolRun(t *testing.T, cmd *exec.Cmd, out *bufio.Reader) poolResult {
	t.Helper()
	cmd.Process.Signal(syscall.SIGUSR1)
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("reading barrierpool's result: %v", err)
	}
	var r poolResult
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("decoding %q: %v", line, err)
	}
	return r
}

// A barrier-synchronised thread pool at saturation under attach: however
// many scheduler events it makes, each reader wakes only on its timer (10
// a second) or when the kernel forces it (a record crossing a quarter or a
// half of the ring), as the pipeline counts itself; nothing is lost, and
// short intervals are folded. The steps-per-second ratio is logged here;
// tools/bench/overhead.sh measures it side by side.
func TestBarrierPoolReaderWakeups(t *testing.T) {
	privtest.Require(t)
	bin := barrierPool(t)

	alone, aloneOut := startPool(t, bin, 3)
	base := poolRun(t, alone, aloneOut)

	cmd, out := startPool(t, bin, 3)
	a := startCLI(t, "attach", strconv.Itoa(cmd.Process.Pid), "--duration", "6s", "--output", "json", "--log.level", "info")
	// The pool runs while attach is attached: its ready line comes once it
	// has loaded and measured the pool's switches for half a second.
	a.stderr.Wait(t, "msg=attached", time.Minute)
	with := poolRun(t, cmd, out)
	if code := a.wait(t, time.Minute, "attach --duration 6s did not end"); code != 0 {
		t.Fatalf("attach: exit %d\n%s", code, a.stderr)
	}
	var sum struct {
		Overhead overhead.Report `json:"overhead"`
		Sched    struct {
			Folded uint64 `json:"folded_intervals"`
		} `json:"sched"`
	}
	if err := json.Unmarshal(a.stdout.Bytes(), &sum); err != nil {
		t.Fatalf("decoding attach's JSON: %v\n%s", err, a.stdout)
	}
	o := sum.Overhead
	t.Logf("steps/s alone %.0f, under attach %.0f: ratio %.3f", base.StepsPerSecond, with.StepsPerSecond, with.StepsPerSecond/base.StepsPerSecond)
	t.Logf("%s", o.Line())
	if o.Seconds <= 0 || len(o.Collectors) == 0 {
		t.Fatalf("no overhead measured: %+v", o)
	}
	for name, c := range o.Collectors {
		// The timer allows seconds/0.1 wakeups; one more for the final
		// drain and one for rounding.
		bound := uint64(o.Seconds/0.1) + 2 + c.ForcedWakeups
		if c.Wakeups > bound {
			t.Errorf("%s: the reader woke %d times in %.1fs (%d forced): more than its timer and the forced wakeups allow (%d)",
				name, c.Wakeups, o.Seconds, c.ForcedWakeups, bound)
		}
		if c.Lost != 0 {
			t.Errorf("%s: %d records lost", name, c.Lost)
		}
	}
	s := o.Collectors["sched"]
	if s.Records == 0 || s.Folded == 0 || sum.Sched.Folded == 0 {
		t.Errorf("sched: %d records, %d folded (summary %d): the pool's short waits were not folded", s.Records, s.Folded, sum.Sched.Folded)
	}
	if s.BPFRuns == 0 || o.BPFStats != "on" {
		t.Errorf("no BPF run-time statistics: %+v", o)
	}
}
