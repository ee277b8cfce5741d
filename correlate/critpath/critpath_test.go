package critpath

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

const ms = int64(1_000_000)

var (
	thA    = Thread{Tid: 101, Tgid: 100, Comm: "llama-server"}
	thB    = Thread{Tid: 102, Tgid: 100, Comm: "llama-worker"}
	thC    = Thread{Tid: 103, Tgid: 100, Comm: "llama-io"}
	stress = Thread{Tid: 4243, Tgid: 4242, Comm: "stress-ng"}
	kwork  = Thread{Tid: 57, Tgid: 57, Comm: "kworker/u8:3"}
)

const port = 40001

func seg(th Thread, st State, a, b int64) Segment {
	return Segment{Thread: th, State: st, Start: a * ms, End: b * ms}
}

func sleepBy(th Thread, a, b int64, w Wake) Segment {
	s := seg(th, Sleep, a, b)
	s.Wake = w
	return s
}

func runq(th Thread, a, b int64, holders ...Holder) Segment {
	s := seg(th, Runnable, a, b)
	s.Holders = holders
	return s
}

func step(a, b int64, th Thread, st State, c Cause, depth int) Step {
	return Step{Start: a * ms, End: b * ms, Thread: th, State: st, Cause: c, Depth: depth}
}

func (s Step) with(other Thread, w WakeKind, note string) Step {
	s.Other, s.Wake, s.Note = other, w, note
	return s
}

func (s Step) port(p uint16) Step { s.Port = p; return s }

// only runs one gap through a fresh engine.
func only(t *testing.T, segs []Segment, cuda []CUDACall, sends []Send, arrs []Arrival, r Read) Gap {
	t.Helper()
	return onlyWith(t, Options{}, segs, cuda, sends, arrs, r)
}

// onlyWith is only with the engine's options.
func onlyWith(t *testing.T, opt Options, segs []Segment, cuda []CUDACall, sends []Send, arrs []Arrival, r Read) Gap {
	t.Helper()
	e := New(opt)
	for _, s := range segs {
		e.AddSegment(s)
	}
	for _, c := range cuda {
		e.AddCUDA(c)
	}
	for _, s := range sends {
		e.AddSend(s)
	}
	for _, a := range arrs {
		e.AddArrival(a)
	}
	e.AddRead(r)
	gs := e.Flush(maxNs)
	if len(gs) != 1 {
		t.Fatalf("%d gaps flushed, want 1", len(gs))
	}
	checkSums(t, gs[0])
	return gs[0]
}

func checkSteps(t *testing.T, g Gap, want []Step) {
	t.Helper()
	if len(g.Steps) != len(want) {
		t.Errorf("%d steps, want %d:\n%s", len(g.Steps), len(want), dump(g.Steps))
		return
	}
	for i := range want {
		if g.Steps[i] != want[i] {
			t.Errorf("step %d:\n got %s\nwant %s", i, fmtStep(g.Steps[i]), fmtStep(want[i]))
		}
	}
}

func fmtStep(s Step) string {
	return fmt.Sprintf("[%v, %v] %s %s %s depth %d %q", float64(s.Start)/1e6, float64(s.End)/1e6, s.Thread, s.State, s.Cause, s.Depth, s.Detail())
}

func dump(ss []Step) string {
	var b strings.Builder
	for _, s := range ss {
		b.WriteString(fmtStep(s) + "\n")
	}
	return b.String()
}

// checkSums: the steps tile the gap and the causes sum to it.
func checkSums(t *testing.T, g Gap) {
	t.Helper()
	at := g.Start
	for i, s := range g.Steps {
		if s.Start != at || s.End <= s.Start {
			t.Fatalf("gap %d/%d: step %d is [%d, %d], the previous ended at %d\n%s", g.Request, g.Index, i, s.Start, s.End, at, dump(g.Steps))
		}
		at = s.End
	}
	if g.Duration() > 0 && at != g.End {
		t.Fatalf("gap %d/%d: the steps end at %d, the gap at %d", g.Request, g.Index, at, g.End)
	}
	var sum int64
	for _, v := range g.Ns {
		sum += v
	}
	if sum != g.Duration() {
		t.Fatalf("gap %d/%d: causes sum to %d, the gap is %d", g.Request, g.Index, sum, g.Duration())
	}
	if !(g.Start <= g.Sent && g.Sent <= g.Arrived && g.Arrived <= g.End) {
		t.Fatalf("gap %d/%d: send %d, arrival %d out of [%d, %d]", g.Request, g.Index, g.Sent, g.Arrived, g.Start, g.End)
	}
}

// A chain of three threads: the sender sleeps until B wakes it, B until
// C, which waited for a disk; the sender then waits for a CPU held by
// stress-ng.
func TestChainOfThreeThreads(t *testing.T) {
	g := only(t, []Segment{
		seg(thA, Running, 0, 10),
		sleepBy(thA, 10, 70, Wake{Kind: WakeThread, Waker: Thread{Tid: thB.Tid}}),
		runq(thA, 70, 75, Holder{stress, 4 * ms}),
		seg(thA, Running, 75, 95),
		seg(thB, Running, 0, 20),
		sleepBy(thB, 20, 60, Wake{Kind: WakeThread, Waker: thC}),
		seg(thB, Running, 60, 80),
		sleepBy(thC, 0, 15, Wake{Kind: WakeTimer}),
		seg(thC, Running, 15, 30),
		seg(thC, IOWait, 30, 50),
		seg(thC, Running, 50, 60),
	}, nil, []Send{{Time: 90 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 95 * ms, Port: port}},
		Read{Request: 1, Index: 3, Port: port, Start: 0, End: 100 * ms})
	checkSteps(t, g, []Step{
		step(0, 10, thA, Running, ServerCompute, 0),
		step(10, 20, thB, Running, ServerCompute, 1),
		step(20, 30, thC, Running, ServerCompute, 2),
		step(30, 50, thC, IOWait, IOBlock, 2),
		step(50, 60, thC, Running, ServerCompute, 2),
		step(60, 70, thB, Running, ServerCompute, 1),
		step(70, 74, thA, Runnable, CPURunqueue, 0).with(stress, 0, ""),
		step(74, 75, thA, Runnable, CPURunqueue, 0),
		step(75, 90, thA, Running, ServerCompute, 0),
		step(90, 95, Thread{}, None, NetBackpressure, 0),
		step(95, 100, Thread{}, None, Client, 0),
	})
	if d := g.Steps[6].Detail(); d != "stress-ng[4242]" {
		t.Errorf("holder detail %q", d)
	}
	var a Aggregate
	a.Add(g)
	nb := a.Neighbours()
	if len(nb) != 1 || nb[0].Process.String() != "stress-ng[4242]" || nb[0].Ns != 4*ms || nb[0].Gaps != 1 {
		t.Errorf("neighbours %+v", nb)
	}
}

