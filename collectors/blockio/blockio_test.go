package blockio

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testproc"
)

func TestMain(m *testing.M) {
	testproc.Register("odirect", childODirect)
	testproc.Main()
	os.Exit(m.Run())
}

// childODirect reads args[1] blocks of args[2] bytes with O_DIRECT from the
// device args[0], starting at block args[3], one at a time.
func childODirect(args []string, ready func(...int), wait func()) {
	runtime.LockOSThread()
	n, _ := strconv.Atoi(args[1])
	size, _ := strconv.Atoi(args[2])
	first, _ := strconv.Atoi(args[3])
	f, err := os.OpenFile(args[0], os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		panic(err)
	}
	buf, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		panic(err)
	}
	ready(unix.Gettid())
	wait()
	for i := range n {
		got, err := unix.Pread(int(f.Fd()), buf, int64(first+i)*int64(size))
		if err != nil {
			panic(err)
		}
		if got != size {
			// A loop device detached under the reader answers 0 bytes,
			// no error and no request: say so rather than count short.
			panic(fmt.Sprintf("read %d of %s: %d of %d bytes: the device is no longer bound to its file", i, args[0], got, size))
		}
	}
}

// loop attaches a loop device over backing (a file, or another block
// device with directIO) and returns its path.
func loop(t testing.TB, backing string, directIO bool) string {
	t.Helper()
	privtest.RequireTool(t, "losetup", "apt-get install mount")
	args := []string{"--find", "--show"}
	if directIO {
		args = append(args, "--direct-io=on")
	}
	out, err := exec.Command("losetup", append(args, backing)...).CombinedOutput()
	if err != nil {
		privtest.Skip(t, "no loop device: "+strings.TrimSpace(string(out)))
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
	return dev
}

// loopFile attaches a loop device over a new sparse file of size bytes.
func loopFile(t testing.TB, size int64) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	return loop(t, img, false)
}

// devOf returns the kernel dev_t (as the programs report it) of a block device path.
func devOf(t *testing.T, path string) uint32 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return MkDev(unix.Major(st.Rdev), unix.Minor(st.Rdev))
}

// setScheduler selects the IO scheduler of a block device (so requests
// are inserted into a queue before they are issued).
func setScheduler(t *testing.T, dev, sched string) {
	t.Helper()
	p := filepath.Join("/sys/block", filepath.Base(dev), "queue/scheduler")
	if err := os.WriteFile(p, []byte(sched), 0); err != nil {
		t.Logf("cannot select %s for %s: %v (queue times not checked)", sched, dev, err)
	}
}

