package cuda

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/privtest"
)

// stubDir holds the CUDA stand-ins built once for the test binary.
var stubDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cuda-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out, err := exec.Command("make", "-s", "-C", "../../tools/cudastub", "OUT="+dir).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building tools/cudastub with make: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	stubDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is the part of cudastub-driver's JSON the tests compare with.
type result struct {
	Launches    uint64            `json:"launches"`
	Syncs       uint64            `json:"syncs"`
	Allocs      uint64            `json:"allocs"`
	AllocErrors uint64            `json:"alloc_errors"`
	Copies      uint64            `json:"copies"`
	CopyBytes   uint64            `json:"copy_bytes"`
	Grid        [3]uint32         `json:"grid"`
	Block       [3]uint32         `json:"block"`
	Calls       map[string]uint64 `json:"calls"`
	Errors      map[string]uint64 `json:"errors"`
	Unexpected  uint64            `json:"unexpected_errors"`
	SyncNS      []uint64          `json:"sync_ns"`
}

// driver is a cudastub-driver process started with --wait-start.
type driver struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout bytes.Buffer
	done   chan error
}

func libPath(api string) string {
	if api == "runtime" {
		return filepath.Join(stubDir, "libcudart.so.12")
	}
	return filepath.Join(stubDir, "libcuda.so.1")
}

// startDriver starts cudastub-driver and waits until it has loaded and
// initialized the library and waits for the go-ahead.
func startDriver(t testing.TB, api string, args ...string) *driver {
	t.Helper()
	return startDriverWith(t, nil, append([]string{"--api", api, "--lib", libPath(api), "--wait-start"}, args...))
}

func startDriverWith(t testing.TB, env, args []string) *driver {
	t.Helper()
	d := &driver{cmd: exec.Command(filepath.Join(stubDir, "cudastub-driver"), args...), done: make(chan error, 1)}
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout = &d.stdout
	var err error
	if d.stdin, err = d.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("starting cudastub-driver: %v", err)
	}
	br := bufio.NewReader(stderr)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "ready pid=") {
		d.cmd.Process.Kill()
		t.Fatalf("cudastub-driver did not get ready: %q %v", line, err)
	}
	go func() {
		rest, _ := io.ReadAll(br)
		if len(rest) > 0 {
			t.Logf("cudastub-driver stderr: %s", rest)
		}
		d.done <- d.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		d.wait()
	})
	return d
}

func (d *driver) pid() int { return d.cmd.Process.Pid }

func (d *driver) release(t testing.TB) {
	t.Helper()
	if _, err := d.stdin.Write([]byte("g")); err != nil {
		t.Fatalf("releasing cudastub-driver: %v", err)
	}
}

var errTimeout = errors.New("timeout")

func (d *driver) wait() error {
	select {
	case err := <-d.done:
		d.done <- err
		return err
	case <-time.After(60 * time.Second):
		return errTimeout
	}
}

// result waits for the driver's exit and decodes its ground truth.
func (d *driver) result(t testing.TB) result {
	t.Helper()
	if err := d.wait(); err != nil {
		t.Fatalf("cudastub-driver: %v\n%s", err, d.stdout.String())
	}
	var r result
	if err := json.Unmarshal(d.stdout.Bytes(), &r); err != nil {
		t.Fatalf("decoding cudastub-driver's JSON: %v\n%s", err, d.stdout.String())
	}
	if r.Unexpected != 0 {
		t.Fatalf("cudastub-driver had %d unexpected errors", r.Unexpected)
	}
	return r
}

// runSection starts a session section on pid, running until stop.
func runSection(t *testing.T, pid int, cfg SectionConfig) (*Section, func()) {
	t.Helper()
	s, err := NewSectionConfig(collectors.Options{Pid: pid}, cfg)
	if err != nil {
		t.Fatalf("new section: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	progs := s.ProgramIDs()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		stop()
		links := s.LinkIDs()
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("second close: %v", err)
		}
		privtest.AssertReleased(t, progs, links)
	})
	return s, stop
}

