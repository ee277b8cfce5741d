package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/job/validate"
	"github.com/bpfbench/bpfbench/perturb"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
)

// The validation matrix against llmsim (a frontend and an engine process):
// each injected cause (CPU contention, O_DIRECT reads of the server's KV
// file, the CUDA stub slowed, the engine's step work raised, a
// slow-reading client, the server's side of its veth pair shaped below
// its baseline rate) must be the top cause of the excess it added to its
// phase's slowest 10% of gaps, with at least 60% of it, by the critical
// path, which judges every row; the log says which rows reached the 80%
// the design asks for (DESIGN.md, "The widened validation matrix"). On a
// shared host a run can be spoilt by other work; one retry is allowed,
// and two more after an attempt during which the hypervisor stole a tenth
// of the host's CPU time or more (validation.json's host_steal_fraction:
// on this VM it swings from 0.1% to a third with the host's other
// guests, and steal off the server's threads moves the rows).
// validate's own verdict (its exit status, at --min-share 0.6) must agree
// with the rows. Nothing of the server's network namespace is left behind.
func TestValidateMatrixOnLLMSim(t *testing.T) {
	privtest.Require(t)
	privtest.RequireTool(t, "ip", "apt-get install iproute2")
	simBinaries(t)
	var last []string
	attempts := 2
	for attempt := 1; attempt <= attempts; attempt++ {
		dir := t.TempDir()
		code, stdout, stderr := runCLIChild("validate", "--sim", "--phase", "4s", "--rate", "4", "--out", dir, "--min-share", "0.6")
		t.Logf("attempt %d:\n%s", attempt, stdout)
		checkSimNetGone(t, stdout)
		b, err := os.ReadFile(filepath.Join(dir, "validation.json"))
		if err != nil {
			t.Fatalf("exit %d, no validation.json: %v\n%s", code, err, stderr)
		}
		var v validate.Validation
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range v.Rows {
			names = append(names, r.Injection)
		}
		if got := strings.Join(names, ","); got != "cpu,io,gpu,compute,client,net,client-cpu" {
			t.Fatalf("rows %s, want cpu, io, gpu, compute, client, net and client-cpu", got)
		}
		last = nil
		cliPass := true
		at80 := 0
		for _, r := range v.Rows {
			t.Logf("%s: injected %s: top %s, %s of the added tail excess (%v, %.1f ms per tail gap, weak %v); ITL p99 %+.1f ms; %s",
				r.Injection, r.Injected, r.JudgedTop(), pct(r.JudgedShare()), r.AddedShares, r.AddedMs, r.Weak, r.AddedP99ITLMs, r.Achieved)
			if r.JudgedTop() != r.Injected || r.JudgedShare() < 0.6 {
				cliPass = false
				last = append(last, r.Injection+": top "+r.JudgedTop()+" "+pct(r.JudgedShare())+" of the added tail excess")
			}
			if r.JudgedTop() == r.Injected && r.JudgedShare() >= 0.8 {
				at80++
			}
		}
		t.Logf("attempt %d: %d of %d rows with the injected cause on top at 80%% or more; unexplained %.3f%% of all gap time; the hypervisor stole %.1f%% of the host's CPU time",
			attempt, at80, len(v.Rows), v.Unexplained*100, v.HostSteal*100)
		if v.Unexplained < 0 || v.Unexplained > 0.05 {
			cliPass = false
			last = append(last, fmt.Sprintf("unexplained %.1f%% of all gap time (at most 5%%)", v.Unexplained*100))
		}
		if cliPass != (code == 0) {
			t.Errorf("validate exit %d, but its rows say pass=%v at --min-share 0.6: %s", code, cliPass, stderr)
		}
		if len(last) == 0 {
			return
		}
		if v.HostSteal >= 0.1 && attempts < 4 {
			attempts++
			t.Logf("attempt %d was run under heavy steal (%.0f%%): one more", attempt, v.HostSteal*100)
		}
	}
	t.Errorf("attribution not validated: %v", last)
}

