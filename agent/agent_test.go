package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/clock"
	"github.com/bpfbench/bpfbench/internal/testutil"
	"github.com/bpfbench/bpfbench/session"
)

// tickSection records a span every few milliseconds, each spanning the
// moment it was recorded on this host's clock: a ground truth for the
// mapping of agent times onto the client's.
type tickSection struct {
	rec collectors.Recorder
}

func (s *tickSection) Start(context.Context) error { return nil }
func (s *tickSection) Run(ctx context.Context) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// What was seen before the end is delivered.
			now := clock.Now()
			s.rec.Record(collectors.Span{Kind: collectors.SpanCUDA, Start: now, End: now, Detail: "last"})
			return nil
		case <-t.C:
			now := clock.Now()
			s.rec.Record(collectors.Span{Kind: collectors.SpanRunqueue, Start: now - 1000, End: now, Tid: 7})
		}
	}
}
func (s *tickSection) Close() error            { return nil }
func (s *tickSection) Name() string            { return "tick" }
func (s *tickSection) WriteInterval(io.Writer) {}
func (s *tickSection) WriteSummary(io.Writer)  {}
func (s *tickSection) Summary() any            { return map[string]int{"ok": 1} }
func (s *tickSection) Lost() uint64            { return 0 }

func tickSections() []session.SectionFactory {
	return []session.SectionFactory{{Name: "tick", Required: true, New: func(o collectors.Options) (collectors.Section, error) {
		return &tickSection{rec: o.Recorder}, nil
	}}}
}

// newTestServer serves an agent whose sessions may follow processes named
// sleep (sleeper's).
func newTestServer(t *testing.T, limits Limits) (*Server, *httptest.Server) {
	t.Helper()
	srv, err := NewServer(tickSections(), limits, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetAllow(Allow{Comms: []string{"sleep"}})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.Close(); hs.Close() })
	return srv, hs
}