func within(got, want, tol float64) bool { return math.Abs(got-want) <= tol*want }

func findCall(s Summary, name string) (CallSummary, bool) {
	for _, c := range s.Calls {
		if c.Name == name {
			return c, true
		}
	}
	return CallSummary{}, false
}

// TestCallsMatchTheDriver runs the stub's driver program with a known
// number of launches, synchronizes of known duration, copies and
// allocations (one failing) and compares every probed call with the
// program's own count, the synchronize durations with its own
// measurements, and the launch dimensions exactly.
// callsCase is one configuration of TestCallsMatchTheDriver.
type callsCase struct {
	name, api string
	args      []string
	launch    string
	sync      string
	copies    map[string]string // call -> direction
}

// callsSeen is what the section streamed of a case's calls.
type callsSeen struct {
	mu           sync.Mutex
	syncNs       []float64
	launchEvents []Event
}

func TestCallsMatchTheDriver(t *testing.T) {
	privtest.Require(t)
	cases := []callsCase{
		{
			name: "driver", api: "driver",
			args:   []string{"--launch", "kernel", "--sync", "stream", "--grid", "7,3,2", "--block", "64,4,1", "--copies", "3", "--copy-bytes", "65536"},
			launch: "cuLaunchKernel", sync: "cuStreamSynchronize",
			copies: map[string]string{"cuMemcpyHtoD_v2": "host_to_device", "cuMemcpyDtoH_v2": "device_to_host"},
		},
		{
			name: "driver-ex-event-async", api: "driver",
			args:   []string{"--launch", "ex", "--sync", "event", "--grid", "1024,2,1", "--block", "256,1,3", "--copies", "2", "--copy-bytes", "4096", "--async-copies"},
			launch: "cuLaunchKernelEx", sync: "cuEventSynchronize",
			copies: map[string]string{"cuMemcpyHtoDAsync_v2": "host_to_device", "cuMemcpyDtoHAsync_v2": "device_to_host"},
		},
		{
			name: "runtime", api: "runtime",
			args:   []string{"--launch", "kernel", "--sync", "device", "--grid", "5,6,7", "--block", "32,8,2", "--copies", "3", "--copy-bytes", "65536"},
			launch: "cudaLaunchKernel", sync: "cudaDeviceSynchronize",
			copies: map[string]string{"cudaMemcpy": ""},
		},
		{
			name: "runtime-graph-stream", api: "runtime",
			args:   []string{"--launch", "graph", "--sync", "stream", "--copies", "2", "--copy-bytes", "8192", "--async-copies"},
			launch: "cudaGraphLaunch", sync: "cudaStreamSynchronize",
			copies: map[string]string{"cudaMemcpyAsync": ""},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--launches", "40", "--syncs", "4", "--kernel-us", "5000", "--allocs", "5", "--fail-alloc"}, tc.args...)
			d := startDriver(t, tc.api, args...)
			seen := &callsSeen{}
			streamAll := tc.name == "driver-ex-event-async"
			s, stop := runSection(t, d.pid(), SectionConfig{StreamLaunches: streamAll, OnEvent: func(e *Event) {
				seen.mu.Lock()
				defer seen.mu.Unlock()
				switch e.Name() {
				case tc.sync:
					seen.syncNs = append(seen.syncNs, float64(e.DurationNs()))
				case tc.launch:
					seen.launchEvents = append(seen.launchEvents, *e)
				}
			}})
			d.release(t)
			r := d.result(t)
			stop()
			sum := s.Aggregate()
			js, _ := json.Marshal(s.Summary())
			t.Logf("summary: %s", js)
			checkCallCounts(t, tc, sum, r)
			checkAllocs(t, tc, sum)
			checkSyncs(t, tc, sum, r, seen)
			checkLaunchShapes(t, tc, sum, r, seen, streamAll)
			checkCopies(t, tc, sum, r)
			if len(sum.Libraries) != 1 || sum.Libraries[0].API != tc.api || sum.Libraries[0].BuildID == "" {
				t.Errorf("libraries %+v, want the %s stub with a build id", sum.Libraries, tc.api)
			}
			if n := s.Lost(); n != 0 {
				t.Errorf("%d events lost", n)
			}
		})
	}
}

