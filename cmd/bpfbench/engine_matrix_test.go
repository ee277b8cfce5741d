package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/internal/engine"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/result"
)

// matrixCell is one configuration of the real engine's matrix: the
// server's compute threads (-t) and slots (-np) on its one CPU, the
// load's concurrency (past saturation: more requests at once than slots,
// so that they queue in the engine), and whether the load goes through a
// front process (nginx) forwarding to the server over loopback HTTP.
type matrixCell struct {
	name           string
	threads, slots int
	concurrency    int
	past           bool
	proxy          bool
}

// matrixResult is what one attempt of a cell measured and what it missed.
type matrixResult struct {
	cell                 matrixCell
	attempt              int
	quietP99, contP99    float64 // p99 ITL of the quiet and contended runs, ms
	fromMs, excessMs     float64 // the contended run's p99 gap band: from, excess over the quiet run's normal gaps
	top                  string
	cpuShare             float64
	unexplained          float64
	first                string
	busy                 string  // the busy process among the noisy neighbours: its rank and run-queue time caused
	burnt                string  // what perturb cpu says it burnt
	deferredPeak         float64 // the engine's llamacpp:requests_deferred, peak over the quiet run
	problems             []string
	slowest              string // the contended run's slowest gap, for a failing cell's log
	quietDir, contendDir string
	live                 liveVerdict // attach's live view of the contended run
	// The server's CPU seconds a token (its /proc stat, all threads, over
	// the quiet and the contended run): the kernel's own account of how
	// much the server computed, the ground truth for server_compute.
	quietCPUTok, contCPUTok float64
}

// inflation is the server's CPU a token in the contended run over the
// quiet run's (0: not measured).
func (r *matrixResult) inflation() float64 {
	if r.quietCPUTok <= 0 {
		return 0
	}
	return r.contCPUTok / r.quietCPUTok
}

// matrixCells: slots ≤ cores (-np 1 on the server's one CPU) and slots >
// cores (-np 2), one compute thread and two (-t 2 on one CPU), each below
// saturation (at most one request per slot) and past it (twice as many
// requests at once as slots); and a front process forwarding to the
// server (nginx, proxy_buffering off), followed from its pid (--via-pid).
var matrixCells = []matrixCell{
	{name: "t1-np1-below", threads: 1, slots: 1, concurrency: 1},
	{name: "t1-np1-past", threads: 1, slots: 1, concurrency: 2, past: true},
	{name: "t1-np2-below", threads: 1, slots: 2, concurrency: 2},
	{name: "t1-np2-past", threads: 1, slots: 2, concurrency: 4, past: true},
	{name: "t2-np2-below", threads: 2, slots: 2, concurrency: 2},
	{name: "t2-np2-past", threads: 2, slots: 2, concurrency: 4, past: true},
	{name: "proxy-t1-np2", threads: 1, slots: 2, concurrency: 2, proxy: true},
}

