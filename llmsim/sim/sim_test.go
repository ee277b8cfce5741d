package sim

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
)

func start(t *testing.T, mod func(*Config)) (*Server, string) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Work = WorkSleep
	cfg.DecodeStep = time.Millisecond
	cfg.PrefillBase = time.Millisecond
	cfg.EOSProb = 0
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.CloseClientConnections(); ts.Close(); s.Close() })
	return s, ts.URL
}

// post sends body and returns the status, the X-Request-Id and the data lines.
func post(t *testing.T, url, body string, hdr map[string]string) (int, string, []string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var data []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			data = append(data, d)
		} else if sc.Text() != "" {
			data = append(data, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading %s: %v", url, err)
	}
	return resp.StatusCode, resp.Header.Get("X-Request-Id"), data
}

func TestAPI(t *testing.T) {
	_, url := start(t, nil)
	code, id, data := post(t, url+"/v1/completions", `{"prompt":"a b c","max_tokens":5,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}`, map[string]string{"X-Request-Id": "req-1"})
	if code != 200 || id != "req-1" || len(data) != 7 || data[6] != "[DONE]" || !strings.Contains(data[5], `"completion_tokens":5`) || !strings.Contains(data[5], `"prompt_tokens":3`) || !strings.Contains(data[4], `"finish_reason":"length"`) {
		t.Errorf("completions: %d %q %q", code, id, data)
	}
	// No include_usage: no usage chunk.
	_, _, data = post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi there"}],"max_tokens":2,"stream":true}`, nil)
	if len(data) != 3 || strings.Contains(strings.Join(data, ""), "usage") || !strings.Contains(data[0], `"role":"assistant"`) {
		t.Errorf("chat: %q", data)
	}
	code, _, data = post(t, url+"/v1/completions", `{"prompt":"a","n":2,"stream":true}`, nil)
	if code != 400 || !strings.Contains(strings.Join(data, ""), "n=2 is not supported") {
		t.Errorf("n=2: %d %q", code, data)
	}
	code, _, data = post(t, url+"/v1/completions", `{"prompt":"a b","max_tokens":4}`, nil)
	if code != 200 || !strings.Contains(strings.Join(data, ""), `"completion_tokens":4`) {
		t.Errorf("non-streaming: %d %q", code, data)
	}
	for _, path := range []string{"/v1/models", "/health"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if resp.StatusCode != 200 {
			t.Errorf("%s: %s", path, resp.Status)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc", "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket", "vllm:e2e_request_latency_seconds_count", "vllm:request_success_total"} {
		if !strings.Contains(string(b), name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

func TestEOSAndIgnoreEOS(t *testing.T) {
	_, url := start(t, func(c *Config) { c.EOSProb = 1 })
	_, _, data := post(t, url+"/v1/completions", `{"prompt":"a","max_tokens":6,"stream":true}`, nil)
	if len(data) != 2 || !strings.Contains(data[0], `"finish_reason":"stop"`) {
		t.Errorf("EOS: %q", data)
	}
	_, _, data = post(t, url+"/v1/completions", `{"prompt":"a","max_tokens":6,"stream":true,"ignore_eos":true}`, nil)
	if len(data) != 7 {
		t.Errorf("ignore_eos: %d chunks", len(data)-1)
	}
}

func TestCPUWorkBurnsCPU(t *testing.T) {
	s, url := start(t, func(c *Config) {
		c.Work = WorkCPU
		c.DecodeStep = 5 * time.Millisecond
		c.PrefillBase = 0
		c.PrefillPerToken = 0
		c.Processes = 1 // this process's CPU time (TestTwoProcesses: the engine's)
	})
	var ru0, ru1 unix.Rusage
	steps0 := s.Stats().Steps
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru0); err != nil {
		t.Fatal(err)
	}
	post(t, url+"/v1/completions", `{"prompt":"a","max_tokens":20,"stream":true,"ignore_eos":true}`, nil)
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru1); err != nil {
		t.Fatal(err)
	}
	steps := s.Stats().Steps - steps0
	cpu := time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano() + ru1.Stime.Nano() - ru0.Stime.Nano())
	// What the engine burnt: every step it ran but the prefill (0 here)
	// spun 5 ms of its thread's CPU clock. The kernel's account of the
	// process (every thread, ns) holds at least most of it.
	burnt := time.Duration(steps-1) * 5 * time.Millisecond
	if steps < 20 || cpu < burnt*3/4 {
		t.Errorf("%v of CPU for %d steps (%v burnt in decode steps of 5 ms), want at least 3/4 of it and 20 steps", cpu, steps, burnt)
	}
	t.Logf("%v of CPU for %v burnt in %d steps", cpu, burnt, steps)
}

func TestIOFile(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "llmsim-io-*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 256<<10)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = openDirect(f.Name(), 64<<10)
	if errors.Is(err, unix.EINVAL) {
		privtest.SkipOptional(t, "O_DIRECT unsupported in %s: %v", filepath.Dir(f.Name()), err)
	}
	if err != nil {
		t.Fatal(err)
	}
	s, url := start(t, func(c *Config) { c.IOFile = f.Name(); c.IOBytes = 64 << 10 })
	post(t, url+"/v1/completions", `{"prompt":"a","max_tokens":10,"stream":true,"ignore_eos":true}`, nil)
	if st := s.Stats(); st.IOErrors != 0 || st.Steps < 10 {
		t.Errorf("stats %+v", st)
	}
}

// TestCUDAStub drives the CUDA driver path against tools/cudastub, whose
// kernels last CUDASTUB_KERNEL_US and whose synchronize waits for them.
func TestCUDAStub(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		privtest.SkipOptional(t, "purego's calls on %s", runtime.GOARCH)
	}
	privtest.RequireTool(t, "cc", "apt-get install gcc")
	privtest.RequireTool(t, "make", "apt-get install make")
	out := t.TempDir()
	cmd := exec.Command("make", "-s", "-C", "../../tools/cudastub", "OUT="+out, filepath.Join(out, "libcuda.so.1"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building tools/cudastub: %v\n%s", err, b)
	}
	t.Setenv("CUDASTUB_KERNEL_US", "3000")
	s, url := start(t, func(c *Config) { c.CUDALib = filepath.Join(out, "libcuda.so.1"); c.DecodeStep = time.Millisecond })
	t0 := time.Now()
	post(t, url+"/v1/completions", `{"prompt":"a","max_tokens":10,"stream":true,"ignore_eos":true}`, nil)
	el := time.Since(t0)
	if st := s.Stats(); st.CUDAErrors != 0 || st.Steps < 10 {
		t.Errorf("stats %+v", st)
	}
	// Ten steps, each waiting for a 3 ms kernel.
	if el < 30*time.Millisecond {
		t.Errorf("10 steps with 3 ms kernels took %v: the synchronize did not wait", el)
	}
}

// The step control file changes the decode step while the server runs:
// the CPU time a request's steps burn follows it.
func TestStepControl(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "step-us")
	if err := os.WriteFile(ctl, []byte("2000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, url := start(t, func(c *Config) {
		c.Work = WorkCPU
		c.DecodeStep = 50 * time.Millisecond // never used: the file says 2 ms
		c.PrefillBase = 0
		c.PrefillPerToken = 0
		c.Processes = 1
		c.StepControl = ctl
	})
	cpuOf := func() time.Duration {
		var ru0, ru1 unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
		post(t, url+"/v1/completions", `{"prompt":"a","max_tokens":20,"stream":true,"ignore_eos":true}`, nil)
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
		return time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano() + ru1.Stime.Nano() - ru0.Stime.Nano())
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return s.engineStep() == 2*time.Millisecond }, "decode step of 2 ms, as the file says")
	short := cpuOf()
	if err := os.WriteFile(ctl, []byte("8000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return s.engineStep() == 8*time.Millisecond }, "decode step of 8 ms, as the file says")
	long := cpuOf()
	t.Logf("20 tokens: %v of CPU at 2 ms a step, %v at 8 ms", short, long)
	// 19 decode steps of 2 ms, then of 8 ms, of spinning.
	if short < 19*2*time.Millisecond || long < 19*8*time.Millisecond || long < 2*short {
		t.Errorf("the step's CPU time did not follow the control file: %v at 2 ms, %v at 8 ms", short, long)
	}
}

// engineStep is the one-process engine's decode step.
func (s *Server) engineStep() time.Duration {
	if e, ok := s.eng.(*engine); ok {
		return time.Duration(e.step.Load())
	}
	return -1
}
