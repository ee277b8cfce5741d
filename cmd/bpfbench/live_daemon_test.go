package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

// The daemon's live view of a server with no load generator: bpfbench
// daemon follows an llmsim target (its live session), an independent
// streaming client written here drives llmsim with several concurrent
// streams, and after a quiet half two busy loops share llmsim's CPU. The
// critical-path seconds blamed on the run queue
// (bpfbench_token_gap_cause_seconds_total{cause="cpu_runqueue"}) grow
// faster per second in the contended half than in the quiet one, and the
// gap histogram counts grow in both. On a shared host a half can be
// spoilt by other work; one retry is allowed.
func TestDaemonLiveTokenGaps(t *testing.T) {
	privtest.Require(t)
	taskset := privtest.RequireTool(t, "taskset", "apt-get install util-linux")
	simBinaries(t)
	dir := t.TempDir()

	// llmsim on CPU 0, one process burning CPU at every decode step.
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	logf, err := os.Create(filepath.Join(dir, "llmsim.log"))
	if err != nil {
		t.Fatal(err)
	}
	sim := exec.Command(taskset, "-c", "0", "llmsim", "--addr", addr, "--processes", "1", "--itl", "5ms", "--work", "cpu")
	sim.Stdout, sim.Stderr = logf, logf
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Process.Kill(); _ = sim.Wait(); logf.Close() })
	waitHTTP(t, "http://"+addr+"/health", logf.Name())

	cfg := filepath.Join(dir, "config.yaml")
	body := fmt.Sprintf("refresh_interval: 500ms\ntargets:\n  - {name: sim, pid: %d}\n", sim.Process.Pid)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	// The daemon's threads stay off llmsim's CPU.
	d := startDaemon(t, "--config", cfg, "--cpus", "1")
	scrape := func() string {
		t.Helper()
		resp, err := http.Get("http://" + d.addr + "/metrics")
		if err != nil {
			t.Fatalf("/metrics: %v\n%s", err, d.logs)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(scrape(), `bpfbench_streams_active{target="sim"}`) {
		if time.Now().After(deadline) {
			t.Fatalf("no live view of the target within 30 s\n%s", d.logs)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The client: 4 streams at a time, each 200 tokens, one after another.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	streams, chunks, failures := 0, 0, 0
	var lastErr error
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				n, err := stream(ctx, addr)
				mu.Lock()
				if err != nil && ctx.Err() == nil {
					failures++
					lastErr = err
				} else if err == nil {
					streams++
				}
				chunks += n
				mu.Unlock()
			}
		}()
	}
	stopClient := func() { cancel(); wg.Wait() }
	t.Cleanup(stopClient)

	type sample struct {
		at       time.Time
		runqueue float64 // bpfbench_token_gap_cause_seconds_total{cause="cpu_runqueue"}
		total    float64 // every cause
		gaps     float64 // bpfbench_token_gap_seconds_count
	}
	take := func() sample {
		s := sample{at: time.Now()}
		for line := range strings.SplitSeq(scrape(), "\n") {
			v, ok := seriesValue(line, "bpfbench_token_gap_cause_seconds_total", `target="sim"`)
			if ok {
				s.total += v
				if strings.Contains(line, `cause="cpu_runqueue"`) {
					s.runqueue += v
				}
			}
			if v, ok := seriesValue(line, "bpfbench_token_gap_seconds_count", `target="sim"`); ok {
				s.gaps += v
			}
		}
		return s
	}
	// A half is measured from settle after its start (the tracker walks a
	// gap 2 s after it ends) for half.
	const settle, half = 3 * time.Second, 8 * time.Second
	measure := func(name string) (rate, blamed, gaps float64) {
		time.Sleep(settle)
		a := take()
		time.Sleep(half)
		b := take()
		secs := b.at.Sub(a.at).Seconds()
		rate = (b.runqueue - a.runqueue) / secs
		blamed = (b.total - a.total) / secs
		gaps = b.gaps - a.gaps
		t.Logf("%s half: cpu_runqueue %.4f s/s of %.4f s/s blamed (%.1f%%), %.0f gaps in %.1f s", name, rate, blamed, 100*rate/max(blamed, 1e-12), gaps, secs)
		return rate, blamed, gaps
	}
	var problems []string
	for attempt := 1; attempt <= 2; attempt++ {
		quiet, _, quietGaps := measure("quiet")
		var busy []*exec.Cmd
		for range 2 {
			c := exec.Command(taskset, "-c", "0", "sh", "-c", "while :; do :; done")
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			busy = append(busy, c)
		}
		contended, _, busyGaps := measure("contended")
		for _, c := range busy {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		problems = nil
		if quietGaps <= 0 || busyGaps <= 0 {
			problems = append(problems, fmt.Sprintf("the gap histogram grew by %.0f (quiet) and %.0f (contended): want both to grow", quietGaps, busyGaps))
		}
		if contended <= quiet {
			problems = append(problems, fmt.Sprintf("cpu_runqueue grew %.4f s/s contended, %.4f s/s quiet: want faster when contended", contended, quiet))
		}
		if len(problems) == 0 {
			break
		}
		t.Logf("attempt %d: %v", attempt, problems)
	}
	stopClient()
	mu.Lock()
	t.Logf("client: %d streams, %d chunks, %d failures (last: %v)", streams, chunks, failures, lastErr)
	mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("live view under CPU contention: %v\n%s", problems, d.logs)
	}
	d.stop(t)
	if !strings.Contains(d.logs.String(), `"msg":"live view stopped"`) {
		t.Errorf("the daemon did not log the live session's end on SIGTERM:\n%s", d.logs)
	}
}

// stream sends one streaming completion to llmsim and reads it to its end;
// it returns the chunks read.
func stream(ctx context.Context, addr string) (int, error) {
	body := `{"model": "llmsim", "prompt": "Tell me about eBPF and the scheduler.", "max_tokens": 200, "ignore_eos": true, "stream": true}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("POST /v1/completions: %s", resp.Status)
	}
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "data: [DONE]" {
			return n, nil
		}
		if strings.HasPrefix(line, "data: ") {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		return n, err
	}
	return n, fmt.Errorf("the stream ended without [DONE] after %d chunks", n)
}

// seriesValue is the value of a text exposition line of metric name
// whose labels hold label.
func seriesValue(line, name, label string) (float64, bool) {
	if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, label) {
		return 0, false
	}
	i := strings.LastIndexByte(line, ' ')
	v, err := strconv.ParseFloat(line[i+1:], 64)
	return v, err == nil
}
