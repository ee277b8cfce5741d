package pipeline

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/exporter/trace"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/result"
)

// synthCrit is a synthetic run for the critical path: one engine thread
// (tid 100 of pid 4242) serves one request at a time. Each 10 ms gap it
// sleeps until a timer, waits 0.1 ms for the CPU, runs, sends the chunk
// 0.5 ms before the client reads it and the chunk arrives 0.3 ms before.
// Every 20th gap a busy neighbour (stress-ng[999]) preempts it for 30 ms
// before the send.
type synthCrit struct {
	t0      int64
	records []loadgen.Record
	spans   []collectors.Span
	slow    int // gaps with a preemption
}

func newSynthCrit(requests, tokens int) *synthCrit {
	const tid, pid = 100, 4242
	run := &synthCrit{t0: 1_000_000 * msNs}
	us := int64(1000)
	lastOut := run.t0 - 5*msNs // the thread's switch-out before the first gap
	// the thread's first switch-in, so that its first Running is known
	run.spans = append(run.spans, collectors.Span{Kind: collectors.SpanOffCPU, Start: lastOut - msNs, End: lastOut - 500*us,
		Tid: tid, Tgid: pid, Detail: "sleep", WakeCtx: "hardirq", WakeTs: lastOut - 600*us})
	c := run.t0
	gap := 0
	switchIn := func(state string, out, wake, in int64, holder bool) {
		rq := collectors.Span{Kind: collectors.SpanRunqueue, Start: wake, End: in, Tid: tid, Tgid: pid, Blocking: true}
		off := collectors.Span{Kind: collectors.SpanOffCPU, Start: out, End: in, Tid: tid, Tgid: pid, Detail: state}
		if holder {
			rq.HolderTid, rq.HolderTgid, rq.HolderComm = 999, 999, "stress-ng"
			off.HolderTid, off.HolderTgid, off.HolderComm = 999, 999, "stress-ng"
		} else {
			off.WakeTs, off.WakeCtx = wake, "hardirq"
		}
		run.spans = append(run.spans, rq, off)
	}
	for i := range requests {
		port := uint16(40000 + i)
		rec := loadgen.Record{Index: i, ScheduledNs: c, StartNs: c, LocalPort: int(port), Success: true}
		for k := range tokens {
			a := c
			g := 10 * msNs
			slow := k > 0 && gap%20 == 19
			if slow {
				g = 40 * msNs
				run.slow++
			}
			gap++
			end := a + g
			send, arrive := end-500*us, end-300*us
			// asleep from the last switch-out until a timer at a+6 ms,
			// runnable 0.1 ms, then running
			switchIn("sleep", lastOut, a+6*msNs, a+6*msNs+100*us, false)
			if slow {
				switchIn("preempted", a+7*msNs, a+7*msNs, a+37*msNs, true)
			}
			lastOut = send + 100*us
			run.spans = append(run.spans,
				collectors.Span{Kind: collectors.SpanSend, Start: send, End: send, Tid: tid, Port: port, LocalPort: 8000, Bytes: 100},
				collectors.Span{Kind: collectors.SpanArrival, Start: arrive, End: arrive, Tid: 7, Port: 8000, LocalPort: port, Bytes: 100, Client: true},
				// the load generator's own thread: ignored by both models
				collectors.Span{Kind: collectors.SpanRunqueue, Start: arrive, End: end, Tid: 7, Tgid: 7, Client: true, Blocking: true})
			rec.ChunkNs = append(rec.ChunkNs, end)
			c = end
		}
		rec.LastNs, rec.EndNs = c, c+100*us
		run.records = append(run.records, rec)
		c += 2 * msNs
	}
	// the last switch-in, after the last send
	switchIn("sleep", lastOut, c, c+100*us, false)
	return run
}