// An injection too weak to judge is run again, twice as strong, after a
// baseline of its own, until it is judged: the stub's kernel raised by
// 0.1 ms (2.0 to 2.1 ms) adds far less than the 40 ms a row needs here
// (--min-added-ms: a quiet phase's tail differs from its baseline's by
// 0.2-16 ms here, so a lower bar can pass a weak attempt on noise alone,
// and judge it on noise); doubled five times (67.2 ms) it adds more. The row that stands is the
// retry's, gpu_sync on top, and it says what the weaker ones achieved.
func TestValidateRetriesAWeakInjectionStronger(t *testing.T) {
	privtest.Require(t)
	privtest.RequireTool(t, "ip", "apt-get install iproute2")
	simBinaries(t)
	dir := t.TempDir()
	code, stdout, stderr := runCLIChild("validate", "--sim", "--phase", "4s", "--rate", "4", "--out", dir, "--min-share", "0",
		"--skip", "cpu,io,compute,client,net,client-cpu", "--gpu-kernel-us", "2100", "--retry-weak", "6", "--min-added-ms", "40")
	t.Logf("exit %d:\n%s%s", code, stdout, stderr)
	checkSimNetGone(t, stdout)
	b, err := os.ReadFile(filepath.Join(dir, "validation.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v validate.Validation
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Rows) != 1 || v.Rows[0].Injection != "gpu" {
		t.Fatalf("rows %+v, want the gpu row alone", v.Rows)
	}
	r := v.Rows[0]
	if r.Retry == 0 || len(r.Earlier) != r.Retry || !strings.Contains(r.Earlier[0], "to 2100 µs") {
		t.Errorf("gpu row: retry %d, earlier %q: want a retry, and the 2.1 ms kernel among the earlier attempts", r.Retry, r.Earlier)
	}
	want := fmt.Sprintf("to %d µs", 2100<<r.Retry)
	if !strings.Contains(r.Achieved, want) || r.RetryDir == "" {
		t.Errorf("gpu row achieved %q in %q, want the kernel %s", r.Achieved, r.RetryDir, want)
	}
	if _, err := os.Stat(filepath.Join(r.RetryDir, "result.json")); err != nil {
		t.Errorf("the retry's run: %v", err)
	}
	if r.Weak || r.JudgedTop() != "gpu_sync" || code != 0 {
		t.Errorf("gpu row after %d retries: weak %v, top %s (%.0f%%, %.1f ms added per tail gap, at least %.1f): exit %d", r.Retry, r.Weak, r.JudgedTop(), 100*r.JudgedShare(), r.AddedMs, v.MinAddedMs, code)
	}
	if !strings.Contains(stdout, "too weak to judge before") {
		t.Errorf("the output does not say the row was retried")
	}
}

// The server's network namespace, its veth pair and the shaping go on
// SIGTERM in the middle of the net phase and when the validation ends in
// an error; after a SIGKILL the server dies with bpfbench and the next
// run sweeps what was left.
func TestValidateSimNetnsCleanup(t *testing.T) {
	privtest.Require(t)
	privtest.RequireTool(t, "ip", "apt-get install iproute2")
	privtest.RequireTool(t, "tc", "apt-get install iproute2")
	simBinaries(t)
	failing := func(t *testing.T) string {
		t.Helper()
		code, stdout, stderr := runCLIChild("validate", "--sim", "--phase", "2s", "--skip", "cpu,gpu,client,net,client-cpu",
			"--io-file", "/nonexistent/kv.img", "--out", t.TempDir())
		if code == 0 {
			t.Fatalf("exit 0 with a missing --io-file: %s", stdout)
		}
		t.Logf("exit %d: %s", code, strings.TrimSpace(stderr))
		return stdout
	}
	t.Run("sigterm", func(t *testing.T) {
		v := startUntilNet(t)
		_ = v.cmd.Process.Signal(syscall.SIGTERM)
		v.wait(t)
		t.Logf("exit %d after SIGTERM\n%s%s", v.cmd.ProcessState.ExitCode(), v.first, v.stderr.String())
		checkGone(t, v.ns, v.iface, v.host)
	})
	t.Run("error", func(t *testing.T) {
		checkSimNetGone(t, failing(t))
	})
	t.Run("sigkill", func(t *testing.T) {
		v := startUntilNet(t)
		_ = v.cmd.Process.Signal(syscall.SIGKILL)
		v.wait(t)
		if !testutil.Until(5*time.Second, func() bool { return syscall.Kill(v.serverPid, 0) != nil }) {
			t.Fatalf("llmsim (pid %d) outlived bpfbench's SIGKILL by 5s", v.serverPid)
		}
		if _, err := os.Stat(filepath.Join("/run/netns", v.ns)); err != nil {
			t.Logf("network namespace %s already gone after SIGKILL: %v", v.ns, err)
		}
		checkSimNetGone(t, failing(t))
		checkGone(t, v.ns, v.iface, v.host)
	})
}

// validateProc is a validate --sim process running in the background.
type validateProc struct {
	cmd             *exec.Cmd
	first           string
	stderr          strings.Builder
	ns, iface, host string
	serverPid       int
}

// startUntilNet starts validate --sim with only the net row and returns
// once the net phase shapes the server's interface.
func startUntilNet(t *testing.T) *validateProc {
	t.Helper()
	v := &validateProc{cmd: cliCmd("validate", "--sim", "--phase", "3s", "--skip", "cpu,io,gpu,client,client-cpu", "--out", t.TempDir())}
	out, err := v.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	v.cmd.Stderr = &v.stderr
	if err := v.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if v.cmd.ProcessState == nil {
			_ = v.cmd.Process.Kill()
			_ = v.cmd.Wait()
		}
	})
	r := bufio.NewReader(out)
	if v.first, err = r.ReadString('\n'); err != nil {
		t.Fatalf("no first line: %v %s", err, v.stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, r) }()
	v.ns, v.iface, v.host = simNetOf(t, v.first)
	if _, err := fmt.Sscanf(v.first[strings.Index(v.first, "(pid "):], "(pid %d)", &v.serverPid); err != nil {
		t.Fatalf("no server pid in %q: %v", v.first, err)
	}
	// The tbf's state file is there while the net phase shapes.
	state := filepath.Join(perturb.DefaultStateDir, fmt.Sprintf("tbf-%s-%s.json", v.ns, v.iface))
	if !testutil.Until(30*time.Second, func() bool { _, err := os.Stat(state); return err == nil }) {
		t.Fatalf("the net phase did not start within 30s: %s", v.stderr.String())
	}
	// The state file is written, then the qdisc installed.
	var qdisc []byte
	testutil.Until(5*time.Second, func() bool {
		qdisc, _ = exec.Command("tc", "-n", v.ns, "qdisc", "show", "dev", v.iface).CombinedOutput()
		return strings.Contains(string(qdisc), "tbf")
	})
	if !strings.Contains(string(qdisc), "tbf") {
		t.Errorf("no tbf on %s during the net phase: %s", v.iface, qdisc)
	}
	return v
}

