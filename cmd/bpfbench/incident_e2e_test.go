package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/incident"
	"github.com/bpfbench/bpfbench/internal/clock"
	"github.com/bpfbench/bpfbench/internal/engine"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
)

// A contention injected into a live engine while nobody watches leaves one
// incident bundle: the daemon follows llama-server (pinned to CPU 0, four
// streams of an independent client), its rule (gap p99 at least twice the
// normal for 8 s) fires during 20 s of two busy loops on the engine's CPU,
// and the cool-down holds back its later firings. The bundle's verdict
// names cpu_runqueue and the busy loops, its window covers the injection,
// `bpfbench report` prints it, headless Chromium opens its report, and
// `bpfbench incidents` lists it. The daemon's CPU while recording is
// logged.
func TestDaemonIncidentOfInjectedContention(t *testing.T) {
	privtest.Require(t)
	taskset := privtest.RequireTool(t, "taskset", "apt-get install util-linux")
	paths, err := engine.Find()
	if err != nil {
		privtest.SkipOptional(t, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	srv, err := engine.Start(ctx, engine.Options{Paths: paths, Threads: 1, Slots: 4, CtxSize: 2048, CPUs: "0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)

	dir := t.TempDir()
	spool := filepath.Join(dir, "incidents")
	cfg := filepath.Join(dir, "config.yaml")
	body := fmt.Sprintf(`refresh_interval: 500ms
targets:
  - {name: llama, pid: %d}
incidents:
  dir: %s
  after: 5s
  rule: {p99_times_normal: 2, for: 8s, over: 5s}
`, srv.Pid, spool)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "--config", cfg, "--cpus", "1")
	metrics := "http://" + d.addr + "/metrics"
	testutil.WaitMetric(t, metrics, `bpfbench_incident_recorder_gaps{target="llama"}`, 30*time.Second)
	client := startLiveStreams("127.0.0.1:"+strconv.Itoa(srv.Port), 4)
	t.Cleanup(client.stop)

	// 25 s of normal gaps (the rolling baseline's 10 s windows), then
	// 20 s of two busy loops on the engine's CPU. A shared host can spoil
	// the normal windows (their p99 already high): with no bundle, the
	// injection runs once more after 15 s of normal gaps.
	time.Sleep(25 * time.Second)
	var list []incident.Summary
	var injected, ended int64
	var load string
	for try := 1; try <= 2 && len(list) == 0; try++ {
		if try > 1 {
			t.Logf("no incident bundle after the injection (gaps %.0f, unwalked %.0f; load before it: %s): once more after 15 s of normal gaps",
				testutil.Value(metrics, "bpfbench_token_gap_seconds_count", `target="llama"`),
				testutil.Value(metrics, "bpfbench_live_gaps_unwalked_total", `target="llama"`), load)
			time.Sleep(15 * time.Second)
		}
		load = hostLoad() // for a failure: the normal gap is judged on an otherwise idle CPU 0
		injected, ended, list = injectContention(t, taskset, d, spool)
	}
	// What the daemon's live view said of the gaps (for a failure).
	said := fmt.Sprintf("gaps %.0f, unwalked %.0f, incidents held back %.0f; client: %s; load before the injection: %s",
		testutil.Value(metrics, "bpfbench_token_gap_seconds_count", `target="llama"`),
		testutil.Value(metrics, "bpfbench_live_gaps_unwalked_total", `target="llama"`),
		testutil.Value(metrics, "bpfbench_incidents_held_back_total", `target="llama"`), client, load)
	client.stop()
	d.stop(t)
	list, err = incident.List(spool)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Incident == nil {
		t.Fatalf("%d incident bundles, want exactly one (the cool-down holds back the rest): %+v; %s\n%s", len(list), list, said, d.logs)
	}
	t.Log(said)
	in := list[0].Incident
	t.Logf("incident: %s (trigger %s, held %.0f s, window %.0f..%.0f s, breach from %.0f s, %d gaps, %d paths); breach neighbours %+v; daemon %d",
		in.Verdict, in.Trigger, in.HeldSeconds, in.WindowStartS, in.WindowEndS, in.BreachStartS, in.Gaps, in.Paths, in.BreachNeighbours, d.cmd.Process.Pid)
	if in.Trigger != incident.TriggerRule || in.Target != "llama" {
		t.Errorf("trigger %s of %s, want the rule of llama", in.Trigger, in.Target)
	}
	if !strings.Contains(in.Verdict, "cpu_runqueue") || !strings.Contains(in.Verdict, "behind sh[") {
		t.Errorf("verdict %q does not name cpu_runqueue behind a busy loop (sh)", in.Verdict)
	}
	if in.FromNs > injected || in.ToNs < injected+8e9 || in.TriggerNs < injected || in.TriggerNs > ended {
		t.Errorf("window [%d, %d] triggered at %d does not cover the injection from %d to %d", in.FromNs, in.ToNs, in.TriggerNs, injected, ended)
	}
	if !strings.Contains(d.logs.String(), in.Verdict) {
		t.Errorf("the daemon did not log the verdict")
	}

	// bpfbench report prints it; bpfbench incidents lists it.
	code, stdout, stderr := runCLI("report", list[0].Dir)
	if code != 0 || !strings.Contains(stdout, in.Verdict) {
		t.Errorf("report %s: exit %d: %s\n%s", list[0].Dir, code, stderr, stdout)
	}
	code, stdout, stderr = runCLI("incidents", "--dir", spool)
	if code != 0 || !strings.Contains(stdout, list[0].Dir) {
		t.Errorf("incidents: exit %d: %s\n%s", code, stderr, stdout)
	}
	// bpfbench diff compares it with another run or incident (here, itself).
	if code, stdout, stderr = runCLI("diff", list[0].Dir, list[0].Dir); code != 0 {
		t.Errorf("diff of the bundle with itself: exit %d: %s\n%s", code, stderr, stdout)
	}
	openInChromium(t, filepath.Join(list[0].Dir, "report.html"), "cpu_runqueue")
}

// injectContention runs two busy loops on CPU 0 for 20 s, logs the
// daemon's CPU meanwhile, and waits up to 30 s for an incident bundle
// (written 5 s after the trigger), then 5 s more; it returns when the
// loops ran and the bundles in spool.
func injectContention(t *testing.T, taskset string, d *daemonProc, spool string) (injected, ended int64, list []incident.Summary) {
	t.Helper()
	cpu0 := procCPUSeconds(t, d.cmd.Process.Pid)
	injected = clock.Now()
	var busyPids []int
	for range 2 {
		c := exec.Command(taskset, "-c", "0", "sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		busyPids = append(busyPids, c.Process.Pid)
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	}
	time.Sleep(20 * time.Second)
	for _, pid := range busyPids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	ended = clock.Now()
	cpu := procCPUSeconds(t, d.cmd.Process.Pid) - cpu0
	t.Logf("the daemon's CPU while recording the contention: %.2f%% of a CPU over %.0f s; busy loops %v", 100*cpu/(float64(ended-injected)/1e9), float64(ended-injected)/1e9, busyPids)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if list, _ = incident.List(spool); len(list) > 0 {
			break
		}
		time.Sleep(time.Second)
	}
	time.Sleep(5 * time.Second)
	return injected, ended, list
}

// hostLoad is the host's load average and its busiest processes.
func hostLoad() string {
	load, _ := os.ReadFile("/proc/loadavg")
	if out, err := exec.Command("ps", "-eo", "pid,psr,pcpu,etimes,comm", "--sort=-pcpu").Output(); err == nil {
		lines := strings.SplitN(string(out), "\n", 7)
		load = append(load, strings.Join(lines[:min(len(lines), 6)], "; ")...)
	}
	return string(load)
}

// openInChromium loads a page in headless Chromium and checks its DOM
// has want.
func openInChromium(t *testing.T, page, want string) {
	t.Helper()
	chromium := "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		privtest.SkipOptional(t, "needs Debian's chromium at %s (apt-get install chromium)", chromium)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+t.TempDir(), "--dump-dom", "file://"+page).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v", page, err)
	}
	if !strings.Contains(string(out), want) {
		t.Errorf("the report's DOM in Chromium (%d bytes) has no %q", len(out), want)
	}
}

// procCPUSeconds is a process's CPU time (collectors.TreeCPU: user and
// system, and its reaped children's).
func procCPUSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	ns, n := collectors.TreeCPU("/proc", []int{pid})
	if n == 0 {
		t.Fatalf("no /proc/%d/stat", pid)
	}
	return float64(ns) / 1e9
}
