package live

import (
	"math"
	"testing"

	"github.com/bpfbench/bpfbench/correlate/critpath"
)

// gapAt is a later token's gap of d ns ending at end, its time split
// between server_compute and cpu_runqueue (runq ns of it).
func gapAt(req int, end, d, runq int64) critpath.Gap {
	g := critpath.Gap{Read: critpath.Read{Request: req, Index: 5, Port: uint16(1000 + req), Start: end - d, End: end}}
	g.Ns[critpath.ServerCompute] = d - runq
	g.Ns[critpath.CPURunqueue] = runq
	g.Steps = []critpath.Step{{Start: end - d, End: end - runq, Cause: critpath.ServerCompute, Thread: critpath.Thread{Tid: 7, Tgid: 7, Comm: "engine"}},
		{Start: end - runq, End: end, Cause: critpath.CPURunqueue, Other: critpath.Thread{Tid: 9, Tgid: 9, Comm: "busy"}}}
	return g
}

// stream feeds rec and roll 50 gaps a second from from to to (ns), each
// of d ns with runq of it in the run queue, and checks w at every half
// second; it returns when w first fired (0: never).
func stream(t *testing.T, rec *Recorder, roll *Rolling, w *Watch, from, to, d, runq int64) (fired int64, last Reading) {
	t.Helper()
	const every = int64(20e6)
	for now := from; now < to; now += every {
		g := gapAt(int(now/every)%8, now, d, runq)
		rec.Add(g)
		roll.Add(CompactOf(g))
		if (now-from)%500e6 == 0 {
			st, ok := roll.quiet()
			rd, f := w.Check(rec, func() Normal { return Normal{Base: st.base, MedianNs: st.median, P99Ns: st.p99, OK: ok} }, now)
			last = rd
			if f && fired == 0 {
				fired = now
			}
		}
	}
	return fired, last
}

// The default trigger: a minute of 10 ms gaps is the normal; 40 ms gaps
// (three times and more) fire it once they held for 30 s, not before,
// and the reading names the run queue's share of the excess.
func TestTriggerFiresAfterItsDuration(t *testing.T) {
	rec, roll := NewRecorder(0, 0), NewRolling()
	w := &Watch{Trigger: DefaultTrigger()}
	if f, _ := stream(t, rec, roll, w, 1e9, 61e9, 10e6, 1e6); f != 0 {
		t.Fatalf("fired at %.1fs on the normal gaps", float64(f)/1e9)
	}
	f, rd := stream(t, rec, roll, w, 61e9, 121e9, 40e6, 31e6)
	if f == 0 {
		t.Fatalf("never fired on gaps four times the normal: last reading p99 %d ns, normal p99 %d ns", rd.P99Ns, rd.Normal.P99Ns)
	}
	// The criterion holds once the recent 10 s p99 crosses 3x (at
	// once: 40 ms gaps fill a p99 within a second), then 30 s.
	if at := float64(f-61e9) / 1e9; at < 30 || at > 33 {
		t.Errorf("fired %.1fs into the contention, want 30-33 s (For 30 s)", at)
	}
	if rd.Band == nil || rd.Band.Top != "cpu_runqueue" {
		t.Errorf("the reading's band %+v, want cpu_runqueue on top", rd.Band)
	}
}

// A trigger on a cause's share holds only while that cause has it; one
// on an absolute p99 only above it; one with no criterion never.
func TestTriggerCriteria(t *testing.T) {
	for _, c := range []struct {
		name      string
		tr        Trigger
		d, runq   int64
		wantFired bool
	}{
		{"share held", Trigger{Cause: "cpu_runqueue", Share: 0.6, For: 5e9}, 40e6, 31e6, true},
		{"share not held", Trigger{Cause: "io_block", Share: 0.6, For: 5e9}, 40e6, 31e6, false},
		{"p99 over", Trigger{P99Ms: 30, For: 5e9}, 40e6, 0, true},
		{"p99 under", Trigger{P99Ms: 50, For: 5e9}, 40e6, 0, false},
		{"no criterion", Trigger{For: 5e9}, 40e6, 31e6, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.tr.Validate(); err != nil {
				t.Fatal(err)
			}
			rec, roll := NewRecorder(0, 0), NewRolling()
			w := &Watch{Trigger: c.tr}
			stream(t, rec, roll, w, 1e9, 61e9, 10e6, 1e6)
			f, _ := stream(t, rec, roll, w, 61e9, 81e9, c.d, c.runq)
			if (f != 0) != c.wantFired {
				t.Errorf("%s: fired %v, want %v", c.tr, f != 0, c.wantFired)
			}
		})
	}
	if err := (Trigger{Cause: "gpu"}).Validate(); err == nil {
		t.Error("an unknown cause validates")
	}
}

