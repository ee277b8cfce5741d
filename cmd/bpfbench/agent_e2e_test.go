package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/result"
	"golang.org/x/crypto/bcrypt"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
)

// agentNode is a second node: a network namespace joined to this one by
// a veth pair, running llmsim and (per case) a bpfbench daemon with the
// agent API behind basic auth.
type agentNode struct {
	ns, ip, hostIP, dir, pwFile string
	simPid                      int
	// daemonCPU, when set, pins the daemon (taskset -c); wrap, when set,
	// is the command the daemon runs under (setpriv).
	daemonCPU string
	wrap      []string
}

// nodeOptions shape a node: llmsim's CPU and arguments, the daemon's CPU
// and configuration (beyond agent.enabled; {{host}} in it is the host's
// address on the node's veth pair).
type nodeOptions struct {
	simCPU, daemonCPU string
	simArgs           []string
	daemonConfig      string
}

const (
	agentUser     = "bench"
	agentPassword = "s3cret-agent"
	agentSimPort  = 8000
	agentPort     = 9464
)

func newAgentNode(t *testing.T) *agentNode {
	t.Helper()
	return newAgentNodeWith(t, nodeOptions{})
}

func newAgentNodeWith(t *testing.T, o nodeOptions) *agentNode {
	t.Helper()
	privtest.Require(t)
	ip := privtest.RequireTool(t, "ip", "apt-get install iproute2")
	simBinaries(t)
	v := newHostVeth(t, "bba", 77, 0)
	n := &agentNode{ns: v.Netns, ip: v.Addr, hostIP: v.HostAddr, dir: t.TempDir(), daemonCPU: o.daemonCPU}

	hash, err := bcrypt.GenerateFromPassword([]byte(agentPassword), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) string {
		p := filepath.Join(n.dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("web.yml", fmt.Sprintf("basic_auth_users:\n  %s: %s\n", agentUser, hash))
	// The agent follows llmsim alone (agent.allow).
	write("agent.yaml", "agent:\n  enabled: true\n  allow: {comms: [llmsim]}\n"+strings.ReplaceAll(o.daemonConfig, "{{host}}", n.hostIP))
	n.pwFile = write("password", agentPassword+"\n")

	simArgs := []string{"netns", "exec", n.ns}
	if o.simCPU != "" {
		simArgs = append(simArgs, "taskset", "-c", o.simCPU) // execs llmsim in place too
	}
	simArgs = append(append(simArgs, "llmsim", "--addr", fmt.Sprintf("%s:%d", n.ip, agentSimPort)), o.simArgs...)
	sim := exec.Command(ip, simArgs...)
	var simLog bytes.Buffer
	sim.Stdout, sim.Stderr = &simLog, &simLog
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Process.Kill(); _ = sim.Wait() })
	n.simPid = sim.Process.Pid // ip netns exec execs llmsim in place
	n.waitHTTP(t, fmt.Sprintf("http://%s:%d/v1/models", n.ip, agentSimPort), false, &simLog)
	return n
}

