package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/clock"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
	"github.com/bpfbench/bpfbench/session"
)

// streamLog counts the streamSections started and closed, by pid.
type streamLog struct {
	mu      sync.Mutex
	started []int
	closed  []int
}

func (l *streamLog) counts(pid int) (started, closed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.started {
		if p == pid {
			started++
		}
	}
	for _, p := range l.closed {
		if p == pid {
			closed++
		}
	}
	return started, closed
}

// open is the sections started and not closed.
func (l *streamLog) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.started) - len(l.closed)
}

// streamSection plays a server's response stream: a request in, then a
// write every 5 ms on the same connection, so that the tracker walks gaps
// (unexplained: no thread's states come with them).
type streamSection struct {
	log *streamLog
	pid int
	rec collectors.Recorder
}

func (s *streamSection) Start(context.Context) error {
	s.log.mu.Lock()
	s.log.started = append(s.log.started, s.pid)
	s.log.mu.Unlock()
	return nil
}

func (s *streamSection) Run(ctx context.Context) error {
	conn := collectors.Span{LocalPort: 8000, Port: 40000, Tid: uint32(s.pid), Tgid: uint32(s.pid)}
	req := conn
	req.Kind, req.Bytes = collectors.SpanRequest, 200
	req.Start, req.End = clock.Now(), clock.Now()
	s.rec.Record(req)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			sp := conn
			sp.Kind, sp.Bytes = collectors.SpanSend, 10
			sp.Start, sp.End = clock.Now(), clock.Now()
			s.rec.Record(sp)
		}
	}
}

func (s *streamSection) Close() error {
	s.log.mu.Lock()
	s.log.closed = append(s.log.closed, s.pid)
	s.log.mu.Unlock()
	return nil
}
func (s *streamSection) Name() string            { return "stream" }
func (s *streamSection) WriteInterval(io.Writer) {}
func (s *streamSection) WriteSummary(io.Writer)  {}
func (s *streamSection) Summary() any            { return nil }
func (s *streamSection) Lost() uint64            { return 0 }

func streamSections(l *streamLog) []session.SectionFactory {
	return []session.SectionFactory{{Name: "stream", Required: true, New: func(o collectors.Options) (collectors.Section, error) {
		return &streamSection{log: l, pid: o.Pid, rec: o.Recorder}, nil
	}}}
}

// liveComm is the command name of the processes the lifecycle test
// follows: a copy of sleep, so that no other process matches.
const liveComm = "bpfbench-lvtst"

func liveProcess(t *testing.T, bin string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// runLive runs a daemon with sections until the test ends and returns it
// and what ends it (cancel, then wait for Run).
func runLive(t *testing.T, cfg Config, sections []session.SectionFactory, logs io.Writer) (*Daemon, func()) {
	t.Helper()
	d := New(cfg, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})), nil)
	d.SetSessionSections(sections)
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, "127.0.0.1:0", "") }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("daemon: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("the daemon did not stop within 10 s of its context")
			}
			d.Close()
		})
	}
	t.Cleanup(stop)
	select {
	case <-d.Listening():
	case err := <-done:
		t.Fatalf("daemon: %v", err)
	}
	return d, stop
}

// liveFamilies gathers the live view's families of target.
func liveFamilies(t *testing.T, d *Daemon, target string) map[string][]*dto.Metric {
	t.Helper()
	mfs, err := d.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*dto.Metric{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "target" && l.GetValue() == target {
					out[mf.GetName()] = append(out[mf.GetName()], m)
				}
			}
		}
	}
	return out
}

func gapCount(t *testing.T, d *Daemon, target string) (uint64, bool) {
	t.Helper()
	ms := liveFamilies(t, d, target)["bpfbench_token_gap_seconds"]
	if len(ms) != 1 {
		return 0, false
	}
	return ms[0].GetHistogram().GetSampleCount(), true
}