// The recorder keeps its window and its byte bound: 1,000 streams' gaps
// stay within MaxBytes; when the gaps alone are over it, every path goes
// first, then the oldest gaps (counted); with a path threshold only the
// slow gaps keep theirs.
func TestRecorderBounds(t *testing.T) {
	const maxBytes = 4 << 20
	rec := NewRecorder(60e9, maxBytes)
	var end int64 = 1e9
	for i := range 200_000 {
		end += 100e3 // 10,000 gaps a second over 1,000 streams
		rec.Add(gapAt(i%1000, end, 10e6, 1e6))
	}
	st := rec.Stats()
	if st.Bytes > maxBytes {
		t.Errorf("holds %d bytes, bound %d", st.Bytes, maxBytes)
	}
	if st.Evicted == 0 || st.Gaps == 0 || st.Paths != 0 || st.PathsShed == 0 {
		t.Errorf("stats %+v: want every path shed, then evictions by bytes", st)
	}
	t.Logf("1,000 streams, 20 s of 10,000 gaps/s with paths: %d gaps held in %d bytes (%d B a gap), %d evicted, %d paths shed", st.Gaps, st.Bytes, st.Bytes/st.Gaps, st.Evicted, st.PathsShed)

	// Paths above 20 ms only: the 10 ms gaps keep none, and the window
	// (60 s) bounds what is held.
	rec = NewRecorder(10e9, maxBytes)
	rec.SetPathAbove(func(float64) (int64, int64) { return 20e6, 20e6 })
	for i := range 30_000 {
		d := int64(10e6)
		if i%100 == 0 {
			d = 50e6
		}
		rec.Add(gapAt(i%1000, int64(i+1)*1e6, d, 1e6))
	}
	st = rec.Stats()
	if st.Gaps != 10_001 || st.Paths != 100 || st.Evicted != 0 {
		t.Errorf("stats %+v: want the last 10 s (10,001 gaps), 100 paths, nothing evicted by bytes", st)
	}
	w := rec.Window(29e9, 30e9)
	if len(w) != 1001 || w[0].Gap.End != 29e9 {
		t.Errorf("window of the last second: %d gaps from %d", len(w), w[0].Gap.End)
	}
}

// The recorder keeps its window before its paths: when the slow tenth's
// paths do not fit its bytes, it keeps them only above the p95, then the
// p99, dropping those it held below, and evicts no gap of the window; once
// the load falls it goes back to the p90.
func TestRecorderKeepsTheWindowBeforeThePaths(t *testing.T) {
	const maxBytes = 4 << 20
	rec := NewRecorder(20e9, maxBytes)
	at := map[float64]int64{0.9: 10e6, 0.95: 20e6, 0.99: 40e6}
	rec.SetPathAbove(func(p float64) (int64, int64) { return at[p], at[p] })
	slow := func(i int) int64 {
		switch r := i % 100; {
		case r == 0:
			return 50e6
		case r < 5:
			return 30e6
		case r < 10:
			return 15e6
		}
		return 5e6
	}
	var end int64
	for i := range 40_000 { // 40 s of 1,000 gaps a second
		end = int64(i+1) * 1e6
		g := gapAt(i%100, end, slow(i), 1e6)
		for range 18 { // a path of 20 steps
			g.Steps = append(g.Steps, g.Steps[0])
		}
		rec.Add(g)
		if i%100 == 0 {
			rec.Expire(end)
		}
	}
	st := rec.Stats()
	if st.Evicted != 0 || st.Gaps != 20_001 || st.Bytes > maxBytes {
		t.Errorf("stats %+v: want the whole 20 s window (20,001 gaps) within %d bytes, no gap evicted", st, maxBytes)
	}
	if st.PathQuantile != 0.99 || st.PathsShed == 0 || st.Paths != 200 {
		t.Errorf("stats %+v: want the paths above the p99 only (200 in the window), those below shed", st)
	}
	for _, r := range rec.Window(0, end) {
		if r.Path != nil && r.Gap.Duration() <= at[0.99] {
			t.Fatalf("a path of %d ns kept at the p99 (%d ns)", r.Gap.Duration(), at[0.99])
		}
	}
	t.Logf("20 s of 1,000 gaps a second, paths of 20 steps: %d gaps and %d paths in %d bytes, %d paths shed", st.Gaps, st.Paths, st.Bytes, st.PathsShed)
	// The load falls to 100 fast gaps a second: the old ones leave the
	// window, and the recorder goes back down to the p90.
	for i := range 3000 {
		end += 10e6
		rec.Add(gapAt(i%100, end, 5e6, 1e6))
		if i%10 == 0 {
			rec.Expire(end)
		}
	}
	if st := rec.Stats(); st.PathQuantile != 0.9 || st.Evicted != 0 {
		t.Errorf("stats %+v after the load fell: want the paths above the p90 again", st)
	}
	// Gaps alike (a narrow distribution: the quantiles a bucket apart,
	// a tenth of the gaps over the "p99"): the quantile keeps no bound,
	// the shortest paths go first and the window stays whole.
	rec = NewRecorder(20e9, maxBytes)
	rec.SetPathAbove(func(float64) (int64, int64) { return 49e6, 49e6 })
	for i := range 40_000 {
		end = int64(i+1) * 1e6
		g := gapAt(i%100, end, 49e6+int64(i%10)*100e3, 1e6)
		for range 18 {
			g.Steps = append(g.Steps, g.Steps[0])
		}
		rec.Add(g)
	}
	st = rec.Stats()
	if st.Evicted != 0 || st.Gaps != 20_001 || st.Bytes > maxBytes || st.Paths == 0 {
		t.Errorf("stats %+v: want the whole window within %d bytes with some paths, no gap evicted", st, maxBytes)
	}
	short := int64(math.MaxInt64)
	for _, r := range rec.Window(0, end) {
		if r.Path != nil {
			short = min(short, r.Gap.Duration())
		}
	}
	if short < 49e6+8*100e3 {
		t.Errorf("a path of %d ns kept: want the longest gaps' (49.8 ms and more)", short)
	}
}