// A wakeup from an IO completion (softirq), and one from a kernel worker
// outside the target.
func TestWakeupFromIOCompletion(t *testing.T) {
	g := only(t, []Segment{
		seg(thA, Running, 0, 10),
		sleepBy(thA, 10, 40, Wake{Kind: WakeBlock}),
		seg(thA, Running, 40, 45),
		sleepBy(thA, 45, 60, Wake{Kind: WakeThread, Waker: kwork}),
		runq(thA, 60, 62),
		seg(thA, Running, 62, 100),
	}, nil, []Send{{Time: 80 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 80 * ms, Port: port}},
		Read{Request: 2, Index: 1, Port: port, Start: 0, End: 80 * ms})
	checkSteps(t, g, []Step{
		step(0, 10, thA, Running, ServerCompute, 0),
		step(10, 40, thA, Sleep, IOBlock, 0).with(Thread{}, WakeBlock, ""),
		step(40, 45, thA, Running, ServerCompute, 0),
		step(45, 60, thA, Sleep, IOBlock, 0).with(kwork, WakeThread, ""),
		step(60, 62, thA, Runnable, CPURunqueue, 0),
		step(62, 80, thA, Running, ServerCompute, 0),
	})
	for i, want := range map[int]string{1: "woken by softirq-block", 3: "woken by kworker/u8:3[57]", 4: "holder unknown"} {
		if d := g.Steps[i].Detail(); d != want {
			t.Errorf("step %d detail %q, want %q", i, d, want)
		}
	}
}

// A CUDA synchronisation that spins on the CPU, then sleeps until the
// device's interrupt, then waits for a CPU: all inside the call is
// gpu_sync but the run-queue wait.
func TestSpinWaitingCUDACall(t *testing.T) {
	g := only(t, []Segment{
		seg(thA, Running, 0, 50),
		sleepBy(thA, 50, 65, Wake{Kind: WakeHardIRQ}),
		runq(thA, 65, 68, Holder{stress, 3 * ms}),
		seg(thA, Running, 68, 100),
	}, []CUDACall{{Tid: thA.Tid, Start: 20 * ms, End: 70 * ms, Name: "cudaStreamSynchronize"}},
		[]Send{{Time: 90 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 92 * ms, Port: port}},
		Read{Request: 3, Index: 5, Port: port, Start: 0, End: 95 * ms})
	const sync = "cudaStreamSynchronize"
	checkSteps(t, g, []Step{
		step(0, 20, thA, Running, ServerCompute, 0),
		step(20, 50, thA, Running, GPUSync, 0).with(Thread{}, 0, sync),
		step(50, 65, thA, Sleep, GPUSync, 0).with(Thread{}, 0, sync),
		step(65, 68, thA, Runnable, CPURunqueue, 0).with(stress, 0, ""),
		step(68, 70, thA, Running, GPUSync, 0).with(Thread{}, 0, sync),
		step(70, 90, thA, Running, ServerCompute, 0),
		step(90, 92, Thread{}, None, NetBackpressure, 0),
		step(92, 95, Thread{}, None, Client, 0),
	})
	if g.Ns[GPUSync] != 47*ms {
		t.Errorf("gpu_sync %d ms, want 47", g.Ns[GPUSync]/ms)
	}
}

// A chunk that waits in the client's socket: it arrived at 20 ms, the
// client read it at 100 ms; the next read finds its chunk already there.
func TestChunkWaitsInClientSocket(t *testing.T) {
	e := New(Options{})
	e.AddSegment(seg(thA, Running, 0, 200))
	e.AddSend(Send{Time: 15 * ms, Tid: thA.Tid, Port: port})
	e.AddArrival(Arrival{Time: 20 * ms, Port: port})
	e.AddRead(Read{Request: 4, Index: 1, Port: port, Start: 0, End: 100 * ms})
	e.AddRead(Read{Request: 4, Index: 2, Port: port, Start: 100 * ms, End: 130 * ms})
	gs := e.Flush(maxNs)
	if len(gs) != 2 {
		t.Fatalf("%d gaps", len(gs))
	}
	checkSums(t, gs[0])
	checkSums(t, gs[1])
	checkSteps(t, gs[0], []Step{
		step(0, 15, thA, Running, ServerCompute, 0),
		step(15, 20, Thread{}, None, NetBackpressure, 0),
		step(20, 100, Thread{}, None, Client, 0),
	})
	checkSteps(t, gs[1], []Step{step(100, 130, Thread{}, None, Client, 0)})
}

// A hole in the sender's history (lost events), a sleep whose waker was
// lost, and a sender with no history at all: unexplained.
func TestLostEventHole(t *testing.T) {
	e := New(Options{})
	for _, s := range []Segment{
		seg(thA, Running, 0, 30),
		// 30..60: lost
		seg(thA, Runnable, 60, 61),
		seg(thA, Running, 61, 70),
		sleepBy(thA, 70, 75, Wake{}),
		seg(thA, Runnable, 75, 76),
		seg(thA, Running, 76, 100),
	} {
		e.AddSegment(s)
	}
	e.AddSend(Send{Time: 90 * ms, Tid: thA.Tid, Port: port})
	e.AddArrival(Arrival{Time: 90 * ms, Port: port})
	e.AddRead(Read{Request: 5, Index: 1, Port: port, Start: 0, End: 90 * ms})
	e.AddSend(Send{Time: 40 * ms, Tid: 999, Port: port + 1})
	e.AddArrival(Arrival{Time: 45 * ms, Port: port + 1})
	e.AddRead(Read{Request: 6, Index: 1, Port: port + 1, Start: 10 * ms, End: 50 * ms})
	gs := e.Flush(maxNs)
	if len(gs) != 2 {
		t.Fatalf("%d gaps", len(gs))
	}
	checkSums(t, gs[0])
	checkSums(t, gs[1])
	checkSteps(t, gs[0], []Step{
		step(10, 40, Thread{Tid: 999}, None, Unexplained, 0).with(Thread{}, 0, NoteNoThread),
		step(40, 45, Thread{}, None, NetBackpressure, 0),
		step(45, 50, Thread{}, None, Client, 0),
	})
	checkSteps(t, gs[1], []Step{
		step(0, 30, thA, Running, ServerCompute, 0),
		step(30, 60, thA, None, Unexplained, 0).with(Thread{}, 0, NoteNoEvents),
		step(60, 61, thA, Runnable, CPURunqueue, 0),
		step(61, 70, thA, Running, ServerCompute, 0),
		step(70, 75, thA, Sleep, Unexplained, 0).with(Thread{}, WakeUnknown, NoteWakerUnknown),
		step(75, 76, thA, Runnable, CPURunqueue, 0),
		step(76, 90, thA, Running, ServerCompute, 0),
	})
}

