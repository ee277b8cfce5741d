package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/host"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
	"github.com/bpfbench/bpfbench/llmsim/simtest"
	"github.com/bpfbench/bpfbench/perturb"
)

// faultEnv marks the processes of one fault case: every child bpfbench
// starts inherits its environment, so the mark finds them wherever they
// are re-parented.
const faultEnv = "BPFBENCH_FAULT_CASE"

// faultCmd is a command of the fault matrix.
type faultCmd struct {
	name string
	args func(out string) []string
	// mid is a moment inside the command's work (a phase, the load).
	mid time.Duration
	// planned commands exit 130 on SIGTERM and SIGINT, the others 0.
	planned bool
}

// The fault matrix: each command is ended by SIGTERM and SIGKILL while it
// loads, and by SIGINT and SIGKILL in the middle of its work. After each, nothing of
// it is left: no process (the mark of its environment), no BPF program or
// link it held, no probe event, no network namespace, veth or qdisc it
// made, no record of a dead owner in the state directory, no temporary
// file in its --out, no file in the source tree; and its exit status is
// the one docs/usage.md gives (130 for a planned command on SIGTERM and
// SIGINT, 0 for attach, perturb and the daemon; SIGKILL: killed).
func TestFaultMatrix(t *testing.T) {
	privtest.Require(t)
	if runtime.NumCPU() < 2 {
		privtest.SkipOptional(t, "needs 2 CPUs (validate and demo pin the server to one), have %d", runtime.NumCPU())
	}
	privtest.RequireTool(t, "ip", "apt-get install iproute2")
	privtest.RequireTool(t, "tc", "apt-get install iproute2")
	simBinaries(t)
	addr, pid := simtest.StartProcess(t, t.TempDir(), "--itl", "5ms")
	url := "http://" + addr
	ns, iface := faultNetns(t)
	scratch := t.TempDir()
	cmds := []faultCmd{
		{name: "run", mid: 4 * time.Second, planned: true, args: func(out string) []string {
			return []string{"run", "--target", url, "--pid", strconv.Itoa(pid), "--duration", "10s", "--rate", "4", "--output-len", "16", "--no-progress", "--out", out}
		}},
		{name: "attach", mid: 3 * time.Second, args: func(string) []string {
			return []string{"attach", strconv.Itoa(pid), "--duration", "30s"}
		}},
		{name: "sweep", mid: 4 * time.Second, planned: true, args: func(out string) []string {
			return []string{"sweep", "--target", url, "--slo", "p99_ttft_ms<=5000", "--requests-per-step", "400", "--output-len", "8", "--no-progress", "--out", out}
		}},
		{name: "demo", mid: 9 * time.Second, planned: true, args: func(out string) []string {
			return []string{"demo", "--no-progress", "--out", out}
		}},
		{name: "validate", mid: 9 * time.Second, planned: true, args: func(out string) []string {
			return []string{"validate", "--sim", "--phase", "3s", "--no-progress", "--out", out}
		}},
		{name: "perturb cpu", mid: 2 * time.Second, args: func(string) []string {
			return []string{"perturb", "cpu", "--threads", "1", "--cpus", "0"}
		}},
		{name: "perturb io", mid: 2 * time.Second, args: func(string) []string {
			return []string{"perturb", "io", "--dir", scratch, "--size", "16mb", "--depth", "2"}
		}},
		{name: "perturb net", mid: 2 * time.Second, args: func(string) []string {
			return []string{"perturb", "net", "--iface", iface, "--netns", ns, "--rate", "8mbit"}
		}},
		{name: "perturb client", mid: 2 * time.Second, args: func(string) []string {
			return []string{"perturb", "client", "--target", url, "--read-rate", "2000"}
		}},
		{name: "daemon", mid: 3 * time.Second, args: func(string) []string {
			return []string{"daemon", "--web.listen-address", "127.0.0.1:0"}
		}},
	}
	n := 0
	for _, c := range cmds {
		for _, k := range []struct {
			sig syscall.Signal
			at  time.Duration
		}{{syscall.SIGTERM, 700 * time.Millisecond}, {syscall.SIGKILL, 700 * time.Millisecond}, {syscall.SIGINT, c.mid}, {syscall.SIGKILL, c.mid}} {
			n++
			t.Run(fmt.Sprintf("%s/%s at %v", c.name, k.sig, k.at), func(t *testing.T) {
				faultCase(t, n, c, k.sig, k.at, ns, iface)
			})
		}
	}
}

