package daemon

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/bpfbench/bpfbench/collectors"
)

// fakeHost aggregates per slot as the kernel does: add counts events of
// a process under the slot SetTarget gave it, and a scrape reads every
// slot the daemon names, a counter and a histogram each.
type fakeHost struct {
	names  collectors.TargetNames
	mu     sync.Mutex
	slots  map[uint32]uint32  // tgid -> slot
	events map[uint32]float64 // slot -> events
	total  *prometheus.Desc
	lat    *prometheus.Desc
}

func newFakeHost() *fakeHost {
	return &fakeHost{
		slots: map[uint32]uint32{}, events: map[uint32]float64{},
		total: prometheus.NewDesc("bpfbench_fake_events_total", "Events.", []string{"target"}, nil),
		lat:   prometheus.NewDesc("bpfbench_fake_latency_seconds", "Latency.", []string{"target", "op"}, nil),
	}
}

func (f *fakeHost) Start(context.Context) error         { return nil }
func (f *fakeHost) Run(ctx context.Context) error       { <-ctx.Done(); return nil }
func (f *fakeHost) Close() error                        { return nil }
func (f *fakeHost) Name() string                        { return "fake" }
func (f *fakeHost) Losses() (uint64, uint64)            { return 0, 0 }
func (f *fakeHost) Describe(ch chan<- *prometheus.Desc) { ch <- f.total; ch <- f.lat }

func (f *fakeHost) SetTarget(tgid, idx uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slots[tgid] = idx
	return nil
}

func (f *fakeHost) DeleteTarget(tgid uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.slots, tgid)
	return nil
}

func (f *fakeHost) add(t *testing.T, tgid uint32, n float64) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	slot, ok := f.slots[tgid]
	if !ok {
		t.Fatalf("pid %d is in no slot", tgid)
	}
	f.events[slot] += n
}

func (f *fakeHost) Collect(ch chan<- prometheus.Metric) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for idx, name := range f.names() {
		n := f.events[idx]
		ch <- prometheus.MustNewConstMetric(f.total, prometheus.CounterValue, n, name)
		ch <- prometheus.MustNewConstHistogram(f.lat, uint64(n), n/1000, map[float64]uint64{0.001: uint64(n)}, name, "read")
	}
}

// podTest is a daemon with the fake collector over a fixture /proc and
// a pod source whose pods the test sets.
type podTest struct {
	t    *testing.T
	d    *Daemon
	host *fakeHost
	proc string
}

func newPodTest(t *testing.T, targets []Target) *podTest {
	cfg := DefaultConfig()
	cfg.Targets = targets
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := newFakeHost()
	d := New(cfg, logger, []HostFactory{{Name: "fake", Required: true, New: func(_ *slog.Logger, names collectors.TargetNames) collectors.Host {
		h.names = names
		return h
	}}})
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	d.proc = fixtureProc(t)
	d.pods = &podSource{log: logger, interval: time.Hour, tried: time.Now()}
	return &podTest{t: t, d: d, host: h, proc: d.proc}
}

// refresh resolves the targets with these pods listed.
func (p *podTest) refresh(pods []corev1.Pod) {
	p.d.pods.mu.Lock()
	p.d.pods.index = NewPodIndex(pods)
	p.d.pods.mu.Unlock()
	p.d.refresh()
}

// process adds a process in a container (cgroupfs driver, cgroup v2).
func (p *podTest) process(pid, uid, id string) {
	d := filepath.Join(p.proc, pid)
	if err := os.MkdirAll(d, 0o755); err != nil {
		p.t.Fatal(err)
	}
	os.WriteFile(filepath.Join(d, "comm"), []byte("python3\n"), 0o644)
	os.WriteFile(filepath.Join(d, "cgroup"), []byte("0::/kubepods/burstable/pod"+uid+"/"+id+"\n"), 0o644)
}

