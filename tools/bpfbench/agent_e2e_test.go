package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/internal/privtest"
)

// agentNode is a second node: a network namespace joined to this one by
// a veth pair, running llmsim and (per case) a bpfbench daemon with the
// agent API behind basic auth.
type agentNode struct {
	ns, ip, dir, pwFile string
	simPid              int
}

const (
	agentUser     = "bench"
	agentPassword = "s3cret-agent"
	agentSimPort  = 8000
	agentPort     = 9464
)

func newAgentNode(t *testing.T) *agentNode {
	t.Helper()
	privtest.Require(t)
	ip := privtest.RequireTool(t, "ip", "apt-get install iproute2")
	simBinaries(t)
	n := &agentNode{ns: fmt.Sprintf("bbag%d", os.Getpid()), ip: "10.77.0.2", dir: t.TempDir()}
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	host, peer := fmt.Sprintf("bbh%d", os.Getpid()%100000), fmt.Sprintf("bbp%d", os.Getpid()%100000)
	sh("netns", "add", n.ns)
	t.Cleanup(func() {
		_ = exec.Command(ip, "netns", "del", n.ns).Run() // deletes the veth pair too
		_ = exec.Command(ip, "link", "del", host).Run()
	})
	sh("link", "add", host, "type", "veth", "peer", "name", peer)
	sh("link", "set", peer, "netns", n.ns)
	sh("addr", "add", "10.77.0.1/24", "dev", host)
	sh("link", "set", host, "up")
	sh("-n", n.ns, "addr", "add", n.ip+"/24", "dev", peer)
	sh("-n", n.ns, "link", "set", peer, "up")
	sh("-n", n.ns, "link", "set", "lo", "up")

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
	write("agent.yaml", "agent:\n  enabled: true\n")
	n.pwFile = write("password", agentPassword+"\n")

	sim := exec.Command(ip, "netns", "exec", n.ns, "llmsim", "--addr", fmt.Sprintf("%s:%d", n.ip, agentSimPort))
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
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if auth {
			req.SetBasicAuth(agentUser, agentPassword)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not answer 200 in 15 s:\n%s", url, logs)
}

// daemon starts `bpfbench daemon` in the node with env added.
func (n *agentNode) daemon(t *testing.T, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", n.ns, os.Args[0], "daemon", "--config", filepath.Join(n.dir, "agent.yaml"),
		"--web.config.file", filepath.Join(n.dir, "web.yml"), "--web.listen-address", fmt.Sprintf("%s:%d", n.ip, agentPort))
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

func readAgentResult(t *testing.T, dir string) *report.Document {
	t.Helper()
	doc, err := report.ReadFile(filepath.Join(dir, "result.json"))
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
			if len(doc.Collectors) == 0 {
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
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
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
