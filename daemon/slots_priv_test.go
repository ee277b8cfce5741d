package daemon

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
	"github.com/bpfbench/bpfbench/internal/testutil"
)

// TestK8sPodSeriesLive: the daemon with the real scheduler collector
// follows two shells, each moved into a cgroup laid out as the cgroupfs
// driver lays out a container's (kubepods/burstable/pod<UID>/<ID>) and
// listed by a fake API server as container "work" of pods p-0 and p-1 of
// namespace ns: /metrics has each pod's off-CPU series with its labels,
// the pid target's without them; when p-1 leaves the list and its shell
// exits, its series leave /metrics.
func TestK8sPodSeriesLive(t *testing.T) {
	privtest.Require(t)
	mnt := testutil.Cgroup2Mount()
	if mnt == "" {
		privtest.Skip(t, "no cgroup v2 hierarchy mounted: the pods' cgroups cannot be laid out")
	}
	ctrs := []podCtr{
		{"p-0", "9d1e2f30-0000-4000-8000-00000000aa00", strings.Repeat("d0", 32)},
		{"p-1", "9d1e2f30-0000-4000-8000-00000000aa01", strings.Repeat("d1", 32)},
	}
	api := startPodAPI(t, ctrs)
	shells := map[string]*exec.Cmd{}
	for _, c := range ctrs {
		shells[c.pod] = startPodShell(t, mnt, c)
	}
	self := exec.Command("sh", "-c", "while :; do sleep 0.01; done")
	if err := self.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = self.Process.Kill(); _ = self.Wait() })
	addr := startPodDaemon(t, api.URL, self.Process.Pid)
	series := func() map[string]float64 { return sleepSeries(t, addr) }

	p0 := `container="work",namespace="ns",pod="p-0",state="sleep",target="k"`
	p1 := `container="work",namespace="ns",pod="p-1",state="sleep",target="k"`
	plain := `state="sleep",target="plain"`
	over := `namespace="ns",state="sleep",target="k"`
	var got map[string]float64
	if !testutil.Until(15*time.Second, func() bool {
		got = series()
		return got[p0] > 10 && got[p1] > 10 && got[plain] > 10
	}) {
		t.Fatalf("after 15 s the sleep off-CPU counts are %v; want p-0's, p-1's and plain's above 10", got)
	}
	if _, ok := got[over]; !ok || len(got) != 4 {
		t.Errorf("series %v: want p-0, p-1, plain and the target's overflow %s alone", got, over)
	}
	t.Logf("sleep off-CPU intervals: p-0 %v, p-1 %v, plain %v, overflow %v", got[p0], got[p1], got[plain], got[over])

	api.unlist("p-1")
	_ = syscall.Kill(-shells["p-1"].Process.Pid, syscall.SIGKILL)
	if !testutil.Until(10*time.Second, func() bool { got = series(); _, ok := got[p1]; return !ok }) {
		t.Fatalf("p-1 gone 10 s ago, its series still there: %v", got)
	}
	before := got[p0]
	testutil.Until(5*time.Second, func() bool { got = series(); return got[p0] > before })
	if got[p0] <= before {
		t.Errorf("p-0's count %v after p-1 left, was %v: want it still counting", got[p0], before)
	}
}

// podCtr is a container of a pod the fake API server lists.
type podCtr struct{ pod, uid, id string }

// podAPI is a fake API server listing the containers "work" of pods of
// namespace ns on the node, until unlisted.
type podAPI struct {
	*httptest.Server
	mu     sync.Mutex
	listed map[string]bool
}

func startPodAPI(t *testing.T, ctrs []podCtr) *podAPI {
	t.Helper()
	a := &podAPI{listed: map[string]bool{}}
	for _, c := range ctrs {
		a.listed[c.pod] = true
	}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
		for _, c := range ctrs {
			if a.listed[c.pod] {
				list.Items = append(list.Items, pod("ns", c.pod, c.uid, map[string]string{"app": "work"}, map[string]string{"work": "containerd://" + c.id}))
			}
		}
		_ = json.NewEncoder(w).Encode(list)
	}))
	t.Cleanup(a.Close)
	return a
}

// unlist takes pod off the list.
func (a *podAPI) unlist(pod string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.listed[pod] = false
}

// startPodShell runs a shell sleeping in a loop (its own process group) in
// a cgroup laid out as the cgroupfs driver lays out c's
// (kubepods/burstable/pod<UID>/<ID>); it is killed at the test's end.
func startPodShell(t *testing.T, mnt string, c podCtr) *exec.Cmd {
	t.Helper()
	dir := testutil.MkCgroup(t, mnt, filepath.Join("kubepods", "burstable", "pod"+c.uid, c.id))
	sh := exec.Command("sh", "-c", "while :; do sleep 0.01; done")
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
		_ = sh.Wait()
	})
	testutil.MoveToCgroup(t, dir, sh.Process.Pid)
	return sh
}

// startPodDaemon runs the daemon with the real scheduler collector, the
// Kubernetes target k (namespace ns, from the API server at apiURL) and
// the pid target plain; it returns its address.
func startPodDaemon(t *testing.T, apiURL string, plainPid int) string {
	t.Helper()
	cfg := DefaultConfig()
	cfg.RefreshInterval = 200 * time.Millisecond
	cfg.Kubernetes = Kubernetes{NodeName: "gpu-1", APIServer: apiURL, TokenFile: writeToken(t, "tok")}
	cfg.Targets = []Target{{Name: "k", Namespace: "ns"}, {Name: "plain", Pid: plainPid}}
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
	return (<-d.Listening()).String()
}

var offCPUCountRE = regexp.MustCompile(`(?m)^bpfbench_sched_offcpu_duration_seconds_count\{([^}]*)\} (\S+)$`)

// sleepSeries maps the label sets of the daemon's sleep-state off-CPU
// counts to them.
func sleepSeries(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range offCPUCountRE.FindAllStringSubmatch(testutil.Scrape(t, "http://"+addr+"/metrics"), -1) {
		if strings.Contains(m[1], `state="sleep"`) {
			out[m[1]], _ = strconv.ParseFloat(m[2], 64)
		}
	}
	return out
}
