package daemon

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Fuzz targets of the daemon's outside input: its configuration file and
// the API server's pod list. `make fuzz` runs each for a bounded time;
// `make test` runs their seeds.

var configSeeds = []string{
	"",
	"listen_address: \":9999\"\nrefresh_interval: 2s\ntargets:\n  - name: vllm\n    comm: python3\n  - name: sglang\n    cgroup: /system.slice/sglang.service\n  - name: one\n    pid: 42\n",
	"targets:\n  - name: serving\n    namespace: llm\n    pod_labels:\n      app.kubernetes.io/name: vllm\n    container: engine\n    max_pods: 8\nkubernetes:\n  node_name: node-1\n  api_server: https://10.0.0.1:443\n  refresh_interval: 10s\n",
	"agent:\n  enabled: true\n  max_sessions: 8\n  max_buffer_spans: 1000\n  idle_timeout: 1m\nenable_pprof: true\nweb_config_file: /etc/bpfbench/web.yml\nlog_level: debug\nlog_format: json\n",
	"targets:\n  - name: a\n    pid: 1\n    comm: x\n",
	"targets: [\n",
	"refresh_interval: -1s\n",
	"listen_adress: :1\n",
	"a: &a [*a, *a]\nb: *a\n",
	"targets:\n  - &t {name: x, pid: 1}\n  - *t\n",
	"kubernetes: {refresh_interval: -5s}\n",
	"targets:\n  - name: p\n    pod_labels: {\"\": \"\"}\n",
}

// FuzzLoadConfig: a configuration file is read or refused with an error,
// never a panic; one that loads is valid, and writing it out and reading
// it back gives the same configuration.
func FuzzLoadConfig(f *testing.F) {
	for _, s := range configSeeds {
		f.Add([]byte(s))
	}
	if b, err := os.ReadFile("../systemd/config.yaml"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		dir := t.TempDir()
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, body, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadConfig(p)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config "+p+": ") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("loaded config does not validate: %v", err)
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshalling a loaded config: %v", err)
		}
		if err := os.WriteFile(p, out, 0o644); err != nil {
			t.Fatal(err)
		}
		again, err := LoadConfig(p)
		if err != nil {
			t.Fatalf("a loaded config written out does not load again: %v\n%s", err, out)
		}
		out2, err := yaml.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("round trip changed the config:\n%s\nbecame\n%s", out, out2)
		}
	})
}

type bodyTransport []byte

func (b bodyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(b)), Request: r}, nil
}

var hex64RE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// FuzzPodList: the API server's pod list (as PodLister.List reads it) is
// indexed without a panic, every container id it holds is found again,
// and a process's cgroup path yields a container id only when it holds
// one (64 hex digits under a pod's cgroup).
func FuzzPodList(f *testing.F) {
	id := strings.Repeat("ab", 32)
	f.Add([]byte(`{"kind":"PodList","apiVersion":"v1","items":[{"metadata":{"name":"vllm-0","namespace":"llm","labels":{"app":"vllm"}},"spec":{"containers":[{"name":"engine"},{"name":"sidecar"}]},"status":{"containerStatuses":[{"name":"engine","containerID":"containerd://`+id+`"}],"initContainerStatuses":[{"name":"init","containerID":"cri-o://`+strings.Repeat("cd", 32)+`"}]}}]}`),
		"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice/cri-containerd-"+id+".scope")
	f.Add([]byte(`{"items":[{"metadata":{"name":"p","namespace":"n"},"status":{"containerStatuses":[{"name":"c","containerID":"://"}]}}]}`), "/kubepods/burstable/podabc/"+id)
	f.Add([]byte(`{"items":null}`), "/../../kubepods/pod-1/"+id+"/nested")
	f.Add([]byte(`[]`), "/system.slice/vllm.service")
	f.Add([]byte(`{"items":[{"status":{"ephemeralContainerStatuses":[{"containerID":"docker://x"}]}}]}`), "/kubepods/crio-conmon-"+id+".scope")
	f.Fuzz(func(t *testing.T, body []byte, cgroup string) {
		l := &PodLister{URL: "http://api.invalid", Node: "node-1", Client: &http.Client{Transport: bodyTransport(body)}}
		pods, err := l.List(context.Background())
		if err == nil {
			ix := NewPodIndex(pods)
			for want, pc := range ix.byID {
				got, ok := ix.lookup(want)
				if !ok || got.PodContainer != pc.PodContainer {
					t.Fatalf("container %q indexed but not found", want)
				}
			}
			if ix.Len() != len(ix.byID) {
				t.Fatalf("Len %d, %d indexed", ix.Len(), len(ix.byID))
			}
		}
		uid, cid, ok := ContainerID(cgroup)
		if !ok {
			if uid != "" || cid != "" {
				t.Fatalf("ContainerID(%q) = %q %q without ok", cgroup, uid, cid)
			}
			return
		}
		if !hex64RE.MatchString(cid) || !strings.Contains(cgroup, cid) {
			t.Fatalf("ContainerID(%q) = id %q: not 64 hex digits of the path", cgroup, cid)
		}
		if uid == "" || strings.Contains(uid, "_") {
			t.Fatalf("ContainerID(%q) = pod uid %q", cgroup, uid)
		}
	})
}