// The sender's Running segment is not delivered until it is switched out:
// after its last Runnable it runs (the tail rule); after anything else
// the rest is a hole.
func TestTailRule(t *testing.T) {
	e := New(Options{})
	e.AddSegment(seg(thA, Running, 0, 10))
	e.AddSegment(runq(thA, 10, 12))
	e.AddSegment(seg(thB, Running, 0, 10))
	e.AddSend(Send{Time: 30 * ms, Tid: thA.Tid, Port: port})
	e.AddSend(Send{Time: 30 * ms, Tid: thB.Tid, Port: port + 1})
	e.AddRead(Read{Request: 1, Index: 1, Port: port, Start: 0, End: 30 * ms})
	e.AddRead(Read{Request: 2, Index: 1, Port: port + 1, Start: 0, End: 30 * ms})
	gs := e.Flush(30 * ms)
	if len(gs) != 2 {
		t.Fatalf("%d gaps", len(gs))
	}
	checkSteps(t, gs[0], []Step{
		step(0, 10, thA, Running, ServerCompute, 0),
		step(10, 12, thA, Runnable, CPURunqueue, 0),
		step(12, 30, thA, Running, ServerCompute, 0),
		step(30, 30, Thread{}, None, NetBackpressure, 0).with(Thread{}, 0, NoteNoArrival),
	}[:3])
	checkSteps(t, gs[1], []Step{
		step(0, 10, thB, Running, ServerCompute, 0),
		step(10, 30, thB, None, Unexplained, 0).with(Thread{}, 0, NoteNoEvents),
	})
	if !gs[0].NoArrival || gs[0].NoSend {
		t.Errorf("flags %+v", gs[0])
	}
}

// With no sends or arrivals (an older kernel), the gap is server time on
// the thread that ran last before the read.
func TestFallbackWithoutSends(t *testing.T) {
	e := New(Options{})
	e.AddSegment(seg(thA, Running, 0, 40))
	e.AddSegment(sleepBy(thA, 40, 100, Wake{Kind: WakeTimer}))
	e.AddSegment(seg(thB, Running, 0, 20))
	e.AddSegment(seg(thB, IOWait, 20, 45))
	e.AddSegment(seg(thB, Running, 45, 60))
	e.AddSegment(sleepBy(thB, 60, 100, Wake{Kind: WakeTimer}))
	e.AddRead(Read{Request: 1, Index: 0, Port: port, Start: 10 * ms, End: 80 * ms})
	gs := e.Flush(maxNs)
	g := gs[0]
	checkSums(t, g)
	if !g.NoSend || !g.NoArrival || !g.Guessed {
		t.Errorf("flags %+v", g)
	}
	checkSteps(t, g, []Step{
		step(10, 20, thB, Running, ServerCompute, 0),
		step(20, 45, thB, IOWait, IOBlock, 0),
		step(45, 60, thB, Running, ServerCompute, 0),
		step(60, 80, thB, Sleep, ServerSleep, 0).with(Thread{}, WakeTimer, ""),
	})
	st := e.Stats()
	if st.NoSend != 1 || st.NoArrival != 1 || st.Guessed != 1 {
		t.Errorf("stats %+v", st)
	}
	// No target thread at all: unexplained.
	e2 := New(Options{})
	e2.AddRead(Read{Request: 1, Index: 1, Port: port, Start: 0, End: 5 * ms})
	g2 := e2.Flush(maxNs)[0]
	checkSteps(t, g2, []Step{step(0, 5, Thread{}, None, Unexplained, 0).with(Thread{}, 0, NoteNoSender)})
	if e2.Stats().NoThread != 1 {
		t.Errorf("stats %+v", e2.Stats())
	}
}

// Two threads that wake each other in turn: the walk stops at the cycle;
// a chain longer than MaxDepth stops at the limit.
func TestCycleAndDepthLimit(t *testing.T) {
	e := New(Options{MaxDepth: 2})
	th := []Thread{thA, thB, thC, {Tid: 104, Tgid: 100, Comm: "w4"}}
	// Each thread i sleeps [10i, 50] woken by i+1; the last one by A.
	for i, x := range th {
		e.AddSegment(seg(x, Running, 0, int64(10*i)+10))
		e.AddSegment(sleepBy(x, int64(10*i)+10, 50, Wake{Kind: WakeThread, Waker: th[(i+1)%len(th)]}))
		e.AddSegment(seg(x, Running, 50, 100))
	}
	e.AddSend(Send{Time: 60 * ms, Tid: thA.Tid, Port: port})
	e.AddRead(Read{Request: 1, Index: 1, Port: port, Start: 0, End: 60 * ms})
	g := e.Flush(maxNs)[0]
	checkSums(t, g)
	checkSteps(t, g, []Step{
		step(0, 10, thA, Running, ServerCompute, 0),
		step(10, 20, thB, Running, ServerCompute, 1),
		step(20, 30, thC, Running, ServerCompute, 2),
		step(30, 50, thC, Sleep, ServerSleep, 2).with(th[3], WakeThread, NoteDepthLimit),
		step(50, 60, thA, Running, ServerCompute, 0),
	})
	e = New(Options{})
	e.AddSegment(seg(thA, Running, 0, 10))
	e.AddSegment(sleepBy(thA, 10, 50, Wake{Kind: WakeThread, Waker: thB}))
	e.AddSegment(seg(thA, Running, 50, 100))
	e.AddSegment(sleepBy(thB, 0, 50, Wake{Kind: WakeThread, Waker: thA}))
	e.AddSegment(seg(thB, Running, 50, 100))
	e.AddSend(Send{Time: 60 * ms, Tid: thA.Tid, Port: port})
	e.AddRead(Read{Request: 1, Index: 1, Port: port, Start: 0, End: 60 * ms})
	g = e.Flush(maxNs)[0]
	checkSums(t, g)
	checkSteps(t, g, []Step{
		step(0, 10, thA, Running, ServerCompute, 0),
		step(10, 50, thB, Sleep, ServerSleep, 1).with(thA, WakeThread, NoteCycle),
		step(50, 60, thA, Running, ServerCompute, 0),
	})
	if e.Stats().Cycles != 1 {
		t.Errorf("stats %+v", e.Stats())
	}
}

