package daemon

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	idVLLM    = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
	idSidecar = "1111111111111111111111111111111111111111111111111111111111111111"
	idOther   = "2222222222222222222222222222222222222222222222222222222222222222"
	idVLLM2   = "3333333333333333333333333333333333333333333333333333333333333333"
	uidVLLM   = "6f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	uidOther  = "01234567-89ab-cdef-0123-456789abcdef"
)

func pod(ns, name, uid string, labels map[string]string, containers map[string]string) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), Labels: labels}}
	for cname, id := range containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: cname, ContainerID: id})
	}
	return p
}

// nodePods are the pods of the fake API server's node.
func nodePods() []corev1.Pod {
	return []corev1.Pod{
		pod("inference", "vllm-0", uidVLLM, map[string]string{"app": "vllm", "tier": "gpu"},
			map[string]string{"vllm": "containerd://" + idVLLM, "proxy": "containerd://" + idSidecar, "waiting": ""}),
		pod("inference", "vllm-1", "", map[string]string{"app": "vllm", "tier": "gpu"},
			map[string]string{"vllm": "cri-o://" + idVLLM2}),
		pod("monitoring", "node-exporter-x", uidOther, map[string]string{"app": "node-exporter"},
			map[string]string{"node-exporter": "containerd://" + idOther}),
	}
}

func TestK8sContainerID(t *testing.T) {
	us := strings.ReplaceAll(uidVLLM, "-", "_")
	for _, c := range []struct{ path, uid, id string }{
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/cri-containerd-" + idVLLM + ".scope", uidVLLM, idVLLM},
		{"/kubepods.slice/kubepods-pod" + us + ".slice/cri-containerd-" + idVLLM + ".scope", uidVLLM, idVLLM},
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us + ".slice/crio-" + idVLLM + ".scope", uidVLLM, idVLLM},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/docker-" + idVLLM + ".scope", uidVLLM, idVLLM},
		{"/kubepods/burstable/pod" + uidVLLM + "/" + idVLLM, uidVLLM, idVLLM},
		{"/kubepods/pod" + uidVLLM + "/" + idVLLM, uidVLLM, idVLLM},
		{"/kubepods/besteffort/pod" + uidVLLM + "/" + idVLLM + "/nested/cgroup", uidVLLM, idVLLM},
		// A private cgroup namespace shows paths outside it from /..
		{"/../../kubepods-burstable-pod" + us + ".slice/cri-containerd-" + idVLLM + ".scope", uidVLLM, idVLLM},
		// A static pod's UID is its config hash.
		{"/kubepods/burstable/pod0123456789abcdef0123456789abcdef/" + idVLLM, "0123456789abcdef0123456789abcdef", idVLLM},
	} {
		uid, id, ok := ContainerID(c.path)
		if !ok || uid != c.uid || id != c.id {
			t.Errorf("ContainerID(%s) = %q %q %v, want %q %q", c.path, uid, id, ok, c.uid, c.id)
		}
	}
	for _, p := range []string{
		"/system.slice/vllm.service",
		"/",
		"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice",
		"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/crio-conmon-" + idVLLM + ".scope",
		"/user.slice/" + idVLLM,
		"/kubepods/burstable/pod" + uidVLLM + "/" + idVLLM[:63],
	} {
		if uid, id, ok := ContainerID(p); ok {
			t.Errorf("ContainerID(%s) = %q %q, want no container", p, uid, id)
		}
	}
}

// fakeAPI serves nodePods for node gpu-1 and counts requests; fail makes
// it answer 500.
type fakeAPI struct {
	*httptest.Server
	requests atomic.Int32
	fail     atomic.Bool
	token    string
}

