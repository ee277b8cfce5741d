package pipeline

import (
	"compress/gzip"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/result"
)

// gapsOf makes n requests of k gaps each, every gap after the first
// computeMs of server_compute, runqMs of cpu_runqueue and 1 ms of client;
// the TTFT is 50 ms of server_compute.
func gapsOf(n, k int, computeMs, runqMs int64, t0 int64) []critGap {
	var out []critGap
	for r := range n {
		at := t0 + int64(r)*1000*msNs
		ttft := critGap{request: int32(r), index: 0, start: at, end: at + 50*msNs}
		ttft.ns[critpath.ServerCompute] = 50 * msNs
		out = append(out, ttft)
		at = ttft.end
		for i := 1; i < k; i++ {
			g := critGap{request: int32(r), index: int32(i), start: at}
			g.ns[critpath.ServerCompute] = computeMs * msNs
			g.ns[critpath.CPURunqueue] = runqMs * msNs
			g.ns[critpath.Client] = msNs
			g.end = at + (computeMs+runqMs+1)*msNs
			at = g.end
			out = append(out, g)
		}
	}
	return out
}

// writeRun writes a run directory the way run.Run (job/run) does for its critical
// path: result.json (its own baseline: the run's medians) and the gaps.
func writeRun(t *testing.T, gaps []critGap, phases []critPhase) string {
	t.Helper()
	dir := t.TempDir()
	cp := &result.CriticalPath{Baseline: "run", Causes: critpath.CauseNames(), Gaps: len(gaps), Slowest: []result.CriticalGap{}}
	rebase(cp, slices.Values(gaps), phases, baselineOf(slices.Values(gaps)), nil)
	doc := &result.Document{CriticalPath: cp}
	if err := doc.WriteFile(filepath.Join(dir, "result.json")); err != nil {
		t.Fatal(err)
	}
	if err := writeGaps(dir, gaps[0].start, phases, slices.Values(gaps)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A run contended from start to end (every gap 20 ms behind another
// task) explains nothing against its own medians, and all of its excess
// as cpu_runqueue against a quiet run recorded before.
func TestRebaseOnAQuietRun(t *testing.T) {
	quiet := writeRun(t, gapsOf(20, 50, 9, 0, 1e12), nil)
	contended := gapsOf(20, 50, 9, 20, 2e12)
	// One gap in a hundred is twice as contended: the p99 band.
	for i := range contended {
		if i%100 == 99 {
			contended[i].ns[critpath.CPURunqueue] += 20 * msNs
			contended[i].end += 20 * msNs
		}
	}
	dir := writeRun(t, contended, nil)

	own, err := result.Load(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if b := own.CriticalPath.ITLP99; b == nil || b.ExcessMs > 21*float64(b.Gaps) {
		t.Fatalf("against its own medians the p99 band's excess is %+v, want at most the extra 20 ms a gap", b)
	}

	prior, err := LoadPrior(quiet)
	if err != nil {
		t.Fatal(err)
	}
	if !prior.haveTail {
		t.Errorf("the quiet run's gaps file was not read")
	}
	if got := prior.Crit.ITL[critpath.ServerCompute]; got != 9*msNs {
		t.Errorf("the quiet run's normal server_compute is %d ns, want 9 ms", got)
	}
	if err := Rebase(own, dir, prior); err != nil {
		t.Fatal(err)
	}
	cp := own.CriticalPath
	if cp.Baseline != "run "+quiet {
		t.Errorf("baseline %q", cp.Baseline)
	}
	b := cp.ITLP99
	if b == nil || b.Top != "cpu_runqueue" || math.Abs(b.ExcessShares["cpu_runqueue"]-1) > 1e-9 {
		t.Fatalf("against the quiet run the p99 band is %+v, want all of its excess cpu_runqueue", b)
	}
	// Every gap in the band is 20 ms over the quiet normal, the ten
	// doubly contended ones 40 ms.
	if want := 20.0*float64(b.Gaps) + 20*10; math.Abs(b.ExcessMs-want) > 1e-6 {
		t.Errorf("p99 excess %.3f ms over %d gaps, want %.0f", b.ExcessMs, b.Gaps, want)
	}
	if got := cp.NormalITLMs["cpu_runqueue"]; got != 0 {
		t.Errorf("normal cpu_runqueue %.3f ms, want the quiet run's 0", got)
	}
}

// Phases are recomputed against the prior's tail, and a gaps file keeps
// its phases.
func TestRebasePhases(t *testing.T) {
	quiet := writeRun(t, gapsOf(10, 50, 9, 0, 1e12), nil)
	gs := gapsOf(10, 50, 9, 0, 2e12)
	gs = append(gs, gapsOf(10, 50, 9, 15, 3e12)...)
	phases := []critPhase{{name: "baseline", from: 2e12, to: 3e12}, {name: "cpu", from: 3e12, to: 4e12}}
	dir := writeRun(t, gs, phases)
	h, back, err := readGaps(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(gs) || len(h.Phases) != 2 || back[len(back)-1] != gs[len(gs)-1] {
		t.Fatalf("read back %d gaps and %d phases, want %d and 2 (last %+v, want %+v)", len(back), len(h.Phases), len(gs), back[len(back)-1], gs[len(gs)-1])
	}
	doc, err := result.Load(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	prior, err := LoadPrior(filepath.Join(quiet, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Rebase(doc, dir, prior); err != nil {
		t.Fatal(err)
	}
	ps := doc.CriticalPath.Phases
	if len(ps) != 2 || ps[0].TailTop != "unexplained" || ps[1].TailTop != "cpu_runqueue" || ps[1].TailAddedShares["cpu_runqueue"] != 1 {
		t.Fatalf("phases %+v", ps)
	}
}

// What cannot be a baseline says so; a damaged gaps file keeps the gaps
// before the damage and says where it is.
func TestPriorErrors(t *testing.T) {
	empty := t.TempDir()
	if _, err := LoadPrior(empty); err == nil || !strings.Contains(err.Error(), "no result.json") {
		t.Errorf("a directory without result.json: %v", err)
	}
	if _, err := LoadPrior(filepath.Join(empty, "nothing")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing directory: %v", err)
	}
	noCP := t.TempDir()
	doc := &result.Document{Loadgen: result.Loadgen{Completed: 3}}
	if err := doc.WriteFile(filepath.Join(noCP, "result.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPrior(noCP); err == nil || !strings.Contains(err.Error(), "no critical path") {
		t.Errorf("a run without a critical path: %v", err)
	}
	dir := writeRun(t, gapsOf(2, 5, 9, 0, 1e12), nil)
	d, _ := result.Load(filepath.Join(dir, "result.json"))
	prior, err := LoadPrior(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := Rebase(d, noCP, prior); err == nil || !strings.Contains(err.Error(), "no "+GapsFile) {
		t.Errorf("a run without a gaps file: %v", err)
	}

	// A gaps file cut short: a row with too few fields.
	f, err := os.OpenFile(filepath.Join(dir, GapsFile), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	enc := json.NewEncoder(zw)
	_ = enc.Encode(gapsHeader{Format: gapsFormat, Causes: critpath.CauseNames()})
	row := make([]int64, 6+critpath.NumCauses)
	copy(row, []int64{1, 1, 0, 10, 0, 1, 2, 3, 4})
	_ = enc.Encode(row)
	_ = enc.Encode([]int64{1, 2, 10})
	_ = zw.Close()
	_ = f.Close()
	_, gs, err := readGaps(dir)
	if err == nil || !strings.Contains(err.Error(), "line 3") || len(gs) != 1 {
		t.Errorf("a damaged gaps file: %d gaps, %v", len(gs), err)
	}
}

// A phase whose added cpu_runqueue was the hypervisor's steal and a
// phase with 6 ms of injected run-queue wait and 10 ms of steal: the
// steal is left out of what each phase added (tail_steal_ms says how
// much), so the first adds nothing to attribute and the second adds its
// injected 6 ms, all cpu_runqueue. The gaps file keeps the steal, and a
// file of the format before it is read as no steal.
func TestPhasesLeaveOutSteal(t *testing.T) {
	base := gapsOf(10, 50, 9, 0, 1e12)
	stolen := gapsOf(10, 50, 9, 10, 2e12)
	for i := range stolen {
		stolen[i].steal = stolen[i].ns[critpath.CPURunqueue]
	}
	mixed := gapsOf(10, 50, 9, 16, 3e12)
	for i := range mixed {
		if mixed[i].index > 0 {
			mixed[i].steal = 10 * msNs
		}
	}
	gs := slices.Concat(base, stolen, mixed)
	phases := []critPhase{{name: "baseline", from: 1e12, to: 2e12}, {name: "steal", from: 2e12, to: 3e12}, {name: "mixed", from: 3e12, to: 4e12}}
	// As run.Run (job/run) does with phases: the first phase's normal gap.
	cp := &result.CriticalPath{}
	rebase(cp, slices.Values(gs), phases, baselineOf(slices.Values(inPhase(slices.Values(gs), phases[0]))), nil)
	ps := cp.Phases
	if len(ps) != 3 {
		t.Fatalf("phases %+v", ps)
	}
	if p := ps[1]; p.TailAddedMs > 1e-6 || math.Abs(p.TailStealMs-10) > 1e-6 {
		t.Errorf("the stolen phase added %.3f ms to attribute and %.3f ms of steal, want 0 and 10", p.TailAddedMs, p.TailStealMs)
	}
	if p := ps[2]; math.Abs(p.TailAddedMs-6) > 1e-6 || math.Abs(p.TailStealMs-10) > 1e-6 || p.TailTop != "cpu_runqueue" || p.TailAddedShares["cpu_runqueue"] != 1 {
		t.Errorf("the mixed phase: added %.3f ms (top %s %.2f), steal %.3f ms; want 6 ms of cpu_runqueue and 10 of steal", p.TailAddedMs, p.TailTop, p.TailAddedShares[p.TailTop], p.TailStealMs)
	}
	dir := writeRun(t, gs, phases)
	_, back, err := readGaps(dir)
	if err != nil || !slices.Equal(back, gs) {
		t.Fatalf("gaps read back: %v (equal %v)", err, slices.Equal(back, gs))
	}

	// The format before the steal column: read, with no steal.
	f, err := os.Create(filepath.Join(dir, GapsFile))
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	enc := json.NewEncoder(zw)
	_ = enc.Encode(gapsHeader{Format: gapsFormat1, Causes: critpath.CauseNames()[:4]})
	_ = enc.Encode([]int64{1, 1, 0, 10, 0, 1, 2, 3, 4})
	_ = zw.Close()
	_ = f.Close()
	_, back, err = readGaps(dir)
	if err != nil || len(back) != 1 || back[0].steal != 0 || back[0].ns[critpath.NetBackpressure] != 4 {
		t.Errorf("a gaps file of the first format: %+v, %v", back, err)
	}
}

// A baseline run's normal lateness is the median of its measured
// requests' own lateness (less a slot wait under --max-concurrency).
func TestPriorNormalLateness(t *testing.T) {
	dir := writeRun(t, gapsOf(10, 50, 9, 0, 1e12), nil)
	doc, err := result.Load(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	doc.BPFBench = &result.LoadDetail{}
	for i, late := range []int64{1, 2, 9, 3, 100} {
		// Request 4 waited 97 ms of its 100 for a slot: 3 ms late.
		r := result.Request{Index: i, Success: true, ScheduledNs: 1e9, StartNs: 1e9 + late*msNs}
		if i == 4 {
			r.SlotWaitNs = 97 * msNs
		}
		doc.BPFBench.Records = append(doc.BPFBench.Records, r)
	}
	doc.BPFBench.Records = append(doc.BPFBench.Records, result.Request{Index: -1, Warmup: true, Success: true, ScheduledNs: 1e9, StartNs: 2e9})
	if err := doc.WriteFile(filepath.Join(dir, "result.json")); err != nil {
		t.Fatal(err)
	}
	prior, err := LoadPrior(dir)
	if err != nil {
		t.Fatal(err)
	}
	if prior.late != 3*msNs {
		t.Errorf("normal lateness %d ns, want the median of 1, 2, 3, 3, 9 ms", prior.late)
	}
}
