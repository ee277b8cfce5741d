package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testproc"
	"github.com/bpfbench/bpfbench/internal/testutil"
)

// nvmlOnly lists the expressions that read only the gpu collector's
// metrics (NVML). On a host without NVML (no GPU, as the test hosts) that
// collector is off (bpfbench_collector_up{collector="gpu"} 0), so these must
// parse but may return nothing. TestGPUExpressionsAreTheGPUPanels keeps the
// list equal to the expressions that mention bpfbench_gpu_.
var nvmlOnly = []string{
	`panel "GPU utilization" A`, `panel "GPU utilization" B`, `panel "GPU utilization" C`,
	`panel "GPU memory" A`, `panel "GPU memory" B`, `panel "GPU memory" C`,
	`panel "GPU power" A`,
	`panel "GPU throttle reasons" A`,
	`panel "GPU clocks and temperature" A`, `panel "GPU clocks and temperature" B`, `panel "GPU clocks and temperature" C`,
	`alert BpfbenchGPUThrottling`,
}

// The live test's two targets: a process of this test binary that burns
// CPU in bursts, reads and writes with O_DIRECT and streams into a
// slow-reading TCP connection; and cudastub-driver looping on the CUDA stub
// with launches, synchronizes, copies and a failing allocation every round.
const (
	workTarget = "work"
	cudaTarget = "cuda"
)

// workChild is the "work" target: args[0] is a directory for its file.
func workChild(args []string, ready func(...int), wait func()) {
	ready(os.Getpid())
	wait()
	deadline := time.Now().Add(2 * time.Minute)
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "work:", err)
		os.Exit(1)
	}
	// CPU: two threads that run 2 ms and sleep 3 ms, waking into run queues
	// shared with each other and with the rest of the host.
	for range 2 {
		go func() {
			runtime.LockOSThread()
			for time.Now().Before(deadline) {
				for end := time.Now().Add(2 * time.Millisecond); time.Now().Before(end); {
				}
				time.Sleep(3 * time.Millisecond)
			}
		}()
	}
	// TCP: a sender into a receiver that reads 1 KiB every 50 ms.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_ = c.(*net.TCPConn).SetReadBuffer(16 << 10)
		buf := make([]byte, 1<<10)
		for time.Now().Before(deadline) {
			if _, err := c.Read(buf); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			fail(err)
		}
		chunk := make([]byte, 64<<10)
		for time.Now().Before(deadline) {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	// Block IO: 64 KiB O_DIRECT writes and reads of a 1 MiB file, one every 10 ms.
	const block, blocks = 64 << 10, 16
	f, err := os.OpenFile(filepath.Join(args[0], "io.dat"), os.O_RDWR|os.O_CREATE|unix.O_DIRECT, 0o600)
	if err != nil {
		fail(err)
	}
	buf, err := unix.Mmap(-1, 0, block, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		fail(err)
	}
	for i := range blocks {
		if _, err := f.WriteAt(buf, int64(i*block)); err != nil {
			fail(err)
		}
	}
	for i := 0; time.Now().Before(deadline); i++ {
		off := int64(rand.IntN(blocks) * block)
		if i%4 == 0 {
			_, err = f.WriteAt(buf, off)
		} else {
			_, err = f.ReadAt(buf, off)
		}
		if err != nil {
			fail(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// process is a program the live test runs; it is stopped (SIGTERM, then
// SIGKILL after 15 s) when the test ends, and its output logged when the
// test failed.
type process struct {
	name string
	cmd  *exec.Cmd
	out  syncBuffer
	done chan struct{}
	err  error
}

func start(t *testing.T, name string, args ...string) *process {
	t.Helper()
	p := &process{name: name, cmd: exec.Command(args[0], args[1:]...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, tail(p.out.String(), 4000))
		}
	})
	return p
}

func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v\n%s", p.name, p.err, tail(p.out.String(), 4000))
	default:
		return nil
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// binary is a program `make build` puts in bin/.
func binary(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "bin", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v (run make build first; make test does)", p, err)
	}
	return p
}

// promResult is an instant query's answer from /api/v1/query.
type promResult struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string            `json:"resultType"`
		Result     json.RawMessage   `json:"result"`
		series     []json.RawMessage // vector or matrix elements
	} `json:"data"`
}

func query(base, q string) (promResult, error) {
	var r promResult
	resp, err := http.Get(base + "/api/v1/query?" + url.Values{"query": {q}}.Encode())
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("HTTP %s: %v: %s", resp.Status, err, tail(string(b), 300))
	}
	switch r.Data.ResultType {
	case "vector", "matrix":
		if err := json.Unmarshal(r.Data.Result, &r.Data.series); err != nil {
			return r, err
		}
	case "scalar", "string":
		r.Data.series = []json.RawMessage{r.Data.Result}
	}
	return r, nil
}