// A target's live session starts at the refresh that finds its process,
// ends when the process exits, starts again on the process that replaces
// it with the figures carried over, stops when live.enabled is turned off
// by a reload, and every session is closed when the daemon stops.
func TestLiveSessionLifecycle(t *testing.T) {
	sleep := privtest.RequireTool(t, "sleep", "apt-get install coreutils")
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), liveComm)
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.RefreshInterval = 100 * time.Millisecond
	cfg.Targets = []Target{{Name: "srv", Comm: liveComm}}
	var sl streamLog
	var logs syncBuffer
	p1 := liveProcess(t, bin)
	d, stop := runLive(t, cfg, streamSections(&sl), &logs)

	testutil.Eventually(t, 10*time.Second, func() bool { s, _ := sl.counts(p1.Process.Pid); return s == 1 }, "the session on the first process")
	// The tracker walks gaps 2 s (its lag) after they end.
	testutil.Eventually(t, 10*time.Second, func() bool { n, _ := gapCount(t, d, "srv"); return n > 10 }, "gaps of the first session")
	fams := liveFamilies(t, d, "srv")
	for _, name := range []string{"bpfbench_token_gap_seconds", "bpfbench_time_to_first_byte_seconds", "bpfbench_token_gap_cause_seconds_total",
		"bpfbench_streams_active", "bpfbench_live_spans_dropped_total"} {
		if len(fams[name]) == 0 {
			t.Errorf("no %s{target=\"srv\"}", name)
		}
	}
	if n := len(fams["bpfbench_token_gap_cause_seconds_total"]); n != 9 {
		t.Errorf("%d cause series, want one per cause (9)", n)
	}
	if g := fams["bpfbench_streams_active"]; len(g) == 1 && g[0].GetGauge().GetValue() != 1 {
		t.Errorf("bpfbench_streams_active %v, want 1", g[0].GetGauge().GetValue())
	}
	stores := map[string]float64{}
	for _, m := range fams["bpfbench_live_store_entries"] {
		for _, l := range m.GetLabel() {
			if l.GetName() == "store" {
				stores[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	if len(stores) != 3 || stores["spans"] <= 0 || stores["streams"] < 1 || stores["connections"] < 1 {
		t.Errorf("bpfbench_live_store_entries %v, want spans held, and the stream's connection grouped and summed", stores)
	}
	var unexplained float64
	for _, m := range fams["bpfbench_token_gap_cause_seconds_total"] {
		for _, l := range m.GetLabel() {
			if l.GetName() == "cause" && l.GetValue() == "unexplained" {
				unexplained = m.GetCounter().GetValue()
			}
		}
	}
	if unexplained <= 0 {
		t.Errorf("bpfbench_token_gap_cause_seconds_total{cause=\"unexplained\"} %v: the gaps with no thread states are unexplained", unexplained)
	}

	// The process exits: its session ends and is closed; the one that
	// replaces it gets a session of its own, the figures going on.
	before, _ := gapCount(t, d, "srv")
	_ = p1.Process.Kill()
	_ = p1.Wait()
	testutil.Eventually(t, 10*time.Second, func() bool { _, c := sl.counts(p1.Process.Pid); return c == 1 }, "the first session closed")
	p2 := liveProcess(t, bin)
	testutil.Eventually(t, 10*time.Second, func() bool { s, _ := sl.counts(p2.Process.Pid); return s == 1 }, "the session on the second process")
	if after, ok := gapCount(t, d, "srv"); !ok || after < before {
		t.Errorf("the gap count went from %d to %d (present %v) across the restart: want it carried over", before, after, ok)
	}
	if n := sl.open(); n != 1 {
		t.Errorf("%d sessions open, want 1", n)
	}

	// live.enabled off: the session is closed and the series go.
	off := cfg
	off.Live.Enabled = false
	if err := d.Reload(off); err != nil {
		t.Fatal(err)
	}
	if n := sl.open(); n != 0 {
		t.Errorf("%d sessions open after live.enabled: false, want 0", n)
	}
	if f := liveFamilies(t, d, "srv"); len(f["bpfbench_token_gap_seconds"]) != 0 {
		t.Errorf("live series remain with live.enabled: false")
	}
	if err := d.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if s, _ := sl.counts(p2.Process.Pid); s != 2 {
		t.Errorf("%d sessions on the second process after live.enabled: true, want 2", s)
	}

	// The daemon stops: every session is closed.
	stop()
	if n := sl.open(); n != 0 {
		t.Errorf("%d sessions open after the daemon stopped:\nstarted %v\nclosed  %v", n, sl.started, sl.closed)
	}
	if t.Failed() {
		t.Logf("daemon log:\n%s", logs.String())
	}
}

// A target whose session cannot start is logged once, tried again at
// every refresh, and the daemon goes on.
func TestLiveFailureLoggedOnce(t *testing.T) {
	pid := sleeper(t)
	cfg := DefaultConfig()
	cfg.RefreshInterval = 50 * time.Millisecond
	cfg.Targets = []Target{{Name: "srv", Pid: pid}}
	var tries sync.Mutex
	n := 0
	sections := []session.SectionFactory{{Name: "broken", Required: true, New: func(collectors.Options) (collectors.Section, error) {
		tries.Lock()
		n++
		tries.Unlock()
		return nil, errors.New("no such map")
	}}}
	var logs syncBuffer
	d, stop := runLive(t, cfg, sections, &logs)
	testutil.Eventually(t, 10*time.Second, func() bool { tries.Lock(); defer tries.Unlock(); return n >= 3 }, "three tries")
	stop()
	if c := strings.Count(logs.String(), "live view not started"); c != 1 {
		t.Errorf("%d warnings for one target failing at every refresh, want 1:\n%s", c, logs.String())
	}
	if f := liveFamilies(t, d, "srv"); len(f["bpfbench_token_gap_seconds"]) != 0 {
		t.Errorf("a target with no live session has live series: %v", f)
	}
}

// The session follows the roots of the target's process trees, the
// lowest first, leaving out kernel threads.
func TestLiveTreeRoots(t *testing.T) {
	proc := t.TempDir()
	stat := func(pid, ppid int, flags uint) {
		dir := filepath.Join(proc, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("%d (x) S %d %d %d 0 -1 %d 0 0\n", pid, ppid, pid, pid, flags)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stat(30, 1, 0)
	stat(31, 30, 0)
	stat(12, 1, 0)
	stat(40, 2, 0x00200000) // a kernel thread
	pid, roots, why := treeRoots(proc, []int{31, 30, 40, 12})
	if pid != 12 || !slices.Equal(roots, []int{30}) || why != "" {
		t.Errorf("treeRoots: pid %d roots %v (%q), want 12 [30]", pid, roots, why)
	}
	if pid, _, why := treeRoots(proc, []int{40}); pid != 0 || !strings.Contains(why, "kernel thread 40") {
		t.Errorf("treeRoots of a kernel thread: pid %d, %q", pid, why)
	}
}