// A network receive wakes the sender: this request's connection is
// net_backpressure, another one server_sleep.
func TestNetRxWake(t *testing.T) {
	e := New(Options{})
	e.AddSegment(seg(thA, Running, 0, 10))
	e.AddSegment(sleepBy(thA, 10, 20, Wake{Kind: WakeNetRx, Port: port}))
	e.AddSegment(seg(thA, Running, 20, 30))
	e.AddSegment(sleepBy(thA, 30, 40, Wake{Kind: WakeNetRx, Port: 5000}))
	e.AddSegment(seg(thA, Running, 40, 60))
	e.AddSend(Send{Time: 50 * ms, Tid: thA.Tid, Port: port})
	e.AddArrival(Arrival{Time: 50 * ms, Port: port})
	e.AddRead(Read{Request: 1, Index: 1, Port: port, Start: 0, End: 50 * ms})
	g := e.Flush(maxNs)[0]
	checkSums(t, g)
	checkSteps(t, g, []Step{
		step(0, 10, thA, Running, ServerCompute, 0),
		step(10, 20, thA, Sleep, NetBackpressure, 0).with(Thread{}, WakeNetRx, "").port(port),
		step(20, 30, thA, Running, ServerCompute, 0),
		step(30, 40, thA, Sleep, ServerSleep, 0).with(Thread{}, WakeNetRx, NoteOtherConn).port(5000),
		step(40, 50, thA, Running, ServerCompute, 0),
	})
	if d := g.Steps[3].Detail(); d != "woken by softirq-net-rx port 5000 (another connection)" {
		t.Errorf("detail %q", d)
	}
}

func TestExcess(t *testing.T) {
	base := Baseline{ITL: Normal{ServerCompute: 8 * ms, CPURunqueue: 1 * ms, Client: 1 * ms}}
	g := Gap{Read: Read{Index: 2, Start: 0, End: 30 * ms}}
	g.Ns[ServerCompute] = 6 * ms // 2 ms below normal: clamped
	g.Ns[CPURunqueue] = 19 * ms  // +18
	g.Ns[IOBlock] = 3 * ms       // +3
	g.Ns[Client] = 2 * ms        // +1
	x := g.Excess(base)
	if x.NormalNs != 10*ms || x.ExcessNs != 20*ms {
		t.Fatalf("%+v", x)
	}
	// Σ over = 22 ms, renormalised to the 20 ms excess.
	want := map[Cause]float64{CPURunqueue: 18.0 / 22, IOBlock: 3.0 / 22, Client: 1.0 / 22}
	var sum float64
	var ns int64
	for c := range NumCauses {
		sum += x.Shares[c]
		ns += x.Ns[c]
		if d := x.Shares[c] - want[c]; d > 1e-12 || d < -1e-12 {
			t.Errorf("%s share %v, want %v", c, x.Shares[c], want[c])
		}
	}
	if sum < 1-1e-12 || sum > 1+1e-12 || ns != x.ExcessNs {
		t.Errorf("shares sum to %v, ns to %d", sum, ns)
	}
	// Rounding: 10 ns over three equal causes.
	g = Gap{Read: Read{Index: 1, Start: 0, End: 10}}
	g.Ns[CPURunqueue], g.Ns[IOBlock], g.Ns[Client], g.Ns[ServerCompute] = 3, 3, 3, 1
	x = g.Excess(Baseline{ITL: Normal{}})
	if x.Ns[CPURunqueue]+x.Ns[IOBlock]+x.Ns[Client]+x.Ns[ServerCompute] != 10 {
		t.Errorf("%+v", x)
	}
	// No excess: all zero.
	g = Gap{Read: Read{Index: 1, Start: 0, End: 5 * ms}}
	g.Ns[ServerCompute] = 5 * ms
	if x := g.Excess(base); x.ExcessNs != 0 || x.Shares != [NumCauses]float64{} {
		t.Errorf("%+v", x)
	}
}

func TestBaselineOfAndJSON(t *testing.T) {
	mk := func(idx int, comp, rq int64) Gap {
		g := Gap{Read: Read{Index: idx}}
		g.Ns[ServerCompute], g.Ns[CPURunqueue] = comp, rq
		return g
	}
	b := BaselineOf([]Gap{mk(0, 50, 0), mk(1, 8, 0), mk(1, 10, 2), mk(1, 9, 0), mk(0, 70, 10)})
	if b.ITL[ServerCompute] != 9 || b.ITL[CPURunqueue] != 0 || b.TTFT[ServerCompute] != 60 || b.TTFT[CPURunqueue] != 5 {
		t.Errorf("%+v", b)
	}
	js, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"server_compute":9`) {
		t.Errorf("%s", js)
	}
	var back Baseline
	if err := json.Unmarshal(js, &back); err != nil || back != b {
		t.Errorf("%+v %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"itl_ns":{"nope":1}}`), &back); err == nil {
		t.Error("an unknown cause read")
	}
}

func TestCauseNames(t *testing.T) {
	want := "cpu_runqueue io_block gpu_sync net_backpressure server_compute server_sleep server_stopped client unexplained"
	if got := strings.Join(CauseNames(), " "); got != want {
		t.Errorf("%s", got)
	}
}

// A connection held back (the client's window at zero) while the sender
// slept and ran: that time is net_backpressure; a CUDA call inside the
// hold keeps gpu_sync; a hold of another connection changes nothing; the
// parts still sum to the gap.
func TestHeldConnection(t *testing.T) {
	e := New(Options{})
	e.AddSegment(seg(thA, Running, 0, 10))
	e.AddSegment(sleepBy(thA, 10, 40, Wake{Kind: WakeTimer}))
	e.AddSegment(seg(thA, Running, 40, 80))
	e.AddCUDA(CUDACall{Tid: thA.Tid, Start: 50 * ms, End: 60 * ms, Name: "cuStreamSynchronize"})
	e.AddHold(Hold{Port: port, Start: 20 * ms, End: 55 * ms, Kind: "zero_window"})
	e.AddHold(Hold{Port: port, Start: 30 * ms, End: 45 * ms, Kind: "retransmit"})
	e.AddHold(Hold{Port: 5000, Start: 0, End: 80 * ms, Kind: "zero_window"})
	e.AddHold(Hold{Port: port, Start: 5 * ms, End: 5 * ms}) // malformed
	e.AddSend(Send{Time: 70 * ms, Tid: thA.Tid, Port: port})
	e.AddArrival(Arrival{Time: 75 * ms, Port: port})
	e.AddRead(Read{Request: 1, Index: 1, Port: port, Start: 0, End: 80 * ms})
	if n := e.Retained(); n != 3+3+1+2+1 {
		t.Errorf("%d items retained, want 10 (3 segments, 3 holds, a CUDA call, a send indexed twice and an arrival)", n)
	}
	g := e.Flush(maxNs)[0]
	checkSums(t, g)
	held := func(a, b int64) Step {
		return Step{Start: a * ms, End: b * ms, Cause: NetBackpressure, Port: port, Note: NoteHeld + "zero_window"}
	}
	checkSteps(t, g, []Step{
		step(0, 10, thA, Running, ServerCompute, 0),
		step(10, 20, thA, Sleep, ServerSleep, 0).with(Thread{}, WakeTimer, ""),
		held(20, 50),
		step(50, 60, thA, Running, GPUSync, 0).with(Thread{}, 0, "cuStreamSynchronize"),
		step(60, 70, thA, Running, ServerCompute, 0),
		step(70, 75, Thread{}, None, NetBackpressure, 0),
		step(75, 80, Thread{}, None, Client, 0),
	})
	if s := e.Stats(); s.Malformed != 1 {
		t.Errorf("malformed %d, want 1", s.Malformed)
	}
	if hs := e.holds; len(hs) != 0 {
		t.Errorf("holds kept past the horizon: %v", hs)
	}
}