func (n *agentNode) waitHTTP(t *testing.T, url string, auth bool, logs *bytes.Buffer) {
	t.Helper()
	ok := testutil.Until(15*time.Second, func() bool {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if auth {
			req.SetBasicAuth(agentUser, agentPassword)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if !ok {
		t.Fatalf("%s did not answer 200 in 15 s:\n%s", url, logs)
	}
}

// daemon starts `bpfbench daemon` in the node with env added.
func (n *agentNode) daemon(t *testing.T, env ...string) *exec.Cmd {
	t.Helper()
	args := []string{"netns", "exec", n.ns}
	if n.daemonCPU != "" {
		args = append(args, "taskset", "-c", n.daemonCPU)
	}
	args = append(args, n.wrap...)
	// Basic auth without TLS on the veth address: --agent.insecure says so.
	args = append(args, os.Args[0], "daemon", "--config", filepath.Join(n.dir, "agent.yaml"),
		"--web.config.file", filepath.Join(n.dir, "web.yml"), "--web.listen-address", fmt.Sprintf("%s:%d", n.ip, agentPort), "--agent.insecure")
	cmd := exec.Command("ip", args...)
	cmd.Env = append(append(os.Environ(), envCLI+"=1"), env...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("daemon:\n%s", logs.String())
		}
	})
	n.waitHTTP(t, fmt.Sprintf("http://%s:%d/-/ready", n.ip, agentPort), true, &logs)
	return cmd
}

// run runs `bpfbench run --agent` from this namespace.
func (n *agentNode) run(t *testing.T, out string, creds bool, requests int) *exec.Cmd {
	args := []string{"run", "--target", fmt.Sprintf("http://%s:%d", n.ip, agentSimPort),
		"--agent", fmt.Sprintf("%s:%d", n.ip, agentPort), "--pid", fmt.Sprint(n.simPid),
		"--num-requests", fmt.Sprint(requests), "--rate", "4", "--out", out}
	if creds {
		args = append(args, "--agent.user", agentUser, "--agent.password-file", n.pwFile)
	}
	return cliCmd(args...)
}

func readAgentResult(t *testing.T, dir string) *result.Document {
	t.Helper()
	doc, err := result.Load(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Agents) != 1 {
		t.Fatalf("result.json has %d agents, want 1", len(doc.Agents))
	}
	return doc
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func TestAgentTwoNamespaces(t *testing.T) {
	n := newAgentNode(t)

	for _, tc := range []struct {
		name  string
		shift int64
	}{{"same clock", 0}, {"clock shifted 5s", 5_000_000_000}} {
		t.Run(tc.name, func(t *testing.T) {
			var env []string
			if tc.shift != 0 {
				env = append(env, fmt.Sprintf("BPFBENCH_TEST_CLOCK_OFFSET_NS=%d", tc.shift))
			}
			n.daemon(t, env...)
			out := t.TempDir()
			cmd := n.run(t, out, true, 16)
			b, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("run --agent: %v\n%s", err, b)
			}
			if !strings.Contains(string(b), "Agent "+n.ip) {
				t.Errorf("the summary has no agent line:\n%s", b)
			}
			doc := readAgentResult(t, out)
			a := doc.Agents[0]
			t.Logf("agent: complete %v, offset %d ns, bound %d ns, drift %.2f ppm, %d estimates, spans sent %d received %d below bound %d",
				a.Complete, a.Clock.OffsetNs, a.Clock.BoundNs, a.Clock.DriftPPM, len(a.Clock.Estimates), a.Spans, a.Received, a.BelowClockBound)
			if !a.Complete {
				t.Errorf("agents[0] not complete: %s", a.Error)
			} else if a.Spans != a.Received {
				t.Errorf("agents[0]: the agent sent %d spans, the run received %d", a.Spans, a.Received)
			}
			if a.Pid != n.simPid {
				t.Errorf("agents[0].pid %d, want llmsim's %d", a.Pid, n.simPid)
			}
			if a.Clock.BoundNs <= 0 || a.Clock.BoundNs >= int64(time.Millisecond) {
				t.Errorf("clock bound %d ns, want in (0, 1 ms)", a.Clock.BoundNs)
			}
			if d := abs64(a.Clock.OffsetNs - tc.shift); d > a.Clock.BoundNs {
				t.Errorf("offset %d ns is %d ns from the shift %d, over the bound %d", a.Clock.OffsetNs, d, tc.shift, a.Clock.BoundNs)
			}
			if doc.ClockBoundNs != a.Clock.BoundNs {
				t.Errorf("clock_bound_ns %d, agents[0].clock.bound_ns %d", doc.ClockBoundNs, a.Clock.BoundNs)
			}
			if doc.Collection == nil || doc.Collection.Spans == 0 || a.Received == 0 {
				t.Errorf("no spans from the agent reached the attribution: collection %+v, received %d", doc.Collection, a.Received)
			}
			if doc.Attribution == nil || doc.CriticalPath == nil {
				t.Errorf("attribution or critical_path missing")
			}
			if len(doc.Collectors.Names()) == 0 {
				t.Errorf("no section summaries from the agent")
			}
			if f := doc.Float("completed"); f != 16 {
				t.Errorf("completed %v, want 16", f)
			}
		})
	}

	t.Run("no credentials", func(t *testing.T) {
		n.daemon(t)
		b, err := n.run(t, t.TempDir(), false, 4).CombinedOutput()
		if err == nil {
			t.Fatalf("run --agent without credentials succeeded:\n%s", b)
		}
		if !strings.Contains(string(b), "401") || !strings.Contains(string(b), "user and password") {
			t.Errorf("the error does not say 401 and what to give:\n%s", b)
		}
	})

	t.Run("agent killed mid-run", func(t *testing.T) {
		d := n.daemon(t)
		out := t.TempDir()
		cmd := n.run(t, out, true, 24)
		var b bytes.Buffer
		cmd.Stdout, cmd.Stderr = &b, &b
		// The simulator serves every subtest: its count goes on from
		// the earlier runs'.
		simMetrics := fmt.Sprintf("http://%s:%d/metrics", n.ip, agentSimPort)
		served := testutil.Value(simMetrics, "vllm:request_success_total", "")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Mid-run: a quarter of the requests served, the spans streaming.
		if !testutil.Until(30*time.Second, func() bool { return testutil.Value(simMetrics, "vllm:request_success_total", "") >= served+6 }) {
			t.Fatalf("the run served no 6 requests in 30 s:\n%s", b.String())
		}
		killed := time.Now()
		_ = d.Process.Kill() // kill -9: no end of session is sent
		if err := cmd.Wait(); err != nil {
			t.Fatalf("run: %v\n%s", err, b.String())
		}
		doc := readAgentResult(t, out)
		a := doc.Agents[0]
		t.Logf("agent: complete %v, stopped at %s (killed %s), error %q, uncollected requests %d", a.Complete, a.StoppedAt, killed, a.Error, a.UncollectedRequests)
		if f := doc.Float("completed"); f != 24 {
			t.Errorf("completed %v, want the whole load (24)", f)
		}
		if a.Complete {
			t.Errorf("agents[0].complete after the agent was killed")
		}
		if !strings.Contains(a.Error, "last seen at") {
			t.Errorf("agents[0].error does not say when collection was last seen: %q", a.Error)
		}
		if dt := a.StoppedAt.Sub(killed); dt < -1500*time.Millisecond || dt > 1500*time.Millisecond {
			t.Errorf("stopped_at %s is %s from the kill", a.StoppedAt, dt)
		}
		if !strings.Contains(b.String(), "collection stopped") {
			t.Errorf("the summary does not say collection stopped:\n%s", b.String())
		}
	})
}

// --agent.pod's bad uses are refused before anything starts.
func TestAgentPodFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"without --agent", []string{"--agent.pod", "inference/vllm-0"}, "need --agent HOST:PORT"},
		{"with --pid", []string{"--agent", "127.0.0.1:1", "--agent.pod", "inference/vllm-0", "--pid", "1"}, "give --agent.pod or the server's --pid/--port"},
		{"not NAMESPACE/POD", []string{"--agent", "127.0.0.1:1", "--agent.pod", "vllm-0"}, "give NAMESPACE/POD or NAMESPACE/POD/CONTAINER"},
		{"bad container", []string{"--agent", "127.0.0.1:1", "--agent.pod", "inference/vllm-0/Engine"}, `container "Engine" is not a Kubernetes container name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "--target", "http://127.0.0.1:1", "--out", t.TempDir()}, tc.args...)
			code, _, stderr := runCLI(args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q, want it to say %q", code, stderr, tc.want)
			}
		})
	}
}

// agentShareTolerance is how far a cause's share of the gaps' time may
// differ between the agent's run and the same-host run of one scenario:
// two runs of a few seconds on a shared 2-core host, one of them with
// every span eroded by the clock bound (its short spans gone, so some
// time moves from cpu_runqueue to the server's own compute: 0.04-0.09
// measured), differ by more than the clock alone would make them.
const agentShareTolerance = 0.15

// The same scenario observed through an agent across two network
// namespaces and by a plain run on the server's host: llmsim (CPU work per
// step) pinned to CPU 0 with two busy loops on it, bpfbench and the daemon
// on CPU 1. The attribution compared is the critical path's (the run's
// attribution model) over every gap: each cause's share of the gaps' time
// (totals_ms / gap_ms) must agree within agentShareTolerance, and the top
// cause (unexplained aside) must be the same, the injected cpu_runqueue.
// The slowest 1% band (9 gaps here: one outlier moves its shares by
// tens of percent) and the union-of-activity attribution are logged
// beside them. The runs change process-wide state (--cpus), so the CLI
// runs as a child. On a shared host a pair can be spoilt by other work;
// one retry is allowed.
func TestAgentMatchesSameHostRun(t *testing.T) {
	privtest.Require(t)
	taskset := privtest.RequireTool(t, "taskset", "apt-get install util-linux")
	n := newAgentNodeWith(t, nodeOptions{simCPU: "0", daemonCPU: "1",
		simArgs: []string{"--work", "cpu", "--itl", "15ms", "--jitter", "0.05", "--max-num-seqs", "32"}})
	n.daemon(t)
	target := fmt.Sprintf("http://%s:%d", n.ip, agentSimPort)
	load := []string{"--target", target, "--pid", fmt.Sprint(n.simPid), "--num-requests", "24", "--rate", "4",
		"--output-len", "32", "--cpus", "1"}
	var problems []string
	for attempt := 1; attempt <= 2; attempt++ {
		var busy []*exec.Cmd
		for range 2 {
			c := exec.Command(taskset, "-c", "0", "sh", "-c", "while :; do :; done")
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			busy = append(busy, c)
		}
		docs := map[string]*result.Document{}
		for _, mode := range []string{"agent", "same host"} {
			out := t.TempDir()
			args := append(append([]string{"run"}, load...), "--out", out)
			if mode == "agent" {
				args = append(args, "--agent", fmt.Sprintf("%s:%d", n.ip, agentPort), "--agent.user", agentUser, "--agent.password-file", n.pwFile)
			}
			code, stdout, stderr := runCLIChild(args...)
			if code != 0 {
				for _, c := range busy {
					_ = c.Process.Kill()
					_ = c.Wait()
				}
				t.Fatalf("%s run: exit %d: %s\n%s", mode, code, stderr, stdout)
			}
			doc, err := result.Load(filepath.Join(out, "result.json"))
			if err != nil {
				t.Fatal(err)
			}
			if doc.Attribution == nil {
				t.Fatalf("%s run: no attribution in result.json:\n%s", mode, stdout)
			}
			docs[mode] = doc
		}
		for _, c := range busy {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		remote, local := docs["agent"], docs["same host"]
		if len(remote.Agents) == 1 {
			a := remote.Agents[0]
			t.Logf("attempt %d: agent clock offset %d ns ± %d ns; spans received %d, eroded away %d", attempt, a.Clock.OffsetNs, a.Clock.BoundNs, a.Received, a.BelowClockBound)
		}
		for _, mode := range []string{"agent", "same host"} {
			d := docs[mode]
			t.Logf("attempt %d: %s run: attribution top %s, ITL excess shares %v", attempt, mode, d.Attribution.TopCause, d.Attribution.ITL["all"])
			if cp := d.CriticalPath; cp != nil && cp.ITLP99 != nil && cp.GapMs > 0 {
				frac := map[string]float64{}
				for c, ms := range cp.TotalsMs {
					frac[c] = ms / cp.GapMs
				}
				t.Logf("attempt %d: %s run: critical path p99 band (%d gaps) top %s, excess shares %v; every gap's time per cause %v",
					attempt, mode, cp.ITLP99.Gaps, cp.ITLP99.Top, cp.ITLP99.ExcessShares, frac)
			}
		}
		rc, lc := remote.CriticalPath, local.CriticalPath
		if rc == nil || lc == nil || rc.GapMs <= 0 || lc.GapMs <= 0 {
			t.Fatalf("critical_path missing or without gaps: agent %+v, same host %+v", rc, lc)
		}
		problems = nil
		rt, lt := gapTop(rc), gapTop(lc)
		if rt != lt {
			problems = append(problems, fmt.Sprintf("top cause %s through the agent, %s on the same host", rt, lt))
		}
		if lt != "cpu_runqueue" {
			problems = append(problems, "the same-host run's top cause is "+lt+", not the injected cpu_runqueue")
		}
		causes := map[string]bool{}
		for c := range lc.TotalsMs {
			causes[c] = true
		}
		for c := range rc.TotalsMs {
			causes[c] = true
		}
		for c := range causes {
			ls, rs := lc.TotalsMs[c]/lc.GapMs, rc.TotalsMs[c]/rc.GapMs
			if d := rs - ls; d > agentShareTolerance || d < -agentShareTolerance {
				problems = append(problems, fmt.Sprintf("%s share %.3f through the agent, %.3f on the same host", c, rs, ls))
			}
		}
		if len(problems) == 0 {
			return
		}
		t.Logf("attempt %d: %v", attempt, problems)
	}
	t.Errorf("the agent's attribution does not match the same-host run's: %v", problems)
}

// gapTop is the cause with the most of the gaps' time, unexplained aside.
func gapTop(cp *result.CriticalPath) string {
	top, best := "unexplained", 0.0
	for c, ms := range cp.TotalsMs {
		if c != "unexplained" && ms > best {
			top, best = c, ms
		}
	}
	return top
}

// A session on a pod through the agent, end to end: llmsim in the agent's
// namespace is moved into a cgroup laid out as the kubelet's cgroupfs
// driver lays out a container's (kubepods/burstable/pod<UID>/<ID>), a fake
// API server lists it as container llmsim of pod inference/llmsim-0 on the
// daemon's node (beside a sidecar with no process), and `run --agent
// --agent.pod` follows it: the agent resolves the pod to llmsim's pid.
// A pod of two containers with none named, and a pod the node does not
// run, fail the run with what to give.
func TestAgentPodTarget(t *testing.T) {
	privtest.Require(t)
	mnt := testutil.Cgroup2Mount()
	if mnt == "" {
		privtest.Skip(t, "no cgroup v2 hierarchy mounted: the pod's cgroup cannot be laid out")
	}
	const (
		uid       = "5e2f0d6a-1b2c-4d3e-8f90-a1b2c3d4e5f6"
		simID     = "7a6b5c4d3e2f10098a7b6c5d4e3f20117a6b5c4d3e2f10098a7b6c5d4e3f2011"
		sidecarID = "8b7c6d5e4f3a21109b8c7d6e5f4a31228b7c6d5e4f3a21109b8c7d6e5f4a3122"
		token     = "agent-pod-token"
	)
	pods := fmt.Sprintf(`{"kind":"PodList","apiVersion":"v1","items":[{"metadata":{"namespace":"inference","name":"llmsim-0","uid":%q,"labels":{"app":"llmsim"}},
"spec":{"nodeName":"gpu-1","containers":[{"name":"llmsim"},{"name":"proxy"}]},
"status":{"containerStatuses":[{"name":"llmsim","containerID":"containerd://%s"},{"name":"proxy","containerID":"containerd://%s"}]}}]}`, uid, simID, sidecarID)
	var listed atomic.Int32
	l, err := net.Listen("tcp", "0.0.0.0:0") // reached from the agent's namespace over the veth pair
	if err != nil {
		t.Fatal(err)
	}
	api := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/pods" || r.URL.Query().Get("fieldSelector") != "spec.nodeName=gpu-1" || r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unexpected request "+r.URL.String(), http.StatusBadRequest)
			return
		}
		listed.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, pods)
	})}
	go func() { _ = api.Serve(l) }()
	t.Cleanup(func() { _ = api.Close() })
	port := l.Addr().(*net.TCPAddr).Port

	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	n := newAgentNodeWith(t, nodeOptions{daemonConfig: fmt.Sprintf("kubernetes:\n  node_name: gpu-1\n  api_server: http://{{host}}:%d\n  token_file: %s\n", port, tokFile)})

	// llmsim into its "container", and back out before the cgroups go.
	orig := ""
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", n.simPid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if p, ok := strings.CutPrefix(line, "0::"); ok {
				orig = p
			}
		}
	}
	podDir := filepath.Join(mnt, "kubepods", "burstable", "pod"+uid)
	ctrDir := filepath.Join(podDir, simID)
	if err := os.MkdirAll(ctrDir, 0o755); err != nil {
		t.Fatalf("creating the container's cgroup under %s: %v", mnt, err)
	}
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(mnt, orig, "cgroup.procs"), []byte(fmt.Sprint(n.simPid)), 0o644)
		for _, d := range []string{ctrDir, podDir, filepath.Dir(podDir), filepath.Join(mnt, "kubepods")} {
			_ = os.Remove(d)
		}
	})
	if err := os.WriteFile(filepath.Join(ctrDir, "cgroup.procs"), []byte(fmt.Sprint(n.simPid)), 0o644); err != nil {
		t.Fatalf("moving llmsim into the container's cgroup: %v", err)
	}
	n.daemon(t)

	run := func(out, pod string) *exec.Cmd {
		return cliCmd("run", "--target", fmt.Sprintf("http://%s:%d", n.ip, agentSimPort),
			"--agent", fmt.Sprintf("%s:%d", n.ip, agentPort), "--agent.user", agentUser, "--agent.password-file", n.pwFile,
			"--agent.pod", pod, "--num-requests", "8", "--rate", "8", "--out", out)
	}
	out := t.TempDir()
	if b, err := run(out, "inference/llmsim-0/llmsim").CombinedOutput(); err != nil {
		t.Fatalf("run --agent.pod: %v\n%s", err, b)
	}
	doc := readAgentResult(t, out)
	a := doc.Agents[0]
	t.Logf("pod inference/llmsim-0/llmsim: agent session on pid %d (%s), complete %v, spans received %d; the API server listed the pods %d times",
		a.Pid, a.Comm, a.Complete, a.Received, listed.Load())
	if a.Pid != n.simPid || !a.Complete || a.Received == 0 {
		t.Errorf("agents[0]: pid %d complete %v received %d; want llmsim's pid %d, complete, spans", a.Pid, a.Complete, a.Received, n.simPid)
	}
	if f := doc.Float("completed"); f != 8 {
		t.Errorf("completed %v, want 8", f)
	}
	for pod, want := range map[string]string{
		"inference/llmsim-0": "has 2 containers (llmsim, proxy): name one",
		"inference/vllm-9":   "404 Not Found: pod inference/vllm-9: no such pod on this node",
	} {
		b, err := run(t.TempDir(), pod).CombinedOutput()
		if err == nil || !strings.Contains(string(b), want) {
			t.Errorf("run --agent.pod %s: %v, want it to say %q:\n%s", pod, err, want, b)
		}
	}
}