// checkCallCounts: every call the driver made that the collector probes.
func checkCallCounts(t *testing.T, tc callsCase, sum Summary, r result) {
	t.Helper()
	probed := 0
	for name, n := range r.Calls {
		if _, ok := CallByName(name); !ok {
			continue
		}
		probed++
		c, _ := findCall(sum, name)
		if c.Count != n {
			t.Errorf("%s: count %d, the driver made %d", name, c.Count, n)
		}
		if info, _ := CallByName(name); info.Info().Blocking && c.Errors != r.Errors[name] {
			t.Errorf("%s: errors %d, the driver saw %d", name, c.Errors, r.Errors[name])
		}
	}
	if probed < 5 {
		t.Errorf("only %d probed calls in the driver's counts %v", probed, r.Calls)
	}
	for _, c := range sum.Calls {
		if r.Calls[c.Name] == 0 {
			t.Errorf("%s: count %d, the driver never called it", c.Name, c.Count)
		}
	}
	if l, _ := findCall(sum, tc.launch); l.Count != 40 || r.Launches != 40 {
		t.Errorf("%s: %d launches, want 40 (driver: %d)", tc.launch, l.Count, r.Launches)
	}
}

// checkAllocs: K allocations, one failing with out of memory.
func checkAllocs(t *testing.T, tc callsCase, sum Summary) {
	t.Helper()
	alloc := map[string]string{"driver": "cuMemAlloc_v2", "runtime": "cudaMalloc"}[tc.api]
	if a, _ := findCall(sum, alloc); a.Count != 5 || a.Errors != 1 {
		t.Errorf("%s: count %d errors %d, want 5 and 1", alloc, a.Count, a.Errors)
	} else if a.Bytes != 4<<20 {
		t.Errorf("%s: %d bytes allocated, want %d", alloc, a.Bytes, 4<<20)
	}
	if sum.OutOfMemory.Count != 1 || len(sum.OutOfMemory.Events) != 1 {
		t.Errorf("out of memory: %+v, want one event", sum.OutOfMemory)
	} else if e := sum.OutOfMemory.Events[0]; e.Call != alloc || e.Bytes != 0xDEADBEEF || e.Code != 2 {
		t.Errorf("out-of-memory event %+v, want %s of 0xDEADBEEF bytes, code 2", e, alloc)
	}
}

// checkSyncs: M synchronizes, each as long as the driver measured it.
func checkSyncs(t *testing.T, tc callsCase, sum Summary, r result, seen *callsSeen) {
	t.Helper()
	sc, _ := findCall(sum, tc.sync)
	if sc.Count != 4 || r.Syncs != 4 {
		t.Errorf("%s: count %d, want 4 (driver: %d)", tc.sync, sc.Count, r.Syncs)
	}
	seen.mu.Lock()
	got := append([]float64(nil), seen.syncNs...)
	seen.mu.Unlock()
	truth := make([]float64, len(r.SyncNS))
	var truthSum float64
	for i, v := range r.SyncNS {
		truth[i] = float64(v)
		truthSum += float64(v)
	}
	if len(got) != len(truth) {
		t.Fatalf("%d %s events, the driver measured %d", len(got), tc.sync, len(truth))
	}
	sort.Float64s(got)
	sort.Float64s(truth)
	for i := range got {
		if !within(got[i], truth[i], 0.10) {
			t.Errorf("%s duration %.3f ms, the driver measured %.3f ms (10%%)", tc.sync, got[i]/1e6, truth[i]/1e6)
		}
	}
	if sc.Duration == nil || !within(sc.Duration.Sum, truthSum/1e9, 0.10) {
		t.Errorf("%s total %+v, the driver measured %.4fs", tc.sync, sc.Duration, truthSum/1e9)
	} else {
		t.Logf("%s: %d calls, %.2f ms in total; driver: %.2f ms", tc.sync, sc.Count, sc.Duration.Sum*1e3, truthSum/1e6)
	}
}

