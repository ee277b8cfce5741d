package daemon

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/bpfbench/bpfbench/collectors"
)

// A reload moves a slot to a new target without stopping the collector:
// the new target's series start at zero, the one it replaced is gone, and
// a target left as it was keeps its series.
func TestReloadRetargets(t *testing.T) {
	p := newPodTest(t, []Target{{Name: "py", Comm: "python3"}, {Name: "envoy", Comm: "envoy"}})
	p.refresh(nil)
	p.host.add(t, 400, 5)
	p.host.add(t, 102, 2)
	p.expect([]string{"bpfbench_fake_events_total"}, map[string]float64{
		"bpfbench_fake_events_total{target=host}": 0, "bpfbench_fake_events_total{target=py}": 5, "bpfbench_fake_events_total{target=envoy}": 2,
	})
	cfg := DefaultConfig()
	cfg.Targets = []Target{{Name: "exporter", Comm: "node_exporter"}, {Name: "envoy", Comm: "envoy"}}
	if err := p.d.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	p.host.add(t, 300, 1)
	p.host.add(t, 102, 1)
	p.expect([]string{"bpfbench_fake_events_total", "bpfbench_target_processes"}, map[string]float64{
		"bpfbench_fake_events_total{target=host}": 0, "bpfbench_fake_events_total{target=exporter}": 1, "bpfbench_fake_events_total{target=envoy}": 3,
		"bpfbench_target_processes{target=exporter}": 1, "bpfbench_target_processes{target=envoy}": 1,
	})
	// A bad configuration changes nothing.
	bad := cfg
	bad.Targets = []Target{{Name: "x", Comm: "a-command-name-too-long"}}
	if err := p.d.Reload(bad); err == nil || !strings.Contains(err.Error(), "15 characters") {
		t.Fatalf("reload of a bad configuration: %v", err)
	}
	p.host.add(t, 300, 1)
	p.expect([]string{"bpfbench_fake_events_total"}, map[string]float64{
		"bpfbench_fake_events_total{target=host}": 0, "bpfbench_fake_events_total{target=exporter}": 2, "bpfbench_fake_events_total{target=envoy}": 3,
	})
}

// syncBuffer is a log sink tests read while the daemon writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// refusingHost refuses every target process.
type refusingHost struct{ *fakeHost }

func (refusingHost) SetTarget(uint32, uint32) error { return errors.New("map full") }

// A process that exits between the scan and SetTarget is churn (debug);
// a refusal of a live process is a warning once per target and interval.
func TestRefreshWarnsOnce(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Targets = []Target{{Name: "py", Comm: "python3"}}
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	h := refusingHost{newFakeHost()}
	d := New(cfg, logger, []HostFactory{{Name: "fake", Required: true, New: func(_ *slog.Logger, names collectors.TargetNames) collectors.Host {
		h.names = names
		return h
	}}})
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	d.proc = fixtureProc(t)
	for range 5 {
		d.refresh()
		d.mu.Lock()
		clear(d.assigned) // as if each refresh found the processes anew
		d.mu.Unlock()
	}
	if n := strings.Count(logs.String(), "adding target process"); n != 1 {
		t.Errorf("%d warnings for one target refused 5 times by one collector, want 1:\n%s", n, logs.String())
	}
	// Processes gone before SetTarget: no warning at all.
	logs.mu.Lock()
	logs.b.Reset()
	logs.mu.Unlock()
	d.warned.reset()
	d.targetError("adding target process", "fake", 999999, 1, errors.New("no such process"))
	if s := logs.String(); s != "" {
		t.Errorf("a process that exited is warned of: %s", s)
	}
}

// A pid target that is a kernel thread and a cgroup target that does not
// exist are warned of.
func TestCheckTargetsWarns(t *testing.T) {
	var logs syncBuffer
	d := New(DefaultConfig(), slog.New(slog.NewTextHandler(&logs, nil)), nil)
	d.proc = t.TempDir()
	os.MkdirAll(filepath.Join(d.proc, "2"), 0o755)
	os.WriteFile(filepath.Join(d.proc, "2", "stat"), []byte("2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 9 0 0\n"), 0o644)
	d.cgroupFS = t.TempDir()
	os.MkdirAll(filepath.Join(d.cgroupFS, "system.slice", "vllm.service"), 0o755)
	d.checkTargets([]Target{{Name: "k", Pid: 2}, {Name: "gone", Cgroup: "/system.slice/sglang.service"}, {Name: "ok", Cgroup: "/system.slice/vllm.service"}})
	out := logs.String()
	if !strings.Contains(out, "kernel thread") || !strings.Contains(out, "target=k") {
		t.Errorf("no warning of the kernel thread:\n%s", out)
	}
	if !strings.Contains(out, "cgroup does not exist") || !strings.Contains(out, "target=gone") {
		t.Errorf("no warning of the missing cgroup:\n%s", out)
	}
	if strings.Contains(out, "target=ok") {
		t.Errorf("a warning of a cgroup that exists:\n%s", out)
	}
}

// POST /-/reload reads the configuration again: 200 when it applies, 500
// with the reason when it does not (the old one kept); behind the web
// configuration like every route.
func TestReloadEndpoint(t *testing.T) {
	web := basicAuthWebConfig(t)
	cfg := DefaultConfig()
	cfg.Targets = []Target{{Name: "first", Comm: "first"}}
	var next Config
	var nextErr error
	addr := runDaemonWith(t, cfg, web, func(d *Daemon) {
		d.SetConfigLoader(func() (Config, error) { return next, nextErr })
	})
	post := func(auth bool) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/-/reload", nil)
		if auth {
			req.SetBasicAuth("bench", "s3cret")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := post(false); code != http.StatusUnauthorized {
		t.Errorf("/-/reload without credentials: %d, want 401", code)
	}
	next = DefaultConfig()
	next.Targets = []Target{{Name: "second", Comm: "second"}}
	if code, body := post(true); code != http.StatusOK {
		t.Fatalf("/-/reload: %d %s", code, body)
	}
	if m := metrics(t, addr); !strings.Contains(m, `bpfbench_target_processes{target="second"}`) || strings.Contains(m, `target="first"`) {
		t.Errorf("after the reload /metrics shows:\n%s", grepLines(m, "bpfbench_target_processes"))
	}
	nextErr = errors.New("config /etc/bpfbench/config.yaml: yaml: line 3: did not find expected key")
	if code, body := post(true); code != http.StatusInternalServerError || !strings.Contains(body, "did not find expected key") {
		t.Errorf("/-/reload of a bad file: %d %s, want 500 with the reason", code, body)
	}
	if m := metrics(t, addr); !strings.Contains(m, `bpfbench_target_processes{target="second"}`) {
		t.Errorf("a bad reload changed the targets:\n%s", grepLines(m, "bpfbench_target_processes"))
	}
}

func metrics(t *testing.T, addr string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.SetBasicAuth("bench", "s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