// sleeper starts a process the test server may follow (comm sleep) and
// returns its pid; it is killed at the end of the test.
func sleeper(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// The estimate holds the true offset within its bound whatever the
// asymmetry of the paths, and its bound is at most half the fastest trip.
func TestEstimateBoundsTheTrueOffset(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const offset = 987_654_321
	for trial := 0; trial < 200; trial++ {
		var s []Sample
		t0 := int64(1e9)
		for i := 0; i < 32; i++ {
			up := 20_000 + r.Int64N(200_000)
			down := 20_000 + r.Int64N(200_000)
			if i%5 == 0 {
				up += 5_000_000 // a preempted request
			}
			s = append(s, Sample{T0: t0, Agent: t0 + up + offset, T1: t0 + up + down})
			t0 += up + down + 10_000
		}
		e, ok := Estimate(s, 1)
		if !ok {
			t.Fatal("no estimate")
		}
		if d := e.OffsetNs - offset; d > e.BoundNs || -d > e.BoundNs {
			t.Fatalf("trial %d: offset %d, true %d, bound %d", trial, e.OffsetNs, int64(offset), e.BoundNs)
		}
		if e.BoundNs > e.RTTMinNs/2+2 {
			t.Fatalf("trial %d: bound %d beyond RTT_min/2 = %d", trial, e.BoundNs, e.RTTMinNs/2)
		}
	}
}

// Report adds the drift over the exchange interval to the widest bound.
func TestReportDrift(t *testing.T) {
	est := []ClockEstimate{{AtNs: 0, OffsetNs: 1000, BoundNs: 50}, {AtNs: 10e9, OffsetNs: 101_000, BoundNs: 80}}
	r := Report("a", est, 5*time.Second)
	if r.DriftPPM != 10 || r.OffsetNs != 101_000 || r.BoundNs != 80+50_000 {
		t.Fatalf("report %+v", r)
	}
}

// Same host: the offset is ~0 and the bound microseconds.
func TestClockSameHost(t *testing.T) {
	_, hs := newTestServer(t, Limits{})
	c := NewClient(hs.Listener.Addr().String(), ClientOptions{})
	e, err := c.MeasureClock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("same host: offset %d ns, bound %d ns, rtt_min %d ns, %d samples, %d used", e.OffsetNs, e.BoundNs, e.RTTMinNs, e.Samples, e.Used)
	if e.OffsetNs > e.BoundNs || -e.OffsetNs > e.BoundNs {
		t.Errorf("offset %d ns outside its bound %d ns on one host", e.OffsetNs, e.BoundNs)
	}
	if e.BoundNs > int64(time.Millisecond) {
		t.Errorf("bound %v on one host: expected microseconds", time.Duration(e.BoundNs))
	}
}

// A clock shifted on purpose is recovered within the bound, and the spans
// of a session arrive on the client's clock.
func TestShiftedClockRecovered(t *testing.T) {
	const shift = 3_600_123_456_789 // an hour and change
	t.Setenv(ClockShiftEnv, strconv.FormatInt(shift, 10))
	_, hs := newTestServer(t, Limits{})
	c := NewClient(hs.Listener.Addr().String(), ClientOptions{ClockInterval: 200 * time.Millisecond})
	ctx := context.Background()
	s, err := c.Start(ctx, StartRequest{Target: Target{Pid: sleeper(t)}})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var worst int64
	deadline := time.After(time.Second)
recv:
	for {
		select {
		case batch, ok := <-s.Spans():
			if !ok {
				break recv
			}
			now := clock.Now()
			for _, sp := range batch {
				n++
				if sp.End > now {
					worst = max(worst, sp.End-now)
				}
			}
		case <-deadline:
			break recv
		}
	}
	col, err := s.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rep := s.Clock()
	t.Logf("shift %d: offset %d, bound %d, drift %.3f ppm, %d estimates; %d spans, %d sent, worst future span %d ns",
		int64(shift), rep.OffsetNs, rep.BoundNs, rep.DriftPPM, len(rep.Estimates), n, col.Spans, worst)
	for _, e := range rep.Estimates {
		if d := e.OffsetNs - shift; d > e.BoundNs || -d > e.BoundNs {
			t.Errorf("estimate %+v misses the shift %d by %d ns", e, int64(shift), d)
		}
	}
	if len(rep.Estimates) < 2 {
		t.Errorf("%d clock estimates in a second at 200 ms: the exchange is not repeated", len(rep.Estimates))
	}
	if n == 0 || !col.Complete || col.Error != "" {
		t.Fatalf("collection %+v after %d spans", col, n)
	}
	// A span is recorded before it is sent: mapped back it cannot lie in
	// the client's future by more than the bound.
	if worst > rep.BoundNs {
		t.Errorf("a span mapped %d ns into the future, beyond the bound %d", worst, rep.BoundNs)
	}
	if now := clock.Now(); col.StoppedNs > now || col.StoppedNs < now-int64(5*time.Second) {
		t.Errorf("stopped at %d, now %d: not on the local clock", col.StoppedNs, now)
	}
}

// Beyond agent.max_sessions a start is refused with 429.
func TestMaxSessions(t *testing.T) {
	srv, hs := newTestServer(t, Limits{MaxSessions: 1})
	c := NewClient(hs.Listener.Addr().String(), ClientOptions{})
	ctx := context.Background()
	pid := sleeper(t)
	s, err := c.Start(ctx, StartRequest{Target: Target{Pid: pid}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Start(ctx, StartRequest{Target: Target{Pid: pid}})
	if !errors.Is(err, ErrTooManySessions) {
		t.Fatalf("second session: %v, want ErrTooManySessions", err)
	}
	t.Log(err)
	if _, err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if srv.Active() != 0 {
		t.Fatalf("%d sessions held after stop", srv.Active())
	}
	s, err = c.Start(ctx, StartRequest{Target: Target{Pid: pid}})
	if err != nil {
		t.Fatalf("a session after the first stopped: %v", err)
	}
	s.Stop(ctx)
}

// Bad requests name the fix.
func TestStartRefusesBadTargets(t *testing.T) {
	_, hs := newTestServer(t, Limits{})
	c := NewClient(hs.Listener.Addr().String(), ClientOptions{})
	for _, tc := range []Target{{}, {Pid: 1, Port: 80}, {Pid: -4}, {Cgroup: "../etc"}} {
		if err := c.do(context.Background(), http.MethodPost, PathSessions, StartRequest{Target: tc}, &StartResponse{}, http.StatusCreated); err == nil || !strings.Contains(err.Error(), "400") {
			t.Errorf("target %+v: %v, want 400", tc, err)
		}
	}
}

// The buffer drops the oldest spans past its bound and counts them.
func TestBufferDropsOldest(t *testing.T) {
	b := newSpanBuffer(100)
	for i := 0; i < 1000; i++ {
		b.Record(collectors.Span{Start: int64(i)})
	}
	got := b.take(1000)
	if len(got) != 100 || got[0].Start != 900 || b.droppedNow() != 900 {
		t.Fatalf("%d spans from %d, %d dropped", len(got), got[0].Start, b.droppedNow())
	}
}

// A session no client streams is stopped after the idle timeout.
func TestIdleSessionStopped(t *testing.T) {
	srv, hs := newTestServer(t, Limits{IdleTimeout: 500 * time.Millisecond})
	c := NewClient(hs.Listener.Addr().String(), ClientOptions{})
	var info StartResponse
	if err := c.do(context.Background(), http.MethodPost, PathSessions, StartRequest{Target: Target{Pid: sleeper(t)}}, &info, http.StatusCreated); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return srv.Active() == 0 }, "an idle session released")
}

// helperEnv makes the test binary an agent on a free port that prints its
// address and serves until killed.
const helperEnv = "BPFBENCH_AGENT_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		srv, err := NewServer(tickSections(), Limits{}, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		srv.SetAllow(Allow{Comms: []string{"sleep"}})
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(l.Addr())
		_ = http.Serve(l, srv.Handler())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// An agent killed mid-stream: the client's stream ends with an error
// saying when collection was last seen, and what was received stays.
func TestAgentKilledMidStream(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(strings.TrimSpace(addr), ClientOptions{})
	ctx := context.Background()
	s, err := c.Start(ctx, StartRequest{Target: Target{Pid: sleeper(t)}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	killedAt := int64(0)
	for batch := range s.Spans() {
		n += len(batch)
		if n > 50 && killedAt == 0 {
			killedAt = clock.Now()
			cmd.Process.Kill()
		}
	}
	var se *StreamError
	if !errors.As(s.Err(), &se) {
		t.Fatalf("stream error %v, want a *StreamError", s.Err())
	}
	t.Logf("after %d spans: %v", n, se)
	if se.LastContactNs == 0 || se.LastContactNs > clock.Now() || killedAt-se.LastContactNs > int64(2*time.Second) {
		t.Errorf("last contact %d, killed at %d", se.LastContactNs, killedAt)
	}
	if se.LastSpanNs == 0 || !strings.Contains(se.Error(), "last seen at") {
		t.Errorf("the error does not say when collection stopped: %v", se)
	}
	col, err := s.Stop(ctx)
	if err == nil || col.Complete || col.StoppedNs != se.LastContactNs {
		t.Errorf("stop after the agent died: %+v, %v", col, err)
	}
}

// A pod target is resolved by the server's PodResolver (the daemon's pod
// list); without one, and for a bad reference, the start is refused with
// what to do. The resolver's not-found is a 404.
func TestStartPodTarget(t *testing.T) {
	srv, hs := newTestServer(t, Limits{})
	c := NewClient(hs.Listener.Addr().String(), ClientOptions{})
	ctx := context.Background()
	ref := PodRef{Namespace: "inference", Name: "vllm-0"}
	if _, err := c.Start(ctx, StartRequest{Target: Target{Pod: &ref}}); err == nil || !strings.Contains(err.Error(), "501") || !strings.Contains(err.Error(), ErrNoKubernetes.Error()) {
		t.Errorf("pod target without a resolver: %v, want 501 and %q", err, ErrNoKubernetes)
	}
	var asked []PodRef
	pid := sleeper(t)
	srv.SetPodResolver(func(_ context.Context, r PodRef) (int, PodRef, error) {
		asked = append(asked, r)
		if r.Name != "vllm-0" {
			return 0, r, fmt.Errorf("pod %s: %w", r, ErrPodNotFound)
		}
		r.Container = "vllm"
		return pid, r, nil
	})
	s, err := c.Start(ctx, StartRequest{Target: Target{Pod: &ref}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Info.Pid != pid || s.Info.Pod == nil || *s.Info.Pod != (PodRef{"inference", "vllm-0", "vllm"}) {
		t.Errorf("session pid %d pod %v, want %d inference/vllm-0/vllm", s.Info.Pid, s.Info.Pod, pid)
	}
	if _, err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, StartRequest{Target: Target{Pod: &PodRef{Namespace: "inference", Name: "gone"}}}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("unknown pod: %v, want 404", err)
	}
	for _, bad := range []PodRef{{Namespace: "", Name: "x"}, {Namespace: "ns", Name: "Bad_Name"}, {Namespace: "ns", Name: "x", Container: "a/b"}} {
		if _, err := c.Start(ctx, StartRequest{Target: Target{Pod: &bad}}); err == nil || !strings.Contains(err.Error(), "400") {
			t.Errorf("pod %s: %v, want 400", bad, err)
		}
	}
	if len(asked) != 2 {
		t.Errorf("the resolver was asked %d times (%v), want 2: bad references are refused before it", len(asked), asked)
	}
}

func TestParsePodRef(t *testing.T) {
	for in, want := range map[string]PodRef{
		"inference/vllm-0":                 {"inference", "vllm-0", ""},
		"inference/vllm-0/vllm":            {"inference", "vllm-0", "vllm"},
		"kube-system/coredns-5d78c9869d.x": {"kube-system", "coredns-5d78c9869d.x", ""},
	} {
		got, err := ParsePodRef(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("ParsePodRef(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"vllm-0", "a/b/c/d", "/vllm-0", "ns/", "NS/pod", "ns/pod/Container", "ns/pod_1"} {
		if _, err := ParsePodRef(in); err == nil {
			t.Errorf("ParsePodRef(%q) accepted", in)
		}
	}
}

// The collection's span count is what the stream delivered: the stop's
// answer may come before the stream's last batches, whose end heartbeat
// counts them.
func TestStopCountsEverySpanDelivered(t *testing.T) {
	_, hs := newTestServer(t, Limits{})
	c := NewClient(hs.Listener.Addr().String(), ClientOptions{})
	ctx := context.Background()
	pid := sleeper(t)
	for round := 0; round < 5; round++ {
		s, err := c.Start(ctx, StartRequest{Target: Target{Pid: pid}})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan uint64)
		var received atomic.Uint64
		go func() {
			var n uint64
			for batch := range s.Spans() {
				n += uint64(len(batch))
				received.Store(n)
			}
			got <- n
		}()
		// Stopped while the spans stream.
		testutil.Eventually(t, 10*time.Second, func() bool { return received.Load() > 0 }, "round %d: spans streaming", round)
		col, err := s.Stop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := <-got; col.Spans != n || !col.Complete {
			t.Errorf("round %d: collection says %d spans sent, the client received %d (complete %v)", round, col.Spans, n, col.Complete)
		}
	}
}
