package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
)

// SIGHUP reloads the daemon's configuration without stopping it: a new
// target shows in /metrics; a file that does not load leaves the
// configuration in effect and says why; SIGTERM still ends it cleanly.
func TestDaemonSIGHUPReload(t *testing.T) {
	privtest.Require(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("refresh_interval: 200ms\ntargets:\n  - name: first\n    comm: no-such-comm\n")
	d := startDaemon(t, "--config", cfg)
	scrape := func() string {
		t.Helper()
		resp, err := http.Get("http://" + d.addr + "/metrics")
		if err != nil {
			t.Fatalf("/metrics: %v\n%s", err, d.logs)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	waitFor := func(what string, ok func(string) bool) string {
		t.Helper()
		var m string
		if !testutil.Until(15*time.Second, func() bool { m = scrape(); return ok(m) }) {
			t.Fatalf("%s: not in /metrics after 15 s\n%s", what, d.logs)
		}
		return m
	}
	waitFor("the first target", func(m string) bool { return strings.Contains(m, `bpfbench_target_processes{target="first"}`) })

	write("refresh_interval: 200ms\nlog_level: debug\ntargets:\n  - name: second\n    comm: no-such-comm\n")
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	m := waitFor("the reloaded target", func(m string) bool { return strings.Contains(m, `bpfbench_target_processes{target="second"}`) })
	if strings.Contains(m, `target="first"`) {
		t.Errorf("the replaced target is still exported")
	}
	// Every collector still runs.
	if !strings.Contains(m, `bpfbench_collector_up{collector="sched"} 1`) {
		t.Errorf("the sched collector is not up after the reload:\n%s", d.logs)
	}

	write("targets: [\n")
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !testutil.Until(10*time.Second, func() bool { return strings.Contains(d.logs.String(), "keeping the one in effect") }) {
		t.Fatalf("no log line for a reload of a bad file\n%s", d.logs)
	}
	if m := scrape(); !strings.Contains(m, `bpfbench_target_processes{target="second"}`) {
		t.Errorf("a bad file changed the targets")
	}
	if n := strings.Count(d.logs.String(), `"msg":"configuration reloaded"`); n != 1 {
		t.Errorf("%d reload lines, want 1 (the good file)\n%s", n, d.logs)
	}
	d.stop(t)
}
