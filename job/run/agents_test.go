package run

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/bpfbench/bpfbench/collectors"
)

type spanList []collectors.Span

func (l *spanList) Record(sp collectors.Span) { *l = append(*l, sp) }

// overlap is the time [s, e) and [a, b) share.
func overlap(s, e, a, b int64) int64 { return max(0, min(e, b)-max(s, a)) }

// Spans eroded by a known bound: each loses the bound at both ends, one
// no longer than twice the bound vanishes and is counted, instants and a
// zero bound pass unchanged.
func TestErodeByClockBound(t *testing.T) {
	const us = int64(1000)
	const bound = 50 * us
	rr := &remoteRun{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var got spanList
	rr.rec = &got
	r := &remote{}
	in := []collectors.Span{
		{Kind: collectors.SpanRunqueue, Start: 1000 * us, End: 2000 * us, Tid: 1},                           // 1 ms: 900 µs left
		{Kind: collectors.SpanOffCPU, Start: 3000 * us, End: 3100 * us, Tid: 1, Detail: "io_wait"},          // 2×bound: vanishes
		{Kind: collectors.SpanCUDA, Start: 4000 * us, End: 4099 * us, Tid: 1},                               // shorter: vanishes
		{Kind: collectors.SpanBlockIO, Start: 5000 * us, End: 5000*us + 2*bound + 1, Tid: 1},                // 1 ns left
		{Kind: collectors.SpanSend, Start: 6000 * us, End: 6000 * us, Tid: 1, Bytes: 10},                    // an instant
		{Kind: collectors.SpanOffCPU, Start: 7000 * us, End: 8000 * us, WakeTs: 7990 * us, Detail: "sleep"}, // wakeup kept
	}
	for _, sp := range in {
		rr.admit(r, sp, bound)
	}
	want := []collectors.Span{
		{Kind: collectors.SpanRunqueue, Start: 1050 * us, End: 1950 * us, Tid: 1},
		{Kind: collectors.SpanBlockIO, Start: 5050 * us, End: 5050*us + 1, Tid: 1},
		{Kind: collectors.SpanSend, Start: 6000 * us, End: 6000 * us, Tid: 1, Bytes: 10},
		{Kind: collectors.SpanOffCPU, Start: 7050 * us, End: 7950 * us, WakeTs: 7990 * us, Detail: "sleep"},
	}
	if len(got) != len(want) {
		t.Fatalf("recorded %d spans, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("span %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if r.received.Load() != 6 || r.below.Load() != 2 {
		t.Errorf("received %d, below the bound %d; want 6 and 2", r.received.Load(), r.below.Load())
	}
	if e := r.eroded.Load(); e != 3*2*bound {
		t.Errorf("eroded %d ns, want %d (2×bound off each of the three spans left with a duration)", e, 3*2*bound)
	}
	for _, sp := range in {
		if e, ok := erode(sp, 0); !ok || e != sp {
			t.Errorf("bound 0 changed %+v into %+v", sp, e)
		}
	}
}

// The rule's guarantee, over random spans, gaps and bounds: the time an
// eroded span shares with a gap is at most the time the span shares with
// it at every clock offset within the bound (so at the true one), and it
// is exactly the worst of them when the span crosses one end of the gap
// by more than the bound.
func TestErodedSpanNeverClaimsMoreThanAnyOffset(t *testing.T) {
	rnd := rand.New(rand.NewPCG(14, 2))
	for trial := 0; trial < 20000; trial++ {
		bound := 1 + rnd.Int64N(100_000)
		s := rnd.Int64N(10_000_000)
		e := s + rnd.Int64N(2_000_000)
		a := rnd.Int64N(10_000_000)
		b := a + 1 + rnd.Int64N(2_000_000)
		sp := collectors.Span{Kind: collectors.SpanRunqueue, Start: s, End: e}
		er, ok := erode(sp, bound)
		claimed := int64(0)
		if ok {
			claimed = overlap(er.Start, er.End, a, b)
		}
		worst := int64(-1)
		for _, d := range []int64{-bound, -bound / 2, 0, bound / 3, bound} {
			ov := overlap(s+d, e+d, a, b)
			if claimed > ov {
				t.Fatalf("span [%d,%d] bound %d gap [%d,%d]: eroded claims %d ns, at offset %d it shares %d", s, e, bound, a, b, claimed, d, ov)
			}
			if worst < 0 || ov < worst {
				worst = ov
			}
		}
		// Crossing the gap's start (or end) by more than the bound, and
		// ending inside it: the worst offset shifts the span out by bound.
		if (s < a-bound && e > a+bound && e < b-bound) || (s > a+bound && s < b-bound && e > b+bound) {
			if claimed != worst {
				t.Fatalf("span [%d,%d] bound %d gap [%d,%d] crossing one end: claimed %d, worst offset %d", s, e, bound, a, b, claimed, worst)
			}
		}
	}
}

// Each agent's spans are eroded by its own clock bound (never narrowing),
// the run's clock_bound_ns is the widest of them.
func TestClockBoundPerAgent(t *testing.T) {
	rr := &remoteRun{}
	tight, loose := &remote{}, &remote{}
	rr.widen(tight, 20_000)
	rr.widen(loose, 90_000)
	rr.widen(tight, 15_000) // a later, better estimate does not narrow it
	if tight.bound.Load() != 20_000 || loose.bound.Load() != 90_000 || rr.boundNs() != 90_000 {
		t.Errorf("bounds: tight %d, loose %d, run %d; want 20000, 90000, 90000", tight.bound.Load(), loose.bound.Load(), rr.boundNs())
	}
}
