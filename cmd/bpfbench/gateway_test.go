package main

import (
	"context"
	"fmt"
	"github.com/bpfbench/bpfbench/result"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
	runjob "github.com/bpfbench/bpfbench/job/run"
	"github.com/bpfbench/bpfbench/llmsim/simtest"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/dataset"
	"github.com/bpfbench/bpfbench/session"
)

// startNginx runs nginx in the foreground (its master and one worker) in
// front of upstream with proxy buffering on or off, its config, logs, pid
// file and temp files in a directory of its own; it returns the port it
// listens on. The client-facing sockets have a small send buffer so that
// a slow reader's backpressure reaches the upstream connection quickly.
func startNginx(t *testing.T, bin, dir, upstream string, buffering bool) int {
	t.Helper()
	onOff := "off"
	if buffering {
		onOff = "on;\n\t\t\tproxy_buffers 8 16k;\n\t\t\tpostpone_output 4096"
	}
	return startNginxServer(t, bin, dir, func(port int) string {
		return fmt.Sprintf(`		listen 127.0.0.1:%d sndbuf=8k;
		location / {
			proxy_pass http://%s;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_buffering %s;
			proxy_read_timeout 60s;
		}
`, port, upstream, onOff)
	})
}

// startNginxGRPC runs nginx as a gRPC proxy (HTTP/2, grpc_pass) in front
// of a gRPC upstream; it has no buffering switch: it forwards frames as
// they come.
func startNginxGRPC(t *testing.T, bin, dir, upstream string) int {
	t.Helper()
	return startNginxServer(t, bin, dir, func(port int) string {
		return fmt.Sprintf(`		listen 127.0.0.1:%d http2 sndbuf=8k;
		location / {
			grpc_pass grpc://%s;
			grpc_read_timeout 60s;
		}
`, port, upstream)
	})
}

// startNginxServer runs nginx with the server block server(port) gives.
func startNginxServer(t *testing.T, bin, dir string, server func(port int) string) int {
	t.Helper()
	nd := filepath.Join(dir, "nginx")
	if err := os.MkdirAll(nd, 0o755); err != nil {
		t.Fatal(err)
	}
	port := testutil.FreePort(t)
	conf := fmt.Sprintf(`daemon off;
master_process on;
worker_processes 1;
user root;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 256; }
http {
	access_log %[1]s/access.log;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	server {
%[2]s	}
}
`, nd, server(port))
	cf := filepath.Join(nd, "nginx.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(nd, "stderr.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", nd, "-c", cf, "-e", filepath.Join(nd, "error.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: the workers go with the master.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(nd, "error.log"))
			t.Logf("nginx error.log:\n%s", b)
		}
	})
	if strings.Contains(server(port), " http2") {
		testutil.WaitTCP(t, fmt.Sprintf("127.0.0.1:%d", port), 10*time.Second, filepath.Join(nd, "error.log"))
	} else {
		testutil.WaitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/health", port), 10*time.Second, filepath.Join(nd, "error.log"))
	}
	return port
}

// gatewayRun is `bpfbench run` through nginx in front of llmsim.
func gatewayRun(t *testing.T, nginx, simAddr string, simPid int, buffering bool) *result.Gateway {
	t.Helper()
	dir := t.TempDir()
	port := startNginx(t, nginx, dir, simAddr, buffering)
	return gatewayRunAt(t, dir, port, simPid, fmt.Sprintf("proxy_buffering %v", buffering), "--target", fmt.Sprintf("http://127.0.0.1:%d", port))
}

