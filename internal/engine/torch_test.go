package engine

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

// The PyTorch engine streams max_tokens tokens to a request, in one
// process or two; stopping it leaves no engine core behind.
func TestTorchEngineStreams(t *testing.T) {
	paths, err := FindTorch()
	if err != nil {
		privtest.SkipOptional(t, "%v", err)
	}
	for _, one := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		srv, err := StartTorch(ctx, TorchOptions{Paths: paths, Threads: 2, Slots: 2, OneProcess: one})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		body := `{"model":"torch-tiny","prompt":"hello there","max_tokens":5,"stream":true}`
		resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var chunks int
		done := false
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			switch l := sc.Text(); {
			case l == "data: [DONE]":
				done = true
			case strings.HasPrefix(l, "data: "):
				chunks++
			}
		}
		resp.Body.Close()
		kids := children(srv.Pid)
		srv.Stop()
		cancel()
		if chunks != 5 || !done {
			t.Errorf("one process %v: %d chunks (want 5), [DONE] %v", one, chunks, done)
		}
		if !one && len(kids) != 1 {
			t.Errorf("two processes: the API server [%d] has children %v, want the engine core", srv.Pid, kids)
		}
		for _, k := range kids {
			deadline := time.Now().Add(5 * time.Second)
			for alive(k) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if alive(k) {
				t.Errorf("engine core [%d] still runs after the API server stopped", k)
			}
		}
	}
}

// children lists pid's child processes (/proc/PID/task/*/children).
func children(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