func newFakeAPI(t *testing.T, tls bool) *fakeAPI {
	f := &fakeAPI{token: "tok-123"}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.requests.Add(1)
		if r.URL.Path != "/api/v1/pods" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+f.token {
			http.Error(w, `{"kind":"Status","message":"Unauthorized"}`, http.StatusUnauthorized)
			return
		}
		if got := r.URL.Query().Get("fieldSelector"); got != "spec.nodeName=gpu-1" {
			http.Error(w, "unexpected fieldSelector "+got, http.StatusBadRequest)
			return
		}
		if f.fail.Load() {
			http.Error(w, "etcd unavailable", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: nodePods()})
	})
	f.Server = httptest.NewUnstartedServer(h)
	f.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted-CA case's handshake error
	if tls {
		f.StartTLS()
	} else {
		f.Start()
	}
	t.Cleanup(f.Close)
	return f
}

// fixtureProc writes a /proc with processes in the containers of
// nodePods (both cgroup drivers, cgroup v1 and v2) and outside them.
func fixtureProc(t *testing.T) string {
	proc := t.TempDir()
	us := strings.ReplaceAll(uidVLLM, "-", "_")
	mk := func(pid, comm, cgroup string) {
		d := filepath.Join(proc, pid)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "comm"), []byte(comm+"\n"), 0o644)
		os.WriteFile(filepath.Join(d, "cgroup"), []byte(cgroup), 0o644)
	}
	// systemd driver, cgroup v2
	mk("100", "python3", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"+us+".slice/cri-containerd-"+idVLLM+".scope\n")
	mk("101", "python3", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"+us+".slice/cri-containerd-"+idVLLM+".scope\n")
	mk("102", "envoy", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"+us+".slice/cri-containerd-"+idSidecar+".scope\n")
	// cgroupfs driver, cgroup v1 (several hierarchies)
	mk("200", "python3", "12:memory:/kubepods/burstable/podabc/"+idVLLM2+"\n11:cpu,cpuacct:/kubepods/burstable/podabc/"+idVLLM2+"\n1:name=systemd:/kubepods/burstable/podabc/"+idVLLM2+"\n")
	// private cgroup namespace (paths from /..)
	mk("300", "node_exporter", "0::/../../kubepods-pod"+strings.ReplaceAll(uidOther, "-", "_")+".slice/cri-containerd-"+idOther+".scope\n")
	// not in a pod, or in a container the API does not know
	mk("400", "python3", "0::/system.slice/vllm.service\n")
	mk("401", "pause", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"+us+".slice/cri-containerd-"+strings.Repeat("9", 64)+".scope\n")
	return proc
}

func TestK8sResolver(t *testing.T) {
	ix := NewPodIndex(nodePods())
	if ix.Len() != 4 { // the container not started has no id
		t.Fatalf("index has %d containers, want 4", ix.Len())
	}
	proc := fixtureProc(t)
	targets := []Target{
		{Name: "vllm", Namespace: "inference", PodLabels: map[string]string{"app": "vllm"}, Container: "vllm"},
		{Name: "sidecars", PodLabels: map[string]string{"app": "vllm", "tier": "gpu"}},
		{Name: "monitoring", Namespace: "monitoring"},
		{Name: "nomatch", PodLabels: map[string]string{"app": "vllm", "tier": "cpu"}},
		{Name: "py", Comm: "python3"},
	}
	slots, pods, err := Resolver{Proc: proc, Targets: targets, Pods: ix}.ResolvePods()
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint32]uint32{100: 1, 101: 1, 200: 1, 102: 2, 300: 3, 400: 5}
	if len(slots) != len(want) {
		t.Errorf("slots %v, want %v", slots, want)
	}
	for pid, slot := range want {
		if slots[pid] != slot {
			t.Errorf("pid %d: slot %d, want %d", pid, slots[pid], slot)
		}
	}
	wantPods := map[uint32]map[PodContainer]int{
		1: {{"inference", "vllm-0", "vllm"}: 2, {"inference", "vllm-1", "vllm"}: 1},
		2: {{"inference", "vllm-0", "proxy"}: 1},
		3: {{"monitoring", "node-exporter-x", "node-exporter"}: 1},
	}
	if len(pods) != len(wantPods) {
		t.Errorf("pods %v, want %v", pods, wantPods)
	}
	for slot, w := range wantPods {
		for pc, n := range w {
			if pods[slot][pc] != n {
				t.Errorf("slot %d: %v has %d processes, want %d (all: %v)", slot, pc, pods[slot][pc], n, pods[slot])
			}
		}
	}

	// Before the pods are listed no Kubernetes target matches; the others do.
	slots, _, err = Resolver{Proc: proc, Targets: targets}.ResolvePods()
	if err != nil {
		t.Fatal(err)
	}
	if len(slots) != 4 || slots[100] != 5 || slots[101] != 5 || slots[200] != 5 || slots[400] != 5 {
		t.Errorf("without pods: %v, want only the comm target's python3 processes", slots)
	}
}

func TestK8sSelectors(t *testing.T) {
	pc := podContainer{PodContainer{"inference", "vllm-0", "vllm"}, map[string]string{"app": "vllm", "tier": "gpu"}}
	for _, c := range []struct {
		t    Target
		want bool
	}{
		{Target{Namespace: "inference"}, true},
		{Target{Namespace: "other"}, false},
		{Target{Container: "vllm"}, true},
		{Target{Container: "proxy"}, false},
		{Target{PodLabels: map[string]string{"app": "vllm"}}, true},
		{Target{PodLabels: map[string]string{"app": "vllm", "tier": "gpu"}}, true},
		{Target{PodLabels: map[string]string{"app": "vllm", "tier": ""}}, false},
		{Target{PodLabels: map[string]string{"zone": "a"}}, false},
		{Target{Namespace: "inference", Container: "vllm", PodLabels: map[string]string{"app": "sglang"}}, false},
	} {
		if got := c.t.matches(pc); got != c.want {
			t.Errorf("%+v matches: %v, want %v", c.t, got, c.want)
		}
	}
}

func TestK8sPodLister(t *testing.T) {
	api := newFakeAPI(t, true)
	dir := t.TempDir()
	caFile, tokFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	cert := api.Certificate()
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o644)
	os.WriteFile(tokFile, []byte(api.token+"\n"), 0o600)
	u, _ := url.Parse(api.URL)
	t.Setenv("NODE_NAME", "gpu-1")
	t.Setenv("KUBERNETES_SERVICE_HOST", u.Hostname())
	t.Setenv("KUBERNETES_SERVICE_PORT", u.Port())

	l, err := InClusterLister(Kubernetes{TokenFile: tokFile, CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	if l.URL != api.URL || l.Node != "gpu-1" {
		t.Errorf("lister %s %s, want %s gpu-1", l.URL, l.Node, api.URL)
	}
	pods, err := l.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 3 || pods[0].Name != "vllm-0" || pods[0].Labels["app"] != "vllm" {
		t.Errorf("pods %+v", pods)
	}

	// A rotated token is read again; a wrong one is refused with the fix.
	os.WriteFile(tokFile, []byte("stale"), 0o600)
	if _, err := l.List(context.Background()); err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "ClusterRole") {
		t.Errorf("unauthorized: %v", err)
	}

	// Errors that say what is missing.
	t.Setenv("NODE_NAME", "")
	if _, err := InClusterLister(Kubernetes{}); err == nil || !strings.Contains(err.Error(), "NODE_NAME") {
		t.Errorf("no node: %v", err)
	}
	t.Setenv("NODE_NAME", "gpu-1")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := InClusterLister(Kubernetes{}); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Errorf("no API server: %v", err)
	}
	if _, err := InClusterLister(Kubernetes{APIServer: "https://10.0.0.1", CAFile: filepath.Join(dir, "none")}); err == nil || !strings.Contains(err.Error(), "CA") {
		t.Errorf("no CA: %v", err)
	}
	// Untrusted server certificate.
	l, err = InClusterLister(Kubernetes{APIServer: api.URL, TokenFile: tokFile, CAFile: writePEM(t, dir)})
	if err == nil {
		_, err = l.List(context.Background())
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("untrusted server: %v", err)
	}
}

// writePEM writes a CA file holding a self-signed certificate that did
// not sign the server's.
func writePEM(t *testing.T, dir string) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bpfbench-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "other.crt")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestK8sPodSourceKeepsLastGood(t *testing.T) {
	api := newFakeAPI(t, false)
	s := &podSource{
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), interval: time.Hour,
		newList: func() (*PodLister, error) {
			return &PodLister{URL: api.URL, Node: "gpu-1", TokenFile: writeToken(t, api.token)}, nil
		},
	}
	if err := s.ready(); err == nil {
		t.Error("ready before any list")
	}
	ix := s.Index(context.Background())
	if ix.Len() != 4 || s.ready() != nil {
		t.Fatalf("first list: %d containers, ready %v", ix.Len(), s.ready())
	}
	// Within the interval no request is made.
	s.Index(context.Background())
	if n := api.requests.Load(); n != 1 {
		t.Errorf("%d requests within the interval, want 1", n)
	}
	// An API error keeps the last good mapping.
	api.fail.Store(true)
	s.tried = time.Time{}
	if got := s.Index(context.Background()); got != ix || s.err == nil || !strings.Contains(s.err.Error(), "500") {
		t.Errorf("after an error: index %p (want the last %p), err %v", got, ix, s.err)
	}
	if s.ready() != nil {
		t.Errorf("ready after a good list and an error: %v", s.ready())
	}
	api.fail.Store(false)
	s.tried = time.Time{}
	if got := s.Index(context.Background()); got == ix || got.Len() != 4 || s.err != nil {
		t.Errorf("after recovery: %p %v", got, s.err)
	}

	// No list ever succeeded: not ready, saying why.
	bad := &podSource{log: s.log, interval: time.Hour, newList: func() (*PodLister, error) { return InClusterLister(Kubernetes{}) }}
	t.Setenv("NODE_NAME", "")
	if bad.Index(context.Background()) != nil {
		t.Error("index without a lister")
	}
	if err := bad.ready(); err == nil || !strings.Contains(err.Error(), "NODE_NAME") {
		t.Errorf("ready: %v", err)
	}
}

