package agent

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/session"
)

// startStatus posts a start and returns the answer's status and error
// message; a started session is stopped.
func startStatus(t *testing.T, addr string, req StartRequest) (int, string) {
	t.Helper()
	c := NewClient(addr, ClientOptions{})
	var info StartResponse
	err := c.do(context.Background(), http.MethodPost, PathSessions, req, &info, http.StatusCreated)
	if err == nil {
		if err := c.do(context.Background(), http.MethodDelete, PathSessions+"/"+info.ID, nil, &StopResponse{}, http.StatusOK); err != nil {
			t.Fatalf("stopping %s: %v", info.ID, err)
		}
		return http.StatusCreated, ""
	}
	for _, code := range []int{400, 403, 404, 429, 500, 501} {
		if strings.Contains(err.Error(), fmt.Sprintf("%d %s", code, http.StatusText(code))) {
			return code, err.Error()
		}
	}
	t.Fatalf("start %+v: %v", req.Target, err)
	return 0, ""
}

// kernelThread finds a kernel thread in /proc (0: none visible, as in a
// container's pid namespace).
func kernelThread(t *testing.T) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if info, err := readProcInfo("/proc", pid); err == nil && info.kthread {
			return pid
		}
	}
	return 0
}

// Sessions follow only what agent.allow lists, never the agent itself nor
// a kernel thread; a process outside the list and one that does not exist
// get the same 403.
func TestStartRefusesOutsideAllowList(t *testing.T) {
	srv, hs := newTestServer(t, Limits{})
	addr := hs.Listener.Addr().String()
	allowed := sleeper(t)
	other := exec.Command("tail", "-f", "/dev/null")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}

	if code, _ := startStatus(t, addr, StartRequest{Target: Target{Pid: allowed}}); code != http.StatusCreated {
		t.Fatalf("a process of an allowed comm: %d", code)
	}
	code, msgOther := startStatus(t, addr, StartRequest{Target: Target{Pid: other.Process.Pid}})
	if code != http.StatusForbidden || !strings.Contains(msgOther, "agent.allow") {
		t.Errorf("a process outside agent.allow: %d %s, want 403 naming agent.allow", code, msgOther)
	}
	_, msgGone := startStatus(t, addr, StartRequest{Target: Target{Pid: gone.Process.Pid}})
	if strings.ReplaceAll(msgGone, strconv.Itoa(gone.Process.Pid), "PID") != strings.ReplaceAll(msgOther, strconv.Itoa(other.Process.Pid), "PID") {
		t.Errorf("a process that does not exist is answered apart from one not allowed:\n%s\n%s", msgGone, msgOther)
	}
	if code, msg := startStatus(t, addr, StartRequest{Target: Target{Pid: os.Getpid()}}); code != http.StatusForbidden || !strings.Contains(msg, "the agent itself") {
		t.Errorf("the agent's own pid: %d %s, want 403", code, msg)
	}
	if code, _ := startStatus(t, addr, StartRequest{Target: Target{Pid: 1}}); code != http.StatusForbidden {
		t.Errorf("pid 1: %d, want 403", code)
	}
	if code, msg := startStatus(t, addr, StartRequest{Target: Target{Cgroup: "/"}}); code != http.StatusForbidden {
		t.Errorf("cgroup /: %d %s, want 403", code, msg)
	}
	if k := kernelThread(t); k != 0 {
		if code, msg := startStatus(t, addr, StartRequest{Target: Target{Pid: k}}); code != http.StatusForbidden || !strings.Contains(msg, "kernel thread") {
			t.Errorf("kernel thread %d: %d %s, want 403", k, code, msg)
		}
		// Not even when everything is allowed.
		srv.SetAllow(Allow{Cgroups: []string{"/"}})
		if code, msg := startStatus(t, addr, StartRequest{Target: Target{Pid: k}}); code != http.StatusForbidden {
			t.Errorf("kernel thread %d with cgroup / allowed: %d %s, want 403", k, code, msg)
		}
	} else {
		t.Log("no kernel thread visible in this pid namespace: that case is not checked")
	}

	// A cgroup prefix: the sleeper's cgroup allows it; the agent, in the
	// same cgroup, is still refused.
	info, err := readProcInfo("/proc", allowed)
	if err != nil || len(info.cgroups) == 0 {
		t.Fatalf("cgroups of %d: %v %v", allowed, info.cgroups, err)
	}
	srv.SetAllow(Allow{Cgroups: []string{info.cgroups[0]}})
	if code, msg := startStatus(t, addr, StartRequest{Target: Target{Pid: allowed}}); code != http.StatusCreated {
		t.Errorf("a process of an allowed cgroup %s: %d %s", info.cgroups[0], code, msg)
	}
	if code, _ := startStatus(t, addr, StartRequest{Target: Target{Pid: os.Getpid()}}); code != http.StatusForbidden {
		t.Errorf("the agent in an allowed cgroup: %d, want 403", code)
	}

	// A daemon target by name.
	srv.SetAllow(Allow{Targets: []string{"vllm"}, InTargets: func(pid int, names []string) bool {
		return pid == other.Process.Pid && len(names) == 1 && names[0] == "vllm"
	}})
	if code, msg := startStatus(t, addr, StartRequest{Target: Target{Pid: other.Process.Pid}}); code != http.StatusCreated {
		t.Errorf("a process of an allowed target: %d %s", code, msg)
	}
	if code, _ := startStatus(t, addr, StartRequest{Target: Target{Pid: allowed}}); code != http.StatusForbidden {
		t.Errorf("a process of no allowed target: %d, want 403", code)
	}

	// A pod's process goes through the same check.
	srv.SetPodResolver(func(_ context.Context, r PodRef) (int, PodRef, error) { return allowed, r, nil })
	if code, _ := startStatus(t, addr, StartRequest{Target: Target{Pod: &PodRef{Namespace: "ns", Name: "p"}}}); code != http.StatusForbidden {
		t.Errorf("a pod whose process is outside agent.allow: %d, want 403", code)
	}

	// Empty: nothing, and the answer says so.
	srv.SetAllow(Allow{})
	if code, msg := startStatus(t, addr, StartRequest{Target: Target{Pid: allowed}}); code != http.StatusForbidden || !strings.Contains(msg, "is empty") {
		t.Errorf("empty agent.allow: %d %s, want 403 saying it is empty", code, msg)
	}
}