func (p *podTest) exit(pid string) {
	if err := os.RemoveAll(filepath.Join(p.proc, pid)); err != nil {
		p.t.Fatal(err)
	}
}

// series scrapes the daemon: "NAME{L=V,...}" -> value (a histogram's
// count) for the fake collector and the target metrics.
func (p *podTest) series() map[string]float64 {
	p.t.Helper()
	mfs, err := p.d.Registry().Gather()
	if err != nil {
		p.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "bpfbench_fake_") && !strings.HasPrefix(name, "bpfbench_target_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var l []string
			for _, lp := range m.GetLabel() {
				l = append(l, lp.GetName()+"="+lp.GetValue())
			}
			k := name + "{" + strings.Join(l, ",") + "}"
			switch {
			case m.Counter != nil:
				out[k] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[k] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[k] = float64(m.GetHistogram().GetSampleCount())
				if b := m.GetHistogram().GetBucket(); len(b) != 1 || float64(b[0].GetCumulativeCount()) != out[k] {
					p.t.Errorf("%s: buckets %v, want one holding all %v", k, b, out[k])
				}
			}
		}
	}
	return out
}

// expect checks the series of the given families against want exactly
// (its keys' labels in any order).
func (p *podTest) expect(families []string, wantAny map[string]float64) {
	p.t.Helper()
	want := map[string]float64{}
	for k, v := range wantAny {
		name, labels, _ := strings.Cut(strings.TrimSuffix(k, "}"), "{")
		l := strings.Split(labels, ",")
		sort.Strings(l)
		want[name+"{"+strings.Join(l, ",")+"}"] = v
	}
	got := p.series()
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, f := range families {
			if !strings.HasPrefix(k, f+"{") {
				continue
			}
			if w, ok := want[k]; !ok {
				p.t.Errorf("unexpected series %s %v", k, got[k])
			} else if got[k] != w {
				p.t.Errorf("%s = %v, want %v", k, got[k], w)
			}
		}
	}
	for k, w := range want {
		if _, ok := got[k]; !ok {
			p.t.Errorf("missing series %s (want %v)", k, w)
		}
	}
}

const (
	vllm0 = "container=vllm,namespace=inference,pod=vllm-0,target=vllm"
	vllm1 = "container=vllm,namespace=inference,pod=vllm-1,target=vllm"
	vllm2 = "container=vllm,namespace=inference,pod=vllm-2,target=vllm"
	vllm3 = "container=vllm,namespace=inference,pod=vllm-3,target=vllm"
	// The overflow: the target's namespace, no pod or container.
	vllmOver = "namespace=inference,target=vllm"
)

var podTargets = []Target{
	{Name: "vllm", Namespace: "inference", Container: "vllm"},
	{Name: "py", Comm: "python3"},
}

func TestK8sPodSeries(t *testing.T) {
	p := newPodTest(t, podTargets)
	p.refresh(nodePods())
	// The first pool slot is 3 (1 and 2 are the targets' own).
	for pid, slot := range map[uint32]uint32{100: 3, 101: 3, 200: 4, 400: 2} {
		if got := p.host.slots[pid]; got != slot {
			t.Errorf("pid %d in slot %d, want %d", pid, got, slot)
		}
	}
	p.host.add(t, 100, 2)
	p.host.add(t, 101, 1)
	p.host.add(t, 200, 5)
	p.host.add(t, 400, 4)
	p.expect([]string{"bpfbench_fake_events_total", "bpfbench_fake_latency_seconds", "bpfbench_target_info", "bpfbench_target_pods_overflow", "bpfbench_target_processes"}, map[string]float64{
		"bpfbench_fake_events_total{target=host}":                   0,
		"bpfbench_fake_events_total{" + vllm0 + "}":                 3,
		"bpfbench_fake_events_total{" + vllm1 + "}":                 5,
		"bpfbench_fake_events_total{" + vllmOver + "}":              0,
		"bpfbench_fake_events_total{target=py}":                     4, // no pod labels
		"bpfbench_fake_latency_seconds{op=read,target=host}":        0,
		"bpfbench_fake_latency_seconds{" + "op=read," + vllm0 + "}": 3,
		"bpfbench_fake_latency_seconds{op=read," + vllm1 + "}":      5,
		"bpfbench_fake_latency_seconds{op=read," + vllmOver + "}":   0,
		"bpfbench_fake_latency_seconds{op=read,target=py}":          4,
		"bpfbench_target_info{" + vllm0 + "}":                       1,
		"bpfbench_target_info{" + vllm1 + "}":                       1,
		"bpfbench_target_pods_overflow{target=vllm}":                0,
		"bpfbench_target_processes{target=vllm}":                    3,
		"bpfbench_target_processes{target=py}":                      1,
	})
}

