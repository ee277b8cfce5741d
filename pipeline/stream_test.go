package pipeline

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/exporter/trace"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/transport"
)

const msNs = int64(1e6)

// synthDaemonRun is a synthetic `bpfbench run`: the load generator's
// records, each handed over when its stream ends, and the sections'
// spans, each reaching the recorder some time after it ends.
type synthDaemonRun struct {
	t0      int64
	records []loadgen.Record
	spans   []collectors.Span
	arrive  []int64
	slowest [2]int64 // the slowest gap
}

func newSynthDaemonRun(seed uint64, seconds int) *synthDaemonRun {
	r := rand.New(rand.NewPCG(seed, 17))
	run := &synthDaemonRun{t0: 1_000_000 * msNs}
	end := run.t0 + int64(seconds)*1000*msNs
	var slowest int64
	for i := 0; ; i++ {
		at := run.t0 + int64(i)*125*msNs
		if at >= end {
			break
		}
		rec := loadgen.Record{Index: i, ScheduledNs: at, StartNs: at + r.Int64N(msNs), LocalPort: 40000 + i%50, Success: r.IntN(40) > 0}
		c := rec.StartNs + 30*msNs + r.Int64N(50*msNs)
		for k := range 10 + r.IntN(50) {
			if k > 0 {
				d := 10*msNs + r.Int64N(10*msNs)
				if r.IntN(40) == 0 {
					d += r.Int64N(300 * msNs)
				}
				if d > slowest {
					slowest, run.slowest = d, [2]int64{c, c + d}
				}
				c += d
			}
			rec.ChunkNs = append(rec.ChunkNs, c)
		}
		rec.LastNs = c
		rec.EndNs = c + r.Int64N(3*msNs)
		if !rec.Success {
			rec.Failure, rec.ChunkNs = transport.FailStall, rec.ChunkNs[:1]
		}
		run.records = append(run.records, rec)
	}
	for st := run.t0 - 500*msNs; st < end+500*msNs; st += r.Int64N(600_000) {
		d := r.Int64N(2*msNs) + 1
		if r.IntN(300) == 0 {
			d += r.Int64N(200 * msNs)
		}
		sp := collectors.Span{Start: st, End: st + d, Tid: uint32(100 + r.IntN(6))}
		switch r.IntN(7) {
		case 0:
			sp.Kind = collectors.SpanRunqueue
		case 1:
			sp.Kind, sp.Detail, sp.Blocking = collectors.SpanOffCPU, "io_wait", true
		case 2:
			sp.Kind, sp.Detail = collectors.SpanOffCPU, "sleep"
		case 3:
			sp.Kind, sp.Detail, sp.Bytes, sp.Blocking = collectors.SpanBlockIO, "vda read", 4096, true
		case 4:
			sp.Kind, sp.Detail, sp.Blocking = collectors.SpanCUDA, "cuStreamSynchronize", true
		case 5:
			sp.Kind, sp.Detail = collectors.SpanCUDA, "cuLaunchKernel"
		case 6:
			sp.Kind, sp.Detail, sp.Port, sp.Blocking = collectors.SpanTCP, "zero_window", uint16(40000+r.IntN(50)), true
			if r.IntN(4) == 0 {
				sp.Detail, sp.End, sp.Blocking = "retransmit", sp.Start, false
			}
		}
		run.spans = append(run.spans, sp)
		run.arrive = append(run.arrive, sp.End+r.Int64N(300*msNs))
	}
	return run
}

// batch is the path `bpfbench run` took before streaming: every span and
// interval held, the baseline from all of them, then one engine.
func (run *synthDaemonRun) batch(pid int) (correlate.Baseline, []correlate.Blame) {
	res := &loadgen.Result{Records: run.records}
	intervals := intervalsOf(res)
	acts := activitiesOf(run.spans)
	base := correlate.Baseline{}
	est := correlate.EstimateBaseline(intervals, acts)
	base.ITLNs, base.TTFTNs, base.Rate = est.ITLNs, est.TTFTNs, est.Rate
	eng := correlate.NewEngine(base)
	for _, a := range acts {
		eng.AddActivity(a)
	}
	for _, iv := range intervals {
		eng.AddInterval(iv)
	}
	return base, eng.Flush()
}