// A gateway: its worker sleeps until the engine's chunk arrives on the
// upstream connection (a net-rx wakeup with no port), then sends it to
// the client. The walk hops to the engine's thread up to its send on the
// upstream connection (a port with no arrival), then the chunk in flight;
// the gateway's own sleep before the engine began is not a hop.
func TestGatewayHop(t *testing.T) {
	gw := Thread{Tid: 201, Tgid: 200, Comm: "nginx"}
	const upstream = 9000
	e := New(Options{})
	e.AddSegment(seg(gw, Running, 0, 2))
	e.AddSegment(sleepBy(gw, 2, 41, Wake{Kind: WakeNetRx}))
	e.AddSegment(seg(gw, Running, 41, 45))
	e.AddSegment(sleepBy(thA, 0, 5, Wake{Kind: WakeTimer}))
	e.AddSegment(seg(thA, Running, 5, 40))
	e.AddSegment(sleepBy(thA, 40, 60, Wake{Kind: WakeTimer}))
	e.AddSend(Send{Time: 40 * ms, Tid: thA.Tid, Port: upstream})
	e.AddSend(Send{Time: 44 * ms, Tid: gw.Tid, Port: port})
	e.AddArrival(Arrival{Time: 44 * ms, Port: port})
	e.AddRead(Read{Request: 1, Index: 1, Port: port, Start: 0, End: 45 * ms})
	g := e.Flush(maxNs)[0]
	checkSums(t, g)
	checkSteps(t, g, []Step{
		step(0, 2, gw, Running, ServerCompute, 0),
		step(2, 5, thA, Sleep, ServerSleep, 1).with(Thread{}, WakeTimer, ""),
		step(5, 40, thA, Running, ServerCompute, 1),
		Step{Start: 40 * ms, End: 41 * ms, Cause: NetBackpressure, Port: upstream, Note: NoteHop},
		step(41, 44, gw, Running, ServerCompute, 0),
		step(44, 45, Thread{}, None, Client, 0),
	})
	if s := e.Stats(); s.Hops != 1 {
		t.Errorf("hops %d, want 1", s.Hops)
	}
}

// TestDataEdge: a frontend thread busy with other work (running, woken
// by nothing) reads the engine's step frame from a unix socket and sends
// the chunk; the engine's GPU wait before the write is the gap's, through
// the data edge. When the frontend waited for the connection between the
// read and the send, the wait's own edge (a network receive on the gap's
// connection) says what held the chunk, and the data edge is not taken.
func TestDataEdge(t *testing.T) {
	fe := Thread{Tid: 301, Tgid: 300, Comm: "frontend"}
	eng := Thread{Tid: 311, Tgid: 310, Comm: "EngineCore"}
	build := func(frontendWaits bool) (*Engine, Gap) {
		e := New(Options{})
		e.AddSegment(seg(eng, Running, 0, 10))
		e.AddSegment(sleepBy(eng, 10, 30, Wake{Kind: WakeTimer}))
		e.AddCUDA(CUDACall{Tid: eng.Tid, Start: 10 * ms, End: 30 * ms, Name: "cuStreamSynchronize"})
		e.AddSegment(seg(eng, Running, 30, 60))
		if frontendWaits {
			e.AddSegment(seg(fe, Running, 0, 32))
			e.AddSegment(sleepBy(fe, 32, 40, Wake{Kind: WakeNetRx, Port: port}))
			e.AddSegment(seg(fe, Running, 40, 60))
		} else {
			e.AddSegment(seg(fe, Running, 0, 60))
		}
		e.AddData(Data{Reader: fe, Writer: eng, Written: 31 * ms, Read: 31 * ms})
		e.AddSend(Send{Time: 41 * ms, Tid: fe.Tid, Port: port})
		e.AddArrival(Arrival{Time: 41 * ms, Port: port})
		e.AddRead(Read{Request: 1, Index: 1, Port: port, Start: 0, End: 42 * ms})
		g := e.Flush(maxNs)[0]
		checkSums(t, g)
		return e, g
	}
	e, g := build(false)
	checkSteps(t, g, []Step{
		step(0, 10, eng, Running, ServerCompute, 1),
		step(10, 30, eng, Sleep, GPUSync, 1).with(Thread{}, 0, "cuStreamSynchronize"),
		step(30, 31, eng, Running, ServerCompute, 1),
		step(31, 41, fe, Running, ServerCompute, 0),
		step(41, 42, Thread{}, None, Client, 0),
	})
	if s := e.Stats(); s.DataEdges != 1 {
		t.Errorf("data edges followed %d, want 1", s.DataEdges)
	}
	e, g = build(true)
	checkSteps(t, g, []Step{
		step(0, 32, fe, Running, ServerCompute, 0),
		step(32, 40, fe, Sleep, NetBackpressure, 0).with(Thread{}, WakeNetRx, "").port(port),
		step(40, 41, fe, Running, ServerCompute, 0),
		step(41, 42, Thread{}, None, Client, 0),
	})
	if s := e.Stats(); s.DataEdges != 0 {
		t.Errorf("data edges followed %d, want 0", s.DataEdges)
	}
}

// TestChunksInOrder: the client fell behind (its socket queued chunks 2
// and 3 before it read chunk 2), and a segment was lost and sent again
// (chunk 3 left at 30 and arrived, with chunk 4, at 70). Each chunk is
// the next send and the next arrival after the previous token's, not the
// last chunk sent or arrived before the read; a stretch the load
// generator waited for a CPU while a chunk was in flight is the client's;
// and a deliberate pause of the reader is its backpressure.
func TestChunksInOrder(t *testing.T) {
	e := New(Options{})
	e.AddSegment(seg(thA, Running, 0, 100))
	for _, at := range []int64{10, 20, 30, 40} {
		e.AddSend(Send{Time: at * ms, Tid: thA.Tid, Port: port})
	}
	for _, at := range []int64{11, 21, 70} {
		e.AddArrival(Arrival{Time: at * ms, Port: port})
	}
	e.AddClientWait(ClientWait{Start: 50 * ms, End: 60 * ms, Holder: stress})
	e.AddRead(Read{Request: 1, Index: 1, Port: port, Start: 0, End: 12 * ms})
	e.AddRead(Read{Request: 1, Index: 2, Port: port, Start: 12 * ms, End: 25 * ms, PauseStart: 22 * ms, PauseEnd: 24 * ms})
	e.AddRead(Read{Request: 1, Index: 3, Port: port, Start: 25 * ms, End: 71 * ms})
	gs := e.Flush(maxNs)
	if len(gs) != 3 {
		t.Fatalf("%d gaps", len(gs))
	}
	for _, g := range gs {
		checkSums(t, g)
	}
	checkSteps(t, gs[1], []Step{
		step(12, 20, thA, Running, ServerCompute, 0),
		step(20, 21, Thread{}, None, NetBackpressure, 0),
		step(21, 22, Thread{}, None, Client, 0),
		step(22, 24, Thread{}, None, NetBackpressure, 0).with(Thread{}, 0, NoteReaderPaused).port(port),
		step(24, 25, Thread{}, None, Client, 0),
	})
	checkSteps(t, gs[2], []Step{
		step(25, 30, thA, Running, ServerCompute, 0),
		step(30, 50, Thread{}, None, NetBackpressure, 0),
		step(50, 60, Thread{}, Runnable, Client, 0).with(stress, 0, NoteClientWaited),
		step(60, 70, Thread{}, None, NetBackpressure, 0),
		step(70, 71, Thread{}, None, Client, 0),
	})
}

