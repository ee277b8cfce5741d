package sim

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/testutil"
)

// metricValues reads /metrics: name{labels} → value.
func metricValues(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// Two processes serve the same tokens, finish reasons and counts as one:
// the same requests, in the same order, against the same seed (the EOS
// draws are the engine's), and the engine is a child process that does
// the steps' CPU work.
func TestTwoProcesses(t *testing.T) {
	requests := []struct{ path, body string }{
		{"/v1/completions", `{"prompt":"a b c d","max_tokens":7,"stream":true}`},
		{"/v1/completions", `{"prompt":"a b","max_tokens":40,"stream":true,"stream_options":{"include_usage":true}}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hello there"}],"max_tokens":12,"stream":true}`},
		{"/v1/completions", `{"prompt":"x y z","max_tokens":9}`},
		{"/v1/completions", `{"prompt":"x","max_tokens":30,"stream":true,"ignore_eos":true}`},
	}
	counted := []string{
		`vllm:generation_tokens_total{model_name="llmsim"}`,
		`vllm:prompt_tokens_total{model_name="llmsim"}`,
		`vllm:request_success_total{finished_reason="length",model_name="llmsim"}`,
		`vllm:request_success_total{finished_reason="stop",model_name="llmsim"}`,
		`vllm:time_to_first_token_seconds_count{model_name="llmsim"}`,
		`vllm:inter_token_latency_seconds_count{model_name="llmsim"}`,
		`vllm:request_queue_time_seconds_count{model_name="llmsim"}`,
		`vllm:num_requests_running{model_name="llmsim"}`,
	}
	type served struct {
		texts  []string
		counts map[string]float64
		steps  int64
		itlSum float64
	}
	serve := func(procs int) served {
		s, url := start(t, func(c *Config) {
			c.Processes = procs
			c.EOSProb = 0.1
			c.Seed = 7
			c.DecodeStep = 2 * time.Millisecond
		})
		if pid := s.EnginePid(); (pid != 0) != (procs == 2) || pid == os.Getpid() {
			t.Fatalf("processes %d: engine pid %d (this process %d)", procs, pid, os.Getpid())
		}
		var got served
		for _, r := range requests {
			code, _, data := post(t, url+r.path, r.body, nil)
			if code != http.StatusOK {
				t.Fatalf("processes %d: %s: status %d", procs, r.body, code)
			}
			// The chunks without their id and creation time.
			var b strings.Builder
			for _, d := range data {
				if i := strings.Index(d, `"model"`); i >= 0 {
					d = d[i:]
				}
				b.WriteString(d + "\n")
			}
			got.texts = append(got.texts, b.String())
		}
		// The last step frame's gauges: nothing running.
		var m map[string]float64
		testutil.Eventually(t, 5*time.Second, func() bool {
			m = metricValues(t, url)
			return m[`vllm:num_requests_running{model_name="llmsim"}`] == 0
		}, "processes %d: no request running", procs)
		got.counts = map[string]float64{}
		for _, k := range counted {
			got.counts[k] = m[k]
		}
		got.itlSum = m[`vllm:inter_token_latency_seconds_sum{model_name="llmsim"}`]
		got.steps = s.Stats().Steps
		return got
	}
	one, two := serve(1), serve(2)
	for i := range requests {
		if one.texts[i] != two.texts[i] {
			t.Errorf("request %d: one process served\n%s\ntwo served\n%s", i, one.texts[i], two.texts[i])
		}
	}
	if fmt.Sprint(one.counts) != fmt.Sprint(two.counts) {
		t.Errorf("counts: one process %v, two %v", one.counts, two.counts)
	}
	if one.steps != two.steps || one.steps == 0 {
		t.Errorf("steps: one process %d, two %d", one.steps, two.steps)
	}
	// The inter-token latencies are the engine's steps in both (2 ms
	// each, rough: a shared host).
	if n := two.counts[counted[5]]; n == 0 || two.itlSum/n < 0.0015 || two.itlSum/n > 0.02 {
		t.Errorf("two processes: mean ITL %.4fs over %g gaps, want about 2ms", two.itlSum/n, n)
	}
	t.Logf("one process %v steps %d; two %v steps %d", one.counts, one.steps, two.counts, two.steps)
}

// procCPU is a process's CPU time, every thread: utime+stime of
// /proc/<pid>/stat, in clock ticks.
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return time.Duration(ut+st) * procTick
}

// procTick is the clock tick of /proc/<pid>/stat (USER_HZ 100).
const procTick = 10 * time.Millisecond

// The engine process burns the steps' CPU (--work cpu), and ends with the
// frontend's Close.
func TestTwoProcessesEngineWorks(t *testing.T) {
	s, url := start(t, func(c *Config) {
		c.Processes = 2
		c.Work = WorkCPU
		c.DecodeStep = 5 * time.Millisecond
		c.PrefillBase = 0
		c.PrefillPerToken = 0
	})
	pid := s.EnginePid()
	steps0 := s.Stats().Steps
	cpu0 := procCPU(t, pid)
	post(t, url+"/v1/completions", `{"prompt":"a","max_tokens":20,"stream":true,"ignore_eos":true}`, nil)
	cpu := procCPU(t, pid) - cpu0
	steps := s.Stats().Steps - steps0
	// What the engine burnt: every step it ran but the prefill (0 here)
	// spun 5 ms of its thread's CPU clock. /proc counts in ticks, each
	// reading truncated, so the difference may be two ticks short.
	burnt := time.Duration(steps-1) * 5 * time.Millisecond
	if steps < 20 || cpu+2*procTick < burnt*2/3 {
		t.Errorf("engine process: %v of CPU for %d steps (%v burnt in decode steps of 5 ms), want at least 2/3 of it and 20 steps", cpu, steps, burnt)
	}
	t.Logf("engine process: %v of CPU for %v burnt in %d steps", cpu, burnt, steps)
	if err := s.Close(); err != nil {
		t.Errorf("closing: %v", err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		t.Errorf("engine process %d still there after Close", pid)
	}
}