// The agent run with the daemon holding only the four capabilities the
// chart and the systemd unit grant (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE,
// CAP_DAC_READ_SEARCH): llmsim maps the CUDA stub, and where the kernel has
// uprobe_multi links (Linux 6.6+, as `bpfbench check` says) the cuda
// section attaches through them, which those capabilities allow, and
// counts llmsim's CUDA calls. On a kernel without them it falls back to
// perf-event uprobes: where the kernel's uprobe PMU asks for CAP_SYS_ADMIN
// (Linux 6.16+ and stable kernels with the change), result.json says cuda
// is unavailable and names that capability. The scheduler's spans arrive
// either way. With CAP_SYS_ADMIN added, the cuda section attaches.
func TestAgentCapabilities(t *testing.T) {
	privtest.Require(t)
	setpriv := privtest.RequireTool(t, "setpriv", "apt-get install util-linux")
	simBinaries(t)
	var checks []struct{ Status, Name, Detail string }
	if code, stdout, stderr := runCLI("check", "-o", "json"); json.Unmarshal([]byte(stdout), &checks) != nil {
		t.Fatalf("bpfbench check -o json: exit %d\n%s%s", code, stdout, stderr)
	}
	multi := false
	for _, c := range checks {
		if c.Name == "uprobe links" {
			multi = strings.Contains(c.Detail, "uprobe_multi: ok")
			t.Logf("bpfbench check: %s: %s", c.Name, c.Detail)
		}
	}
	n := newAgentNodeWith(t, nodeOptions{simArgs: []string{"--cuda-lib", filepath.Join(simBinsDir, "libcuda.so.1")}})
	const four = "-all,+bpf,+perfmon,+sys_ptrace,+dac_read_search"
	for _, caps := range []string{four, four + ",+sys_admin"} {
		t.Run(caps, func(t *testing.T) {
			n.wrap = []string{setpriv, "--inh-caps=" + caps, "--ambient-caps=" + caps, "--bounding-set=" + caps}
			defer func() { n.wrap = nil }()
			n.daemon(t)
			out := t.TempDir()
			if b, err := n.run(t, out, true, 8).CombinedOutput(); err != nil {
				t.Fatalf("run --agent: %v\n%s", err, b)
			}
			doc := readAgentResult(t, out)
			a := doc.Agents[0]
			why, refused := a.Unavailable["cuda"]
			calls := uint64(0)
			if doc.Collectors != nil && doc.Collectors.CUDA != nil {
				for _, c := range doc.Collectors.CUDA.Calls {
					calls += c.Count
				}
			}
			t.Logf("daemon with %s: spans received %d; CUDA calls counted %d; cuda unavailable %v: %s", caps, a.Received, calls, refused, why)
			if a.Received == 0 {
				t.Errorf("no spans from the daemon")
			}
			switch {
			case !refused:
				if calls == 0 {
					t.Errorf("cuda attached but counted no call of llmsim's")
				}
				if caps == four && !multi {
					t.Logf("this kernel lets CAP_PERFMON place perf-event uprobes (before Linux 6.16)")
				}
			case caps != four:
				t.Errorf("cuda unavailable with CAP_SYS_ADMIN: %s", why)
			case multi:
				t.Errorf("cuda unavailable with %s on a kernel with uprobe_multi links: %s", caps, why)
			case strings.Contains(why, "perf_uprobe PMU"):
				if !strings.Contains(why, "CAP_SYS_ADMIN") {
					t.Errorf("cuda refused by the uprobe PMU without naming CAP_SYS_ADMIN: %s", why)
				}
			default:
				t.Errorf("cuda unavailable for another reason: %s", why)
			}
		})
	}
}

// jsonOf is v as result.json has it (a part of the typed document read
// back as the load generator's own types).
func jsonOf(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
