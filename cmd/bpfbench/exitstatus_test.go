package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
	"github.com/bpfbench/bpfbench/llmsim/sim"
)

// Every duration, rate, length and ratio flag out of its range is a usage
// error (exit 2), one line naming the flag and the range.
func TestFlagRanges(t *testing.T) {
	target := "http://127.0.0.1:1"
	load := func(extra ...string) []string {
		return append([]string{"load", "--target", target, "--num-requests", "2"}, extra...)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"rate 0", load("--rate", "0"), "--rate 0: give a rate in requests/s above 0, or inf"},
		{"rate -1", load("--rate", "-1"), "--rate -1: give a rate in requests/s above 0"},
		{"timeout 0 is none, -1s refused", load("--timeout", "-1s"), "--timeout -1s: give 0 (none) or more"},
		{"stall-timeout", load("--stall-timeout", "-1s"), "--stall-timeout -1s: give 0 (never) or more"},
		{"header-timeout", load("--header-timeout", "-5s"), "--header-timeout -5s: give 0 (never) or more"},
		{"output-len", load("--output-len", "-5"), "--output-len -5: give 1 or more tokens"},
		{"input-len", load("--input-len", "0"), "--input-len 0: give 1 or more tokens"},
		{"duration", load("--duration", "-1s"), "--duration -1s: give 0"},
		{"num-requests", load("--num-requests", "-3"), "--num-requests -3: give 0"},
		{"max-concurrency", load("--max-concurrency", "-1"), "--max-concurrency -1: give 0 (no cap) or more"},
		{"range-ratio", load("--range-ratio", "1.5"), "--range-ratio 1.5: give a fraction in [0, 1)"},
		{"max-failed-ratio", load("--max-failed-ratio", "2"), "--max-failed-ratio 2: give a fraction in [0, 1]"},
		{"attach duration", []string{"attach", "1", "--duration", "-2s"}, "--duration -2s: give 0 (until Ctrl-C or the target exits) or more"},
		{"attach interval", []string{"attach", "1", "--interval", "0s"}, "--interval 0s: give a period above 0"},
		{"run rate", []string{"run", "--target", target, "--pid", "1", "--rate", "0", "--out", dir}, "--rate 0"},
		{"run baseline", []string{"run", "--target", target, "--pid", "1", "--baseline-itl-ms", "-1", "--out", dir}, "--baseline-itl-ms -1: give 0"},
		{"run metrics period", []string{"run", "--target", target, "--pid", "1", "--server-metrics-period", "5s", "--out", dir}, "--server-metrics-period 5s: give 250ms to 1s"},
		{"run spool", []string{"run", "--target", target, "--pid", "1", "--spool-mib", "-1", "--out", dir}, "--spool-mib -1"},
		{"sweep precision", []string{"sweep", "--target", target, "--slo", "p99_ttft_ms<=500", "--precision", "0"}, "--precision 0: give a fraction above 0 and below 1"},
		{"sweep requests", []string{"sweep", "--target", target, "--slo", "p99_ttft_ms<=500", "--requests-per-step", "0"}, "--requests-per-step 0: give 1 or more"},
		{"sweep stall", []string{"sweep", "--target", target, "--slo", "p99_ttft_ms<=500", "--stall-timeout", "-1s"}, "--stall-timeout -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(tc.args...)
			if line := oneLine(t, stderr); code != statusUsage || !strings.Contains(line, tc.want) {
				t.Errorf("exit %d, %q; want exit 2 saying %q", code, line, tc.want)
			}
		})
	}
}

// A load whose requests all fail writes its result and exits 3; with
// --max-failed-ratio 1 it exits 0.
func TestLoadBelowThreshold(t *testing.T) {
	url := inProcessSim(t, func(c *sim.Config) { c.FailRate = 1 })
	out := filepath.Join(t.TempDir(), "result.json")
	code, stdout, stderr := runCLI("load", "--target", url, "--num-requests", "5", "--output-len", "2", "--input-len", "4", "--result", out)
	if code != statusThreshold || !strings.Contains(stderr, "5 of 5 requests failed (100%), more than --max-failed-ratio 0.1 allows") {
		t.Errorf("exit %d, stderr %q: want 3 and the failed share", code, stderr)
	}
	if m := readJSON(t, out); m["failed"] != 5.0 || !strings.Contains(stdout, "result written to "+out) {
		t.Errorf("result: failed %v; stdout:\n%s", m["failed"], stdout)
	}
	code, _, stderr = runCLI("load", "--target", url, "--num-requests", "3", "--output-len", "2", "--input-len", "4", "--max-failed-ratio", "1")
	if code != statusOK {
		t.Errorf("--max-failed-ratio 1: exit %d, %q", code, stderr)
	}
}

