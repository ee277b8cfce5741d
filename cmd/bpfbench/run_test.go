package main

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/result"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/exporter/trace"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/job/demo"
	"github.com/bpfbench/bpfbench/llmsim/sim"
	"github.com/bpfbench/bpfbench/llmsim/simtest"
)

var (
	simBinsOnce sync.Once
	simBinsDir  string
	simBinsErr  error
)

// simBinaries builds llmsim and the CUDA stub into a directory on PATH,
// as `make build` puts them next to bpfbench.
func simBinaries(t *testing.T) {
	t.Helper()
	simBinsOnce.Do(func() {
		dir, err := os.MkdirTemp("", "bpfbench-bins")
		if err != nil {
			simBinsErr = err
			return
		}
		simBinsDir = dir
		root, _ := filepath.Abs("../..")
		for _, c := range [][]string{
			{"go", "build", "-o", filepath.Join(dir, "llmsim"), "./cmd/llmsim"},
			{"make", "-s", "-C", "tools/cudastub", "OUT=" + dir},
		} {
			cmd := exec.Command(c[0], c[1:]...)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				simBinsErr = err
				t.Logf("%s", out)
				return
			}
		}
		os.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	})
	if simBinsErr != nil {
		t.Fatalf("building llmsim and the CUDA stub: %v", simBinsErr)
	}
}