func writeToken(t *testing.T, tok string) string {
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestK8sConfig(t *testing.T) {
	cfg, err := LoadConfig(writeConfig(t, `
kubernetes:
  node_name: gpu-1
  refresh_interval: 30s
targets:
  - name: vllm
    namespace: inference
    pod_labels: {app.kubernetes.io/name: vllm, tier: gpu}
    container: vllm
    max_pods: 4
  - name: all-inference
    namespace: inference
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kubernetes.NodeName != "gpu-1" || cfg.Kubernetes.RefreshInterval != 30*time.Second ||
		cfg.Targets[0].PodLimit() != 4 || cfg.Targets[1].PodLimit() != DefaultMaxPods || !cfg.Targets[1].Kubernetes() {
		t.Errorf("config %+v", cfg)
	}
	for body, want := range map[string]string{
		"targets:\n  - {name: a, namespace: inference, comm: x}\n":         "set exactly one",
		"targets:\n  - {name: a, namespace: Inference}\n":                  "not a Kubernetes namespace name",
		"targets:\n  - {name: a, container: vllm_0}\n":                     "not a Kubernetes container name",
		"targets:\n  - {name: a, pod_labels: {'a b': x}}\n":                "not a Kubernetes label key",
		"targets:\n  - {name: a, pod_labels: {app: 'x y'}}\n":              "not a Kubernetes label value",
		"targets:\n  - {name: a, namespace: ns, max_pods: 1000}\n":         "max_pods 1000 must be between 1 and 256",
		"targets:\n  - {name: a, namespace: ns, max_pods: -1}\n":           "max_pods -1",
		"targets:\n  - {name: a, comm: x, max_pods: 3}\n":                  "max_pods applies to targets with namespace",
		"kubernetes: {refresh_interval: -1s}\n":                            "kubernetes.refresh_interval",
		"kubernetes: {nodename: x}\n":                                      "field nodename not found",
		"targets:\n  - {name: a, namespace: ns, pod_label: {app: vllm}}\n": "field pod_label not found",
	} {
		_, err := LoadConfig(writeConfig(t, body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %q: error %v, want it to say %q", body, err, want)
		}
	}
}
