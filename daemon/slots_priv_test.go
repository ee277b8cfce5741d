package daemon

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/collectors/sched"
	"github.com/bpfbench/bpfbench/internal/privtest"
)

func cgroup2Mount() string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[2] == "cgroup2" {
			return f[1]
		}
	}
	return ""
}

// TestK8sPodSeriesLive: the daemon with the real scheduler collector
// follows two shells, each moved into a cgroup laid out as the cgroupfs
// driver lays out a container's (kubepods/burstable/pod<UID>/<ID>) and
// listed by a fake API server as container "work" of pods p-0 and p-1 of
// namespace ns: /metrics has each pod's off-CPU series with its labels,
// the pid target's without them; when p-1 leaves the list and its shell
// exits, its series leave /metrics.
func TestK8sPodSeriesLive(t *testing.T) {
	privtest.Require(t)
	mnt := cgroup2Mount()
	if mnt == "" {
		privtest.Skip(t, "no cgroup v2 hierarchy mounted: the pods' cgroups cannot be laid out")
	}
	type ctr struct{ pod, uid, id string }
	ctrs := []ctr{
		{"p-0", "9d1e2f30-0000-4000-8000-00000000aa00", strings.Repeat("d0", 32)},
		{"p-1", "9d1e2f30-0000-4000-8000-00000000aa01", strings.Repeat("d1", 32)},
	}
	var mu sync.Mutex
	listed := map[string]bool{"p-0": true, "p-1": true}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
		for _, c := range ctrs {
			if listed[c.pod] {
				list.Items = append(list.Items, pod("ns", c.pod, c.uid, map[string]string{"app": "work"}, map[string]string{"work": "containerd://" + c.id}))
			}
		}
		_ = json.NewEncoder(w).Encode(list)
	}))
	t.Cleanup(api.Close)

	shells := map[string]*exec.Cmd{}
	for _, c := range ctrs {
		podDir := filepath.Join(mnt, "kubepods", "burstable", "pod"+c.uid)
		dir := filepath.Join(podDir, c.id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("creating a container's cgroup under %s: %v", mnt, err)
		}
		sh := exec.Command("sh", "-c", "while :; do sleep 0.01; done")
		sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := sh.Start(); err != nil {
			t.Fatal(err)
		}
		shells[c.pod] = sh
		t.Cleanup(func() {
			_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
			_ = sh.Wait()
			// The loop's last sleep may outlive it a moment.
			for i := 0; i < 50 && os.Remove(dir) != nil; i++ {
				time.Sleep(20 * time.Millisecond)
			}
			for _, d := range []string{podDir, filepath.Dir(podDir), filepath.Join(mnt, "kubepods")} {
				_ = os.Remove(d) // left when another test's cgroups are there
			}
		})
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(sh.Process.Pid)), 0o644); err != nil {
			t.Fatalf("moving the shell into the container's cgroup: %v", err)
		}
	}
	self := exec.Command("sh", "-c", "while :; do sleep 0.01; done")
	if err := self.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = self.Process.Kill(); _ = self.Wait() })

	cfg := DefaultConfig()
	cfg.RefreshInterval = 200 * time.Millisecond
	cfg.Kubernetes = Kubernetes{NodeName: "gpu-1", APIServer: api.URL, TokenFile: writeToken(t, "tok")}
	cfg.Targets = []Target{{Name: "k", Namespace: "ns"}, {Name: "plain", Pid: self.Process.Pid}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	d := New(cfg, logger, []HostFactory{{Name: "sched", Required: true, New: func(l *slog.Logger, names collectors.TargetNames) collectors.Host {
		return sched.NewHost(l, names)
	}}})
	ctx, cancel := context.WithCancel(context.Background())
	if err := d.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, "127.0.0.1:0", "") }()
	t.Cleanup(func() {
		cancel()
		<-done
		d.Close()
	})
	addr := (<-d.Listening()).String()

	line := regexp.MustCompile(`(?m)^bpfbench_sched_offcpu_duration_seconds_count\{([^}]*)\} (\S+)$`)
	// series maps the label sets of the sleep-state off-CPU counts to them.
	series := func() map[string]float64 {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out := map[string]float64{}
		for _, m := range line.FindAllStringSubmatch(string(b), -1) {
			if strings.Contains(m[1], `state="sleep"`) {
				out[m[1]], _ = strconv.ParseFloat(m[2], 64)
			}
		}
		return out
	}
	p0 := `container="work",namespace="ns",pod="p-0",state="sleep",target="k"`
	p1 := `container="work",namespace="ns",pod="p-1",state="sleep",target="k"`
	plain := `state="sleep",target="plain"`
	over := `namespace="ns",state="sleep",target="k"`
	var got map[string]float64
	deadline := time.Now().Add(15 * time.Second)
	for {
		got = series()
		if got[p0] > 10 && got[p1] > 10 && got[plain] > 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 15 s the sleep off-CPU counts are %v; want p-0's, p-1's and plain's above 10", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, ok := got[over]; !ok || len(got) != 4 {
		t.Errorf("series %v: want p-0, p-1, plain and the target's overflow %s alone", got, over)
	}
	t.Logf("sleep off-CPU intervals: p-0 %v, p-1 %v, plain %v, overflow %v", got[p0], got[p1], got[plain], got[over])

	mu.Lock()
	listed["p-1"] = false
	mu.Unlock()
	_ = syscall.Kill(-shells["p-1"].Process.Pid, syscall.SIGKILL)
	deadline = time.Now().Add(10 * time.Second)
	for {
		got = series()
		if _, ok := got[p1]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("p-1 gone 10 s ago, its series still there: %v", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	before := got[p0]
	time.Sleep(500 * time.Millisecond)
	if got = series(); got[p0] <= before {
		t.Errorf("p-0's count %v after p-1 left, was %v: want it still counting", got[p0], before)
	}
}