// The main job end to end: each phase of the demo injects one cause and
// the attribution of that phase's slowest gaps must name it; the slow
// reader is the only request blamed on the network.
func TestDemoNamesEachInjectedCause(t *testing.T) {
	privtest.Require(t)
	simBinaries(t)
	// In a child: the demo pins bpfbench off the server's CPU and raises
	// its priority. A shared VM's other work and hypervisor steal (which
	// reads as the server running) can spoil one demo: one retry.
	var dir, stdout string
	var doc *result.Document
	for attempt := 1; attempt <= 2; attempt++ {
		dir = t.TempDir()
		code, out, stderr := runCLIChild("demo", "--out", dir, "--phase", "10s", "--rate", "4")
		stdout = out
		t.Logf("attempt %d:\n%s", attempt, stdout)
		if code != 0 {
			t.Fatalf("demo exit %d: %s", code, stderr)
		}
		var err error
		if doc, err = result.Load(filepath.Join(dir, "result.json")); err != nil {
			t.Fatal(err)
		}
		if len(doc.Phases) != 5 || doc.CriticalPath == nil || len(doc.CriticalPath.Phases) != 5 {
			t.Fatalf("%d phases", len(doc.Phases))
		}
		if strings.Contains(stdout, "named 4 of 4 injected causes") || attempt == 2 {
			break
		}
		t.Logf("attempt %d did not name all four: one retry", attempt)
	}
	// Each phase's top cause is the critical path's top added cause, and
	// it is the injected one; no injection is too weak to judge.
	for i, p := range doc.Phases[1:] {
		cp := doc.CriticalPath.Phases[i+1]
		want := demo.DemoCauses[p.Name]
		if p.Weak {
			t.Errorf("phase %q: %s", p.Name, p.Verdict)
			continue
		}
		if p.TopCause != cp.TailTop || p.TopCause != want {
			t.Errorf("phase %q: top cause %s (critical path %s, added shares %v), want %s", p.Name, p.TopCause, cp.TailTop, cp.TailAddedShares, want)
		}
		if p.Injection == "" || p.Expected != want || !strings.Contains(p.Verdict, "names "+want) {
			t.Errorf("phase %q: injection %q, expected %q, verdict %q", p.Name, p.Injection, p.Expected, p.Verdict)
		}
		t.Logf("phase %q: %s; %s", p.Name, p.Injection, p.Verdict)
	}
	if !strings.Contains(stdout, "named 4 of 4 injected causes") {
		t.Errorf("the demo does not say it named all four")
	}
	if doc.Attribution == nil || doc.Attribution.Model != correlate.ModelCriticalPath {
		t.Fatalf("attribution %+v, want the critical path's", doc.Attribution)
	}
	// The slow readers are blamed on the network, mostly, and each holds
	// more network time than any other request. (Other requests' gaps can
	// carry tens of ms of net_backpressure where the walk takes an early
	// send for the chunk's: DESIGN.md, "Known gaps".)
	slow := demo.DemoSlowReaders(4, 10*time.Second)
	minSlow, maxOther := math.Inf(1), 0.0
	for _, r := range doc.Attribution.Requests {
		nb := r.ITLShares["net_backpressure"]*r.ITLExcessMs + r.TTFTShares["net_backpressure"]*(r.TotalExcessMs-r.ITLExcessMs)
		if slices.Contains(slow, r.Request) {
			minSlow = min(minSlow, nb)
			if r.TopCause != "net_backpressure" || r.ITLShares["net_backpressure"] < 0.5 {
				t.Errorf("slow reader %d: top %s, %.0f%% of its excess on the network", r.Request, r.TopCause, 100*r.ITLShares["net_backpressure"])
			}
			continue
		}
		maxOther = max(maxOther, nb)
		if r.TopCause == "net_backpressure" {
			t.Logf("request %d (not a slow reader): top net_backpressure, %.2f ms of %.2f ms excess", r.Request, nb, r.TotalExcessMs)
		}
	}
	if !(minSlow > maxOther) {
		t.Errorf("the slow readers %v hold at least %.0f ms of net_backpressure each, another request %.0f ms", slow, minSlow, maxOther)
	}
	if doc.Collection == nil || doc.Collection.LostEvents != 0 || doc.Float("failed") != 0 {
		t.Errorf("collection %+v, failed %v", doc.Collection, doc.Float("failed"))
	}
	f, err := os.Open(filepath.Join(dir, "trace.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tf, err := trace.Read(f)
	if err != nil {
		t.Fatalf("trace.json is not a Chrome trace: %v", err)
	}
	groups := map[int]bool{}
	for _, e := range tf.TraceEvents {
		if e.Ph == "X" {
			groups[e.Pid] = true
		}
	}
	for _, pid := range []int{trace.PidRequests, trace.PidServer, trace.PidBlock, trace.PidCUDA, trace.PidNetwork} {
		if !groups[pid] {
			t.Errorf("trace.json has no slices in track group %d", pid)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "report.html")); err != nil || st.Size() < 10000 {
		t.Errorf("report.html: %v", err)
	}
	// `bpfbench report` re-renders from the directory.
	os.Remove(filepath.Join(dir, "report.html"))
	if code, _, stderr := runCLI("report", dir); code != 0 {
		t.Errorf("report: exit %d %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "report.html")); err != nil {
		t.Error("report did not write report.html")
	}
}

// inProcessSim serves llmsim from this process, which is then the server's pid.
func inProcessSim(t *testing.T, mod func(*sim.Config)) string {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Work = sim.WorkSleep
	cfg.DecodeStep = 5 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	return simtest.StartConfig(t, cfg)
}

func TestRunBadInput(t *testing.T) {
	privtest.Require(t)
	url := inProcessSim(t, nil)
	self := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"nobody listens", []string{"run", "--target", "http://127.0.0.1:1", "--port", "1", "--out", t.TempDir()}, "nobody listens on TCP port 1"},
		{"unwritable out", []string{"run", "--target", url, "--pid", self, "--num-requests", "2", "--out", "/dev/null/run"}, "cannot create --out"},
		{"no out", []string{"run", "--target", url, "--pid", self, "--num-requests", "2"}, "--out DIR is required"},
		{"pid and port", []string{"run", "--target", url, "--pid", self, "--port", "80", "--out", t.TempDir()}, "not both"},
		{"cgroup and pid", []string{"run", "--target", url, "--pid", self, "--cgroup", "/system.slice", "--out", t.TempDir()}, "give --cgroup or --pid/--port, not both"},
		{"empty cgroup", []string{"run", "--target", url, "--cgroup", "/bpfbench-no-such-cgroup", "--out", t.TempDir()}, "holds no process"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(tc.args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q, want it to say %q", code, stderr, tc.want)
			}
		})
	}
}