// grafanaVarRE is a Grafana variable in an expression: $name or ${name}.
var grafanaVarRE = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)

// expand replaces the dashboard's variables by the values Grafana would
// give them for this node, both targets selected, and 1 s scrapes.
func expand(q string, vars map[string]string) (string, error) {
	var missing []string
	out := grafanaVarRE.ReplaceAllStringFunc(q, func(m string) string {
		name := grafanaVarRE.FindStringSubmatch(m)[1]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, m)
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("unknown variables %v", missing)
	}
	return out, nil
}

// TestDashboardAndRulesOnALiveDaemon evaluates every expression of the
// dashboard and the rules on Debian's prometheus scraping bin/bpfbench
// daemon every second, the daemon following the two target processes:
// each must parse and return series (the NVML-only ones may be empty;
// an alert's measure, its expression without its threshold, must return
// series; its condition only parse, except the CUDA allocation failure
// alert, which the cuda target makes true).
func TestDashboardAndRulesOnALiveDaemon(t *testing.T) {
	privtest.Require(t)
	promBin := privtest.RequireTool(t, "prometheus", promtoolHint)
	bpfbench := binary(t, "bpfbench")
	rulesPath, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	exprs := expressions(t, loadDashboard(t), loadRules(t))
	exempt := map[string]bool{}
	for _, w := range nvmlOnly {
		exempt[w] = true
	}
	dir := t.TempDir()
	began := time.Now()

	work, cuda := startLiveTargets(t, dir)
	cfg := filepath.Join(dir, "bpfbench.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "refresh_interval: 1s\ntargets:\n  - {name: %s, pid: %d}\n  - {name: %s, pid: %d}\n",
		workTarget, work.Pid(), cudaTarget, cuda.cmd.Process.Pid), 0o644); err != nil {
		t.Fatal(err)
	}
	daemon := start(t, "bpfbench daemon", bpfbench, "daemon", "--config", cfg, "--web.listen-address", "127.0.0.1:0")
	var daemonAddr string
	servingRE := regexp.MustCompile(`msg="serving metrics".* address=(\S+)`)
	testutil.Succeeds(t, 30*time.Second, func() error {
		if err := daemon.exited(); err != nil {
			t.Fatal(err)
		}
		if m := servingRE.FindStringSubmatch(daemon.out.String()); m != nil {
			daemonAddr = m[1]
			return nil
		}
		return fmt.Errorf("no serving metrics line yet")
	}, "bpfbench daemon serving /metrics")
	prom, base := startPrometheus(t, promBin, dir, rulesPath, daemonAddr)

	vars := map[string]string{
		"node":            daemonAddr,                    // a single value: Grafana leaves it as it is
		"target":          workTarget + "|" + cudaTarget, // both selected: Grafana's regex for a multi-value variable
		"__rate_interval": "4s",                          // Grafana's: 4 scrape intervals
		"__interval":      "1s",
		"__range":         "1m",
	}
	checks := liveChecks(t, exprs, vars, exempt)
	// Every expression parses at once; then poll until each required one
	// returns series (rates need two scrapes, recorded series an evaluation).
	var missing []string
	testutil.Poll(40*time.Second, time.Second, func() bool {
		for _, p := range []*process{daemon, prom, cuda} {
			if err := p.exited(); err != nil {
				t.Fatal(err)
			}
		}
		missing = checkRound(base, checks)
		for _, c := range checks {
			if c.err != nil {
				t.Error(c.err)
			}
		}
		return t.Failed() || len(missing) == 0
	})
	for _, m := range missing {
		t.Error(m)
	}
	for _, c := range checks {
		note := ""
		if exempt[c.where] {
			note = " (NVML only: parsed)"
		}
		t.Logf("%-58s %3d series%s", c.where, c.series, note)
	}
	t.Logf("%d expressions evaluated (%d NVML-only, parsed only) in %v from the start", len(checks), len(nvmlOnly), time.Since(began).Round(time.Second))
	checkTargetFigures(t, base)
}

// startLiveTargets starts the live test's two targets: the work child and
// cudastub-driver looping on the CUDA stub.
func startLiveTargets(t *testing.T, dir string) (work *testproc.Child, cuda *process) {
	t.Helper()
	driver := binary(t, "cudastub-driver")
	libcuda := binary(t, "libcuda.so.1")
	work = testproc.Start(t, "work", dir)
	work.Go(t)
	cuda = start(t, "cudastub-driver", driver, "--lib", libcuda, "--loop", "--duration-ms", "120000",
		"--launches", "20", "--syncs", "2", "--kernel-us", "500",
		"--allocs", "2", "--fail-alloc", "--copies", "1", "--copy-bytes", "65536")
	return work, cuda
}