// A thread pool at a barrier: the sender runs (spins) while its sibling
// waits for a CPU held by stress-ng: that stretch is the sibling's wait,
// cpu_runqueue with stress-ng named. Its wait behind a thread of the
// targets (the sender itself) stays the process's own compute, and so
// does the sender's running while the sibling sleeps.
func TestSiblingWaitAtABarrier(t *testing.T) {
	g := only(t, []Segment{
		seg(thA, Running, 0, 100),
		seg(thB, Running, 0, 20),
		runq(thB, 20, 60, Holder{stress, 30 * ms}, Holder{thC, 10 * ms}),
		seg(thB, Running, 60, 70),
		runq(thB, 70, 80, Holder{thA, 10 * ms}),
		sleepBy(thB, 80, 100, Wake{Kind: WakeTimer}),
		seg(thC, Sleep, 0, 100),
	}, nil, []Send{{Time: 90 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 92 * ms, Port: port}},
		Read{Request: 1, Index: 2, Port: port, Start: 0, End: 95 * ms})
	checkSteps(t, g, []Step{
		step(0, 20, thA, Running, ServerCompute, 0),
		step(20, 50, thB, Runnable, CPURunqueue, 0).with(stress, 0, NoteSiblingWait),
		step(50, 90, thA, Running, ServerCompute, 0),
		step(90, 92, Thread{}, None, NetBackpressure, 0),
		step(92, 95, Thread{}, None, Client, 0),
	})
	if g.Ns[CPURunqueue] != 30*ms || g.Ns[ServerCompute] != 60*ms {
		t.Errorf("cpu_runqueue %d ms, server_compute %d ms; want 30 and 60", g.Ns[CPURunqueue]/ms, g.Ns[ServerCompute]/ms)
	}
	// A thread alone in its process keeps its running time.
	g = only(t, []Segment{
		seg(stress, Running, 0, 100),
		seg(thB, Running, 0, 100),
	}, nil, []Send{{Time: 90 * ms, Tid: stress.Tid, Port: port}}, []Arrival{{Time: 92 * ms, Port: port}},
		Read{Request: 1, Index: 2, Port: port, Start: 0, End: 95 * ms})
	if g.Ns[ServerCompute] != 90*ms {
		t.Errorf("a lone thread: server_compute %d ms, want 90", g.Ns[ServerCompute]/ms)
	}
}

// Interrupts on the thread's CPU while it ran: a part of the running
// stretch has its share of them, io_block for the disk's and
// net_backpressure for the network's; inside a blocking CUDA call the
// stretch stays gpu_sync; more interrupt time than the segment (folded
// stints) takes at most the piece.
func TestInterruptsInRunning(t *testing.T) {
	run := seg(thA, Running, 0, 40)
	run.IRQ = IRQTime{Block: 8 * ms, Net: 4 * ms}
	g := only(t, []Segment{run}, nil,
		[]Send{{Time: 40 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 45 * ms, Port: port}},
		Read{Request: 1, Index: 2, Port: port, Start: 20 * ms, End: 50 * ms})
	checkSteps(t, g, []Step{
		step(20, 34, thA, Running, ServerCompute, 0),
		step(34, 38, thA, Running, IOBlock, 0).with(Thread{}, 0, NoteIRQBlock),
		step(38, 40, thA, Running, NetBackpressure, 0).with(Thread{}, 0, NoteIRQNet),
		step(40, 45, Thread{}, None, NetBackpressure, 0),
		step(45, 50, Thread{}, None, Client, 0),
	})

	g = only(t, []Segment{run}, []CUDACall{{Tid: thA.Tid, Start: 30 * ms, End: 40 * ms, Name: "cuStreamSynchronize"}},
		[]Send{{Time: 40 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 45 * ms, Port: port}},
		Read{Request: 1, Index: 2, Port: port, Start: 20 * ms, End: 50 * ms})
	checkSteps(t, g, []Step{
		step(20, 27, thA, Running, ServerCompute, 0),
		step(27, 29, thA, Running, IOBlock, 0).with(Thread{}, 0, NoteIRQBlock),
		step(29, 30, thA, Running, NetBackpressure, 0).with(Thread{}, 0, NoteIRQNet),
		step(30, 40, thA, Running, GPUSync, 0).with(Thread{}, 0, "cuStreamSynchronize"),
		step(40, 45, Thread{}, None, NetBackpressure, 0),
		step(45, 50, Thread{}, None, Client, 0),
	})

	run.IRQ = IRQTime{Block: 100 * ms, Net: 100 * ms}
	g = only(t, []Segment{run}, nil,
		[]Send{{Time: 40 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 40 * ms, Port: port}},
		Read{Request: 1, Index: 2, Port: port, Start: 20 * ms, End: 40 * ms})
	if g.Ns[IOBlock] != 20*ms || g.Ns[ServerCompute] != 0 {
		t.Errorf("io_block %d ms, server_compute %d ms: want all 20 ms on the disk", g.Ns[IOBlock]/ms, g.Ns[ServerCompute]/ms)
	}
}