// The real engine in a matrix of configurations (matrixCells): for each
// cell llama-server pinned to CPU 0 (-t threads -np slots), bpfbench and
// the load generator on CPU 1, a quiet run and then the same load with two
// busy threads of another process (`bpfbench perturb cpu`) on CPU 0 from
// start to end, compared with the quiet run (--baseline). Every cell's
// critical path names cpu_runqueue on top of what the p99 gap band added
// over the quiet run's (with at least 60% of it, server_compute at most
// 20%), leaves at most 10% of the gap time unexplained, and
// names the busy process first among the noisy neighbours; a past-
// saturation cell must have queued requests in the engine (its
// requests_deferred). Then the same contended load once more, sent by
// `bpfbench load` while `bpfbench attach PID --baseline QUIET` follows the
// server: the live view must meet the run's bar and name the busy
// process first (attachRun, judgeLive). Then a slow-reading client on the engine (validate's
// client injection): at least 80% of the slow request's pause (its longest
// gap) on its own connection (net_backpressure or client); validate's own
// verdict on the phase is logged. The whole matrix is
// printed as a table; a cell that misses is run again (a shared host
// can spoil a run), and the test fails listing every cell that missed
// matrixAttempts times.
//
// BPFBENCH_MATRIX_KEEP=DIR keeps every run's directory under DIR and the
// contended runs' critical path dumps (BPFBENCH_CRITPATH_DUMP) beside them;
// BPFBENCH_MATRIX_CELLS=REGEXP runs the cells whose names match (and no
// slow reader), for a closer look at some.
func TestRealEngineMatrix(t *testing.T) {
	privtest.Require(t)
	paths, err := engine.Find()
	if err != nil {
		privtest.SkipOptional(t, "%v", err)
	}
	if runtime.NumCPU() < 2 {
		privtest.SkipOptional(t, "needs 2 CPUs (the server's and bpfbench's), have %d", runtime.NumCPU())
	}
	taskset := privtest.RequireTool(t, "taskset", "apt-get install util-linux")
	nginx := privtest.RequireTool(t, "nginx", "apt-get install nginx-light")
	up, _ := os.ReadFile("/proc/loadavg")
	t.Logf("load average at start: %s", strings.TrimSpace(string(up)))
	m := &matrixRunner{t: t, paths: paths, taskset: taskset, keep: os.Getenv("BPFBENCH_MATRIX_KEEP")}

	// The cells, grouped by server: one llama-server per -t/-np.
	var results []matrixResult
	var srv *engine.Server
	var cur [2]int
	only := os.Getenv("BPFBENCH_MATRIX_CELLS")
	cells := onlyCells(matrixCells, only, func(c matrixCell) string { return c.name })
	for _, c := range cells {
		if srv == nil || cur != [2]int{c.threads, c.slots} {
			if srv != nil {
				srv.Stop()
			}
			srv, cur = m.start(c.threads, c.slots), [2]int{c.threads, c.slots}
		}
		target, via := srv.URL, 0
		if c.proxy {
			target, via = m.proxy(c, srv, nginx)
		}
		for attempt := 1; attempt <= matrixAttempts; attempt++ {
			r := m.cellRun(t, c, srv, target, via, attempt)
			results = append(results, r)
			if len(r.problems) == 0 {
				break
			}
			up, _ := os.ReadFile("/proc/loadavg")
			t.Logf("%s attempt %d missed (load average %s): %s; slowest gap: %s", c.name, attempt, strings.TrimSpace(string(up)), strings.Join(r.problems, "; "), r.slowest)
			if attempt < matrixAttempts {
				t.Logf("%s: once more", c.name)
			}
		}
	}

	// The slow-reading client on -t 1 -np 2: validate's client injection
	// (a request stops reading for 2 s after its first token, on its own
	// connection with a small receive buffer).
	if srv != nil && (cur != [2]int{1, 2} || only != "") {
		srv.Stop()
		srv = nil
	}
	if srv == nil && only == "" {
		srv = m.start(1, 2)
	}
	var slowRows []string
	var slowProblems []string
	for attempt := 1; attempt <= 2 && only == ""; attempt++ {
		row, problems := m.slowReader(srv, attempt)
		verdict := "ok"
		if len(problems) > 0 {
			verdict = "MISS: " + strings.Join(problems, "; ")
		}
		slowRows = append(slowRows, fmt.Sprintf("slow-reader-t1-np2 (attempt %d)\t%s\t%s", attempt, row, verdict))
		slowProblems = problems
		if len(problems) == 0 {
			break
		}
		t.Logf("slow reader attempt %d missed: %s", attempt, strings.Join(problems, "; "))
	}

	table, failed := matrixTable(results)
	t.Logf("real engine matrix (llama-server on CPU 0, bpfbench and the load on CPU 1; contended: 2 busy threads of another process on CPU 0, --baseline the quiet run):\n%s\n%s", table, slowTable(slowRows))
	if len(slowProblems) > 0 {
		failed = append(failed, "slow reader: "+strings.Join(slowProblems, "; "))
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d rows missed every attempt:\n%s", len(failed), len(cells)+1, strings.Join(failed, "\n"))
	}
}

// matrixAttempts is how many times a cell runs before it fails: a shared
// host spoils rounds (docs/measurements.md, "attach on every cell of the
// engine matrices": one cell's quiet p99 moved 2.3-17.5 ms between
// rounds, and a CI trial missed t1-np2-below's server_compute bar twice,
// 0.24, that other rounds met).
const matrixAttempts = 3

// matrixRunner runs the matrix's servers and commands.
type matrixRunner struct {
	t       *testing.T
	paths   engine.Paths
	taskset string
	keep    string // BPFBENCH_MATRIX_KEEP
}