// faultNetns makes a network namespace with a veth pair for perturb net
// to shape (its v0 end), removed at the test's end.
func faultNetns(t *testing.T) (ns, iface string) {
	t.Helper()
	sweepFaultNetns(t)
	ns = fmt.Sprintf("bpfbench-fault-%d", os.Getpid())
	for _, c := range [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1"},
		{"-n", ns, "link", "set", "v0", "up"},
		{"-n", ns, "link", "set", "v1", "up"},
	} {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(c, " "), err, out)
		}
		if c[0] == "netns" {
			t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		}
	}
	return ns, "v0"
}

// sweepFaultNetns removes the namespaces of earlier test processes that
// are gone: a test binary killed by a signal runs no cleanup.
func sweepFaultNetns(t *testing.T) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		pid, ok := strings.CutPrefix(name, "bpfbench-fault-")
		if !ok {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue
		}
		if err := exec.Command("ip", "netns", "del", name).Run(); err == nil {
			t.Logf("removed %s, left by a test process that was killed", name)
		}
	}
}

// faultCase starts c, sends sig after at, and checks what is left.
func faultCase(t *testing.T, n int, c faultCmd, sig syscall.Signal, at time.Duration, ns, iface string) {
	out := filepath.Join(t.TempDir(), "out")
	mark := fmt.Sprintf("%s=%d-%d", faultEnv, os.Getpid(), n)
	before := snapshotLeftovers(t)
	cmd := cliCmd(c.args(out)...)
	cmd.Env = append(cmd.Env, mark)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	bpf := watchBPF(cmd.Process.Pid)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("%s ended before the signal: %v\nstdout:\n%s\nstderr:\n%s", c.name, err, stdout.String(), stderr.String())
	case <-time.After(at):
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("%s did not end within 90 s of %v", c.name, sig)
	}
	code := cmd.ProcessState.ExitCode()
	want := 0
	if c.planned {
		want = statusInterrupted
	}
	if sig == syscall.SIGKILL {
		want = -1
	}
	if code != want {
		t.Errorf("exit status %d after %v, want %d\nstderr:\n%.2000s", code, sig, want, stderr.String())
	}
	var left []string
	testutil.Until(30*time.Second, func() bool {
		left = faultLeft(mark, out, ns, iface)
		return len(left) == 0
	})
	if len(left) > 0 {
		t.Errorf("after %v: left %s\nstderr:\n%.2000s", sig, strings.Join(left, "; "), stderr.String())
	}
	before.check(t, c.name+" ended by "+sig.String(), bpf())
}

// faultLeft lists what a fault case left: its processes, the namespaces,
// veth pairs and qdiscs bpfbench makes, dead owners' records, and
// temporary files in out.
func faultLeft(mark, out, ns, iface string) []string {
	var left []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !strings.Contains("\x00"+string(env)+"\x00", "\x00"+mark+"\x00") {
			continue
		}
		st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		if f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:])); len(f) > 0 && f[0] == "Z" {
			continue // exited, not reaped yet
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		left = append(left, fmt.Sprintf("process %d (%s)", p, strings.ReplaceAll(strings.TrimSpace(string(cmdline)), "\x00", " ")))
	}
	if b, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(b), "bpfbench-sim-") {
		left = append(left, "network namespace "+strings.TrimSpace(string(b)))
	}
	if b, _ := exec.Command("ip", "-o", "link", "show").Output(); strings.Contains(string(b), "bbsim") {
		left = append(left, "a bbsim veth")
	}
	if b, _ := exec.Command("tc", "-n", ns, "qdisc", "show", "dev", iface).Output(); strings.Contains(string(b), "tbf") {
		left = append(left, "the tbf on "+iface+": "+strings.TrimSpace(string(b)))
	}
	for _, l := range host.Leftovers(perturb.DefaultStateDir) {
		if !l.Alive {
			left = append(left, fmt.Sprintf("%s of a dead owner (%s, %s)", l.What, l.Owner, l.State))
		}
	}
	if tmps, _ := filepath.Glob(filepath.Join(out, ".*.tmp-*")); len(tmps) > 0 {
		left = append(left, "temporary files "+strings.Join(tmps, ", "))
	}
	return left
}
