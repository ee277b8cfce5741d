package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
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

// With basic auth in the web configuration, the session API refuses a
// session (and the clock) without credentials and accepts one with them,
// on the listener of /metrics.
func TestAgentRefusesUnauthenticatedSessions(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	web := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(web, []byte("basic_auth_users:\n  bench: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Agent = Agent{Enabled: true, MaxSessions: 2}
	addr := runDaemon(t, cfg, web)
	ctx := context.Background()
	req := agent.StartRequest{Target: agent.Target{Pid: os.Getpid()}}

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
	if want := (Agent{Enabled: true, MaxSessions: 2, MaxBufferSpans: 1000, IdleTimeout: 10 * time.Second}); cfg.Agent != want {
		t.Fatalf("agent %+v, want %+v", cfg.Agent, want)
	}
	bad := filepath.Join(dir, "bad.yml")
	os.WriteFile(bad, []byte("agent:\n  max_sessions: 1000\n"), 0o600)
	if _, err := LoadConfig(bad); err == nil || !strings.Contains(err.Error(), "agent.max_sessions") {
		t.Fatalf("max_sessions 1000: %v", err)
	}
}