// outDir is a run's directory: under keep when set, else a temporary one.
func (m *matrixRunner) outDir(name string) string {
	if m.keep != "" {
		d := filepath.Join(m.keep, name)
		_ = os.RemoveAll(d)
		return d
	}
	return filepath.Join(m.t.TempDir(), name)
}

// cli runs bpfbench (this test binary as the CLI) on CPU 1.
func (m *matrixRunner) cli(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(m.taskset, append([]string{"--cpu-list", "1", os.Args[0]}, args...)...)
	cmd.Env = append(append(os.Environ(), envCLI+"=1"), env...)
	return cmd
}

// matrixRunCmd runs cmd, or fails t with its output.
func matrixRunCmd(t *testing.T, what string, cmd *exec.Cmd) {
	t.Helper()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s\n%s", what, err, e.String(), o.String())
	}
}

// start runs llama-server -t threads -np slots on CPU 0.
func (m *matrixRunner) start(threads, slots int) *engine.Server {
	t := m.t
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	t.Cleanup(cancel)
	// No prompt cache: the quiet and the contended runs send the
	// same prompts, and the second would find them cached.
	srv, err := engine.Start(ctx, engine.Options{Paths: m.paths, Threads: threads, Slots: slots, CtxSize: 512 * slots, Metrics: true, CPUs: "0",
		Args: []string{"--no-cache-prompt"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Stop()
		if t.Failed() {
			out := srv.Output()
			if len(out) > 3000 {
				out = out[len(out)-3000:]
			}
			t.Logf("llama-server -t %d -np %d output (tail):\n%s", threads, slots, out)
		}
	})
	return srv
}

// proxy runs nginx (proxy_buffering off) in front of srv, beside it on
// CPU 0 with its workers; it returns its URL and its master's pid.
func (m *matrixRunner) proxy(c matrixCell, srv *engine.Server, nginx string) (target string, via int) {
	t := m.t
	dir := t.TempDir()
	port := startNginx(t, nginx, dir, fmt.Sprintf("127.0.0.1:%d", srv.Port), false)
	target, via = fmt.Sprintf("http://127.0.0.1:%d", port), matrixNginxMaster(t, dir)
	// The front process beside the server on CPU 0, its workers
	// too: the server's side of the host is CPU 0.
	for _, p := range append([]int{via}, matrixChildPids(via)...) {
		if out, err := exec.Command(m.taskset, "-a", "-p", "-c", "0", strconv.Itoa(p)).CombinedOutput(); err != nil {
			t.Fatalf("taskset nginx %d: %v: %s", p, err, out)
		}
	}
	t.Logf("%s: nginx [%d, workers %v] on CPU 0 at %s in front of llama-server [%d] at %s", c.name, via, matrixChildPids(via), target, srv.Pid, srv.URL)
	return target, via
}

// cellRun is one attempt of a cell on the server srv (its target the
// server's URL, or the front process's).
func (m *matrixRunner) cellRun(t *testing.T, c matrixCell, srv *engine.Server, target string, viaPid, attempt int) matrixResult {
	r := matrixResult{cell: c, attempt: attempt}
	load := []string{"--target", target, "--pid", strconv.Itoa(srv.Pid), "--model", "tiny-llama", "--input-len", "4", "--output-len", "40",
		"--num-requests", "32", "--max-concurrency", strconv.Itoa(c.concurrency), "--warmup", "0", "--no-progress"}
	if viaPid != 0 {
		load = append(load, "--via-pid", strconv.Itoa(viaPid))
	}
	r.quietDir = m.outDir(fmt.Sprintf("%s-%d-quiet", c.name, attempt))
	r.contendDir = m.outDir(fmt.Sprintf("%s-%d-contended", c.name, attempt))
	m.quietRun(t, c, srv, load, &r)

	// Two busy threads of another process on the server's CPU from
	// start to end of the contended run.
	busyPid, stopBusy := m.startBusy(t, c.name, "0")
	defer stopBusy()
	var env []string
	if m.keep != "" {
		env = append(env, "BPFBENCH_CRITPATH_DUMP="+r.contendDir+".dump")
	}
	cpu0 := procCPUSeconds(t, srv.Pid)
	matrixRunCmd(t, c.name+": bpfbench run --baseline (contended)", m.cli(env, append([]string{"run", "--out", r.contendDir, "--baseline", r.quietDir}, load...)...))
	cpu1 := procCPUSeconds(t, srv.Pid)
	r.live = m.attachRun(t, c.name, srv.Pid, busyPid, r.quietDir, r.contendDir+"-attach.json", load)
	r.burnt = stopBusy()

	doc, err := result.Load(filepath.Join(r.contendDir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if n := doc.Float("total_output_tokens"); n > 0 {
		r.contCPUTok = (cpu1 - cpu0) / n
	}
	judgeContended(t, c, &r, doc, busyPid)
	r.problems = append(r.problems, r.live.problems...)
	t.Logf("%s attempt %d: attach's live view of the contended run: %s, busy process %s", c.name, attempt, r.live, r.live.busy)
	return r
}

// quietRun is the cell's quiet run, the engine's queue followed from its
// /metrics.
func (m *matrixRunner) quietRun(t *testing.T, c matrixCell, srv *engine.Server, load []string, r *matrixResult) {
	stop := make(chan struct{})
	peak := make(chan float64, 1)
	go func() {
		var p float64
		defer func() { peak <- p }()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if m, err := srv.Metrics(ctx); err == nil {
				p = max(p, m["llamacpp:requests_deferred"])
			}
			cancel()
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	cpu0 := procCPUSeconds(t, srv.Pid)
	matrixRunCmd(t, c.name+": bpfbench run (quiet)", m.cli(nil, append([]string{"run", "--out", r.quietDir}, load...)...))
	cpu1 := procCPUSeconds(t, srv.Pid)
	close(stop)
	r.deferredPeak = <-peak
	quiet, err := result.Load(filepath.Join(r.quietDir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if sm := quiet.ServerMetrics; sm != nil {
		r.deferredPeak = max(r.deferredPeak, sm.Peaks["requests_waiting"])
	}
	r.quietP99 = quiet.Float("p99_itl_ms")
	if n := quiet.Float("total_output_tokens"); n > 0 {
		r.quietCPUTok = (cpu1 - cpu0) / n
	}
}

// startBusy starts `bpfbench perturb cpu` (two busy threads on cpus) and
// waits for its first line, which says the threads are busy; stop ends it
// (again: nothing) and returns what it burnt.
func (m *matrixRunner) startBusy(t *testing.T, name, cpus string) (pid int, stop func() string) {
	busy := m.cli(nil, "perturb", "cpu", "--threads", "2", "--cpus", cpus, "--duration", "300s")
	var burnt bytes.Buffer
	busy.Stdout = &burnt
	busyOut, err := busy.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	pid = busy.Process.Pid
	stop = func() string {
		if busy != nil {
			_ = busy.Process.Signal(syscall.SIGTERM)
			_ = busy.Wait()
			busy = nil
		}
		return strings.TrimSpace(burnt.String())
	}
	started := make(chan struct{})
	go func() {
		br := bufio.NewReader(busyOut)
		_, _ = br.ReadString('\n')
		close(started)
		_, _ = io.Copy(io.Discard, br)
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		stop()
		t.Fatalf("%s: bpfbench perturb cpu did not start in 10 s", name)
	}
	time.Sleep(200 * time.Millisecond) // the busy threads' contention settles: a margin, no event
	return pid, stop
}

// judgeContended holds the contended run's critical path to the cell's
// expectations: cpu_runqueue on top, with 60% of what the p99 gap band
// added over the quiet run's, at most 10% unexplained, the busy process the first noisy neighbour, and
// queued requests past saturation.
func judgeContended(t *testing.T, c matrixCell, r *matrixResult, doc *result.Document, busyPid int) {
	attempt := r.attempt
	r.contP99 = doc.Float("p99_itl_ms")
	cp := doc.CriticalPath
	if cp == nil || cp.ITLP99 == nil {
		r.problems = append(r.problems, "no critical path p99 band in the contended run")
		return
	}
	if cp.Baseline != "run "+r.quietDir {
		r.problems = append(r.problems, fmt.Sprintf("critical_path.baseline %q, want the quiet run", cp.Baseline))
	}
	b := cp.ITLP99
	r.fromMs, r.excessMs, r.top, r.cpuShare, r.unexplained = b.FromMs, b.ExcessMs, b.Top, b.ExcessShares["cpu_runqueue"], cp.UnexplainedFraction
	if len(cp.NoisyNeighbours) > 0 {
		r.first = cp.NoisyNeighbours[0].Label()
	}
	// Every cell: 60% of what the contended run added over the quiet
	// run's own p99 band (live.MatchBand). Against the quiet run's normal gap
	// the two-thread cells read 0.58-0.64: their band holds decode steps
	// batched with another slot's prefill, long in the quiet run's tail
	// too (docs/measurements.md, 2026-12-04 and 2026-12-05).
	if want := 0.6; b.Top != "cpu_runqueue" || r.cpuShare < want {
		r.problems = append(r.problems, fmt.Sprintf("p99 gap excess: top %s, cpu_runqueue %.2f (shares %s), want cpu_runqueue on top with at least %.2f", b.Top, r.cpuShare, matrixShares(b.ExcessShares), want))
	}
	// Contention is not the server's work: at most 20% of what the band
	// added on server_compute (the two-thread cells read 0.18-0.27 until
	// the prefill rule: a request delayed into the next step carries its
	// prefill into another's decode gap; pipeline/prefill.go).
	// Unless the server did compute more: on this shared host the
	// server's CPU a token, by the kernel's account, rose 1.9x under
	// the busy threads in some rounds and not in others (the same step
	// costing more CPU: below the scheduler, which bpfbench sees; the
	// steal clock read ~0.3%). bpfbench says so itself (critical_path's
	// server_cpu against the quiet run's, the terminal's line): then its
	// compute is the server's, as said, and the bar is not judged. The
	// test's own reading of the server's CPU a token is logged beside.
	if sc := b.ExcessShares["server_compute"]; sc > 0.2 {
		said := cp.ServerCPU != nil && strings.Contains(report.ServerCPULine(cp.ServerCPU, b), "the same tokens costing more CPU")
		if said {
			t.Logf("%s attempt %d: server_compute %.2f of the p99 band's excess, and bpfbench says the same tokens cost more CPU: %s (the test's reading: %.2fx, %.2f against %.2f ms); not judged on the 0.20 bar",
				c.name, attempt, sc, report.ServerCPULine(cp.ServerCPU, b), r.inflation(), 1e3*r.contCPUTok, 1e3*r.quietCPUTok)
		} else {
			r.problems = append(r.problems, fmt.Sprintf("p99 gap excess: server_compute %.2f, want at most 0.20, or bpfbench saying the same tokens cost more CPU (its server_cpu %+v; the test's reading %.2fx the quiet run's)", sc, cp.ServerCPU, r.inflation()))
		}
	}
	if r.unexplained > 0.1 {
		r.problems = append(r.problems, fmt.Sprintf("unexplained %.3f of the gap time, want at most 0.1", r.unexplained))
	}
	var first bool
	r.busy, first = busyRank(cp.NoisyNeighbours, busyPid)
	if nb := cp.NoisyNeighbours; !first {
		var names []string
		for i, n := range nb {
			if i < 4 {
				names = append(names, fmt.Sprintf("%s %.0f ms", n.Label(), n.Ms))
			}
		}
		r.problems = append(r.problems, fmt.Sprintf("the first noisy neighbour is not the busy process [%d]: %s", busyPid, strings.Join(names, ", ")))
	}
	if c.past && r.deferredPeak < 1 {
		r.problems = append(r.problems, fmt.Sprintf("past saturation, yet the engine deferred no request (requests_deferred peak %.0f)", r.deferredPeak))
	}
	if len(cp.Slowest) > 0 {
		r.slowest = matrixGap(cp.Slowest[0])
	}
	var said string // bpfbench's own ratio
	if sc := cp.ServerCPU; sc != nil {
		said = fmt.Sprintf(", bpfbench's %.2fx (%.2f-%.2f)", sc.Ratio, sc.RatioLow, sc.RatioHigh)
	}
	t.Logf("%s attempt %d: quiet p99 ITL %.2f ms, contended %.2f ms; server CPU a token %.2f then %.2f ms (%.2fx%s); p99 gap band from %.2f ms (%d gaps), excess %.1f ms, shares %s; unexplained %.4f; neighbours %+v; requests_deferred peak %.0f; busy process [%d]: %s",
		c.name, attempt, r.quietP99, r.contP99, 1e3*r.quietCPUTok, 1e3*r.contCPUTok, r.inflation(), said, b.FromMs, b.Gaps, b.ExcessMs, matrixShares(b.ExcessShares), r.unexplained, cp.NoisyNeighbours, r.deferredPeak, busyPid, r.burnt)
}

// slowReader is an attempt of the slow-reading client (validate's client
// injection) on srv: the row and what missed.
func (m *matrixRunner) slowReader(srv *engine.Server, attempt int) (row string, problems []string) {
	t := m.t
	vdir := m.outDir(fmt.Sprintf("slow-reader-%d", attempt))
	cmd := m.cli(nil, "validate", "--target", srv.URL, "--pid", strconv.Itoa(srv.Pid), "--model", "tiny-llama",
		"--output-len", "96", "--rate", "4", "--phase", "3s", "--slow-read", slowPause.String(), "--min-share", "0",
		"--skip", "cpu,io,gpu,net,client-cpu", "--no-progress", "--out", vdir)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	// validate's own verdict (its client phase's slowest 10% of gaps,
	// against the first phase's) is logged; the row is judged on the
	// slow request's connection.
	if err := cmd.Run(); err != nil {
		t.Logf("slow reader attempt %d: validate: %v: %s", attempt, err, strings.TrimSpace(e.String()))
		if _, serr := os.Stat(filepath.Join(vdir, "validation.json")); serr != nil {
			return "validate failed", []string{fmt.Sprintf("validate: %v: %s", err, strings.TrimSpace(e.String()))}
		}
	}
	return matrixSlowReader(t, vdir)
}

// matrixTable is the matrix as a table, and the cells whose last attempt
// missed.
func matrixTable(results []matrixResult) (string, []string) {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "config\ttry\tqueued\tquiet p99\tcontended p99\tband from\ttop cause\tcpu_runqueue\tunexplained\tfirst neighbour\tbusy process\tattach (live)\tverdict")
	var failed []string
	for i, r := range results {
		verdict := "ok"
		if len(r.problems) > 0 {
			verdict = "MISS: " + strings.Join(r.problems, "; ")
		}
		last := i == len(results)-1 || results[i+1].cell.name != r.cell.name
		if last && len(r.problems) > 0 {
			failed = append(failed, fmt.Sprintf("%s: %s", r.cell.name, strings.Join(r.problems, "; ")))
		}
		cfg := fmt.Sprintf("%s (-t %d -np %d, conc %d)", r.cell.name, r.cell.threads, r.cell.slots, r.cell.concurrency)
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.2f ms\t%.2f ms\t%.2f ms\t%s\t%.0f%%\t%.2f%%\t%s\t%s\t%s\t%s\n",
			cfg, r.attempt, r.deferredPeak, r.quietP99, r.contP99, r.fromMs, r.top, r.cpuShare*100, r.unexplained*100, r.first, r.busy, r.live, verdict)
	}
	tw.Flush()
	return buf.String(), failed
}

// slowTable is the slow reader's rows as a table.
func slowTable(rows []string) string {
	var sb bytes.Buffer
	sw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(sw, "slow reader\tits pause\trequest\ton its connection\tvalidate's phase top\tverdict")
	for _, row := range rows {
		fmt.Fprintln(sw, row)
	}
	sw.Flush()
	return sb.String()
}

// matrixSlowReader reads validate's client row and the run's critical path:
// the slow request's longest gap (its pause) has at least 80% of it on that
// request's connection (net_backpressure, or the client: the chunk held in
// its socket). It returns the table's cells and what missed.
func matrixSlowReader(t *testing.T, dir string) (row string, problems []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "validation.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Rows []struct {
			Injection  string  `json:"injection"`
			Achieved   string  `json:"achieved"`
			Attributed string  `json:"attributed_top_cause"`
			Share      float64 `json:"injected_share_of_tail_excess"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Rows) != 1 || v.Rows[0].Injection != "client" {
		t.Fatalf("validation rows %+v, want the client's", v.Rows)
	}
	mt := regexp.MustCompile(`request (\d+) stops reading`).FindStringSubmatch(v.Rows[0].Achieved)
	if mt == nil {
		t.Fatalf("validation does not say which request read slowly: %q", v.Rows[0].Achieved)
	}
	slow, _ := strconv.Atoi(mt[1])
	doc, err := result.Load(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var bb struct {
		Records []loadgen.Record `json:"records"`
	}
	if err := json.Unmarshal(jsonOf(t, doc.BPFBench), &bb); err != nil {
		t.Fatal(err)
	}
	port := 0
	for _, r := range bb.Records {
		if r.Index == slow {
			port = r.LocalPort
		}
	}
	cp := doc.CriticalPath
	if cp == nil || len(cp.Slowest) == 0 {
		return "no critical path", []string{"validate's result.json has no critical path"}
	}
	// The slow request's longest gap among the slowest: its pause.
	var g *result.CriticalGap
	for i := range cp.Slowest {
		if cp.Slowest[i].Request == slow && (g == nil || cp.Slowest[i].DurationMs > g.DurationMs) {
			g = &cp.Slowest[i]
		}
	}
	if g == nil {
		return "no gap of the slow request", []string{fmt.Sprintf("no gap of the slow request %d among the slowest (the slowest: %s)", slow, matrixGap(cp.Slowest[0]))}
	}
	conn := g.CausesMs["net_backpressure"] + g.CausesMs["client"]
	share := conn / max(g.DurationMs, 1e-9)
	t.Logf("slow reader: %s; request %d on port %d; its longest gap token %d port %d, %.0f ms: net_backpressure %.0f ms, client %.0f ms; the run's slowest gap: %s",
		v.Rows[0].Achieved, slow, port, g.Index, g.Port, g.DurationMs, g.CausesMs["net_backpressure"], g.CausesMs["client"], matrixGap(cp.Slowest[0]))
	row = fmt.Sprintf("%.0f ms (token %d)\t%d (port %d)\t%.0f%% (net_backpressure %.0f ms, client %.0f ms)\t%s %.0f%%",
		g.DurationMs, g.Index, slow, port, share*100, g.CausesMs["net_backpressure"], g.CausesMs["client"], v.Rows[0].Attributed, v.Rows[0].Share*100)
	if share < 0.8 {
		problems = append(problems, fmt.Sprintf("%.0f%% of the slow request's pause (%.0f ms) on its connection (net_backpressure or client), want at least 80%%", share*100, g.DurationMs))
	}
	return row, problems
}

// matrixShares writes a cause → share map, largest first.
func matrixShares(m map[string]float64) string {
	type kv struct {
		k string
		v float64
	}
	var s []kv
	for k, v := range m {
		if v != 0 {
			s = append(s, kv{k, v})
		}
	}
	sort.Slice(s, func(i, j int) bool { return s[i].v > s[j].v })
	var parts []string
	for _, e := range s {
		parts = append(parts, fmt.Sprintf("%s %.2f", e.k, e.v))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// matrixGap writes a gap's critical path: its causes and its steps.
func matrixGap(g result.CriticalGap) string {
	var steps []string
	for _, s := range g.Steps {
		steps = append(steps, fmt.Sprintf("%.2f+%.2f ms %s %s %s (%s) d%d", s.StartMs, s.DurationMs, s.Thread, s.State, s.Cause, s.Detail, s.Depth))
	}
	return fmt.Sprintf("request %d token %d %.2f ms, causes %v, steps [%s] (%d omitted)", g.Request, g.Index, g.DurationMs, g.CausesMs, strings.Join(steps, "; "), g.StepsOmitted)
}

// matrixNginxMaster is the pid nginx wrote to its pid file in dir (the master,
// the workers below it).
func matrixNginxMaster(t *testing.T, dir string) int {
	t.Helper()
	var pid int
	var err error
	if !testutil.Until(5*time.Second, func() bool {
		var b []byte
		if b, err = os.ReadFile(filepath.Join(dir, "nginx", "nginx.pid")); err == nil {
			pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return err == nil && pid > 0
	}) {
		t.Fatalf("nginx wrote no pid file: %v", err)
	}
	return pid
}

// matrixChildPids are the children of pid (every thread's).
func matrixChildPids(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(s); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// busyRank is where the busy process busyPid stands among the noisy
// neighbours ("#2, 310 ms", or "absent"), and whether it is the first.
func busyRank(nb []result.NoisyNeighbour, busyPid int) (string, bool) {
	for i, n := range nb {
		if n.Pid == uint32(busyPid) && !n.Target {
			return fmt.Sprintf("#%d, %.0f ms", i+1, n.Ms), i == 0
		}
	}
	return "absent", false
}

// onlyCells is the cells whose names match the regular expression only
// (BPFBENCH_MATRIX_CELLS), or all of them when it is empty.
func onlyCells[C any](cells []C, only string, name func(C) string) []C {
	if only == "" {
		return cells
	}
	re := regexp.MustCompile(only)
	return slices.DeleteFunc(slices.Clone(cells), func(c C) bool { return !re.MatchString(name(c)) })
}
