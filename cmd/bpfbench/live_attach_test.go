package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/engine"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
	"github.com/bpfbench/bpfbench/live"
	"github.com/bpfbench/bpfbench/llmsim/simtest"
)

// streamClient runs testdata/stream_client.py, a streaming client that is
// not bpfbench (no load generator): streams keep-alive connections to the
// server on port, for seconds, on CPU 1. It prints each connection's local
// port as it connects ("port N").
func streamClient(t *testing.T, port, streams int, seconds float64, extra ...string) *streamProc {
	t.Helper()
	py := privtest.RequireTool(t, "python3", "apt-get install python3")
	taskset := privtest.RequireTool(t, "taskset", "apt-get install util-linux")
	args := append([]string{"--cpu-list", "1", py, filepath.Join("testdata", "stream_client.py"), "--port", strconv.Itoa(port),
		"--streams", strconv.Itoa(streams), "--seconds", fmt.Sprint(seconds)}, extra...)
	cmd := exec.Command(taskset, args...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &streamProc{out: testutil.WatchLines(stdout), done: make(chan struct{})}
	go func() { <-c.out.Done(); _ = cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
		if t.Failed() && errb.Len() > 0 {
			t.Logf("stream client stderr:\n%s", errb.String())
		}
	})
	return c
}

// streamProc is a running stream client.
type streamProc struct {
	out  *testutil.Lines
	done chan struct{}
}

// connected waits until n connections have connected (their requests
// follow at once), or fails t.
func (c *streamProc) connected(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, func() bool { return len(c.portsNow()) >= n }, "%d stream client connections", n)
}

// ports waits for the client's end and returns its connections' local
// ports.
func (c *streamProc) ports() []uint16 {
	<-c.done
	return c.portsNow()
}

func (c *streamProc) portsNow() []uint16 {
	var ports []uint16
	for line := range strings.Lines(c.out.String()) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "port "); ok {
			n, _ := strconv.Atoi(p)
			ports = append(ports, uint16(n))
		}
	}
	return ports
}

// attachLive runs `bpfbench attach PID --duration D -o json` on CPU 1 and
// decodes its live view.
func attachLive(t *testing.T, pid int, d time.Duration) (start time.Time, wait func() live.Result) {
	t.Helper()
	cmd := cliCmd("attach", strconv.Itoa(pid), "--duration", d.String(), "-o", "json", "--cpus", "1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	return start, func() live.Result {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("attach: %v\n%s", err, errb.String())
		}
		var r live.Result
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("attach's JSON: %v\n%s", err, out.String())
		}
		if r.CriticalPath == nil {
			t.Fatalf("attach's JSON has no critical_path:\n%s", errb.String())
		}
		return r
	}
}

// halves sums the intervals' p99-gap excess by cause (weighted by each
// interval's excess) and their neighbours' shares, for the intervals
// ending in [from, to) seconds.
func halves(r live.Result, from, to float64) (shares map[string]float64, neighbours map[uint32]float64, n int) {
	shares, neighbours = map[string]float64{}, map[uint32]float64{}
	var total float64
	for _, v := range r.Live.Intervals {
		if v.AtS < from || v.AtS >= to || v.ITLP99 == nil {
			continue
		}
		n++
		total += v.ITLP99.ExcessMs
		for c, s := range v.ITLP99.ExcessShares {
			shares[c] += s * v.ITLP99.ExcessMs
		}
		for _, nb := range v.Neighbours {
			neighbours[nb.Pid] += nb.Share
		}
	}
	for c := range shares {
		if total > 0 {
			shares[c] /= total
		}
	}
	return shares, neighbours, n
}