// libsSections records the libraries each session was given.
func libsSections(got *[][]string, mu *sync.Mutex) []session.SectionFactory {
	return []session.SectionFactory{{Name: "tick", Required: true, New: func(o collectors.Options) (collectors.Section, error) {
		mu.Lock()
		*got = append(*got, o.CUDALibs)
		mu.Unlock()
		return &tickSection{rec: o.Recorder}, nil
	}}}
}

// A cuda_libs path is opened only when the target maps it; every other
// path gets one answer, whether the file exists or not, quoting nothing of
// it.
func TestCUDALibsMustBeMapped(t *testing.T) {
	var mu sync.Mutex
	var got [][]string
	srv, err := NewServer(libsSections(&got, &mu), Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetAllow(Allow{Comms: []string{"sleep"}})
	hs := newHTTPServer(t, srv)
	addr := hs.Listener.Addr().String()
	pid := sleeper(t)

	secret := filepath.Join(t.TempDir(), "libcuda.so.1")
	if err := os.WriteFile(secret, []byte("root:SECRET-CONTENT\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, p := range []string{secret, "/etc/shadow", filepath.Join(t.TempDir(), "missing", "libcuda.so.1"), "relative/libcuda.so"} {
		code, msg := startStatus(t, addr, StartRequest{Target: Target{Pid: pid}, CUDALibs: []string{p}})
		if code != http.StatusForbidden {
			t.Errorf("cuda_libs %s: %d %s, want 403", p, code, msg)
		}
		if strings.Contains(msg, "SECRET") || strings.Contains(msg, "root:") || strings.Contains(msg, "magic") {
			t.Errorf("cuda_libs %s: the answer quotes the file: %s", p, msg)
		}
		msgs = append(msgs, strings.Replace(msg, strconv.Quote(p), "PATH", 1))
	}
	for _, m := range msgs[1:] {
		if m != msgs[0] {
			t.Errorf("refusals differ:\n%s\n%s", msgs[0], m)
		}
	}

	// A library the sleeper maps is given to the sections as mapped.
	mapped := ""
	for p := range mappedFiles("/proc", []int{pid}) {
		if strings.Contains(filepath.Base(p), ".so") {
			mapped = p
			break
		}
	}
	if mapped == "" {
		t.Fatalf("pid %d maps no shared library", pid)
	}
	mu.Lock()
	got = nil
	mu.Unlock()
	if code, msg := startStatus(t, addr, StartRequest{Target: Target{Pid: pid}, CUDALibs: []string{mapped}}); code != http.StatusCreated {
		t.Fatalf("cuda_libs %s, mapped by the target: %d %s", mapped, code, msg)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || len(got[0]) != 1 || got[0][0] != mapped {
		t.Errorf("the sections were given %v, want [[%s]]", got, mapped)
	}
}

// What an ELF parser quotes of a file that is not one never reaches the
// client.
func TestErrorsQuoteNoFile(t *testing.T) {
	_, elfErr := elf.NewFile(bytes.NewReader([]byte("root:x:0:0:SECRET:/root:/bin/bash\n")))
	if elfErr == nil || !strings.Contains(elfErr.Error(), "[114 111 111 116]") {
		t.Fatalf("debug/elf's error %v no longer quotes the bytes: update the test", elfErr)
	}
	if s := sanitize("reading ELF /etc/shadow: " + elfErr.Error()); strings.Contains(s, "114") || !strings.Contains(s, "/etc/shadow") {
		t.Errorf("sanitized: %s", s)
	}
	srv, err := NewServer([]session.SectionFactory{{Name: "bad", Required: true, New: func(collectors.Options) (collectors.Section, error) {
		return nil, fmt.Errorf("cuda: reading ELF /x: %w", elfErr)
	}}}, Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetAllow(Allow{Comms: []string{"sleep"}})
	hs := newHTTPServer(t, srv)
	code, msg := startStatus(t, hs.Listener.Addr().String(), StartRequest{Target: Target{Pid: sleeper(t)}})
	if code == http.StatusCreated || strings.Contains(msg, "114 111") {
		t.Errorf("a section's ELF error: %d %s", code, msg)
	}
	t.Log(msg)
}

// A stopped session frees its slot at once, streamed or not.
func TestStoppedSessionFreesItsSlot(t *testing.T) {
	for _, max := range []int{1, 2} {
		_, hs := newTestServer(t, Limits{MaxSessions: max})
		c := NewClient(hs.Listener.Addr().String(), ClientOptions{})
		ctx := context.Background()
		pid := sleeper(t)
		start := func() string {
			t.Helper()
			var info StartResponse
			if err := c.do(ctx, http.MethodPost, PathSessions, StartRequest{Target: Target{Pid: pid}}, &info, http.StatusCreated); err != nil {
				t.Fatalf("max_sessions %d: %v", max, err)
			}
			return info.ID
		}
		stop := func(id string) {
			t.Helper()
			if err := c.do(ctx, http.MethodDelete, PathSessions+"/"+id, nil, &StopResponse{}, http.StatusOK); err != nil {
				t.Fatal(err)
			}
		}
		var ids []string
		for range max {
			ids = append(ids, start())
		}
		// Stop one, start another, many times over: never a 429.
		for round := range 3 * max {
			stop(ids[0])
			ids = append(ids[1:], start())
			_ = round
		}
		for _, id := range ids {
			stop(id)
		}
	}
}

// A client that trickles a start's body has its connection closed once
// agent.read_timeout has passed.
func TestSlowBodyClosed(t *testing.T) {
	_, hs := newTestServer(t, Limits{ReadTimeout: 200 * time.Millisecond})
	conn, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{", PathSessions)
	stopTrickle := make(chan struct{})
	defer close(stopTrickle)
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopTrickle:
				return
			case <-t.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	const within = 10 * time.Second
	_ = conn.SetReadDeadline(time.Now().Add(within))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a trickled body within %v: %v", within, err)
	}
	rest, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("status %s (%s), want 408", resp.Status, rest)
	}
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	// The server closed the connection: a read sees its end.
	var one [1]byte
	_, err = conn.Read(one[:])
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("the connection is still open %v after the answer: read %v", within, err)
	}
	t.Logf("after the 408: %v", err)
}

func newHTTPServer(t *testing.T, srv *Server) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.Close(); hs.Close() })
	return hs
}
