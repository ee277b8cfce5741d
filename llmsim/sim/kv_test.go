package sim

import (
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

// stubLib builds tools/cudastub's libcuda.so.1 into a directory of its
// own: a library file loaded once per process reads its CUDASTUB_*
// environment once, so each test that sets it needs its own copy.
func stubLib(t *testing.T) string {
	t.Helper()
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
	return filepath.Join(out, "libcuda.so.1")
}

// metricValue returns the value of the sample name (with its labels) in
// the server's /metrics.
func metricValue(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", l, err)
			}
			return v
		}
	}
	t.Fatalf("no %s in /metrics:\n%s", name, b)
	return 0
}

// TestKVAllocOOM: with device memory for the startup buffer and two KV
// caches, of four concurrent requests exactly two fail (the stub refuses
// the third and fourth cuMemAlloc_v2), as HTTP 500 or as an error in the
// stream; the caches are freed when their sequences end, so the requests
// after them succeed. In one process and in two (the engine process
// allocates).
func TestKVAllocOOM(t *testing.T) {
	for _, procs := range []int{1, 2} {
		t.Run("processes="+strconv.Itoa(procs), func(t *testing.T) {
			lib := stubLib(t)
			const kv = 1 << 20
			t.Setenv("CUDASTUB_MEM_BYTES", strconv.Itoa(cudaBufBytes+2*kv))
			t.Setenv("CUDASTUB_KERNEL_US", "100")
			_, url := start(t, func(c *Config) {
				c.CUDALib = lib
				c.KVBytesPerSeq = kv
				c.Processes = procs
			})
			// Each request decodes 150 tokens (over 150 ms): the four overlap.
			concurrent := func(n int, stream bool) (codes []int, bodies []string) {
				codes, bodies = make([]int, n), make([]string, n)
				body := `{"prompt":"a b c","max_tokens":150,"ignore_eos":true,"stream":` + strconv.FormatBool(stream) + `}`
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() {
						resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
						if err != nil {
							t.Error(err)
							return
						}
						b, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						codes[i], bodies[i] = resp.StatusCode, string(b)
					})
				}
				wg.Wait()
				return codes, bodies
			}

			codes, bodies := concurrent(4, false)
			ok, oom := 0, 0
			for i, c := range codes {
				switch {
				case c == http.StatusOK:
					ok++
				case c == http.StatusInternalServerError && strings.Contains(bodies[i], "out of memory"):
					oom++
				default:
					t.Errorf("request %d: HTTP %d %s", i, c, bodies[i])
				}
			}
			if ok != 2 || oom != 2 {
				t.Errorf("4 concurrent requests with memory for 2: %d succeeded, %d out of memory; want 2 and 2", ok, oom)
			}
			if v := metricValue(t, url, "llmsim_kv_alloc_failures_total"); v != 2 {
				t.Errorf("llmsim_kv_alloc_failures_total %v, want 2", v)
			}

			// Freed: three streams, two fit, one gets the error in its stream.
			_, bodies = concurrent(3, true)
			ok, oom = 0, 0
			for i, b := range bodies {
				switch {
				case strings.Contains(b, `"finish_reason":"length"`) && strings.HasSuffix(b, "data: [DONE]\n\n"):
					ok++
				case strings.Contains(b, `"object":"error"`) && strings.Contains(b, "out of memory"):
					oom++
				default:
					t.Errorf("stream %d: %q", i, b)
				}
			}
			if ok != 2 || oom != 1 {
				t.Errorf("3 concurrent streams after the first 4 ended: %d succeeded, %d out of memory; want 2 and 1", ok, oom)
			}

			// And freed again: one at a time, every request fits.
			for i := range 3 {
				resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"a","max_tokens":5}`))
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("sequential request %d: HTTP %d %s", i, resp.StatusCode, b)
				}
			}
			if v := metricValue(t, url, "llmsim_kv_alloc_failures_total"); v != 3 {
				t.Errorf("llmsim_kv_alloc_failures_total %v, want 3", v)
			}
		})
	}
}