func TestK8sPodSeriesMaxPods(t *testing.T) {
	targets := append([]Target(nil), podTargets...)
	targets[0].MaxPods = 1
	p := newPodTest(t, targets)
	p.refresh(nodePods())
	// vllm-0 sorts first and has the one slot; vllm-1 is folded into
	// the target's own.
	if p.host.slots[100] != 3 || p.host.slots[200] != 1 {
		t.Errorf("slots %v: want vllm-0's pid 100 in 3, vllm-1's pid 200 in the target's 1", p.host.slots)
	}
	p.host.add(t, 100, 2)
	p.host.add(t, 200, 5)
	fams := []string{"bpfbench_fake_events_total", "bpfbench_target_info", "bpfbench_target_pods_overflow"}
	p.expect(fams, map[string]float64{
		"bpfbench_fake_events_total{target=host}":      0,
		"bpfbench_fake_events_total{" + vllm0 + "}":    2,
		"bpfbench_fake_events_total{" + vllmOver + "}": 5,
		"bpfbench_fake_events_total{target=py}":        0,
		"bpfbench_target_info{" + vllm0 + "}":          1,
		"bpfbench_target_pods_overflow{target=vllm}":   1,
	})

	// vllm-0 goes: at the same refresh its slot is not given to vllm-1
	// (its series just left), which takes the next one; nothing is
	// folded any more.
	pods := nodePods()[1:]
	p.exit("100")
	p.exit("101")
	p.refresh(pods)
	if p.host.slots[200] != 4 {
		t.Errorf("vllm-1's pid 200 in slot %d, want 4", p.host.slots[200])
	}
	p.host.add(t, 200, 1)
	p.expect(fams, map[string]float64{
		"bpfbench_fake_events_total{target=host}":      0,
		"bpfbench_fake_events_total{" + vllm1 + "}":    1,
		"bpfbench_fake_events_total{" + vllmOver + "}": 5,
		"bpfbench_fake_events_total{target=py}":        0,
		"bpfbench_target_info{" + vllm1 + "}":          1,
		"bpfbench_target_pods_overflow{target=vllm}":   0,
	})
}

