package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
	"github.com/bpfbench/bpfbench/live"
)

// The daemon's live views share one session: with eight targets (two
// llmsim servers and six idle processes) the daemon holds exactly the
// eBPF programs and links it holds with one target (counted from the
// kernel's side: the program and link ids of the daemon's file
// descriptors), and each target's spans reach its own view: streams to
// the second server are gaps of its target, none of the first's.
func TestDaemonLiveTargetsShareOneProgramSet(t *testing.T) {
	privtest.Require(t)
	taskset := privtest.RequireTool(t, "taskset", "apt-get install util-linux")
	sleep := privtest.RequireTool(t, "sleep", "apt-get install coreutils")
	simBinaries(t)
	dir := t.TempDir()
	_, pidA := startCPUSim(t, taskset, dir)
	dirB := filepath.Join(dir, "b")
	if err := os.Mkdir(dirB, 0o755); err != nil {
		t.Fatal(err)
	}
	addrB, pidB := startCPUSim(t, taskset, dirB)
	names := []string{"a", "b"}
	targets := []string{fmt.Sprintf("  - {name: a, pid: %d}\n", pidA), fmt.Sprintf("  - {name: b, pid: %d}\n", pidB)}
	for i := range 6 {
		c := exec.Command(sleep, "300")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		names = append(names, fmt.Sprintf("idle%d", i))
		targets = append(targets, fmt.Sprintf("  - {name: %s, pid: %d}\n", names[len(names)-1], c.Process.Pid))
	}
	count := func(n int) (progs, links int) {
		t.Helper()
		cfg := filepath.Join(dir, fmt.Sprintf("config-%d.yaml", n))
		body := "refresh_interval: 500ms\ntargets:\n" + strings.Join(targets[:n], "")
		if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		d := startDaemon(t, "--config", cfg, "--cpus", "1")
		metrics := "http://" + d.addr + "/metrics"
		for _, name := range names[:n] {
			testutil.WaitMetric(t, metrics, fmt.Sprintf(`bpfbench_streams_active{target=%q}`, name), 30*time.Second)
		}
		// A settled count: the same twice, half a second apart (a
		// session's start loads and closes probe programs of its own,
		// such as the uprobe cost's, for a moment).
		progs, links = bpfFDs(t, d.cmd.Process.Pid)
		for range 20 {
			time.Sleep(500 * time.Millisecond)
			p, l := bpfFDs(t, d.cmd.Process.Pid)
			if p == progs && l == links {
				break
			}
			progs, links = p, l
		}
		t.Logf("%d live targets: the daemon holds %d programs and %d links", n, progs, links)
		if n > 1 {
			routed(t, metrics, addrB)
		}
		d.stop(t)
		return progs, links
	}
	p1, l1 := count(1)
	p8, l8 := count(8)
	if p8 != p1 || l8 != l1 {
		t.Errorf("8 live targets: %d programs and %d links, 1 live target: %d and %d; want the same", p8, l8, p1, l1)
	}
}

// routed streams from the server at addrB (target b) and checks that its
// gaps are b's and that target a, which nobody streams from, has none.
func routed(t *testing.T, metrics, addrB string) {
	t.Helper()
	client := startLiveStreams(addrB, 2)
	defer client.stop()
	gaps := func(target string) float64 {
		return testutil.Value(metrics, "bpfbench_token_gap_seconds_count", fmt.Sprintf("target=%q", target))
	}
	if !testutil.Until(20*time.Second, func() bool { return gaps("b") >= 100 }) {
		t.Errorf("target b: %.0f gaps walked after 20 s of streams to it, want 100 or more", gaps("b"))
	}
	client.stop()
	if a := gaps("a"); a != 0 {
		t.Errorf("target a: %.0f gaps, want none (only b's server was streamed from)", a)
	}
	t.Logf("gaps: b %.0f, a %.0f; client %s", gaps("b"), gaps("a"), client)
}

// bpfFDs counts the distinct eBPF programs and links pid holds open, from
// its file descriptors' fdinfo (prog_id, link_id).
func bpfFDs(t *testing.T, pid int) (progs, links int) {
	t.Helper()
	fdDir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	p, l := map[string]bool{}, map[string]bool{}
	for _, e := range ents {
		f, err := os.Open(filepath.Join(fdDir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			switch k {
			case "prog_id":
				p[v] = true
			case "link_id":
				l[v] = true
			}
		}
		f.Close()
	}
	return len(p), len(l)
}

// attach beside a running daemon: both follow one llmsim server that a
// client streams from; attach says it runs beside the daemon (two
// readers), walks the streams' gaps, and the daemon's view of the same
// target goes on counting meanwhile.
func TestAttachBesideTheDaemon(t *testing.T) {
	privtest.Require(t)
	taskset := privtest.RequireTool(t, "taskset", "apt-get install util-linux")
	simBinaries(t)
	dir := t.TempDir()
	addr, pid := startCPUSim(t, taskset, dir)
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("refresh_interval: 500ms\ntargets:\n  - {name: sim, pid: %d}\n", pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "--config", cfg, "--cpus", "1")
	metrics := "http://" + d.addr + "/metrics"
	testutil.WaitMetric(t, metrics, `bpfbench_streams_active{target="sim"}`, 30*time.Second)
	client := startLiveStreams(addr, 2)
	defer client.stop()
	gaps := func() float64 {
		return testutil.Value(metrics, "bpfbench_token_gap_seconds_count", `target="sim"`)
	}
	before := gaps()
	code, stdout, stderr := runCLIChild("attach", strconv.Itoa(pid), "--duration", "6s", "-o", "json", "--cpus", "1")
	if code != 0 {
		t.Fatalf("attach beside the daemon: exit %d\n%s", code, stderr)
	}
	var r live.Result
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("attach's JSON: %v\n%s", err, stdout)
	}
	after := gaps()
	t.Logf("attach: %d gaps walked; the daemon's gaps meanwhile %.0f -> %.0f", r.Live.Gaps, before, after)
	if !strings.Contains(stderr, "two readers") || !strings.Contains(stderr, strconv.Itoa(d.cmd.Process.Pid)) {
		t.Errorf("attach did not say it runs beside the daemon (pid %d):\n%s", d.cmd.Process.Pid, stderr)
	}
	if r.Live.Gaps < 50 {
		t.Errorf("attach walked %d gaps of 6 s of two streams, want 50 or more", r.Live.Gaps)
	}
	if after-before < 50 {
		t.Errorf("the daemon's gaps grew by %.0f while attach ran, want 50 or more", after-before)
	}
}
