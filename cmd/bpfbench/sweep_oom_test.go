package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
)

// A sweep with --pid against llmsim whose every sequence allocates its KV
// cache on the CUDA stub (--kv-bytes-per-seq), with device memory for four:
// past four concurrent sequences the stub answers cuMemAlloc_v2 with
// CUDA_ERROR_OUT_OF_MEMORY, the cuda section's uprobes count it, and the
// cuda_alloc_failures signal stops the step; the answer names it. The SLO
// is loose and the error-rate signal is off: llmsim fails each refused
// request (HTTP 500 or an error in its stream), and the error rate would
// otherwise race the kernel's count to stop the same step, each 250 ms
// poll deciding which came first. The ground truth is the stub's refusal,
// counted by llmsim (llmsim_kv_alloc_failures_total).
func TestSweepStopsOnCUDAAllocFailures(t *testing.T) {
	privtest.Require(t)
	simBinaries(t)
	dir := t.TempDir()
	const kvBytes = 16 << 20
	// llmsim's startup buffer (llmsim/sim/cuda.go cudaBufBytes)
	// and four KV caches.
	const memBytes = 64<<10 + 4*kvBytes
	addr := testutil.FreeAddr(t)
	logf, err := os.Create(filepath.Join(dir, "llmsim.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("llmsim", "--addr", addr, "--work", "sleep", "--itl", "10ms",
		"--cuda-lib", filepath.Join(simBinsDir, "libcuda.so.1"), "--kv-bytes-per-seq", strconv.Itoa(kvBytes))
	cmd.Env = append(os.Environ(), "CUDASTUB_MEM_BYTES="+strconv.Itoa(memBytes), "CUDASTUB_KERNEL_US=200")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	url := "http://" + addr
	testutil.WaitHTTP(t, url+"/health", 10*time.Second, logf.Name())

	result := filepath.Join(dir, "sweep.json")
	code, stdout, stderr := runCLI("sweep", "--target", url, "--pid", strconv.Itoa(cmd.Process.Pid),
		"--input-len", "16", "--output-len", "8", "--slo", "p99_ttft_ms<=60000", "--requests-per-step", "24",
		"--precision", "0.5", "--max-error-rate", "0", "--no-progress", "--result", result, "--out", filepath.Join(dir, "knee"))
	t.Logf("\n%s", stdout)
	if code != 0 {
		b, _ := os.ReadFile(logf.Name())
		t.Fatalf("sweep exit %d: %s\nllmsim:\n%s", code, stderr, b)
	}
	b, err := os.ReadFile(result)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		LimitedBy  []string `json:"limited_by"`
		Conclusion string   `json:"conclusion"`
		Steps      []struct {
			Rate      float64 `json:"rate"`
			StoppedBy []struct {
				Signal string `json:"signal"`
				Detail string `json:"detail"`
			} `json:"stopped_by"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	stopped := false
	for _, s := range res.Steps {
		for _, sb := range s.StoppedBy {
			t.Logf("step at %.2f req/s stopped by %s: %s", s.Rate, sb.Signal, sb.Detail)
			if sb.Signal == "cuda_alloc_failures" {
				stopped = true
			}
		}
	}
	if !stopped {
		t.Errorf("no step was stopped by cuda_alloc_failures")
	}
	if !slices.Contains(res.LimitedBy, "cuda_alloc_failures") {
		t.Errorf("limited_by %v, want cuda_alloc_failures", res.LimitedBy)
	}
	if !strings.Contains(res.Conclusion, "for lack of device memory") {
		t.Errorf("conclusion %q does not name the failed CUDA allocations", res.Conclusion)
	}
	t.Logf("conclusion: %s", res.Conclusion)
	// The ground truth: the stub refused allocations, and llmsim failed
	// those requests.
	if n := kvAllocFailures(t, url); n == 0 {
		t.Errorf("llmsim_kv_alloc_failures_total is 0: the stub refused no KV cache")
	} else {
		t.Logf("llmsim_kv_alloc_failures_total %v", n)
	}
}

// kvAllocFailures is llmsim's llmsim_kv_alloc_failures_total.
func kvAllocFailures(t *testing.T, url string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "llmsim_kv_alloc_failures_total") {
			v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", l, err)
			}
			return v
		}
	}
	t.Fatalf("no llmsim_kv_alloc_failures_total in llmsim's /metrics")
	return 0
}