// A wait for a CPU held by the block layer's worker (kblockd's
// high-priority pool) is the disk's work on the server's CPU: io_block,
// noted, and the worker is still a noisy neighbour; behind any other task
// it is cpu_runqueue.
func TestRunqueueBehindTheBlockWorker(t *testing.T) {
	kblockd := Thread{Tid: 44, Tgid: 44, Comm: "kworker/1:1H"}
	g := only(t, []Segment{
		seg(thA, Running, 0, 40),
		runq(thA, 40, 50, Holder{kblockd, 6 * ms}, Holder{stress, 4 * ms}),
		seg(thA, Running, 50, 90),
	}, nil, []Send{{Time: 90 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 92 * ms, Port: port}},
		Read{Request: 1, Index: 3, Port: port, Start: 0, End: 95 * ms})
	checkSteps(t, g, []Step{
		step(0, 40, thA, Running, ServerCompute, 0),
		step(40, 46, thA, Runnable, IOBlock, 0).with(kblockd, 0, NoteBlockWorker),
		step(46, 50, thA, Runnable, CPURunqueue, 0).with(stress, 0, ""),
		step(50, 90, thA, Running, ServerCompute, 0),
		step(90, 92, Thread{}, None, NetBackpressure, 0),
		step(92, 95, Thread{}, None, Client, 0),
	})
	var a Aggregate
	a.Add(g)
	nb := a.Neighbours()
	if len(nb) != 2 || nb[0].Process != kblockd || nb[0].Ns != 6*ms || nb[1].Process != stress {
		t.Errorf("neighbours %+v, want the block worker (6 ms) and stress-ng", nb)
	}
	for comm, want := range map[string]bool{
		"kworker/1:1H": true, "kworker/0:0H-kblockd": true, "kblockd": true,
		"kworker/1:1H-events_highpri": false, "kworker/u8:3": false, "kworker/1:2": false, "stress-ng": false, "kworker/1:1-kblockd": false,
	} {
		if BlockWorker(comm) != want {
			t.Errorf("BlockWorker(%q) = %v, want %v", comm, !want, want)
		}
	}
}

// Steal inside a running stretch is the thread waiting for a physical
// CPU while the guest saw it running: its share of the part walked is
// cpu_runqueue held by the hypervisor, after the interrupts' shares, and
// the hypervisor is a noisy neighbour.
func TestStealInRunning(t *testing.T) {
	run := seg(thA, Running, 0, 40)
	run.IRQ = IRQTime{Block: 8 * ms, Steal: 16 * ms}
	g := only(t, []Segment{run}, nil,
		[]Send{{Time: 40 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 45 * ms, Port: port}},
		Read{Request: 1, Index: 2, Port: port, Start: 20 * ms, End: 50 * ms})
	checkSteps(t, g, []Step{
		step(20, 28, thA, Running, ServerCompute, 0),
		step(28, 32, thA, Running, IOBlock, 0).with(Thread{}, 0, NoteIRQBlock),
		step(32, 40, thA, Running, CPURunqueue, 0).with(Hypervisor, 0, NoteSteal),
		step(40, 45, Thread{}, None, NetBackpressure, 0),
		step(45, 50, Thread{}, None, Client, 0),
	})
	var a Aggregate
	a.Add(g)
	if nb := a.Neighbours(); len(nb) != 1 || nb[0].Process != Hypervisor || nb[0].Ns != 8*ms {
		t.Errorf("neighbours %+v, want the hypervisor, 8 ms", nb)
	}
	run.IRQ = IRQTime{Block: 30 * ms, Steal: 30 * ms}
	g = only(t, []Segment{run}, nil,
		[]Send{{Time: 40 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 40 * ms, Port: port}},
		Read{Request: 1, Index: 2, Port: port, Start: 20 * ms, End: 40 * ms})
	if g.Ns[IOBlock] != 15*ms || g.Ns[CPURunqueue] != 5*ms || g.Ns[ServerCompute] != 0 {
		t.Errorf("io_block %d ms, cpu_runqueue %d ms, server_compute %d ms: want 15, 5 and 0 (the interrupts first, the steal to what is left)",
			g.Ns[IOBlock]/ms, g.Ns[CPURunqueue]/ms, g.Ns[ServerCompute]/ms)
	}
}

// A sender stopped (SIGSTOP, a tracer, a freezer) on the path: the stop
// is server_stopped, who resumed it is named and not walked.
func TestStoppedOnThePath(t *testing.T) {
	kill := Thread{Tid: 900, Tgid: 900, Comm: "kill"}
	stop := seg(thA, Stopped, 10, 60)
	stop.Wake = Wake{Kind: WakeThread, Waker: kill}
	g := only(t, []Segment{
		seg(thA, Running, 0, 10),
		stop,
		runq(thA, 60, 62),
		seg(thA, Running, 62, 100),
		seg(kill, Running, 0, 100), // not a target's: never walked
	}, nil, []Send{{Time: 80 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 80 * ms, Port: port}},
		Read{Request: 2, Index: 1, Port: port, Start: 0, End: 80 * ms})
	checkSteps(t, g, []Step{
		step(0, 10, thA, Running, ServerCompute, 0),
		step(10, 60, thA, Stopped, ServerStopped, 0).with(kill, WakeThread, ""),
		step(60, 62, thA, Runnable, CPURunqueue, 0),
		step(62, 80, thA, Running, ServerCompute, 0),
	})
	if d := g.Steps[1].Detail(); d != "resumed by kill[900]" {
		t.Errorf("detail %q", d)
	}
	if g.Ns[ServerStopped] != 50*ms {
		t.Errorf("server_stopped %d ms", g.Ns[ServerStopped]/ms)
	}
}

// A gap of the server's writes (the live view, Read.AtSend) ends at the
// send: walked back from it on the sending thread, with no network or
// client part, even where a client's arrivals are known on the port.
func TestGapAtSend(t *testing.T) {
	g := only(t, []Segment{runq(thA, 0, 12, Holder{stress, 12 * ms}), seg(thA, Running, 12, 40)}, nil,
		[]Send{{Time: 30 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 35 * ms, Port: port}},
		Read{Request: 1, Index: 3, Port: port, Start: 0, End: 30 * ms, AtSend: true})
	checkSteps(t, g, []Step{
		step(0, 12, thA, Runnable, CPURunqueue, 0).with(stress, 0, ""),
		step(12, 30, thA, Running, ServerCompute, 0),
	})
	if g.Sent != 30*ms || g.Arrived != 30*ms || g.NoArrival || g.NoSend {
		t.Errorf("sent %d arrived %d (no arrival %v, no send %v), want both at the end", g.Sent, g.Arrived, g.NoArrival, g.NoSend)
	}
}