// stream replays the run through the recorder in arrival order, ticking
// every 100 ms on a simulated clock.
func (run *synthDaemonRun) stream(t *testing.T, dir string, pid int) (*runStream, int) {
	return run.streamSpooled(t, dir, pid, 0)
}

// streamSpooled is stream with the stream deferred behind a spool of
// spoolMax bytes (0: live, advancing every tick).
func (run *synthDaemonRun) streamSpooled(t *testing.T, dir string, pid int, spoolMax int64) (*runStream, int) {
	marks := &PhaseMarks{marks: []phaseMark{{"baseline", run.t0}, {"later", run.t0 + 10_000*msNs}}}
	tr, err := newTraceStream(dir, run.t0, marks)
	if err != nil {
		t.Fatal(err)
	}
	s := newRunStream(0, nil, tr)
	var now int64
	s.now = func() int64 { return now }
	s.sched.floor0 = run.t0
	s.deferUntilFinish(spoolMax)
	order := make([]int, len(run.spans))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(i, j int) bool { return run.arrive[order[i]] < run.arrive[order[j]] })
	done := make([]int, len(run.records))
	for i := range done {
		done[i] = i
	}
	sort.Slice(done, func(i, j int) bool { return run.records[done[i]].EndNs < run.records[done[j]].EndNs })
	nextSpan, nextRec, held := 0, 0, 0
	for now = run.t0 - time100ms; nextSpan < len(order) || nextRec < len(done); now += time100ms {
		for nextSpan < len(order) && run.arrive[order[nextSpan]] <= now {
			s.Record(run.spans[order[nextSpan]])
			nextSpan++
		}
		for nextRec < len(done) && run.records[done[nextRec]].EndNs <= now {
			s.AddRecord(&run.records[done[nextRec]])
			nextRec++
		}
		if spoolMax > 0 {
			s.tick()
		} else {
			s.advance(false)
		}
		held = max(held, s.eng.Retained()+s.tr.held)
	}
	s.finish()
	return s, held
}

const time100ms = 100 * msNs

func sortedBlames(bl []correlate.Blame) []correlate.Blame {
	sort.Slice(bl, func(i, j int) bool {
		if bl[i].Request != bl[j].Request {
			return bl[i].Request < bl[j].Request
		}
		return bl[i].Index < bl[j].Index
	})
	return bl
}