// A run whose requests all fail writes its directory and exits 3.
func TestRunBelowThreshold(t *testing.T) {
	privtest.Require(t)
	url := inProcessSim(t, func(c *sim.Config) { c.FailRate = 1 })
	dir := t.TempDir()
	code, stdout, stderr := runCLI("run", "--target", url, "--pid", strconv.Itoa(os.Getpid()), "--num-requests", "5", "--out", dir)
	if code != statusThreshold || !strings.Contains(stderr, "5 of 5 requests failed") {
		t.Fatalf("exit %d, stderr %q: want 3", code, stderr)
	}
	if m := readJSON(t, filepath.Join(dir, "result.json")); m["failed"] != 5.0 {
		t.Errorf("result.json: failed %v", m["failed"])
	}
	if !strings.Contains(stdout, "wrote "+filepath.Join(dir, "trace.json")) {
		t.Errorf("stdout does not list the files:\n%s", stdout)
	}
}

// SIGINT ends a load early: what was measured is written and the exit
// status is 130.
func TestLoadInterrupted(t *testing.T) {
	url, served := countingSim(t)
	out := filepath.Join(t.TempDir(), "result.json")
	code, stdout, stderr := interrupt(t, func() bool { return served.Load() >= 5 }, "load", "--target", url, "--rate", "20",
		"--num-requests", "100000", "--output-len", "4", "--input-len", "4", "--result", out)
	if code != statusInterrupted || !strings.Contains(stderr, "bpfbench load: interrupted") {
		t.Fatalf("exit %d, stderr %q: want 130", code, stderr)
	}
	m := readJSON(t, out)
	if c, _ := m["completed"].(float64); c < 1 || !strings.Contains(stdout, "result written to "+out) {
		t.Errorf("completed %v; stdout:\n%s", m["completed"], stdout)
	}
}

// SIGINT ends a run early: its directory is written, exit status 130.
func TestRunInterrupted(t *testing.T) {
	privtest.Require(t)
	url, served := countingSim(t)
	dir := t.TempDir()
	code, stdout, stderr := interrupt(t, func() bool { return served.Load() >= 5 }, "run", "--target", url, "--pid", strconv.Itoa(os.Getpid()), "--rate", "20",
		"--num-requests", "100000", "--output-len", "4", "--input-len", "4", "--out", dir)
	if code != statusInterrupted {
		t.Fatalf("exit %d, stderr %q: want 130", code, stderr)
	}
	doc := readJSON(t, filepath.Join(dir, "result.json"))
	if c, _ := doc["completed"].(float64); c < 1 {
		t.Errorf("result.json: completed %v", doc["completed"])
	}
	for _, f := range []string{"trace.json", "report.html"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil || !strings.Contains(stdout, filepath.Join(dir, f)) {
			t.Errorf("%s: %v; stdout:\n%s", f, err, stdout)
		}
	}
	noTemporaries(t, dir)
}

// interrupt runs the CLI as a child and sends it SIGINT once ready says
// so (polled), then returns what it did.
func interrupt(t *testing.T, ready func() bool, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := cliCmd(args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	deadline := time.Now().Add(time.Minute)
	for !ready() {
		select {
		case <-done:
			t.Fatalf("%v ended before it was interrupted: %s\n%s", args, o.String(), e.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			t.Fatalf("%v: not ready within a minute: %s", args, e.String())
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%v: still running a minute after SIGINT", args)
	}
	return cmd.ProcessState.ExitCode(), o.String(), e.String()
}

// countingSim serves llmsim from this process and counts the requests
// it finished.
func countingSim(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Work = sim.WorkSleep
	cfg.DecodeStep = 5 * time.Millisecond
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	h := s.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if strings.HasSuffix(r.URL.Path, "/completions") {
			n.Add(1)
		}
	}))
	t.Cleanup(func() { ts.CloseClientConnections(); ts.Close(); s.Close() })
	return ts.URL, &n
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// noTemporaries fails when dir holds a temporary file.
func noTemporaries(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("%s left in %s", e.Name(), dir)
		}
	}
}