func TestRunServerFailingEveryRequest(t *testing.T) {
	privtest.Require(t)
	url := inProcessSim(t, func(c *sim.Config) { c.FailRate = 1 })
	dir := t.TempDir()
	code, stdout, stderr := runCLI("run", "--target", url, "--pid", strconv.Itoa(os.Getpid()), "--num-requests", "5", "--out", dir)
	if code != statusThreshold { // all failed: above --max-failed-ratio
		t.Fatalf("exit %d: %s", code, stderr)
	}
	doc, err := result.Load(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if doc.Float("failed") != 5 || doc.Float("completed") != 0 {
		t.Errorf("failed %v completed %v", doc.Float("failed"), doc.Float("completed"))
	}
	if !strings.Contains(strings.Join(doc.Diagnosis, "\n"), "fail") || !strings.Contains(stdout, "5 failed") {
		t.Errorf("the failures are not reported:\n%s", stdout)
	}
}

// A target that exits mid-run: the load result is kept and the report
// says when collection stopped.
func TestRunTargetExitsMidRun(t *testing.T) {
	privtest.Require(t)
	url := inProcessSim(t, nil)
	// The victim outlives the session's start (seconds on a loaded
	// machine) and dies well before the load's end (60 requests at 10/s).
	victim := exec.Command("sleep", "2")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	go victim.Wait()
	dir := t.TempDir()
	code, _, stderr := runCLI("run", "--target", url, "--pid", strconv.Itoa(victim.Process.Pid),
		"--num-requests", "60", "--rate", "10", "--output-len", "16", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	doc, err := result.Load(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if doc.Float("completed") != 60 {
		t.Errorf("completed %v, want the whole load kept", doc.Float("completed"))
	}
	c := doc.Collection
	if c == nil || !strings.Contains(c.StoppedReason, "exited") || c.StoppedOffsetS >= doc.Float("duration") {
		b, _ := json.Marshal(c)
		t.Errorf("collection %s: want it stopped when the target exited, before the load's end (%.1f s)", b, doc.Float("duration"))
	}
}

// Requests of a run reach an OTLP collector as spans carrying their attribution.
func TestRunExportsAttributedSpans(t *testing.T) {
	privtest.Require(t)
	var mu sync.Mutex
	attrs := map[string]int{}
	spans := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req collectorpb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					spans++
					for _, kv := range sp.Attributes {
						attrs[kv.Key]++
					}
				}
			}
		}
		mu.Unlock()
		out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	defer srv.Close()
	url := inProcessSim(t, nil)
	code, _, stderr := runCLI("run", "--target", url, "--pid", strconv.Itoa(os.Getpid()), "--num-requests", "6",
		"--output-len", "8", "--out", t.TempDir(), "--otlp-endpoint", srv.URL, "--otlp-protocol", "http/protobuf")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if spans != 6 {
		t.Errorf("%d spans exported, want 6", spans)
	}
	for _, k := range []string{"gen_ai.operation.name", "gen_ai.request.model", "bpfbench.attribution.top_cause", "bpfbench.attribution.itl.cpu_runqueue", "bpfbench.attribution.ttft.unexplained"} {
		if attrs[k] != spans {
			t.Errorf("attribute %s on %d of %d spans", k, attrs[k], spans)
		}
	}
}

// sweep --pid finds the knee, runs its two sides under the collectors and
// says what breaks the SLO, writing both runs.
func TestSweepExplainsTheKnee(t *testing.T) {
	privtest.Require(t)
	url := inProcessSim(t, func(c *sim.Config) {
		c.MaxNumSeqs = 4
		c.PrefillBase = 2 * time.Millisecond
		c.PrefillPerToken = 0
		c.DecodeStep = 4 * time.Millisecond
	})
	dir := t.TempDir()
	code, stdout, stderr := runCLI("sweep", "--target", url, "--pid", strconv.Itoa(os.Getpid()),
		"--slo", "p90_ttft_ms<=60", "--requests-per-step", "60", "--step", "10",
		"--input-len", "16", "--output-len", "8", "--no-progress", "--out", dir)
	t.Logf("\n%s", stdout)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "the SLO breaks at") || !strings.Contains(stdout, "what breaks it is") {
		t.Errorf("no explanation of the knee in the output")
	}
	for _, side := range []string{"pass", "fail"} {
		doc, err := result.Load(filepath.Join(dir, side, "result.json"))
		if err != nil {
			t.Fatalf("%s run: %v", side, err)
		}
		if doc.Attribution == nil || doc.Float("completed") == 0 {
			t.Errorf("%s run has no attribution or no completed request", side)
		}
	}
}
