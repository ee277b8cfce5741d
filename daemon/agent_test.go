package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/bpfbench/bpfbench/agent"
	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/session"
)

// idleSection records nothing: the API's auth is under test, not the spans.
type idleSection struct{}

func (idleSection) Start(context.Context) error   { return nil }
func (idleSection) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (idleSection) Close() error                  { return nil }
func (idleSection) Name() string                  { return "idle" }
func (idleSection) WriteInterval(io.Writer)       {}
func (idleSection) WriteSummary(io.Writer)        {}
func (idleSection) Summary() any                  { return nil }
func (idleSection) Lost() uint64                  { return 0 }

// runDaemon serves a daemon with the agent API behind webConfig and
// returns its address.
func runDaemon(t *testing.T, cfg Config, webConfig string) string {
	t.Helper()
	return runDaemonWith(t, cfg, webConfig, nil)
}

// runDaemonWith is runDaemon with the daemon adjusted by set before it
// starts (nil: as New made it).
func runDaemonWith(t *testing.T, cfg Config, webConfig string, set func(*Daemon)) string {
	t.Helper()
	d := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if set != nil {
		set(d)
	}
	d.SetSessionSections([]session.SectionFactory{{Name: "idle", New: func(collectors.Options) (collectors.Section, error) { return idleSection{}, nil }}})
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, "127.0.0.1:0", webConfig) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("daemon: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the daemon did not stop within 10 s of its context")
		}
		d.Close()
	})
	select {
	case a := <-d.Listening():
		return a.String()
	case err := <-done:
		t.Fatalf("daemon: %v", err)
	}
	return ""
}