// The live view of traffic bpfbench does not generate: a server pinned to
// CPU 0 streams to an independent client on CPU 1 (four keep-alive
// connections); attach follows it for 30 s, and from 15 s on two busy
// threads of another process (`bpfbench perturb cpu`) share CPU 0. In the
// contended half the p99 gap's excess over the server's quiet window must
// be cpu_runqueue (60% or more), and the busy process the first noisy
// neighbour; in the quiet half cpu_runqueue must not lead. For llmsim and
// the real llama-server.
func TestLiveAttachContention(t *testing.T) {
	privtest.Require(t)
	if runtime.NumCPU() < 2 {
		privtest.SkipOptional(t, "needs 2 CPUs (the server's and the client's), have %d", runtime.NumCPU())
	}
	taskset := privtest.RequireTool(t, "taskset", "apt-get install util-linux")
	t.Run("llmsim", func(t *testing.T) {
		simBinaries(t)
		dir := t.TempDir()
		addr, pid := simtest.StartProcess(t, dir, "--itl", "10ms")
		if out, err := exec.Command(taskset, "--all-tasks", "--cpu-list", "-p", "0", strconv.Itoa(pid)).CombinedOutput(); err != nil {
			t.Fatalf("taskset: %v\n%s", err, out)
		}
		port, _ := strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
		retryLive(t, func() []string { return liveContention(t, pid, port, "m", 0) })
	})
	t.Run("llama-server", func(t *testing.T) {
		paths, err := engine.Find()
		if err != nil {
			privtest.SkipOptional(t, "%v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		srv, err := engine.Start(ctx, engine.Options{Paths: paths, Threads: 1, Slots: 4, CtxSize: 2048, CPUs: "0"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		retryLive(t, func() []string { return liveContention(t, srv.Pid, srv.Port, "tiny-llama", 0) })
	})
	// A real framework whose threads busy-wait: the PyTorch engine's API
	// process and its engine core (two intra-op threads), attached by the
	// API process's pid.
	t.Run("pytorch", func(t *testing.T) {
		paths, err := engine.FindTorch()
		if err != nil {
			privtest.SkipOptional(t, "%v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		srv, err := engine.StartTorch(ctx, engine.TorchOptions{Paths: paths, Threads: 2, Slots: 4, CPUs: "0"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		retryLive(t, func() []string { return liveContention(t, srv.Pid, srv.Port, "torch-tiny", 0.2) })
	})
}

// retryLive runs a live check once more when it finds problems: a shared
// host's steal (the hypervisor holding the server's vCPU, cpu_runqueue)
// can spoil a half.
func retryLive(t *testing.T, check func() []string) {
	t.Helper()
	var problems []string
	for attempt := 1; attempt <= 2; attempt++ {
		if problems = check(); len(problems) == 0 {
			return
		}
		t.Logf("attempt %d: %s", attempt, strings.Join(problems, "; "))
	}
	t.Error(strings.Join(problems, "\n"))
}

// liveContention attaches to the server pid for 30 s while a client
// streams from it, two busy threads of another process on its CPU in the
// second half: the contended half's p99 gap excess must be cpu_runqueue's
// (60% or more; server_compute at most maxCompute when that is above 0),
// the quiet half's not, and the busy process the first neighbour.
func liveContention(t *testing.T, pid, port int, model string, maxCompute float64) (problems []string) {
	const quiet, contended = 15.0, 15.0
	client := streamClient(t, port, 4, quiet+contended+3, "--model", model, "--max-tokens", "48")
	client.connected(t, 4, 10*time.Second) // the client's first requests under way
	start, wait := attachLive(t, pid, time.Duration((quiet+contended)*float64(time.Second)))
	time.Sleep(time.Until(start.Add(time.Duration(quiet * float64(time.Second)))))
	busy := cliCmd("perturb", "cpu", "--threads", "2", "--cpus", "0", "--duration", "60s")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	busyAt := time.Since(start).Seconds()
	r := wait()
	_ = busy.Process.Signal(syscall.SIGTERM)
	_ = busy.Wait()
	t.Logf("client connections %v; live: %d streams, %d gaps, itl %+v, ttfb %+v, baseline %q; cost %+v",
		client.ports(), r.Live.Streams, r.Live.Gaps, r.Live.ITL, r.Live.TTFB, r.CriticalPath.Baseline, r.Live.Cost)
	for _, v := range r.Live.Intervals {
		if v.ITLP99 != nil {
			t.Logf("  %5.1fs gaps %4d p99 %6.1f ms excess %6.1f ms %s; %s", v.AtS, v.Gaps, v.ITLP99.FromMs, v.ITLP99.ExcessMs,
				topShares(v.ITLP99.ExcessShares), v.Baseline)
		}
	}
	if r.Live.Gaps < 200 {
		t.Fatalf("%d gaps walked: the client's streams were not seen", r.Live.Gaps)
	}
	// The attach clock starts with its first span, a little after start:
	// a second of slack on each side of the change.
	qs, _, qn := halves(r, 3, busyAt-1)
	cs, nbs, cn := halves(r, busyAt+2, quiet+contended+5)
	if qn == 0 || cn == 0 {
		t.Fatalf("%d quiet and %d contended intervals with a p99 band", qn, cn)
	}
	t.Logf("quiet half: %s; contended half: %s; neighbours %v (busy pid %d)", topShares(qs), topShares(cs), nbs, busy.Process.Pid)
	if cs["cpu_runqueue"] < 0.6 {
		problems = append(problems, fmt.Sprintf("contended half: cpu_runqueue is %.0f%% of the p99 gap's excess, want 60%% or more", 100*cs["cpu_runqueue"]))
	}
	if maxCompute > 0 && cs["server_compute"] > maxCompute {
		problems = append(problems, fmt.Sprintf("contended half: server_compute is %.0f%% of the p99 gap's excess, want %.0f%% or less", 100*cs["server_compute"], 100*maxCompute))
	}
	if live.TopOf(qs) == "cpu_runqueue" && qs["cpu_runqueue"] > 0.5 {
		problems = append(problems, fmt.Sprintf("quiet half: cpu_runqueue leads the p99 gap's excess (%.0f%%) with nothing contending", 100*qs["cpu_runqueue"]))
	}
	pids := slices.Collect(func(yield func(uint32) bool) {
		for p := range nbs {
			if !yield(p) {
				return
			}
		}
	})
	slices.SortFunc(pids, func(a, b uint32) int {
		if nbs[a] > nbs[b] {
			return -1
		}
		if nbs[a] < nbs[b] {
			return 1
		}
		return 0
	})
	if len(pids) == 0 || pids[0] != uint32(busy.Process.Pid) {
		problems = append(problems, fmt.Sprintf("contended half: neighbours %v, want the busy process %d first", nbs, busy.Process.Pid))
	}
	return problems
}

func topShares(m map[string]float64) string {
	var parts []string
	for _, c := range []string{"cpu_runqueue", "server_compute", "server_sleep", "io_block", "gpu_sync", "net_backpressure", "unexplained"} {
		if m[c] >= 0.01 {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", c, 100*m[c]))
		}
	}
	return strings.Join(parts, " ")
}

// A slow reader among independent clients: its connection's gaps are the
// server waiting for it (net_backpressure, the connection held back), the
// other connections' are not.
func TestLiveAttachSlowReader(t *testing.T) {
	privtest.Require(t)
	if runtime.NumCPU() < 2 {
		privtest.SkipOptional(t, "needs 2 CPUs, have %d", runtime.NumCPU())
	}
	simBinaries(t)
	dir := t.TempDir()
	addr, pid := simtest.StartProcess(t, dir, "--itl", "10ms")
	port, _ := strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
	// The slow reader's buffers fill first (its small receive buffer, the
	// server's send buffer): attach sees the steady state, the server
	// writing as the reader frees room.
	slow := streamClient(t, port, 1, 20, "--slow", "--max-tokens", "2000")
	slow.connected(t, 1, 10*time.Second)
	time.Sleep(4 * time.Second) // the slow reader's steady state: not an event to wait for
	fast := streamClient(t, port, 3, 14, "--max-tokens", "64")
	fast.connected(t, 3, 10*time.Second)
	_, wait := attachLive(t, pid, 12*time.Second)
	r := wait()
	slowPorts, fastPorts := slow.ports(), fast.ports()
	if len(slowPorts) == 0 || len(fastPorts) == 0 {
		t.Fatalf("client ports: slow %v, fast %v", slowPorts, fastPorts)
	}
	slowSeen, fastSeen := 0, 0
	for _, c := range r.Live.Connections {
		share := c.CausesMs["net_backpressure"] / max(c.GapMs, 1e-9)
		t.Logf("port %d: %d gaps, %.0f ms, net_backpressure %.0f%%, top %s", c.Port, c.Gaps, c.GapMs, 100*share, c.Top)
		switch {
		case slices.Contains(slowPorts, c.Port):
			slowSeen++
			if c.Top != "net_backpressure" {
				t.Errorf("the slow reader's connection (port %d): top cause %s, want net_backpressure (%v)", c.Port, c.Top, c.CausesMs)
			}
		case slices.Contains(fastPorts, c.Port):
			fastSeen++
			if share > 0.1 {
				t.Errorf("a fast reader's connection (port %d): net_backpressure is %.0f%% of its gap time, want under 10%%", c.Port, 100*share)
			}
		}
	}
	if slowSeen == 0 || fastSeen == 0 {
		t.Errorf("the live view's connections %+v miss the clients' ports (slow %v, fast %v)", r.Live.Connections, slowPorts, fastPorts)
	}
}
