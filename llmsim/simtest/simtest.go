// Package simtest starts the simulated server (llmsim/sim) for
// tests: in-process behind an httptest server, with its KServe gRPC
// endpoint, or as the llmsim binary in a process of its own.
package simtest

import (
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/testutil"
	"github.com/bpfbench/bpfbench/llmsim/sim"
)

// Config is llmsim's default configuration made deterministic for tests:
// the steps sleep (no CPU work), no request ends early on EOS, and a
// batch is no slower than one request.
func Config() sim.Config {
	cfg := sim.DefaultConfig()
	cfg.Work = sim.WorkSleep
	cfg.EOSProb = 0
	cfg.BatchSlowdown = 0
	return cfg
}

// start builds the simulator from Config changed by mod.
func start(t testing.TB, mod func(*sim.Config)) (*sim.Server, *httptest.Server) {
	t.Helper()
	cfg := Config()
	if mod != nil {
		mod(&cfg)
	}
	return startConfig(t, cfg)
}

func startConfig(t testing.TB, cfg sim.Config) (*sim.Server, *httptest.Server) {
	t.Helper()
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, httptest.NewServer(s.Handler())
}

// Start runs llmsim in-process, its configuration Config changed by mod
// (nil: none), and returns its base URL; it stops with the test.
func Start(t testing.TB, mod func(*sim.Config)) string {
	t.Helper()
	cfg := Config()
	if mod != nil {
		mod(&cfg)
	}
	return StartConfig(t, cfg)
}

// StartConfig runs llmsim in-process with cfg as it is and returns its
// base URL; it stops with the test.
func StartConfig(t testing.TB, cfg sim.Config) string {
	t.Helper()
	s, ts := startConfig(t, cfg)
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		s.Close()
	})
	return ts.URL
}

// StartGRPC runs llmsim in-process, HTTP and KServe gRPC on one engine,
// and returns its base URL and its gRPC address.
func StartGRPC(t testing.TB, mod func(*sim.Config)) (url, grpcAddr string) {
	t.Helper()
	s, ts := start(t, mod)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ts.Close()
		s.Close()
		t.Fatal(err)
	}
	gs := s.GRPCServer()
	go func() { _ = gs.Serve(l) }()
	t.Cleanup(func() {
		gs.Stop()
		ts.CloseClientConnections()
		ts.Close()
		s.Close()
	})
	return ts.URL, l.Addr().String()
}

// StartProcess runs the llmsim binary found on PATH as its own process
// (--itl 2ms, then extra), its output in dir/llmsim.log, and waits until
// it answers /health; it returns its address and pid. The address is
// none of extra's words (a port already handed out to another listener).
func StartProcess(t testing.TB, dir string, extra ...string) (addr string, pid int) {
	t.Helper()
	addr = testutil.FreeAddr(t, extra...)
	logf, err := os.Create(filepath.Join(dir, "llmsim.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("llmsim", append([]string{"--addr", addr, "--itl", "2ms"}, extra...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	testutil.WaitHTTP(t, "http://"+addr+"/health", 10*time.Second, logf.Name())
	return addr, cmd.Process.Pid
}
