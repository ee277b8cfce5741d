package cuda

import (
	"bufio"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

// endWaitDriver is cudastub-driver run with --wait-start and --end-wait:
// its threads are still there when the section stops, so that their
// on-CPU time is read to the end.
type endWaitDriver struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startEndWait(t *testing.T, args ...string) *endWaitDriver {
	t.Helper()
	args = append([]string{"--api", "driver", "--lib", libPath("driver"), "--wait-start", "--end-wait"}, args...)
	cmd := exec.Command(filepath.Join(stubDir, "cudastub-driver"), args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errp, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting cudastub-driver: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(errp).ReadString('\n')
	if err != nil || !strings.Contains(line, "ready pid=") {
		t.Fatalf("cudastub-driver did not get ready: %q %v", line, err)
	}
	go io.Copy(io.Discard, errp)
	return &endWaitDriver{cmd: cmd, stdin: stdin, out: bufio.NewReader(out)}
}

// run lets the driver go and returns its ground truth once it has made
// every call (it then waits for exit).
func (d *endWaitDriver) run(t *testing.T) result {
	t.Helper()
	if _, err := d.stdin.Write([]byte("g")); err != nil {
		t.Fatal(err)
	}
	line, err := d.out.ReadString('\n')
	if err != nil {
		t.Fatalf("reading cudastub-driver's result: %v", err)
	}
	var r result
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("decoding %q: %v", line, err)
	}
	if r.Unexpected != 0 {
		t.Fatalf("cudastub-driver had %d unexpected errors", r.Unexpected)
	}
	return r
}

// The launch count of a session whose launch probes go over budget is the
// counted launches plus an estimate within 10% of what the caller made,
// with its method and bound in the summary, for decode-like steps, steps
// of CUDA Graph launches, and bursts of steps between idle periods (each
// burst opens a sample window when its thread comes back on CPU). The
// truth is the driver's own count; the callers spin 5 µs of CPU per
// launch, as a framework does on its launching thread.
//
// A burst without synchronizes is the pattern no estimator here can
// see exactly: only the thread's on-CPU time clocks it, and a window's
// launches per on-CPU second include the probes' own cost, which differs
// by process (estimate.go). Its count must say lower_bound and stay at or
// below the truth, also when synchronizes follow the burst.
func TestLaunchEstimateHolds(t *testing.T) {
	privtest.Require(t)
	for _, c := range []struct {
		name  string
		args  []string
		lower bool // the pattern is a lower bound
	}{
		{"decode steps", []string{"--loop", "--duration-ms", "2000", "--launches", "300", "--syncs", "1", "--host-us", "5", "--kernel-us", "0"}, false},
		{"graph steps", []string{"--loop", "--duration-ms", "2000", "--graphs", "2", "--launches", "300", "--syncs", "1", "--host-us", "5", "--kernel-us", "0"}, false},
		{"bursts of steps and idle", []string{"--launches", "6000", "--syncs", "20", "--rounds", "5", "--idle-ms", "300", "--host-us", "5", "--kernel-us", "0"}, false},
		{"burst without synchronizes", []string{"--launches", "20000", "--syncs", "0", "--host-us", "10", "--kernel-us", "0"}, true},
		{"burst then 100 synchronizes", []string{"--launches", "20000", "--syncs", "0", "--tail-syncs", "100", "--host-us", "10", "--kernel-us", "0"}, true},
		{"bursts without synchronizes and idle", []string{"--launches", "5000", "--syncs", "0", "--rounds", "5", "--idle-ms", "300", "--host-us", "10", "--kernel-us", "0"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := startEndWait(t, c.args...)
			s, stop := runSection(t, d.cmd.Process.Pid, SectionConfig{Budget: Budget{Period: 300 * time.Millisecond, Window: 40 * time.Millisecond}})
			r := d.run(t)
			time.Sleep(3 * DefaultBudget.Check) // a reading after the last call
			stop()
			checkEstimate(t, s, r, c.lower)
		})
	}
}

func checkEstimate(t *testing.T, s *Section, r result, lower bool) {
	t.Helper()
	lp := s.LaunchProbes()
	sum := s.Summary().(Summary)
	total := lp.MeasuredLaunches + lp.EstimatedLaunches
	t.Logf("driver: %d launches, %d syncs; probes: %d counted + %d estimated = %d (%.1f%% of the truth), method %s, bound ±%.1f%%, lower bound %v %s; %d windows, duty %.2f",
		r.Launches, r.Syncs, lp.MeasuredLaunches, lp.EstimatedLaunches, total, 100*float64(total)/float64(r.Launches),
		lp.Method, 100*lp.EstimateError, lp.LowerBound, lp.LowerBoundReason, lp.Windows, probeDuty(lp))
	if lp.Mode != "sampled" {
		t.Fatalf("launch probes were not sampled: %+v", lp)
	}
	name := "cuLaunchKernel"
	if sum.Graphs != nil {
		name = "cuGraphLaunch"
	}
	call, ok := findCall(sum, name)
	if !ok || !call.Estimated || call.EstimatedCount < call.Count {
		t.Errorf("%s lacks its estimate: %+v", name, call)
	}
	if lower {
		if !lp.LowerBound || !call.LowerBound || total > r.Launches {
			t.Errorf("want a lower bound at or below the truth %d: %d, lower_bound %v (call %v)", r.Launches, total, lp.LowerBound, call.LowerBound)
		}
		return
	}
	if lp.LowerBound || lp.Method != "per_step" {
		t.Errorf("want a per-step estimate: method %q, lower bound %v (%s)", lp.Method, lp.LowerBound, lp.LowerBoundReason)
	}
	if !within(float64(total), float64(r.Launches), 0.10) {
		t.Errorf("counted %d + estimated %d launches, the driver made %d", lp.MeasuredLaunches, lp.EstimatedLaunches, r.Launches)
	}
	if !within(float64(call.EstimatedCount), float64(r.Launches), 0.10) {
		t.Errorf("%s estimated_count %d, the driver made %d", name, call.EstimatedCount, r.Launches)
	}
	if lp.EstimateError <= 0 || !within(float64(r.Launches), float64(total), lp.EstimateError) {
		t.Errorf("estimate_error %.3f does not bound the estimate %d of %d", lp.EstimateError, total, r.Launches)
	}
}