// A run onto a full file system fails (exit 1), saying which file could
// not be written and why; it claims no file it did not write whole, and
// leaves no truncated JSON and no temporary file.
func TestRunOntoAFullDisk(t *testing.T) {
	dir := privtest.Tmpfs(t, "1m")
	url := inProcessSim(t, nil)
	// The directory takes a file (the run checks it can write there), but
	// not the run's: 64 KiB are left free.
	fill(t, filepath.Join(dir, "filler"), 1<<20-64<<10)
	code, stdout, stderr := runCLI("run", "--target", url, "--pid", strconv.Itoa(os.Getpid()), "--num-requests", "200",
		"--rate", "100", "--output-len", "32", "--out", dir)
	if code != statusError || !strings.Contains(stderr, "no space left on device") || !strings.Contains(stderr, "writing "+dir+"/") {
		t.Fatalf("exit %d, stderr %q: want 1 and which file could not be written", code, stderr)
	}
	checkClaims(t, dir, stdout)
	noTemporaries(t, dir)
}

// load --result onto a full file system: the same.
func TestLoadOntoAFullDisk(t *testing.T) {
	dir := privtest.Tmpfs(t, "1m")
	url := inProcessSim(t, nil)
	fill(t, filepath.Join(dir, "filler"), 1<<20-16<<10)
	out := filepath.Join(dir, "result.json")
	code, stdout, stderr := runCLI("load", "--target", url, "--num-requests", "100", "--output-len", "16", "--input-len", "4", "--result", out)
	if code != statusError || !strings.Contains(stderr, "writing "+out+": no space left on device") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if strings.Contains(stdout, "result written") {
		t.Errorf("stdout claims the result:\n%s", stdout)
	}
	checkClaims(t, dir, stdout)
	noTemporaries(t, dir)
}

// checkClaims checks that every JSON file of dir parses and that every
// file a "wrote" line of stdout names exists.
func checkClaims(t *testing.T, dir, stdout string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			if !json.Valid(b) {
				t.Errorf("%s is not valid JSON (%d bytes): truncated", e.Name(), len(b))
			}
		}
	}
	for _, l := range strings.Split(stdout, "\n") {
		if !strings.HasPrefix(l, "wrote ") {
			continue
		}
		for _, f := range strings.FieldsFunc(strings.TrimPrefix(l, "wrote "), func(r rune) bool { return r == ',' || r == ' ' }) {
			if f == "and" {
				continue
			}
			if _, err := os.Stat(f); err != nil {
				t.Errorf("stdout claims %s: %v", f, err)
			}
		}
	}
}

func fill(t *testing.T, path string, size int) {
	t.Helper()
	if err := os.WriteFile(path, bytes.Repeat([]byte{1}, size), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A killed run's partial files are removed by the next write into that
// directory; what another running writer holds is not.
func TestStalePartialsRemoved(t *testing.T) {
	url := inProcessSim(t, nil)
	dir := t.TempDir()
	// A writer that was killed (its lock went with it) and a partial
	// trace of an earlier release, an hour old.
	stale := []string{".trace.json.tmp-4194000-17", ".trace.json.partial-123456"}
	for _, n := range stale {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, stale[1]), old, old)
	// A writer still at work: another process holding its lock.
	held := filepath.Join(dir, ".result.json.tmp-4194001-18")
	holder := exec.Command("flock", "-x", held, "sleep", "30")
	if err := holder.Start(); err != nil {
		privtest.SkipOptional(t, "flock(1): %v", err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	// flock(1) opens, then locks: wait until the lock is held.
	testutil.Eventually(t, 10*time.Second, func() bool { return lockHeld(held) }, "flock(1) holding %s", held)
	out := filepath.Join(dir, "r.json")
	if code, _, stderr := runCLI("load", "--target", url, "--num-requests", "2", "--output-len", "2", "--input-len", "4", "--result", out); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, n := range stale {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			t.Errorf("%s was left", n)
		}
	}
	if _, err := os.Stat(held); err != nil {
		t.Errorf("the file another writer holds was removed: %v", err)
	}
}

// lockHeld says whether another process holds an exclusive flock on path
// (a non-blocking try fails with EWOULDBLOCK).
func lockHeld(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	}
	return err == syscall.EWOULDBLOCK
}