// checkLaunchShapes: launch dimensions exactly (a graph launch has none of
// its own), and launch events streamed on request only.
func checkLaunchShapes(t *testing.T, tc callsCase, sum Summary, r result, seen *callsSeen, streamAll bool) {
	t.Helper()
	if strings.Contains(tc.launch, "Graph") {
		if len(sum.Launches) != 0 {
			t.Errorf("launch shapes %+v for graph launches, want none", sum.Launches)
		}
	} else if len(sum.Launches) != 1 {
		t.Errorf("launch shapes %+v, want one", sum.Launches)
	} else if l := sum.Launches[0]; l.Call != tc.launch || l.Grid != r.Grid || l.Block != r.Block || l.Count != 40 || l.Estimated {
		t.Errorf("launch shape %+v, want %s grid %v block %v x40, exact", l, tc.launch, r.Grid, r.Block)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	nl := len(seen.launchEvents)
	if streamAll {
		if nl != 40 {
			t.Errorf("%d %s events streamed, want 40", nl, tc.launch)
		} else if e := seen.launchEvents[0]; e.Grid != r.Grid || e.Block != r.Block || e.HasRet != 0 || e.Tid == 0 {
			t.Errorf("launch event %+v, want grid %v block %v at entry", e, r.Grid, r.Block)
		}
	} else if nl != 0 {
		t.Errorf("%d launch events streamed without StreamLaunches", nl)
	}
}

// checkCopies: count and bytes by direction.
func checkCopies(t *testing.T, tc callsCase, sum Summary, r result) {
	t.Helper()
	for call, dir := range tc.copies {
		c, _ := findCall(sum, call)
		if c.Count != r.Calls[call] || c.Count == 0 {
			t.Errorf("%s: count %d, the driver made %d", call, c.Count, r.Calls[call])
		}
		if dir != "" && sum.CopyBytes[dir] != r.CopyBytes/2 {
			t.Errorf("copy bytes %s = %d, want %d", dir, sum.CopyBytes[dir], r.CopyBytes/2)
		}
	}
	var copied uint64
	for _, n := range sum.CopyBytes {
		copied += n
	}
	if copied != r.CopyBytes {
		t.Errorf("copy bytes %v, the driver copied %d", sum.CopyBytes, r.CopyBytes)
	}
}

func TestNoCUDALibrary(t *testing.T) {
	pid := os.Getpid()
	_, err := NewSection(collectors.Options{Pid: pid})
	want := fmt.Sprintf("no CUDA library mapped by pid %d", pid)
	if err == nil || err.Error() != want {
		t.Fatalf("NewSection on a process without CUDA: %v, want %q", err, want)
	}
	if !errors.Is(err, collectors.ErrNotApplicable) {
		t.Errorf("%v does not wrap collectors.ErrNotApplicable", err)
	}
}

// TestTargetExitsMidRun kills the target inside a synchronize: the
// session ends cleanly with what it saw, and releases everything.
func TestTargetExitsMidRun(t *testing.T) {
	privtest.Require(t)
	d := startDriver(t, "driver", "--loop", "--launches", "10", "--syncs", "1", "--kernel-us", "20000")
	s, stop := runSection(t, d.pid(), SectionConfig{})
	d.release(t)
	time.Sleep(700 * time.Millisecond)
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.wait()
	time.Sleep(100 * time.Millisecond)
	stop()
	sum := s.Aggregate()
	l, _ := findCall(sum, "cuLaunchKernel")
	sc, _ := findCall(sum, "cuStreamSynchronize")
	t.Logf("before the kill: %d launches, %d synchronizes", l.Count, sc.Count)
	if l.Count == 0 || sc.Count == 0 {
		t.Errorf("launches %d, synchronizes %d before the kill, want some", l.Count, sc.Count)
	}
	if sc.Count > l.Count/10+1 {
		t.Errorf("%d synchronizes for %d launches", sc.Count, l.Count)
	}
}

// TestHostMetrics follows a driver process from the daemon's collector
// and reads the counts back from /metrics.
func TestHostMetrics(t *testing.T) {
	privtest.Require(t)
	h := NewHost(nil, func() map[uint32]string { return map[uint32]string{0: "host", 3: "llm"} })
	if err := h.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	progs := h.ProgramIDs()
	defer func() {
		links := h.LinkIDs()
		if err := h.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		privtest.AssertReleased(t, progs, links)
	}()
	// A process without CUDA is a target like any other.
	if err := h.SetTarget(uint32(os.Getpid()), 2); err != nil {
		t.Errorf("target without CUDA: %v", err)
	}
	d := startDriver(t, "driver", "--launches", "30", "--syncs", "3", "--kernel-us", "2000", "--allocs", "2", "--fail-alloc", "--copies", "2", "--copy-bytes", "1000")
	if err := h.SetTarget(uint32(d.pid()), 3); err != nil {
		t.Fatal(err)
	}
	n := len(h.LinkIDs())
	if err := h.SetTarget(uint32(d.pid()), 3); err != nil {
		t.Fatal(err)
	}
	if m := len(h.LinkIDs()); m != n || n == 0 {
		t.Errorf("%d links after adding the target twice, %d after once", m, n)
	}
	d.release(t)
	r := d.result(t)

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	get := func(name string, labels map[string]string) *dto.Metric {
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		next:
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
						continue next
					}
				}
				return m
			}
		}
		return nil
	}
	for _, c := range []string{"cuLaunchKernel", "cuStreamSynchronize", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyHtoD_v2"} {
		m := get("bpfbench_cuda_calls_total", map[string]string{"target": "llm", "call": c})
		if m == nil || uint64(m.GetCounter().GetValue()) != r.Calls[c] {
			t.Errorf("bpfbench_cuda_calls_total{call=%q} = %v, the driver made %d", c, m, r.Calls[c])
		}
	}
	if m := get("bpfbench_cuda_errors_total", map[string]string{"target": "llm", "call": "cuMemAlloc_v2"}); m == nil || m.GetCounter().GetValue() != 1 {
		t.Errorf("bpfbench_cuda_errors_total{call=cuMemAlloc_v2} = %v, want 1", m)
	}
	m := get("bpfbench_cuda_call_duration_seconds", map[string]string{"target": "llm", "call": "cuStreamSynchronize"})
	if m == nil || m.GetHistogram().GetSampleCount() != 3 {
		t.Errorf("bpfbench_cuda_call_duration_seconds{call=cuStreamSynchronize} = %v, want 3 samples", m)
	} else {
		var truth float64
		for _, v := range r.SyncNS {
			truth += float64(v) / 1e9
		}
		if !within(m.GetHistogram().GetSampleSum(), truth, 0.10) {
			t.Errorf("synchronize time %.4fs, the driver measured %.4fs", m.GetHistogram().GetSampleSum(), truth)
		}
	}
	if m := get("bpfbench_cuda_copy_bytes_total", map[string]string{"target": "llm", "direction": "host_to_device"}); m == nil || m.GetCounter().GetValue() != 2000 {
		t.Errorf("bpfbench_cuda_copy_bytes_total{direction=host_to_device} = %v, want 2000", m)
	}
	if get("bpfbench_cuda_calls_total", map[string]string{"target": "host"}) != nil {
		t.Errorf("calls reported for the host slot")
	}
	if err := h.DeleteTarget(uint32(d.pid())); err != nil {
		t.Fatal(err)
	}
	if n := len(h.LinkIDs()); n != 0 {
		t.Errorf("%d links after deleting the only CUDA target", n)
	}
}