// startPrometheus runs Prometheus with the rules, scraping the daemon
// every second, and waits until it is ready; it returns it and its URL.
func startPrometheus(t *testing.T, promBin, dir, rulesPath, daemonAddr string) (*process, string) {
	t.Helper()
	promAddr := testutil.FreeAddr(t)
	promCfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(promCfg, fmt.Appendf(nil, `global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: bpfbench
    static_configs:
      - targets: [%q]
`, rulesPath, daemonAddr), 0o644); err != nil {
		t.Fatal(err)
	}
	prom := start(t, "prometheus", promBin, "--config.file", promCfg, "--storage.tsdb.path", filepath.Join(dir, "tsdb"),
		"--web.listen-address", promAddr, "--log.level", "warn")
	base := "http://" + promAddr
	testutil.Succeeds(t, 30*time.Second, func() error {
		if err := prom.exited(); err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s", resp.Status)
		}
		return nil
	}, "prometheus ready")
	return prom, base
}

// liveCheck is an expression of the dashboard or the rules, expanded, and
// what its last round found.
type liveCheck struct {
	expression
	measure string // what must return series ("" when it only has to parse)
	queries []string
	series  int // of measure, in the last round
	err     error
}

// liveChecks expands the expressions with vars; an alert's measure is its
// expression without its threshold; the exempt ones only parse.
func liveChecks(t *testing.T, exprs []expression, vars map[string]string, exempt map[string]bool) []*liveCheck {
	t.Helper()
	var checks []*liveCheck
	for _, e := range exprs {
		q, err := expand(e.query, vars)
		if err != nil {
			t.Fatalf("%s: %v", e.where, err)
		}
		c := &liveCheck{expression: e, measure: q, queries: []string{q}}
		if e.alert != nil {
			m := thresholdRE.FindStringSubmatch(q)
			if m == nil {
				t.Fatalf("%s: %q does not end with a threshold comparison", e.where, q)
			}
			c.measure = m[1]
			c.queries = append(c.queries, m[1])
			if e.alert.Alert == "BpfbenchCUDAAllocationFailures" {
				c.measure = q // cudastub-driver --fail-alloc fails an allocation every round
			}
		}
		if exempt[e.where] {
			c.measure = ""
		}
		checks = append(checks, c)
	}
	return checks
}

// checkRound runs every check's queries once; it returns the measures
// that returned no series (a query's error is in its check).
func checkRound(base string, checks []*liveCheck) (missing []string) {
	for _, c := range checks {
		c.series, c.err = 0, nil
		for _, q := range c.queries {
			r, err := query(base, q)
			if err == nil && r.Status != "success" {
				err = fmt.Errorf("%s: %s", r.ErrorType, r.Error)
			}
			if err != nil {
				c.err = fmt.Errorf("%s: %s: %v", c.where, q, err)
				break
			}
			if q == c.measure {
				c.series = len(r.Data.series)
			}
		}
		if c.err == nil && c.measure != "" && c.series == 0 {
			missing = append(missing, fmt.Sprintf("%s: %s returned no series", c.where, c.measure))
		}
	}
	return missing
}

// checkTargetFigures queries a few figures the targets make non-zero, as
// a check that the series are the targets' own and not just present.
func checkTargetFigures(t *testing.T, base string) {
	t.Helper()
	for _, f := range []struct {
		q    string
		want int
	}{
		{fmt.Sprintf(`sum(rate(bpfbench_cuda_calls_total{target=%q, call="cuStreamSynchronize"}[10s])) > 0`, cudaTarget), 1},
		{fmt.Sprintf(`sum(bpfbench_cuda_errors_total{target=%q, call="cuMemAlloc_v2"}) > 0`, cudaTarget), 1},
		{fmt.Sprintf(`sum(bpfbench_sched_runqueue_latency_seconds_count{target=%q}) > 0`, workTarget), 1},
		{fmt.Sprintf(`sum(bpfbench_target_blockio_bytes_total{target=%q}) > 0`, workTarget), 1},
		{fmt.Sprintf(`bpfbench_target_processes{target=~"%s|%s"} == 1`, workTarget, cudaTarget), 2},
	} {
		r, err := query(base, f.q)
		if err != nil || r.Status != "success" {
			t.Errorf("%s: %v %s", f.q, err, r.Error)
		} else if len(r.Data.series) != f.want {
			t.Errorf("%s: %d series, want %d", f.q, len(r.Data.series), f.want)
		}
	}
}
