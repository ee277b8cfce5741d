package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/live"
)

// liveVerdict is what attach's live view said of a contended load: the
// p99 gap band's excess over the quiet run's (--baseline), by cause, and
// what missed.
type liveVerdict struct {
	gaps              uint64
	top               string
	cpuShare, compute float64
	busy              string
	problems          []string
}

// attachBeside starts `bpfbench attach PID --baseline QUIET -o json` on
// CPU 1 and returns once its programs are attached (its "attached" log
// line). stop ends it (SIGINT: it prints what it recorded) and returns
// its live view.
func (m *matrixRunner) attachBeside(t *testing.T, name string, pid int, quietDir string) (stop func() (live.Result, error)) {
	cmd := m.cli(nil, "attach", strconv.Itoa(pid), "--baseline", quietDir, "-o", "json", "--cpus", "1", "--log.level", "info")
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	attached, drained := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(drained)
		br := bufio.NewReader(pipe)
		seen := false
		for {
			line, err := br.ReadString('\n')
			errb.WriteString(line)
			if !seen && strings.Contains(line, "attached") {
				seen = true
				close(attached)
			}
			if err != nil {
				_, _ = io.Copy(&errb, br)
				return
			}
		}
	}()
	done := false
	stop = func() (live.Result, error) {
		var r live.Result
		if done {
			return r, fmt.Errorf("stopped twice")
		}
		done = true
		_ = cmd.Process.Signal(syscall.SIGINT)
		<-drained
		if err := cmd.Wait(); err != nil {
			return r, fmt.Errorf("attach: %v: %s", err, strings.TrimSpace(errb.String()))
		}
		if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.CriticalPath == nil {
			return r, fmt.Errorf("attach's JSON (%v): %.300s; stderr %s", err, out.String(), strings.TrimSpace(errb.String()))
		}
		return r, nil
	}
	t.Cleanup(func() {
		if !done {
			_, _ = stop()
		}
	})
	select {
	case <-attached:
	case <-drained:
		_, err := stop()
		t.Fatalf("%s: attach ended before it attached: %v", name, err)
	case <-time.After(60 * time.Second):
		_, err := stop()
		t.Fatalf("%s: attach did not attach in 60 s: %v", name, err)
	}
	return stop
}

// attachRun is the cell's contended load once more, sent by `bpfbench
// load` (a load generator and no observer) while attach follows the
// server against the quiet run (--baseline): the operator's view of the
// same contention, judged by judgeLive. Not beside the contended run:
// two observers and the load generator on CPU 1 delayed the run's reads
// (net_backpressure 0.60 of one cell's band). When keep is set the live
// view is kept at save.
func (m *matrixRunner) attachRun(t *testing.T, name string, pid, busyPid int, quietDir, save string, runArgs []string) liveVerdict {
	stop := m.attachBeside(t, name, pid, quietDir)
	matrixRunCmd(t, name+": bpfbench load (contended, attach beside)", m.cli(nil, append([]string{"load"}, loadArgs(runArgs)...)...))
	r, err := stop()
	if m.keep != "" && err == nil {
		if b, jerr := json.MarshalIndent(r, "", " "); jerr == nil {
			_ = os.WriteFile(save, b, 0o644)
		}
	}
	return judgeLive(r, err, busyPid)
}

// loadArgs is run's load options without what only run takes (the
// server's pid, the front process's).
func loadArgs(runArgs []string) []string {
	var out []string
	for i := 0; i < len(runArgs); i++ {
		if runArgs[i] == "--pid" || runArgs[i] == "--via-pid" {
			i++
			continue
		}
		out = append(out, runArgs[i])
	}
	return out
}

// judgeLive holds attach's live view of a contended load to the run's
// bar: cpu_runqueue on top of what the p99 gap band added over the quiet
// run's (live.MatchBand) with at least 60% of it, server_compute at most
// 20%, and the busy process the first noisy neighbour. A miss runs the
// cell again (matrixAttempts): rounds of one cell read server_compute
// 0-0.28 before the live prefill rule and the crowded sibling rule
// (docs/measurements.md, "attach on every cell of the engine matrices").
func judgeLive(r live.Result, err error, busyPid int) (v liveVerdict) {
	if err != nil {
		v.problems = append(v.problems, err.Error())
		return v
	}
	cp := r.CriticalPath
	v.gaps = r.Live.Gaps
	b := cp.ITLP99
	if b == nil {
		v.problems = append(v.problems, fmt.Sprintf("attach: no p99 gap band (%d gaps seen)", r.Live.Gaps))
		return v
	}
	v.top, v.cpuShare, v.compute = b.Top, b.ExcessShares["cpu_runqueue"], b.ExcessShares["server_compute"]
	switch {
	case v.top != "cpu_runqueue":
		v.problems = append(v.problems, fmt.Sprintf("attach: p99 gap excess top %s (shares %s), want cpu_runqueue", v.top, matrixShares(b.ExcessShares)))
	case v.cpuShare < 0.6 || v.compute > 0.2:
		v.problems = append(v.problems, fmt.Sprintf("attach: p99 gap excess cpu_runqueue %.2f, server_compute %.2f (shares %s), want at least 0.60 and at most 0.20",
			v.cpuShare, v.compute, matrixShares(b.ExcessShares)))
	}
	var first bool
	if v.busy, first = busyRank(cp.NoisyNeighbours, busyPid); !first {
		v.problems = append(v.problems, fmt.Sprintf("attach: the first noisy neighbour is not the busy process [%d] (it is %s)", busyPid, v.busy))
	}
	return v
}

// String is the verdict's table cell.
func (v liveVerdict) String() string {
	if v.top == "" {
		return "-"
	}
	bar := ""
	if v.cpuShare < 0.6 || v.compute > 0.2 {
		bar = ", below the run's bar"
	}
	return fmt.Sprintf("%s, cpu_runqueue %.0f%% (compute %.0f%%, %d gaps%s)", v.top, 100*v.cpuShare, 100*v.compute, v.gaps, bar)
}