// gatewayRunAt is `bpfbench run` through the gateway listening on port,
// with the target and protocol flags given.
func gatewayRunAt(t *testing.T, dir string, port, simPid int, label string, target ...string) *result.Gateway {
	t.Helper()
	out := filepath.Join(dir, "run")
	args := append([]string{"run"}, target...)
	args = append(args, "--pid", strconv.Itoa(simPid),
		"--via-port", strconv.Itoa(port), "--num-requests", "12", "--rate", "4", "--output-len", "64", "--ignore-eos",
		"--no-progress", "--out", out)
	code, stdout, stderr := runCLI(args...)
	t.Logf("%s:\n%s", label, stdout)
	if code != 0 {
		t.Fatalf("run exit %d: %s", code, stderr)
	}
	doc, err := result.Load(filepath.Join(out, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	g := doc.Gateway
	if g == nil {
		t.Fatalf("result.json has no gateway section")
	}
	if len(g.Pids) < 2 || g.Comm != "nginx" {
		t.Errorf("gateway pids %v (%s): want nginx's master and its worker", g.Pids, g.Comm)
	}
	if g.Requests < 10 || g.Chunks == 0 {
		t.Fatalf("gateway: %d requests matched (%d not), %d chunks timed of %d", g.Requests, g.RequestsUnmatched, g.Chunks, g.ChunksSeen)
	}
	for _, h := range g.Hops {
		if h.Count == 0 {
			t.Errorf("hop %q timed no chunk", h.Name)
		}
	}
	if g.Throughput.GatewayTokensPerS <= 0 || g.Throughput.EngineSource == "" {
		t.Errorf("throughput %+v", g.Throughput)
	}
	if doc.CriticalPath == nil || doc.CriticalPath.Stats.Sends == 0 {
		t.Errorf("the critical path was fed no send (the gateway's on the client connections)")
	}
	// The critical path crosses the gateway: the slowest gaps' steps reach
	// the engine's threads through the gateway's sleeps woken by the
	// engine's chunks (a hop).
	var onEngine, onGateway, hopped float64
	for _, gp := range doc.CriticalPath.Slowest {
		for _, st := range gp.Steps {
			switch {
			case strings.HasPrefix(st.Thread, "nginx"):
				onGateway += st.DurationMs
			case strings.HasPrefix(st.Thread, "llmsim"):
				onEngine += st.DurationMs
			}
			if strings.Contains(st.Detail, critpath.NoteHop) {
				hopped += st.DurationMs
			}
		}
	}
	t.Logf("critical path of the %d slowest gaps: %.1f ms on nginx's threads, %.1f ms on llmsim's, %.1f ms in flight between them",
		len(doc.CriticalPath.Slowest), onGateway, onEngine, hopped)
	if onEngine == 0 {
		t.Errorf("the critical path did not cross the gateway: no step of the slowest gaps on the engine's threads")
	}
	return g
}

// nginx as a gRPC proxy (HTTP/2, grpc_pass) in front of llmsim's KServe
// v2 endpoint, the load on --protocol kserve-grpc with a connection per
// request (--no-keepalive: one client port per request, as the legs are
// matched by port): the same per-hop figures and the critical path
// crossing the gateway as over HTTP.
func TestRunGRPCThroughGateway(t *testing.T) {
	privtest.Require(t)
	nginx := privtest.RequireTool(t, "nginx", "apt-get install nginx-light")
	simBinaries(t)
	grpcAddr := testutil.FreeAddr(t)
	_, simPid := simtest.StartProcess(t, t.TempDir(), "--grpc", grpcAddr)
	dir := t.TempDir()
	port := startNginxGRPC(t, nginx, dir, grpcAddr)
	g := gatewayRunAt(t, dir, port, simPid, "grpc_pass", "--protocol", "kserve-grpc", "--no-keepalive", "--model", "llmsim",
		"--target", fmt.Sprintf("127.0.0.1:%d", port))
	t.Logf("gRPC through nginx: %.2f engine sends per gateway send, %.1f client arrivals per request", g.EngineSendsPerGatewaySend, g.ArrivalsPerRequest)
}

// nginx in front of llmsim, with proxy buffering on and off: the per-hop
// figures are there in both runs and the buffering flag follows the
// engine sends per gateway send (logged for both). Then a slow-reading
// client behind the gateway: its backpressure shows on its own connection
// in both, and on the engine's connection towards the gateway only
// without buffering (less with it).
func TestRunThroughGateway(t *testing.T) {
	privtest.Require(t)
	nginx := privtest.RequireTool(t, "nginx", "apt-get install nginx-light")
	simBinaries(t)
	simAddr, simPid := simtest.StartProcess(t, t.TempDir())

	on := gatewayRun(t, nginx, simAddr, simPid, true)
	off := gatewayRun(t, nginx, simAddr, simPid, false)
	t.Logf("buffering on: %.2f engine sends per gateway send, %.1f client arrivals per request; off: %.2f, %.1f",
		on.EngineSendsPerGatewaySend, on.ArrivalsPerRequest, off.EngineSendsPerGatewaySend, off.ArrivalsPerRequest)
	// The figure is measured, not asserted: nginx's buffering reads the
	// upstream ahead but writes to a client that keeps up as soon as it
	// has read (its event pipe flushes when the upstream has nothing more).
	for name, g := range map[string]*result.Gateway{"on": on, "off": off} {
		if g.Buffering != (g.EngineSendsPerGatewaySend >= result.BufferingRatio) {
			t.Errorf("buffering %s: flag %v for %.2f engine sends per gateway send", name, g.Buffering, g.EngineSendsPerGatewaySend)
		}
	}

	// A slow reader behind the gateway: with buffering off its
	// backpressure reaches the engine's connection to the gateway; with
	// buffering on the gateway takes the response and the engine is not
	// held back. Both send the held chunks in bursts after the pause
	// (logged: several engine sends per gateway send either way).
	slowOff := slowClientRun(t, nginx, simAddr, simPid, false)
	slowOn := slowClientRun(t, nginx, simAddr, simPid, true)
	if slowOff.ClientBlockMs <= 0 || slowOn.ClientBlockMs <= 0 {
		t.Errorf("backpressure on the slow reader's own connection: buffering off %.1f ms, on %.1f ms; want both", slowOff.ClientBlockMs, slowOn.ClientBlockMs)
	}
	if slowOff.UpBlockMs <= 0 {
		t.Errorf("buffering off: no backpressure on the engine's connection towards the gateway for the slow reader")
	}
	if slowOn.UpBlockMs >= slowOff.UpBlockMs {
		t.Errorf("upstream backpressure of the slow reader: buffering on %.1f ms, off %.1f ms: want less with buffering", slowOn.UpBlockMs, slowOff.UpBlockMs)
	}
	ratio := func(r *result.GatewayRequest) float64 {
		return float64(r.EngineSends) / float64(max(r.GatewaySends, 1))
	}
	t.Logf("slow reader: engine sends per gateway send, buffering on %.1f, off %.1f; client arrivals on %d, off %d",
		ratio(slowOn), ratio(slowOff), slowOn.ClientArrivals, slowOff.ClientArrivals)
}

// slowClientRun is a run through nginx (buffering on or off) in which one
// request reads slowly; it returns that request's legs.
func slowClientRun(t *testing.T, nginx, simAddr string, simPid int, buffering bool) *result.GatewayRequest {
	t.Helper()
	var out *result.GatewayRequest
	t.Run(fmt.Sprintf("slow client buffering %v", buffering), func(t *testing.T) {
		dir := t.TempDir()
		port := startNginx(t, nginx, dir, simAddr, buffering)
		viaPid, err := session.ListenerPid(port)
		if err != nil {
			t.Fatal(err)
		}
		const n, slow = 8, 3
		reqs, err := dataset.Load(dataset.Config{Name: dataset.Random, InputLen: 64, OutputLen: 64}, n, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i := range reqs {
			reqs[i].OffsetNs = -1
		}
		reqs[slow].OutputLen = 1500
		reqs[slow].SlowRead = 3 * time.Second
		lc := loadgen.DefaultConfig()
		lc.Target.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
		lc.Scenario.Requests, lc.Scenario.NumRequests, lc.Scenario.Rate, lc.Scenario.Constant, lc.Target.IgnoreEOS = reqs, n, 2, true, true
		lc.Target.Timeout = time.Minute
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := runjob.Run(ctx, runjob.RunConfig{Load: lc, Pid: simPid, ViaPid: viaPid, OutDir: filepath.Join(dir, "run"), Sections: sessionSections()})
		if err != nil {
			t.Fatal(err)
		}
		g := res.Doc.Gateway
		if g == nil {
			t.Fatal("no gateway section")
		}
		var slowReq *result.GatewayRequest
		for i := range g.PerRequest {
			if g.PerRequest[i].Index == slow {
				slowReq = &g.PerRequest[i]
			}
		}
		t.Logf("backpressure %+v; slow request %+v", g.Backpressure, slowReq)
		if slowReq == nil {
			t.Fatalf("the slow reader (request %d) was not matched to an engine connection", slow)
		}
		if buffering {
			out = slowReq
			return
		}
		for _, r := range g.PerRequest {
			if r.Index != slow && r.UpBlockMs > 0 {
				t.Errorf("request %d, read at once, has %.1f ms of upstream backpressure", r.Index, r.UpBlockMs)
			}
		}
		out = slowReq
	})
	if out == nil {
		t.FailNow()
	}
	return out
}
