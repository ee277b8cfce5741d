package correlate

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"
)

// synthRun is a synthetic `bpfbench run`: requests sent over time whose
// token intervals become known when the request finishes, and activity
// spans that reach userspace some time after they end, out of order.
type synthRun struct {
	acts     []Activity
	arrive   []int64 // when each span reaches the reader
	reqs     [][]Interval
	reqStart []int64
	reqDone  []int64 // when the load generator hands the request over
}

func newSynthRun(r *rand.Rand, seconds int, delay int64) *synthRun {
	run := &synthRun{}
	end := int64(seconds) * 1000 * ms
	t := int64(0)
	for req := 0; t < end; req++ {
		port := uint16(40000 + req%300)
		start := t
		var ivs []Interval
		// TTFT then gaps; a few slow gaps and stalls.
		c := start + 20*ms + r.Int64N(60*ms)
		ivs = append(ivs, Interval{Request: req, Index: 0, Start: start, End: c, Port: port})
		n := 5 + r.IntN(60)
		for k := 1; k < n; k++ {
			d := 8*ms + r.Int64N(8*ms)
			if r.IntN(50) == 0 {
				d += r.Int64N(400 * ms)
			}
			ivs = append(ivs, Interval{Request: req, Index: k, Start: c, End: c + d, Port: port})
			c += d
		}
		run.reqs = append(run.reqs, ivs)
		run.reqStart = append(run.reqStart, start)
		run.reqDone = append(run.reqDone, c+r.Int64N(2*ms))
		t += r.Int64N(250 * ms)
	}
	for st := int64(0); st < end; st += r.Int64N(800_000) {
		cause := Cause(r.IntN(int(NumCauses)))
		d := r.Int64N(2*ms) + 1
		if r.IntN(200) == 0 {
			d += r.Int64N(150 * ms) // a long wait now and then
		}
		a := Activity{Cause: cause, Start: st, End: st + d, Tid: uint32(100 + r.IntN(8))}
		if cause == NetBackpressure {
			a.Port = uint16(40000 + r.IntN(300))
		}
		run.acts = append(run.acts, a)
		run.arrive = append(run.arrive, a.End+r.Int64N(delay+1))
	}
	return run
}

func (run *synthRun) intervals() []Interval {
	var out []Interval
	for _, ivs := range run.reqs {
		out = append(out, ivs...)
	}
	return out
}

// batch is the path that holds everything: the baseline from all the
// intervals and activity, then one engine over all of it.
func (run *synthRun) batch() (Baseline, []Blame) {
	ivs := run.intervals()
	base := EstimateBaseline(ivs, run.acts)
	e := NewEngine(base)
	for _, a := range run.acts {
		e.AddActivity(a)
	}
	for _, iv := range ivs {
		e.AddInterval(iv)
	}
	return base, e.Flush()
}

// stream replays the run in arrival order: spans as they reach the
// reader, intervals as their request finishes, and every tick a
// watermark lag behind the clock; the floor is the start of the oldest
// request not finished. It returns the log and the most spans held.
func (run *synthRun) stream(tick, lag int64) (*Log, *Engine, int) {
	order := make([]int, len(run.acts))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(i, j int) bool { return run.arrive[order[i]] < run.arrive[order[j]] })
	var log Log
	e := NewEngine(Baseline{})
	nextSpan, nextReq, held := 0, 0, 0
	// Requests finish out of order: hand them over by reqDone.
	done := make([]int, len(run.reqs))
	for i := range done {
		done[i] = i
	}
	sort.Slice(done, func(i, j int) bool { return run.reqDone[done[i]] < run.reqDone[done[j]] })
	finished := make([]bool, len(run.reqs))
	oldest := 0
	for now := int64(0); nextSpan < len(order) || nextReq < len(done); now += tick {
		for nextSpan < len(order) && run.arrive[order[nextSpan]] <= now {
			e.AddActivity(run.acts[order[nextSpan]])
			nextSpan++
		}
		for nextReq < len(done) && run.reqDone[done[nextReq]] <= now {
			q := done[nextReq]
			for _, iv := range run.reqs[q] {
				e.AddInterval(iv)
			}
			finished[q] = true
			nextReq++
		}
		for oldest < len(run.reqs) && finished[oldest] {
			oldest++
		}
		floor := now
		if oldest < len(run.reqs) {
			floor = min(floor, run.reqStart[oldest])
		}
		e.SetFloor(floor)
		e.Measure(now-lag, log.Append)
		held = max(held, e.Retained())
	}
	e.SetFloor(maxNs)
	e.Measure(maxNs, log.Append)
	return &log, e, held
}