// replay feeds the run through the recorder, spans 50 ms after they end
// and requests when they end, on a simulated clock.
func (run *synthCrit) replay(t *testing.T, dir string) *runStream {
	t.Helper()
	tr, err := newTraceStream(dir, run.t0, &PhaseMarks{})
	if err != nil {
		t.Fatal(err)
	}
	s := newRunStream(0, nil, tr)
	var now int64
	s.now = func() int64 { return now }
	s.sched.floor0 = run.t0
	spans := append([]collectors.Span(nil), run.spans...)
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].End < spans[j].End })
	next, nextRec := 0, 0
	for now = run.t0 - time100ms; next < len(spans) || nextRec < len(run.records); now += 10 * msNs {
		for next < len(spans) && spans[next].End+50*msNs <= now {
			s.Record(spans[next])
			next++
		}
		for nextRec < len(run.records) && run.records[nextRec].EndNs <= now {
			s.AddRecord(&run.records[nextRec])
			nextRec++
		}
		if now%time100ms == 0 {
			s.advance(false)
		}
	}
	s.finish()
	return s
}

// The critical path of a synthetic stream: every gap walked, the slow
// gaps' excess named cpu_runqueue behind the neighbour, the neighbour in
// the table, the client's read delay the 0.3 ms the chunks waited, and
// the old consumers see neither the new kinds nor the client's spans.
func TestRunStreamCriticalPath(t *testing.T) {
	const requests, tokens = 8, 50
	run := newSynthCrit(requests, tokens)
	s := run.replay(t, t.TempDir())
	var old uint64
	for _, sp := range run.spans {
		if !sp.Client && sp.Kind <= collectors.SpanTCP {
			old++
		}
	}
	if s.spans != old {
		t.Errorf("the correlation recorded %d spans, want the %d of the old kinds", s.spans, old)
	}
	res := &loadgen.Result{Records: run.records, StartNs: run.t0, EndNs: run.records[len(run.records)-1].EndNs}
	cp := s.crit.critResult(res.StartNs, nil, nil, nil)
	b, err := json.MarshalIndent(cp, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("critical_path stats %+v", cp.Stats)
	if cp.Gaps != requests*tokens {
		t.Fatalf("walked %d gaps, want %d", cp.Gaps, requests*tokens)
	}
	if cp.Stats.NoArrival != 0 || cp.Stats.NoSend != 0 || cp.Stats.Late != 0 || cp.Stats.ClientSpans != uint64(requests*tokens) {
		t.Errorf("stats %+v: want no fallbacks, nothing late, every client run-queue span counted apart", cp.Stats)
	}
	if cp.ITLP99 == nil || cp.ITLP99.Top != "cpu_runqueue" || cp.ITLP99.ExcessShares["cpu_runqueue"] < 0.9 {
		t.Errorf("itl p99 band %+v: want cpu_runqueue on top with >= 90%% of the excess", cp.ITLP99)
	}
	var sum float64
	for _, v := range cp.ITLP99.ExcessShares {
		sum += v
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Errorf("p99 excess shares sum to %v", sum)
	}
	if len(cp.NoisyNeighbours) == 0 || cp.NoisyNeighbours[0].Process != "stress-ng[999]" {
		t.Fatalf("noisy neighbours %+v: want stress-ng[999] first", cp.NoisyNeighbours)
	}
	if got, want := cp.NoisyNeighbours[0].Ms, float64(run.slow)*30; math.Abs(got-want) > 1e-6 || cp.NoisyNeighbours[0].Gaps != run.slow {
		t.Errorf("stress-ng: %v ms over %d gaps, want %v ms over %d", got, cp.NoisyNeighbours[0].Gaps, want, run.slow)
	}
	if d := cp.ClientReadDelay; d == nil || math.Abs(d.P50Ms-0.3) > 1e-9 || math.Abs(d.MaxMs-0.3) > 1e-9 {
		t.Errorf("client read delay %+v, want 0.3 ms", d)
	}
	if cp.UnexplainedFraction > 0.01 {
		t.Errorf("unexplained %.3f of the gap time", cp.UnexplainedFraction)
	}
	var total float64
	for _, v := range cp.TotalsMs {
		total += v
	}
	if math.Abs(total-cp.GapMs) > 1e-6 {
		t.Errorf("causes sum to %v ms, the gaps to %v", total, cp.GapMs)
	}
	if len(cp.Slowest) != critSlowest {
		t.Fatalf("%d slowest gaps kept, want %d", len(cp.Slowest), critSlowest)
	}
	g := cp.Slowest[0]
	if g.DurationMs != 40 || g.SentMs != 39.5 || g.ArrivedMs != 39.7 {
		t.Errorf("slowest gap %+v", g)
	}
	found := false
	for _, st := range g.Steps {
		if st.Cause == "cpu_runqueue" && st.Detail == "stress-ng[999]" && st.DurationMs == 30 && st.State == "runnable" {
			found = true
		}
	}
	if !found {
		t.Errorf("the slowest gap's steps do not name 30 ms runnable behind stress-ng[999]: %+v", g.Steps)
	}
	if !strings.Contains(string(b), `"noisy_neighbours"`) {
		t.Error("no noisy_neighbours key")
	}
}

// Run writes critical_path into result.json beside the attribution, and
// the report renders it (the terminal summary names the neighbour).
func TestCriticalPathInResult(t *testing.T) {
	run := newSynthCrit(4, 40)
	dir := t.TempDir()
	s := run.replay(t, dir)
	res := &loadgen.Result{Records: run.records, StartNs: run.t0, EndNs: run.records[len(run.records)-1].EndNs}
	doc := &result.Document{CriticalPath: s.crit.critResult(res.StartNs, nil, nil, nil)}
	path := filepath.Join(dir, "result.json")
	if err := doc.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	back, err := result.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.CriticalPath == nil || back.CriticalPath.Gaps != 160 || back.Completed != 0 || back.BPFBench != nil {
		t.Fatalf("read back %+v (load %+v)", back.CriticalPath, back.Loadgen)
	}
	var term, page strings.Builder
	if err := report.WriteTerminal(&term, back); err != nil {
		t.Fatal(err)
	}
	if err := report.WriteHTML(&page, back); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Critical path", "the p99 gap is", "runnable behind stress-ng[999]", "noisy neighbours", "stress-ng[999] 240 ms"} {
		if !strings.Contains(term.String(), want) {
			t.Errorf("terminal summary lacks %q:\n%s", want, term.String())
		}
	}
	if !strings.Contains(page.String(), `id="table-noisy-neighbours"`) || !strings.Contains(page.String(), "stress-ng[999]") {
		t.Error("report.html has no noisy neighbours table naming stress-ng[999]")
	}
	t.Logf("terminal:\n%s", term.String())
	raw, _ := os.ReadFile(path)
	for _, k := range []string{`"critical_path"`, `"excess_shares"`, `"client_read_delay"`, `"unexplained_fraction"`, `"slowest"`} {
		if !strings.Contains(string(raw), k) {
			t.Errorf("result.json has no %s", k)
		}
	}
}