// basicAuthWebConfig writes a web configuration asking for user bench,
// password s3cret.
func basicAuthWebConfig(t *testing.T) string {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	web := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(web, []byte("basic_auth_users:\n  bench: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return web
}

// sleeper starts a process named sleep for a session to follow.
func sleeper(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// With basic auth in the web configuration, the session API refuses a
// session (and the clock) without credentials and accepts one with them,
// on the listener of /metrics.
func TestAgentRefusesUnauthenticatedSessions(t *testing.T) {
	web := basicAuthWebConfig(t)
	cfg := DefaultConfig()
	cfg.Agent = Agent{Enabled: true, MaxSessions: 2, Allow: AgentAllow{Comms: []string{"sleep"}}}
	addr := runDaemon(t, cfg, web)
	ctx := context.Background()
	req := agent.StartRequest{Target: agent.Target{Pid: sleeper(t)}}

	anon := agent.NewClient(addr, agent.ClientOptions{})
	if _, err := anon.MeasureClock(ctx); !errors.Is(err, agent.ErrUnauthorized) {
		t.Errorf("clock without credentials: %v, want ErrUnauthorized", err)
	}
	if _, err := anon.Start(ctx, req); !errors.Is(err, agent.ErrUnauthorized) {
		t.Fatalf("session without credentials: %v, want ErrUnauthorized", err)
	}
	wrong := agent.NewClient(addr, agent.ClientOptions{Username: "bench", Password: "guess"})
	if _, err := wrong.Start(ctx, req); !errors.Is(err, agent.ErrUnauthorized) {
		t.Fatalf("session with a wrong password: %v, want ErrUnauthorized", err)
	}
	// The status of a raw POST, as curl would see it.
	resp, err := http.Post("http://"+addr+agent.PathSessions, "application/json", strings.NewReader(`{"pid":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST %s without credentials: %s", agent.PathSessions, resp.Status)
	}

	c := agent.NewClient(addr, agent.ClientOptions{Username: "bench", Password: "s3cret"})
	s, err := c.Start(ctx, req)
	if err != nil {
		t.Fatalf("session with credentials: %v", err)
	}
	e := s.Clock()
	t.Logf("through the daemon with basic auth: offset %d ns, bound %d ns", e.OffsetNs, e.BoundNs)
	col, err := s.Stop(ctx)
	if err != nil || !col.Complete {
		t.Fatalf("stop: %+v, %v", col, err)
	}
	// /metrics is on the same listener, behind the same auth.
	mreq, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	mreq.SetBasicAuth("bench", "s3cret")
	mresp, err := http.DefaultClient.Do(mreq)
	if err != nil {
		t.Fatal(err)
	}
	mresp.Body.Close()
	if mresp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics with credentials: %s", mresp.Status)
	}
}

// Without agent.enabled the API is not served.
func TestAgentDisabledByDefault(t *testing.T) {
	addr := runDaemon(t, DefaultConfig(), "")
	resp, err := http.Get("http://" + addr + agent.PathClock)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("%s served with agent.enabled false", agent.PathClock)
	}
}

// The agent's keys are read and checked.
func TestAgentConfig(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.yml")
	os.WriteFile(ok, []byte("agent:\n  enabled: true\n  max_sessions: 2\n  max_buffer_spans: 1000\n  idle_timeout: 10s\n"), 0o600)
	cfg, err := LoadConfig(ok)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Agent{Enabled: true, MaxSessions: 2, MaxBufferSpans: 1000, IdleTimeout: 10 * time.Second}); !reflect.DeepEqual(cfg.Agent, want) {
		t.Fatalf("agent %+v, want %+v", cfg.Agent, want)
	}
	bad := filepath.Join(dir, "bad.yml")
	os.WriteFile(bad, []byte("agent:\n  max_sessions: 1000\n"), 0o600)
	if _, err := LoadConfig(bad); err == nil || !strings.Contains(err.Error(), "agent.max_sessions") {
		t.Fatalf("max_sessions 1000: %v", err)
	}
}

// agent.allow is read and checked: comms the kernel can show, absolute
// cgroups, targets that exist.
func TestAgentAllowConfig(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.yml")
	os.WriteFile(ok, []byte("targets:\n  - {name: vllm, comm: vllm}\nagent:\n  enabled: true\n  read_timeout: 2s\n  allow:\n    comms: [llama-server]\n    cgroups: [/system.slice/vllm.service]\n    targets: [vllm]\n"), 0o600)
	cfg, err := LoadConfig(ok)
	if err != nil {
		t.Fatal(err)
	}
	if want := (AgentAllow{Comms: []string{"llama-server"}, Cgroups: []string{"/system.slice/vllm.service"}, Targets: []string{"vllm"}}); !reflect.DeepEqual(cfg.Agent.Allow, want) || cfg.Agent.ReadTimeout != 2*time.Second {
		t.Fatalf("agent %+v", cfg.Agent)
	}
	for body, want := range map[string]string{
		"agent:\n  allow: {targets: [sglang]}\n":              "not the name of a configured target",
		"agent:\n  allow: {cgroups: [system.slice]}\n":        "absolute cgroup path",
		"agent:\n  allow: {comms: [a-name-longer-than-15]}\n": "1-15 characters",
		"agent:\n  read_timeout: -1s\n":                       "agent.read_timeout",
	} {
		bad := filepath.Join(dir, "bad.yml")
		os.WriteFile(bad, []byte(body), 0o600)
		if _, err := LoadConfig(bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", body, err, want)
		}
	}
}

// A daemon target named in agent.allow.targets lets a session follow its
// processes; the daemon itself is refused whatever the list says.
func TestAgentAllowByTarget(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Targets = []Target{{Name: "sleepers", Comm: "sleep"}}
	cfg.Agent = Agent{Enabled: true, Allow: AgentAllow{Targets: []string{"sleepers"}, Comms: []string{"daemon.test"}}}
	addr := runDaemon(t, cfg, "")
	c := agent.NewClient(addr, agent.ClientOptions{})
	ctx := context.Background()
	s, err := c.Start(ctx, agent.StartRequest{Target: agent.Target{Pid: sleeper(t)}})
	if err != nil {
		t.Fatalf("a process of an allowed target: %v", err)
	}
	s.Stop(ctx)
	if _, err := c.Start(ctx, agent.StartRequest{Target: agent.Target{Pid: os.Getpid()}}); !errors.Is(err, agent.ErrForbidden) || !strings.Contains(err.Error(), "agent itself") {
		t.Errorf("the daemon's own pid: %v, want 403", err)
	}
	if _, err := c.Start(ctx, agent.StartRequest{Target: agent.Target{Pid: 1}}); !errors.Is(err, agent.ErrForbidden) {
		t.Errorf("pid 1: %v, want 403", err)
	}
}

// runDaemonAt runs a daemon with the agent API on listen and returns its
// address, or Run's error when it refuses to start.
func runDaemonAt(t *testing.T, cfg Config, listen, webConfig string, insecure bool) (string, error) {
	t.Helper()
	d := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	d.SetAgentInsecure(insecure)
	d.SetSessionSections([]session.SectionFactory{{Name: "idle", New: func(collectors.Options) (collectors.Section, error) { return idleSection{}, nil }}})
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, listen, webConfig) }()
	select {
	case a := <-d.Listening():
		t.Cleanup(func() { cancel(); <-done; d.Close() })
		return a.String(), nil
	case err := <-done:
		cancel()
		d.Close()
		return "", err
	}
}

// Secure by default: the session API is not served on an address other
// than loopback without TLS and authentication, unless --agent.insecure.
func TestAgentNeedsWebConfigBeyondLoopback(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Agent = Agent{Enabled: true}
	_, err := runDaemonAt(t, cfg, "0.0.0.0:0", "", false)
	if err == nil || !strings.Contains(err.Error(), "--web.config.file") || !strings.Contains(err.Error(), "--agent.insecure") {
		t.Errorf("agent.enabled on 0.0.0.0 without a web configuration: %v, want a refusal naming the fixes", err)
	}
	if _, err := runDaemonAt(t, cfg, "0.0.0.0:0", basicAuthWebConfig(t), false); err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Errorf("basic auth without TLS on 0.0.0.0: %v, want a refusal naming TLS", err)
	}
	if _, err := runDaemonAt(t, cfg, "127.0.0.1:0", "", false); err != nil {
		t.Errorf("on loopback: %v", err)
	}
	if _, err := runDaemonAt(t, cfg, "0.0.0.0:0", "", true); err != nil {
		t.Errorf("with --agent.insecure: %v", err)
	}
	// Without the agent the metrics alone are served anywhere.
	if _, err := runDaemonAt(t, DefaultConfig(), "0.0.0.0:0", "", false); err != nil {
		t.Errorf("without the agent: %v", err)
	}
	dir := t.TempDir()
	for body, want := range map[string][2]bool{
		"tls_server_config: {cert_file: a.crt, key_file: a.key}\nbasic_auth_users: {u: x}\n":                                             {true, true},
		"tls_server_config: {cert_file: a.crt, key_file: a.key, client_auth_type: RequireAndVerifyClientCert, client_ca_file: ca.crt}\n": {true, true},
		"tls_server_config: {cert_file: a.crt, key_file: a.key}\n":                                                                       {true, false},
		"basic_auth_users: {u: x}\n": {false, true},
	} {
		p := filepath.Join(dir, "web.yml")
		os.WriteFile(p, []byte(body), 0o600)
		tls, auth, err := webConfigSecures(p)
		if err != nil || tls != want[0] || auth != want[1] {
			t.Errorf("%q: tls %v auth %v (%v), want %v", body, tls, auth, err, want)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:9464": true, "[::1]:9464": true, "localhost:9464": true, ":9464": false, "0.0.0.0:9464": false, "10.0.0.1:9464": false} {
		if loopback(addr) != want {
			t.Errorf("loopback(%q) = %v", addr, !want)
		}
	}
}

// With a web configuration every route of the session API, and
// /-/reload, answers 401 without credentials.
func TestAgentEveryRouteNeedsCredentials(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Agent = Agent{Enabled: true, Allow: AgentAllow{Comms: []string{"sleep"}}}
	addr := runDaemon(t, cfg, basicAuthWebConfig(t))
	api, err := agent.NewServer(nil, agent.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	api.Close()
	patterns := []string{"POST /-/reload", "PUT /-/reload"}
	for p := range api.Routes() {
		patterns = append(patterns, p)
	}
	for _, p := range patterns {
		method, path, _ := strings.Cut(p, " ")
		path = strings.ReplaceAll(path, "{id}", "0123456789abcdef")
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s without credentials: %s, want 401", method, path, resp.Status)
		}
	}
	if len(patterns) < 6 {
		t.Errorf("routes %v: the agent serves fewer than it did", patterns)
	}
}