func (v *validateProc) wait(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = v.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = v.cmd.Process.Kill()
		<-done
		t.Fatalf("validate did not exit within 30s")
	}
}

var simNetLine = regexp.MustCompile(`in network namespace (\S+) \(veth (\S+), host side (\S+)\)`)

func simNetOf(t *testing.T, stdout string) (ns, iface, host string) {
	t.Helper()
	m := simNetLine.FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("llmsim not in a network namespace of its own: %q", stdout)
	}
	return m[1], m[2], m[3]
}

// checkSimNetGone checks that the namespace a validate --sim run printed,
// its veth pair and their state files are gone.
func checkSimNetGone(t *testing.T, stdout string) {
	t.Helper()
	ns, iface, host := simNetOf(t, stdout)
	checkGone(t, ns, iface, host)
}

func checkGone(t *testing.T, ns, iface, host string) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil || regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(ns)+`\b`).Match(out) {
		t.Errorf("network namespace %s left behind (ip netns list: %v): %s", ns, err, out)
	}
	if out, err := exec.Command("ip", "-o", "link").CombinedOutput(); err != nil || strings.Contains(string(out), " "+host+"@") || strings.Contains(string(out), " "+host+":") {
		t.Errorf("veth %s left behind (ip link: %v): %s", host, err, out)
	}
	for _, f := range []string{fmt.Sprintf("tbf-%s-%s.json", ns, iface), "simnet-" + ns + ".json"} {
		if _, err := os.Stat(filepath.Join(perturb.DefaultStateDir, f)); err == nil {
			t.Errorf("state file %s left behind", f)
		}
	}
}

func pct(f float64) string { return fmt.Sprintf("%.0f%%", f*100) }