// The streaming recorder gives the blames, the summary, the timeline and
// the phases of the batch path, holds a bounded window of spans, and
// writes a trace that reads back, with detail around the slowest gap and
// counters elsewhere.
func TestRunStreamMatchesBatch(t *testing.T) {
	for seed := range uint64(2) {
		run := newSynthDaemonRun(seed, 40)
		const pid = 4242
		wantBase, want := run.batch(pid)
		dir := t.TempDir()
		s, held := run.stream(t, dir, pid)
		if s.late() != 0 {
			t.Errorf("seed %d: %d spans late or dropped", seed, s.late())
		}
		if s.spans != uint64(len(run.spans)) {
			t.Errorf("seed %d: recorded %d spans of %d", seed, s.spans, len(run.spans))
		}
		base := s.log.Baseline()
		if base != wantBase {
			t.Fatalf("seed %d: baseline %+v, batch %+v", seed, base, wantBase)
		}
		got := sortedBlames(slices.Collect(s.log.Blames(base)))
		want = sortedBlames(want)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: %d streamed blames differ from the %d of the batch path", seed, len(got), len(want))
		}
		ps := []float64{50, 90, 99}
		if a, b := correlate.SummarizeSeq(s.log.Blames(base), base, ps), correlate.Summarize(want, base, ps); !reflect.DeepEqual(a, b) {
			t.Errorf("seed %d: summaries differ", seed)
		}
		res := &loadgen.Result{Records: run.records, StartNs: run.t0, EndNs: run.records[len(run.records)-1].EndNs}
		marks := &PhaseMarks{marks: []phaseMark{{"baseline", run.t0}, {"later", run.t0 + 10_000*msNs}}}
		if a, b := Timeline(res, s.log.Blames(base)), Timeline(res, slices.Values(want)); !reflect.DeepEqual(a, b) {
			t.Errorf("seed %d: timelines differ", seed)
		}
		if a, b := Phases(res, s.log.Blames(base), base, marks), Phases(res, slices.Values(want), base, marks); !reflect.DeepEqual(a, b) {
			t.Errorf("seed %d: phases differ", seed)
		}
		if held > len(run.spans)/5 {
			t.Errorf("seed %d: held up to %d of %d spans", seed, held, len(run.spans))
		}

		if err := s.tr.finish(res, &s.log, base, nil); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(filepath.Join(dir, "trace.json"))
		if err != nil {
			t.Fatal(err)
		}
		tf, err := trace.Read(f)
		f.Close()
		if err != nil {
			t.Fatalf("trace.json: %v", err)
		}
		slicesIn, counters := map[int]int{}, map[int]int{}
		slowSpans, slowToken := 0, false
		for _, e := range tf.TraceEvents {
			switch e.Ph {
			case "X":
				slicesIn[e.Pid]++
				ts := run.t0 + int64(math.Round(e.Ts*1e3))
				if e.Pid != trace.PidRequests && ts < run.slowest[1] && ts+int64(math.Round(*e.Dur*1e3)) > run.slowest[0] {
					slowSpans++
				}
				if e.Name == "token" && ts == run.slowest[0] {
					slowToken = true
				}
			case "C":
				counters[e.Pid]++
			}
		}
		for _, pid := range []int{trace.PidRequests, trace.PidServer, trace.PidBlock, trace.PidCUDA, trace.PidNetwork} {
			if slicesIn[pid] == 0 {
				t.Errorf("seed %d: no slices in track group %d", seed, pid)
			}
		}
		for _, pid := range []int{trace.PidServer, trace.PidBlock, trace.PidCUDA, trace.PidNetwork} {
			if counters[pid] == 0 {
				t.Errorf("seed %d: no counters in track group %d", seed, pid)
			}
		}
		var inSlow int
		for _, sp := range run.spans {
			if overlaps(sp, run.slowest[0], run.slowest[1]) && sp.End > sp.Start {
				inSlow++
			}
		}
		if !slowToken || slowSpans < inSlow {
			t.Errorf("seed %d: the slowest gap's token slice %v, %d of its %d spans in the trace", seed, slowToken, slowSpans, inSlow)
		}
		if total := slicesIn[trace.PidServer] + slicesIn[trace.PidBlock] + slicesIn[trace.PidCUDA] + slicesIn[trace.PidNetwork]; total > len(run.spans)/2 {
			t.Errorf("seed %d: %d of %d spans in full detail", seed, total, len(run.spans))
		}
	}
}

// The floor is the earliest start of a request not finished: with send
// times that grow with the index, that of the last request in order;
// with fixed offsets in any order, the least offset still to come.
func TestScheduleFloor(t *testing.T) {
	s := newSchedule(nil, 50)
	if s.floor() != 50 {
		t.Errorf("nothing finished: floor %d, want 50", s.floor())
	}
	s.finish(&loadgen.Record{Index: 1, ScheduledNs: 200})
	if s.floor() != 50 {
		t.Errorf("request 0 not finished: floor %d, want 50", s.floor())
	}
	s.finish(&loadgen.Record{Index: 0, ScheduledNs: 100})
	if s.floor() != 200 {
		t.Errorf("0 and 1 finished: floor %d, want 200", s.floor())
	}

	s = newSchedule([]int64{0, 500, 100, 900}, 50)
	s.finish(&loadgen.Record{Index: 0, ScheduledNs: 1000})
	if s.floor() != 1100 {
		t.Errorf("0 finished, 2 sent at +100 not: floor %d, want 1100", s.floor())
	}
	s.finish(&loadgen.Record{Index: 2, ScheduledNs: 1100})
	s.finish(&loadgen.Record{Index: 1, ScheduledNs: 1500})
	if s.floor() != 1900 {
		t.Errorf("0-2 finished: floor %d, want 1900", s.floor())
	}
	s.finish(&loadgen.Record{Index: 3, ScheduledNs: 1900})
	if s.floor() != math.MaxInt64 {
		t.Errorf("all finished: floor %d", s.floor())
	}
}