// A wait for a CPU held by the server's own thread is the server's own
// work: the walk follows the holder over the stretch (running:
// server_compute; spinning in a blocking CUDA call: gpu_sync), and a
// holder it cannot follow (on the path already) is server_compute, noted.
// Behind a task outside the targets it stays cpu_runqueue.
func TestRunqueueBehindTheServersOwnThread(t *testing.T) {
	g := only(t, []Segment{
		seg(thA, Running, 0, 30),
		runq(thA, 30, 60, Holder{thB, 10 * ms}, Holder{stress, 5 * ms}, Holder{thB, 15 * ms}),
		seg(thA, Running, 60, 90),
		seg(thB, Running, 0, 100),
	}, []CUDACall{{Tid: thB.Tid, Start: 45 * ms, End: 70 * ms, Name: "cudaStreamSynchronize"}},
		[]Send{{Time: 90 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 92 * ms, Port: port}},
		Read{Request: 1, Index: 4, Port: port, Start: 0, End: 95 * ms})
	// stress-ng took 5 ms of the 30 ms wait, thB 25: a fifth of thB's
	// time repaid stress-ng's (owedOf) and is stress-ng's cpu_runqueue.
	checkSteps(t, g, []Step{
		step(0, 30, thA, Running, ServerCompute, 0),
		step(30, 32, thA, Runnable, CPURunqueue, 0).with(stress, 0, NoteOwed),
		step(32, 40, thB, Running, ServerCompute, 1),
		step(40, 45, thA, Runnable, CPURunqueue, 0).with(stress, 0, ""),
		step(45, 48, thA, Runnable, CPURunqueue, 0).with(stress, 0, NoteOwed),
		step(48, 60, thB, Running, GPUSync, 1).with(Thread{}, 0, "cudaStreamSynchronize"),
		step(60, 90, thA, Running, ServerCompute, 0),
		step(90, 92, Thread{}, None, NetBackpressure, 0),
		step(92, 95, Thread{}, None, Client, 0),
	})
	if g.Ns[CPURunqueue] != 10*ms {
		t.Errorf("cpu_runqueue %d ms, want 10 (the outside holder's 5 and the 5 its siblings repaid)", g.Ns[CPURunqueue]/ms)
	}
	var a Aggregate
	a.Add(g)
	if nb := a.Neighbours(); len(nb) != 1 || nb[0].Process != stress || nb[0].Ns != 10*ms {
		t.Errorf("neighbours %+v, want stress-ng alone, 10 ms", nb)
	}
	// An outsider that took more than the server's own threads: the whole
	// wait is its (the waiter would have preempted its sibling on a quiet
	// CPU).
	g = only(t, []Segment{
		seg(thA, Running, 0, 30),
		runq(thA, 30, 60, Holder{stress, 20 * ms}, Holder{thB, 10 * ms}),
		seg(thA, Running, 60, 90),
		seg(thB, Running, 0, 100),
	}, nil, []Send{{Time: 90 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 92 * ms, Port: port}},
		Read{Request: 1, Index: 4, Port: port, Start: 0, End: 95 * ms})
	if g.Ns[CPURunqueue] != 30*ms || g.Ns[ServerCompute] != 60*ms {
		t.Errorf("outsider first: cpu_runqueue %d ms, server_compute %d ms; want 30 and 60\n%s", g.Ns[CPURunqueue]/ms, g.Ns[ServerCompute]/ms, dump(g.Steps))
	}
	// The holder on the path already: thB woke thA and then held its CPU.
	g = only(t, []Segment{
		seg(thB, Running, 0, 100),
		sleepBy(thA, 0, 20, Wake{Kind: WakeThread, Waker: thB}),
		runq(thA, 20, 40, Holder{thB, 20 * ms}),
		seg(thA, Running, 40, 90),
	}, nil, []Send{{Time: 90 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 92 * ms, Port: port}},
		Read{Request: 1, Index: 5, Port: port, Start: 0, End: 95 * ms})
	if g.Ns[CPURunqueue] != 0 || g.Ns[ServerCompute] != 90*ms {
		t.Errorf("behind its own waker: cpu_runqueue %d ms, server_compute %d ms; want 0 and 90\n%s", g.Ns[CPURunqueue]/ms, g.Ns[ServerCompute]/ms, dump(g.Steps))
	}
	// The one holder recorded (the task that ran last) is approximate:
	// where it was asleep it did not hold the CPU (holder unknown), and
	// where it waited for a CPU itself, its holder is the one.
	g = only(t, []Segment{
		seg(thA, Running, 0, 20),
		runq(thA, 20, 50, Holder{thB, 30 * ms}),
		seg(thA, Running, 50, 90),
		seg(thB, Sleep, 0, 30),
		runq(thB, 30, 40, Holder{stress, 10 * ms}),
		seg(thB, Running, 40, 100),
	}, nil, []Send{{Time: 90 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 92 * ms, Port: port}},
		Read{Request: 1, Index: 6, Port: port, Start: 0, End: 95 * ms})
	checkSteps(t, g, []Step{
		step(0, 20, thA, Running, ServerCompute, 0),
		step(20, 30, thA, Runnable, CPURunqueue, 0),
		step(30, 40, thB, Runnable, CPURunqueue, 1).with(stress, 0, ""),
		step(40, 50, thB, Running, ServerCompute, 1),
		step(50, 90, thA, Running, ServerCompute, 0),
		step(90, 92, Thread{}, None, NetBackpressure, 0),
		step(92, 95, Thread{}, None, Client, 0),
	})
}

// A writer woken with a token waits behind its sibling, which had just
// waited for its CPU behind an outside task: the sibling is being repaid
// that wait, and the writer's wait behind the repayment is the outsider's
// (owedOf, starvedBefore), noted. The same sibling after a wait behind
// the server's own thread owes nothing (a sibling's wait inside the
// writer's is followed there: TestRunqueueBehindTheServersOwnThread).
func TestRunqueueBehindARepaidSibling(t *testing.T) {
	gap := func(siblingWait Segment) Gap {
		return only(t, []Segment{
			seg(thB, Sleep, 0, 10),
			siblingWait,
			seg(thB, Running, 20, 40),
			sleepBy(thA, 0, 22, Wake{Kind: WakeThread, Waker: thB}),
			runq(thA, 22, 30, Holder{thB, 8 * ms}),
			seg(thA, Running, 30, 40),
		}, nil, []Send{{Time: 31 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 32 * ms, Port: port}},
			Read{Request: 1, Index: 4, Port: port, Start: 12 * ms, End: 33 * ms})
	}
	owed := func(g Gap) (ns int64) {
		for _, st := range g.Steps {
			if st.Note == NoteOwed {
				ns += st.End - st.Start
			}
		}
		return ns
	}
	g := gap(runq(thB, 10, 20, Holder{stress, 10 * ms}))
	if owed(g) != 8*ms || g.Ns[CPURunqueue] != 16*ms {
		t.Errorf("behind a sibling repaid 10 ms: %d ms owed, cpu_runqueue %d ms; want 8 and 16 (8 of the sibling's own wait)\n%s", owed(g)/ms, g.Ns[CPURunqueue]/ms, dump(g.Steps))
	}
	g = gap(runq(thB, 10, 20, Holder{thC, 10 * ms}))
	if owed(g) != 0 || g.Ns[CPURunqueue] != 0 {
		t.Errorf("behind a sibling that waited behind the server's own thread: %d ms owed, cpu_runqueue %d ms; want none\n%s", owed(g)/ms, g.Ns[CPURunqueue]/ms, dump(g.Steps))
	}
}