func TestK8sPodGoes(t *testing.T) {
	p := newPodTest(t, podTargets)
	p.refresh(nodePods())
	p.host.add(t, 100, 2)
	p.host.add(t, 200, 5)
	fams := []string{"bpfbench_fake_events_total", "bpfbench_fake_latency_seconds", "bpfbench_target_info"}

	// vllm-1 goes and vllm-2 comes at the same refresh: vllm-1's series
	// go, its slot 4 cools, vllm-2 takes 5.
	const uid2, id2 = "aaaaaaaa-0000-0000-0000-000000000002", "4444444444444444444444444444444444444444444444444444444444444444"
	pods := append(nodePods()[:1:1], pod("inference", "vllm-2", uid2, nil, map[string]string{"vllm": "containerd://" + id2}))
	p.exit("200")
	p.process("210", uid2, id2)
	p.refresh(pods)
	if _, ok := p.host.slots[200]; ok {
		t.Error("pid 200 still followed")
	}
	if p.host.slots[210] != 5 {
		t.Errorf("vllm-2's pid 210 in slot %d, want 5 (4 was freed at this refresh)", p.host.slots[210])
	}
	p.host.add(t, 210, 1)
	p.expect(fams, map[string]float64{
		"bpfbench_fake_events_total{target=host}":                 0,
		"bpfbench_fake_events_total{" + vllm0 + "}":               2,
		"bpfbench_fake_events_total{" + vllm2 + "}":               1,
		"bpfbench_fake_events_total{" + vllmOver + "}":            0,
		"bpfbench_fake_events_total{target=py}":                   0,
		"bpfbench_fake_latency_seconds{op=read,target=host}":      0,
		"bpfbench_fake_latency_seconds{op=read," + vllm0 + "}":    2,
		"bpfbench_fake_latency_seconds{op=read," + vllm2 + "}":    1,
		"bpfbench_fake_latency_seconds{op=read," + vllmOver + "}": 0,
		"bpfbench_fake_latency_seconds{op=read,target=py}":        0,
		"bpfbench_target_info{" + vllm0 + "}":                     1,
		"bpfbench_target_info{" + vllm2 + "}":                     1,
	})

	// vllm-3 comes at a later refresh and gets slot 4 back: the kernel
	// still holds vllm-1's 5 events there, which its series do not show.
	const uid3, id3 = "aaaaaaaa-0000-0000-0000-000000000003", "5555555555555555555555555555555555555555555555555555555555555555"
	pods = append(pods, pod("inference", "vllm-3", uid3, nil, map[string]string{"vllm": "containerd://" + id3}))
	p.process("220", uid3, id3)
	p.refresh(pods)
	if p.host.slots[220] != 4 {
		t.Fatalf("vllm-3's pid 220 in slot %d, want 4 again", p.host.slots[220])
	}
	if p.host.events[4] != 5 {
		t.Fatalf("slot 4 holds %v events, want vllm-1's 5", p.host.events[4])
	}
	p.host.add(t, 220, 2)
	p.expect(fams, map[string]float64{
		"bpfbench_fake_events_total{target=host}":                 0,
		"bpfbench_fake_events_total{" + vllm0 + "}":               2,
		"bpfbench_fake_events_total{" + vllm2 + "}":               1,
		"bpfbench_fake_events_total{" + vllm3 + "}":               2,
		"bpfbench_fake_events_total{" + vllmOver + "}":            0,
		"bpfbench_fake_events_total{target=py}":                   0,
		"bpfbench_fake_latency_seconds{op=read,target=host}":      0,
		"bpfbench_fake_latency_seconds{op=read," + vllm0 + "}":    2,
		"bpfbench_fake_latency_seconds{op=read," + vllm2 + "}":    1,
		"bpfbench_fake_latency_seconds{op=read," + vllm3 + "}":    2,
		"bpfbench_fake_latency_seconds{op=read," + vllmOver + "}": 0,
		"bpfbench_fake_latency_seconds{op=read,target=py}":        0,
		"bpfbench_target_info{" + vllm0 + "}":                     1,
		"bpfbench_target_info{" + vllm2 + "}":                     1,
		"bpfbench_target_info{" + vllm3 + "}":                     1,
	})
}

// TestK8sPodSlotsRunOut: beyond the 63 slots pod containers are folded
// into their target's slot too.
func TestK8sPodSlotsRunOut(t *testing.T) {
	p := newPodTest(t, podTargets)
	p.d.pool = 3 // one pool slot
	p.refresh(nodePods())
	if p.host.slots[100] != 3 || p.host.slots[200] != 1 {
		t.Errorf("slots %v: want vllm-0 in the one pool slot 3, vllm-1 folded into 1", p.host.slots)
	}
	if got := p.series()["bpfbench_target_pods_overflow{target=vllm}"]; got != 1 {
		t.Errorf("overflow %v, want 1", got)
	}
}