// trace.json draws the slowest gaps' critical paths in their own track
// group: slices named by cause, and every flow arrow that starts ends.
func TestCriticalPathInTrace(t *testing.T) {
	run := newSynthCrit(4, 40)
	dir := t.TempDir()
	s := run.replay(t, dir)
	res := &loadgen.Result{Records: run.records, StartNs: run.t0, EndNs: run.records[len(run.records)-1].EndNs}
	if err := s.tr.finish(res, &s.log, s.log.Baseline(), nil); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "trace.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	file, err := trace.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	evs := file.TraceEvents
	slicesByCause := map[string]int{}
	starts, ends := map[string]bool{}, map[string]bool{}
	for _, e := range evs {
		if e.Pid != trace.PidCriticalPath {
			continue
		}
		switch e.Ph {
		case "X":
			slicesByCause[e.Name]++
		case "s":
			starts[e.ID] = true
		case "f":
			ends[e.ID] = true
			if e.Bp != "e" {
				t.Errorf("flow end %s not bound to its enclosing slice", e.ID)
			}
		}
	}
	if slicesByCause["cpu_runqueue"] == 0 || slicesByCause["client"] == 0 {
		t.Errorf("critical path slices by cause %v: want cpu_runqueue and client steps", slicesByCause)
	}
	if len(starts) == 0 || len(starts) != len(ends) {
		t.Errorf("%d flow starts, %d ends", len(starts), len(ends))
	}
	for id := range starts {
		if !ends[id] {
			t.Errorf("flow %s starts and never ends", id)
		}
	}
}