// stream starts a session collector following pid in slot 1 and returns
// the events it saw on dev once stop is called.
func stream(t *testing.T, cfg Config, pid int, dev uint32) (*Collector, func() []Event) {
	t.Helper()
	var (
		mu  sync.Mutex
		evs []Event
	)
	cfg.OnEvent = func(e *Event) {
		if e.Dev != dev || e.Tgid != uint32(pid) {
			return
		}
		mu.Lock()
		evs = append(evs, *e)
		mu.Unlock()
	}
	c := New(cfg)
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetTarget(uint32(pid), 1, true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return c, func() []Event {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		if n := c.Lost(); n != 0 {
			t.Errorf("%d events lost", n)
		}
		mu.Lock()
		defer mu.Unlock()
		return evs
	}
}

type tally struct {
	reads, bytes, queued, other int
	minService                  uint64
}

func count(evs []Event) tally {
	var tl tally
	for _, e := range evs {
		if Op(e.Op) != Read {
			tl.other++
			continue
		}
		tl.reads++
		tl.bytes += int(e.Bytes)
		if e.Flags&FlagQueued != 0 {
			tl.queued++
		}
		if tl.minService == 0 || e.ServiceNs < tl.minService {
			tl.minService = e.ServiceNs
		}
	}
	return tl
}

const (
	nReads   = 200
	readSize = 8192
)

// TestExactODirectReads checks a session, the daemon's host-wide and
// per-target aggregates, and its metrics against N O_DIRECT reads of a
// known size made by one child on a loop device.
func TestExactODirectReads(t *testing.T) {
	privtest.Require(t)
	devPath := loopFile(t, 16<<20)
	setScheduler(t, devPath, "mq-deadline")
	dev := devOf(t, devPath)
	name := filepath.Base(devPath)
	if got := DevName(dev); got != name {
		t.Errorf("DevName(%d:%d) = %q, want %q", Major(dev), Minor(dev), got, name)
	}

	child := testproc.Start(t, "odirect", devPath, strconv.Itoa(nReads), strconv.Itoa(readSize), "0")
	_, stop := stream(t, Config{}, child.Pid(), dev)

	host := NewHost(nil, func() map[uint32]string { return map[uint32]string{0: "host", 4: "llm"} })
	if err := host.Start(context.Background()); err != nil {
		t.Fatalf("host start: %+v", err)
	}
	defer host.Close()
	if err := host.SetTarget(uint32(child.Pid()), 4); err != nil {
		t.Fatal(err)
	}

	sec, err := NewSection(collectors.Options{Pid: child.Pid()})
	if err != nil {
		t.Fatal(err)
	}
	if err := sec.Start(context.Background()); err != nil {
		t.Fatalf("section start: %+v", err)
	}
	defer sec.Close()
	sctx, scancel := context.WithCancel(context.Background())
	sdone := make(chan error, 1)
	go func() { sdone <- sec.Run(sctx) }()

	child.Go(t)
	child.Wait(t, 30*time.Second)
	evs := stop()
	scancel()
	if err := <-sdone; err != nil {
		t.Fatal(err)
	}

	tl := count(evs)
	t.Logf("%s: %d reads, %d bytes, %d queued, %d other, min service %dns", name, tl.reads, tl.bytes, tl.queued, tl.other, tl.minService)
	if tl.reads != nReads || tl.bytes != nReads*readSize || tl.other != 0 {
		t.Errorf("saw %d reads of %d bytes and %d other requests, want exactly %d reads of %d bytes", tl.reads, tl.bytes, tl.other, nReads, nReads*readSize)
	}
	if tl.minService == 0 {
		t.Error("a read has zero service time")
	}
	if sched, _ := os.ReadFile(filepath.Join("/sys/block", name, "queue/scheduler")); strings.Contains(string(sched), "[mq-deadline]") && tl.queued != nReads {
		t.Errorf("%d of %d reads have a queue time under mq-deadline, want all", tl.queued, nReads)
	}

	// The session's JSON section.
	var found bool
	for _, d := range sec.Summary().(Summary).Devices {
		if d.Device != name {
			continue
		}
		found = true
		t.Logf("section: %+v", d)
		if d.Reads != nReads || d.ReadBytes != nReads*readSize || d.Writes != 0 {
			t.Errorf("section %s: %d reads %d bytes %d writes, want %d reads %d bytes", name, d.Reads, d.ReadBytes, d.Writes, nReads, nReads*readSize)
		}
		if d.Latency.P50 <= 0 || d.Latency.P99 < d.Latency.P50 || d.Latency.Max < d.Latency.P99 {
			t.Errorf("section %s: inconsistent latency %+v", name, d.Latency)
		}
	}
	if !found {
		t.Errorf("section has no device %s", name)
	}

	// The daemon's aggregates.
	stats, err := host.Stats()
	if err != nil {
		t.Fatal(err)
	}
	var hostReads, tgtReads, tgtBytes uint64
	for _, s := range stats {
		if s.Dev != dev || s.Op != Read {
			continue
		}
		switch s.Target {
		case 0:
			hostReads = s.Count
		case 4:
			tgtReads, tgtBytes = s.Count, s.Bytes
			if s.Service.Count != s.Count || s.Service.SumNs == 0 {
				t.Errorf("target service histogram %d values, sum %dns", s.Service.Count, s.Service.SumNs)
			}
		}
	}
	if tgtReads != nReads || tgtBytes != nReads*readSize || hostReads < nReads {
		t.Errorf("kernel aggregates of %s: target %d reads %d bytes, host %d reads; want %d, %d, >= %d", name, tgtReads, tgtBytes, hostReads, nReads, nReads*readSize, nReads)
	}

	checkMetrics(t, host, name)
}

// checkMetrics checks the daemon's metrics of the device name and of the
// target "llm" against the reads of TestExactODirectReads.
func checkMetrics(t *testing.T, host *Host, name string) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(host); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName() + labelString(m)
			switch {
			case m.Histogram != nil:
				got[key] = float64(m.Histogram.GetSampleCount())
			case m.Counter != nil:
				got[key] = m.Counter.GetValue()
			}
		}
	}
	if v := got[fmt.Sprintf(`bpfbench_blockio_latency_seconds{device=%q,op="read"}`, name)]; v < nReads {
		t.Errorf("bpfbench_blockio_latency_seconds count for %s = %v, want >= %d", name, v, nReads)
	}
	if v := got[`bpfbench_target_blockio_bytes_total{op="read",target="llm"}`]; v < nReads*readSize {
		t.Errorf("bpfbench_target_blockio_bytes_total for the target = %v, want >= %d", v, nReads*readSize)
	}
	if v := got[`bpfbench_target_blockio_latency_seconds{op="read",target="llm"}`]; v < nReads {
		t.Errorf("bpfbench_target_blockio_latency_seconds count for the target = %v, want >= %d", v, nReads)
	}
}

