package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/agent"
)

// writeStat gives a fixture process its parent.
func writeStat(t *testing.T, proc string, pid, ppid int, comm string) {
	t.Helper()
	d := filepath.Join(proc, strconv.Itoa(pid))
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	// comm may hold spaces and parentheses: the fields after the last ')' count.
	stat := fmt.Sprintf("%d (%s) S %d %d %d 0 -1\n", pid, comm, ppid, pid, pid)
	if err := os.WriteFile(filepath.Join(d, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A pod target resolves to the root of its container's process tree:
// the process whose parent is outside the container, not merely the
// lowest pid (pids wrap).
func TestK8sPodProcess(t *testing.T) {
	proc := fixtureProc(t)
	us := strings.ReplaceAll(uidVLLM, "-", "_")
	writeStat(t, proc, 100, 1, "python3")
	writeStat(t, proc, 101, 100, "python3 (worker)")
	writeStat(t, proc, 102, 1, "envoy")
	writeStat(t, proc, 200, 1, "python3")
	// A worker whose pid wrapped below its parent's.
	if err := os.MkdirAll(filepath.Join(proc, "90"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(proc, "90", "cgroup"), []byte("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"+us+".slice/cri-containerd-"+idVLLM+".scope\n"), 0o644)
	writeStat(t, proc, 90, 101, "python3")
	ix := NewPodIndex(nodePods())

	for _, c := range []struct {
		ref     agent.PodRef
		pid     int
		resolve string // the container resolved
	}{
		{agent.PodRef{Namespace: "inference", Name: "vllm-0", Container: "vllm"}, 100, "vllm"},
		{agent.PodRef{Namespace: "inference", Name: "vllm-0", Container: "proxy"}, 102, "proxy"},
		{agent.PodRef{Namespace: "inference", Name: "vllm-1"}, 200, "vllm"}, // its only container
		{agent.PodRef{Namespace: "monitoring", Name: "node-exporter-x"}, 300, "node-exporter"},
	} {
		pid, got, err := podProcess(proc, ix, c.ref)
		if err != nil || pid != c.pid || got.Container != c.resolve {
			t.Errorf("%s: pid %d container %q, %v; want pid %d container %q", c.ref, pid, got.Container, err, c.pid, c.resolve)
		}
	}

	for _, c := range []struct {
		ref      agent.PodRef
		notFound bool
		says     string
	}{
		{agent.PodRef{Namespace: "inference", Name: "vllm-9"}, true, "no such pod on this node"},
		{agent.PodRef{Namespace: "default", Name: "vllm-0"}, true, "no such pod"},
		{agent.PodRef{Namespace: "inference", Name: "vllm-0"}, false, "has 3 containers (proxy, vllm, waiting): name one"},
		{agent.PodRef{Namespace: "inference", Name: "vllm-0", Container: "sidecar"}, true, `no container "sidecar" (it has proxy, vllm, waiting)`},
		{agent.PodRef{Namespace: "inference", Name: "vllm-0", Container: "waiting"}, true, "has not started"},
	} {
		_, _, err := podProcess(proc, ix, c.ref)
		if err == nil || errors.Is(err, agent.ErrPodNotFound) != c.notFound || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v; want it to say %q (not found: %v)", c.ref, err, c.says, c.notFound)
		}
	}

	// A started container with no process here: the daemon sees another
	// PID namespace.
	empty := t.TempDir()
	if _, _, err := podProcess(empty, ix, agent.PodRef{Namespace: "inference", Name: "vllm-1"}); err == nil || !strings.Contains(err.Error(), "hostPID") {
		t.Errorf("no process: %v, want the hostPID hint", err)
	}
}

// Through the daemon's agent API: a session on a pod of the fake API
// server's node follows the process in that pod's container (a child of
// the test, placed in it by the fixture /proc, of a comm agent.allow
// lists); unknown pods, a pod of
// several containers without one named, and an agent with no Kubernetes
// configuration are refused with what to do.
func TestAgentPodSession(t *testing.T) {
	api := newFakeAPI(t, false)
	proc := t.TempDir()
	self := sleeper(t)
	os.MkdirAll(filepath.Join(proc, strconv.Itoa(self)), 0o755)
	os.WriteFile(filepath.Join(proc, strconv.Itoa(self), "cgroup"), []byte("12:memory:/kubepods/burstable/podabc/"+idVLLM2+"\n0::/kubepods/burstable/podabc/"+idVLLM2+"\n"), 0o644)
	writeStat(t, proc, self, os.Getpid(), "sleep")

	cfg := DefaultConfig()
	cfg.Agent = Agent{Enabled: true, Allow: AgentAllow{Comms: []string{"sleep"}}}
	cfg.Kubernetes = Kubernetes{NodeName: "gpu-1", APIServer: api.URL, TokenFile: writeToken(t, api.token)}
	addr := runDaemonWith(t, cfg, "", func(d *Daemon) { d.proc = proc })
	c := agent.NewClient(addr, agent.ClientOptions{})
	ctx := context.Background()

	s, err := c.Start(ctx, agent.StartRequest{Target: agent.Target{Pod: &agent.PodRef{Namespace: "inference", Name: "vllm-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("session %s on pod %v: pid %d (%s)", s.Info.ID, s.Info.Pod, s.Info.Pid, s.Info.Comm)
	if s.Info.Pid != self || s.Info.Pod == nil || s.Info.Pod.String() != "inference/vllm-1/vllm" {
		t.Errorf("session on pid %d pod %v, want pid %d pod inference/vllm-1/vllm", s.Info.Pid, s.Info.Pod, self)
	}
	if _, err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	for ref, want := range map[agent.PodRef]string{
		{Namespace: "inference", Name: "vllm-7"}:                    "404 Not Found: pod inference/vllm-7: no such pod on this node",
		{Namespace: "inference", Name: "vllm-0"}:                    "400 Bad Request: pod inference/vllm-0 has 3 containers",
		{Namespace: "Inference", Name: "vllm-1"}:                    "400 Bad Request: pod Inference/vllm-1: namespace",
		{Namespace: "inference", Name: "vllm-1", Container: "none"}: `404 Not Found: pod inference/vllm-1 has no container "none"`,
	} {
		_, err := c.Start(ctx, agent.StartRequest{Target: agent.Target{Pod: &ref}})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("pod %s: %v, want %q", ref, err, want)
		}
	}
	if _, err := c.Start(ctx, agent.StartRequest{Target: agent.Target{Pid: self, Pod: &agent.PodRef{Namespace: "inference", Name: "vllm-1"}}}); err == nil || !strings.Contains(err.Error(), "exactly one target") {
		t.Errorf("pid and pod: %v", err)
	}

	// An agent outside a cluster with no kubernetes.* configuration.
	t.Setenv("NODE_NAME", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	plain := DefaultConfig()
	plain.Agent = Agent{Enabled: true}
	addr = runDaemonWith(t, plain, "", func(d *Daemon) { d.proc = proc })
	_, err = agent.NewClient(addr, agent.ClientOptions{}).Start(ctx, agent.StartRequest{Target: agent.Target{Pod: &agent.PodRef{Namespace: "inference", Name: "vllm-1"}}})
	if err == nil || !strings.Contains(err.Error(), "501") || !strings.Contains(err.Error(), "cannot list its node's pods") || !strings.Contains(err.Error(), "NODE_NAME") {
		t.Errorf("no kubernetes: %v", err)
	}
}