func sortBlames(bl []Blame) {
	sort.Slice(bl, func(i, j int) bool {
		if bl[i].Request != bl[j].Request {
			return bl[i].Request < bl[j].Request
		}
		return bl[i].Index < bl[j].Index
	})
}

// Streaming a run through the engine in windows, keeping only compact
// measurements and attributing at the end, gives exactly the blames and
// the summary of the batch path, while holding a bounded window of spans.
func TestStreamMatchesBatch(t *testing.T) {
	for seed := range uint64(4) {
		r := rand.New(rand.NewPCG(seed, 3))
		run := newSynthRun(r, 60, 300*ms)
		base, want := run.batch()
		log, e, held := run.stream(100*ms, 500*ms)
		if e.Late() != 0 {
			t.Fatalf("seed %d: %d spans late with a lag above the delivery delay", seed, e.Late())
		}
		if log.Len() != len(want) {
			t.Fatalf("seed %d: %d measurements, want %d", seed, log.Len(), len(want))
		}
		gotBase := log.Baseline()
		if gotBase != base {
			t.Fatalf("seed %d: stream baseline %+v, batch %+v", seed, gotBase, base)
		}
		got := slices.Collect(log.Blames(gotBase))
		sortBlames(got)
		sortBlames(want)
		if !reflect.DeepEqual(got, want) {
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("seed %d: blame %d differs:\nstream %+v\nbatch  %+v", seed, i, got[i], want[i])
				}
			}
		}
		ps := []float64{50, 90, 99}
		if s1, s2 := SummarizeSeq(log.Blames(gotBase), gotBase, ps), Summarize(want, base, ps); !reflect.DeepEqual(s1, s2) {
			t.Errorf("seed %d: summaries differ:\nstream %+v\nbatch  %+v", seed, s1, s2)
		}
		if held >= len(run.acts)/10 {
			t.Errorf("seed %d: held up to %d of %d spans", seed, held, len(run.acts))
		}
		var nonzero int
		for _, b := range want {
			if b.ExcessNs > 0 && b.AttributedNs[Unexplained] < b.ExcessNs {
				nonzero++
			}
		}
		if nonzero < len(want)/20 {
			t.Fatalf("seed %d: only %d of %d intervals have attributed excess: the run tests nothing", seed, nonzero, len(want))
		}
	}
}

// Spans that reach the reader after the watermark has passed intervals
// they overlap are counted as late.
func TestStreamCountsLateSpans(t *testing.T) {
	e := NewEngine(Baseline{})
	var log Log
	e.SetFloor(0)
	e.AddInterval(Interval{Request: 0, Index: 1, Start: 0, End: 10 * ms})
	e.Measure(20*ms, log.Append)
	e.AddActivity(Activity{Cause: IOBlock, Start: 5 * ms, End: 30 * ms})  // ended after the watermark
	e.AddActivity(Activity{Cause: IOBlock, Start: 8 * ms, End: 9 * ms})   // delivered late
	e.AddActivity(Activity{Cause: IOBlock, Start: 12 * ms, End: 14 * ms}) // after every measured interval
	if e.Late() != 2 || log.Len() != 1 {
		t.Errorf("late %d, measured %d", e.Late(), log.Len())
	}
}

func TestLogRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	var log Log
	var want []Measurement
	for i := range 20000 {
		m := Measurement{Interval: Interval{Request: r.IntN(1 << 20), Index: i % 300, Start: r.Int64() - r.Int64(), Port: uint16(r.Uint32())}}
		m.End = m.Start + r.Int64N(1e10) - 5
		for c := range m.Active {
			if r.IntN(3) > 0 {
				m.Active[c] = r.Int64N(1e12)
			}
		}
		log.Append(m)
		want = append(want, m)
	}
	got := slices.Collect(log.All())
	if !reflect.DeepEqual(got, want) {
		t.Fatal("the log does not give back what was appended")
	}
	if perM := log.Bytes() / log.Len(); perM > 72 {
		t.Errorf("%d bytes per measurement", perM)
	}
}