func labelString(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// TestThrottledDeviceRaisesLatency reads a loop device whose backing
// device is throttled for the reader's blkio cgroup (cgroup v1
// blkio.throttle.read_iops_device). The throttle holds bios back before
// they become requests (and releases them from a kernel worker), so the
// throttled device itself shows no longer requests; the device above it
// does: each of its requests waits for a read below, made on the reader's
// behalf and charged to its cgroup by the loop driver.
func TestThrottledDeviceRaisesLatency(t *testing.T) {
	privtest.Require(t)
	const blkio = "/sys/fs/cgroup/blkio"
	if _, err := os.Stat(filepath.Join(blkio, "blkio.throttle.read_iops_device")); err != nil {
		privtest.Skip(t, "cgroup v1 blkio throttling not mounted at "+blkio)
	}
	lower := loopFile(t, 16<<20)
	upper := loop(t, lower, true)
	dev := devOf(t, upper)
	lowerDev := devOf(t, lower)

	run := func(cgroup string, first int) []Event {
		child := testproc.Start(t, "odirect", upper, "40", "4096", strconv.Itoa(first))
		if cgroup != "" {
			if err := os.WriteFile(filepath.Join(cgroup, "cgroup.procs"), []byte(strconv.Itoa(child.Pid())), 0); err != nil {
				t.Fatalf("moving the child into %s: %v", cgroup, err)
			}
		}
		_, stop := stream(t, Config{}, child.Pid(), dev)
		child.Go(t)
		child.Wait(t, 30*time.Second)
		return stop()
	}
	summary := func(evs []Event) DeviceStats {
		a := NewAggregator()
		for i := range evs {
			a.Add(&evs[i])
		}
		for _, d := range a.Devices() {
			return d
		}
		return DeviceStats{}
	}

	free := run("", 0)
	cg := filepath.Join(blkio, fmt.Sprintf("bpfbench-test-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The child has exited by then; an empty cgroup can go.
		for range 50 {
			if err := os.Remove(cg); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	rule := fmt.Sprintf("%d:%d 50", Major(lowerDev), Minor(lowerDev))
	if err := os.WriteFile(filepath.Join(cg, "blkio.throttle.read_iops_device"), []byte(rule), 0); err != nil {
		t.Fatalf("throttling %s: %v", lower, err)
	}
	throttled := run(cg, 1000)

	// blk-throttle releases bios in slices (5 per 100 ms slice at 50
	// IOPS), so most requests stay fast and the throttle shows in the
	// tail and the total: 40 reads take about 0.7 s.
	a, b := summary(free), summary(throttled)
	t.Logf("%s over %s: free: total %.4fs p50 %.6fs p99 %.6fs; %s limited to 50 read IOPS: total %.4fs p50 %.6fs p99 %.6fs",
		upper, lower, a.LatencySum, a.Latency.P50, a.Latency.P99, lower, b.LatencySum, b.Latency.P50, b.Latency.P99)
	if len(free) != 40 || len(throttled) != 40 {
		t.Fatalf("saw %d and %d reads, want 40 each", len(free), len(throttled))
	}
	if b.LatencySum < 0.3 || b.LatencySum < 20*a.LatencySum {
		t.Errorf("throttled reads took %.4fs in all, want >= 0.3s and >= 20x the unthrottled %.4fs", b.LatencySum, a.LatencySum)
	}
	if b.Latency.P99 < 0.02 || b.Latency.Max < 0.05 {
		t.Errorf("throttled p99 %.4fs max %.4fs, want >= 20ms and >= 50ms", b.Latency.P99, b.Latency.Max)
	}
}

// TestMissingTracepoint simulates a kernel without block_rq_insert: the
// collector names it and still counts every request from the others.
func TestMissingTracepoint(t *testing.T) {
	privtest.Require(t)
	devPath := loopFile(t, 16<<20)
	setScheduler(t, devPath, "mq-deadline")
	dev := devOf(t, devPath)
	child := testproc.Start(t, "odirect", devPath, "50", "4096", "0")
	c, stop := stream(t, Config{rename: map[string]string{"block_rq_insert": "block_rq_insert_gone"}}, child.Pid(), dev)
	if m := c.Missing(); len(m) != 1 || m[0] != "block_rq_insert_gone" {
		t.Errorf("Missing() = %v, want [block_rq_insert_gone]", m)
	}
	if n := len(c.LinkIDs()); n != 3 {
		t.Errorf("%d links, want 3", n)
	}
	child.Go(t)
	child.Wait(t, 30*time.Second)
	tl := count(stop())
	if tl.reads != 50 || tl.queued != 0 {
		t.Errorf("saw %d reads (%d with queue time), want 50 reads without queue time", tl.reads, tl.queued)
	}
}

func TestBadInput(t *testing.T) {
	if _, err := NewSection(collectors.Options{Pid: 0}); err == nil {
		t.Error("NewSection accepted pid 0")
	}
	privtest.Require(t)
	c := New(Config{})
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	defer c.Close()
	if err := c.SetTarget(1, 0, false); err == nil {
		t.Error("slot 0 accepted as a target slot")
	}
	if err := c.SetTarget(1, MaxTargets, false); err == nil {
		t.Error("slot MaxTargets accepted")
	}
	if err := c.DeleteTarget(12345678); err != nil {
		t.Errorf("deleting an unknown target: %v", err)
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	privtest.Require(t)
	c := New(Config{})
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	progs, links := c.ProgramIDs(), c.LinkIDs()
	if len(progs) != 4 || len(links) != 4 {
		t.Fatalf("loaded %d programs and %d links, want 4 and 4", len(progs), len(links))
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	privtest.AssertReleased(t, progs, links)
}
