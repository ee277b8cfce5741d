package critpath

import (
	"testing"
)

var (
	sender   = Thread{Tid: 201, Tgid: 200, Comm: "sender"}
	producer = Thread{Tid: 202, Tgid: 200, Comm: "producer"}
	acceptor = Thread{Tid: 203, Tgid: 200, Comm: "acceptor"}
)

// timedWait is a sender that waits on a condition variable with a
// timeout for the token from 10 to 60 ms and is woken by its timer; it
// sends at 62 ms. The producer's and the other threads' segments are
// the test's.
func timedWait(t *testing.T, wake Wake, others ...Segment) Gap {
	t.Helper()
	s := sleepBy(sender, 10, 60, wake)
	return only(t, append([]Segment{
		seg(sender, Running, 0, 10),
		s,
		seg(sender, Running, 60, 70),
	}, others...), nil, []Send{{Time: 62 * ms, Tid: sender.Tid, Port: port}}, []Arrival{{Time: 63 * ms, Port: port}},
		Read{Request: 1, Index: 4, Port: port, Start: 0, End: 64 * ms})
}

func meanwhileStep(a, b int64, th Thread, st State, c Cause) Step {
	return step(a, b, th, st, c, 1).with(Thread{}, 0, NoteMeanwhile)
}

func tail() []Step {
	return []Step{
		step(60, 62, sender, Running, ServerCompute, 0),
		step(62, 63, Thread{}, None, NetBackpressure, 0),
		step(63, 64, Thread{}, None, Client, 0),
	}
}

// The producer runnable behind a busy process while the sender waited for
// its timeout: cpu_runqueue, the busy process named (and counted as the
// noisy neighbour); its running is server_compute; the acceptor asleep all
// along changes nothing.
func TestTimedWaitProducerRunnable(t *testing.T) {
	g := timedWait(t, Wake{Kind: WakeTimer},
		seg(producer, Running, 0, 20),
		runq(producer, 20, 50, Holder{stress, 30 * ms}),
		seg(producer, Running, 50, 58),
		sleepBy(producer, 58, 70, Wake{Kind: WakeThread, Waker: sender}),
		sleepBy(acceptor, 0, 100, Wake{Kind: WakeNetRx}),
	)
	checkSteps(t, g, append([]Step{
		step(0, 10, sender, Running, ServerCompute, 0),
		meanwhileStep(10, 20, producer, Running, ServerCompute),
		meanwhileStep(20, 50, producer, Runnable, CPURunqueue).with(stress, 0, NoteMeanwhile),
		meanwhileStep(50, 58, producer, Running, ServerCompute),
		step(58, 60, sender, Sleep, ServerSleep, 0).with(Thread{}, WakeTimer, ""),
	}, tail()...))
	if d := g.Steps[2].Detail(); d != "stress-ng[4242] ("+NoteMeanwhile+")" {
		t.Errorf("detail %q", d)
	}
	if g.Ns[CPURunqueue] != 30*ms || g.Ns[ServerSleep] != 2*ms || g.Ns[ServerCompute] != 30*ms {
		t.Errorf("cpu_runqueue %d, server_sleep %d, server_compute %d ms", g.Ns[CPURunqueue]/ms, g.Ns[ServerSleep]/ms, g.Ns[ServerCompute]/ms)
	}
	var a Aggregate
	a.Add(g)
	if nb := a.Neighbours(); len(nb) != 1 || nb[0].Process != stress || nb[0].Ns != 30*ms || nb[0].Gaps != 1 {
		t.Errorf("neighbours %+v", nb)
	}
}

// The producer running all the while: server_compute; the producer asleep
// with nothing of the server runnable or running: server_sleep, as it
// was; an unknown waker keeps its unexplained for the idle part.
func TestTimedWaitProducerRunningOrIdle(t *testing.T) {
	g := timedWait(t, Wake{Kind: WakeTimer}, seg(producer, Running, 0, 70))
	checkSteps(t, g, append([]Step{
		step(0, 10, sender, Running, ServerCompute, 0),
		meanwhileStep(10, 60, producer, Running, ServerCompute),
	}, tail()...))

	g = timedWait(t, Wake{Kind: WakeTimer},
		sleepBy(producer, 0, 70, Wake{Kind: WakeThread, Waker: sender}),
		sleepBy(acceptor, 0, 100, Wake{Kind: WakeNetRx}))
	checkSteps(t, g, append([]Step{
		step(0, 10, sender, Running, ServerCompute, 0),
		step(10, 60, sender, Sleep, ServerSleep, 0).with(Thread{}, WakeTimer, ""),
	}, tail()...))

	g = timedWait(t, Wake{},
		seg(producer, Running, 0, 30),
		sleepBy(producer, 30, 70, Wake{Kind: WakeThread, Waker: sender}))
	checkSteps(t, g, append([]Step{
		step(0, 10, sender, Running, ServerCompute, 0),
		meanwhileStep(10, 30, producer, Running, ServerCompute),
		step(30, 60, sender, Sleep, Unexplained, 0).with(Thread{}, WakeUnknown, NoteWakerUnknown),
	}, tail()...))
}

// Every kind of wakeup with no edge to follow takes the producer's
// states: a timer's softirq, an outside task, a network receive of
// another connection; a block completion and a target waker keep their
// own rules. (The sender's running meanwhile is the producer's wait too:
// the sibling rule.)
func TestTimedWaitWakeKinds(t *testing.T) {
	prod := []Segment{
		seg(producer, Running, 0, 5),
		runq(producer, 5, 65, Holder{stress, 60 * ms}),
		seg(producer, Running, 65, 70),
	}
	for _, w := range []Wake{
		{Kind: WakeSoftIRQTimer},
		{Kind: WakeThread, Waker: Thread{Tid: 900, Tgid: 900, Comm: "cron"}},
		{Kind: WakeNetRx, Port: 5000},
		{Kind: WakeNetRx},
	} {
		g := timedWait(t, w, prod...)
		if g.Ns[CPURunqueue] != 57*ms {
			t.Errorf("woken by %v: cpu_runqueue %d ms, want 57\n%s", w, g.Ns[CPURunqueue]/ms, dump(g.Steps))
		}
	}
	for _, w := range []Wake{{Kind: WakeBlock}, {Kind: WakeThread, Waker: kwork}} {
		g := timedWait(t, w, prod...)
		if g.Ns[IOBlock] != 50*ms || g.Ns[CPURunqueue] != 7*ms {
			t.Errorf("woken by %v: io_block %d ms, cpu_runqueue %d ms, want 50 and 7\n%s", w, g.Ns[IOBlock]/ms, g.Ns[CPURunqueue]/ms, dump(g.Steps))
		}
	}
}

// Several threads at once: per stretch the highest rank wins (a CUDA
// call, then a wait for a CPU behind an outside task, then D, then
// running, then a wait for a CPU with the holder unknown, then a wait
// behind the server's own thread), each stretch is given once, and the
// parts sum to the gap.
func TestTimedWaitRanks(t *testing.T) {
	w1 := Thread{Tid: 204, Tgid: 200, Comm: "w1"}
	w2 := Thread{Tid: 205, Tgid: 300, Comm: "engine"}
	e := New(Options{})
	for _, s := range []Segment{
		seg(sender, Running, 0, 10),
		sleepBy(sender, 10, 100, Wake{Kind: WakeTimer}),
		seg(sender, Running, 100, 110),
		// producer: running 0-40, behind a target 40-45, behind stress
		// 45-55, holder unknown 55-60, running 60-80, D 80-90, asleep after.
		seg(producer, Running, 0, 40),
		runq(producer, 40, 60, Holder{w1, 5 * ms}, Holder{stress, 10 * ms}),
		seg(producer, Running, 60, 80),
		seg(producer, IOWait, 80, 90),
		sleepBy(producer, 90, 110, Wake{Kind: WakeTimer}),
		// w1 (a thread of the same process) running 20-50, asleep after.
		seg(w1, Running, 20, 50),
		sleepBy(w1, 50, 110, Wake{Kind: WakeTimer}),
		// the engine of another process asleep inside a CUDA call 30-42.
		sleepBy(w2, 0, 110, Wake{Kind: WakeHardIRQ}),
	} {
		e.AddSegment(s)
	}
	e.AddCUDA(CUDACall{Tid: w2.Tid, Start: 30 * ms, End: 42 * ms, Name: "cuStreamSynchronize"})
	e.AddSend(Send{Time: 105 * ms, Tid: sender.Tid, Port: port})
	e.AddArrival(Arrival{Time: 105 * ms, Port: port})
	e.AddRead(Read{Request: 1, Index: 2, Port: port, Start: 0, End: 106 * ms})
	g := e.Flush(maxNs)[0]
	checkSums(t, g)
	checkSteps(t, g, []Step{
		step(0, 10, sender, Running, ServerCompute, 0),
		meanwhileStep(10, 30, producer, Running, ServerCompute),
		step(30, 42, w2, Sleep, GPUSync, 1).with(Thread{}, 0, "cuStreamSynchronize"),
		meanwhileStep(42, 45, w1, Running, ServerCompute),
		meanwhileStep(45, 55, producer, Runnable, CPURunqueue).with(stress, 0, NoteMeanwhile),
		meanwhileStep(55, 60, producer, Runnable, CPURunqueue),
		meanwhileStep(60, 80, producer, Running, ServerCompute),
		meanwhileStep(80, 90, producer, IOWait, IOBlock),
		step(90, 100, sender, Sleep, ServerSleep, 0).with(Thread{}, WakeTimer, ""),
		step(100, 105, sender, Running, ServerCompute, 0),
		step(105, 106, Thread{}, None, Client, 0),
	})
	if n := e.Stats().NoEdgeSleeps; n != 1 {
		t.Errorf("no-edge sleeps %d, want 1", n)
	}
	// A wait for a CPU, holder unknown, while another thread of the
	// server runs: the running thread's compute (the holder may well be
	// the server itself); alone, cpu_runqueue.
	g = only(t, []Segment{
		seg(sender, Running, 0, 10),
		sleepBy(sender, 10, 60, Wake{Kind: WakeTimer}),
		seg(sender, Running, 60, 70),
		sleepBy(producer, 0, 20, Wake{Kind: WakeThread, Waker: w1}),
		runq(producer, 20, 50),
		seg(producer, Running, 50, 70),
		seg(w1, Running, 0, 30),
		sleepBy(w1, 30, 70, Wake{Kind: WakeTimer}),
	}, nil, []Send{{Time: 62 * ms, Tid: sender.Tid, Port: port}}, []Arrival{{Time: 63 * ms, Port: port}},
		Read{Request: 1, Index: 4, Port: port, Start: 0, End: 64 * ms})
	checkSteps(t, g, append([]Step{
		step(0, 10, sender, Running, ServerCompute, 0),
		meanwhileStep(10, 30, w1, Running, ServerCompute),
		meanwhileStep(30, 50, producer, Runnable, CPURunqueue),
		meanwhileStep(50, 60, producer, Running, ServerCompute),
	}, tail()...))
	// w1 gone: the producer's wait behind w1 (a target) is server_compute,
	// not cpu_runqueue.
	e = New(Options{})
	for _, s := range []Segment{
		seg(sender, Running, 0, 10),
		sleepBy(sender, 10, 100, Wake{Kind: WakeTimer}),
		seg(sender, Running, 100, 110),
		runq(producer, 0, 60, Holder{w1, 60 * ms}),
		seg(producer, Running, 60, 110),
	} {
		e.AddSegment(s)
	}
	e.AddSend(Send{Time: 105 * ms, Tid: sender.Tid, Port: port})
	e.AddRead(Read{Request: 1, Index: 2, Port: port, Start: 0, End: 106 * ms})
	g = e.Flush(maxNs)[0]
	checkSums(t, g)
	if g.Ns[CPURunqueue] != 0 || g.Ns[ServerCompute] != 105*ms {
		t.Errorf("behind a target thread:\n%s", dump(g.Steps))
	}
}

// A futex wake edge (the producer's wake of the sender) is followed as
// before, across two threads: the sender woken by the producer, the
// producer woken by the engine's worker, whose wait for a CPU is named;
// the worker's own timed sleep takes the states of the threads not on
// the path (the sender and the producer wait for it) only.
func TestTimedWaitFutexEdgeAcrossTwoThreads(t *testing.T) {
	worker := Thread{Tid: 206, Tgid: 200, Comm: "worker"}
	g := only(t, []Segment{
		seg(sender, Running, 0, 10),
		sleepBy(sender, 10, 60, Wake{Kind: WakeThread, Waker: Thread{Tid: producer.Tid}}),
		seg(sender, Running, 60, 70),
		seg(producer, Running, 0, 15),
		sleepBy(producer, 15, 50, Wake{Kind: WakeThread, Waker: worker}),
		seg(producer, Running, 50, 70),
		sleepBy(worker, 0, 25, Wake{Kind: WakeTimer}),
		runq(worker, 25, 40, Holder{stress, 15 * ms}),
		seg(worker, Running, 40, 50),
		sleepBy(worker, 50, 70, Wake{Kind: WakeTimer}),
		seg(acceptor, Running, 0, 20),
		sleepBy(acceptor, 20, 70, Wake{Kind: WakeNetRx}),
	}, nil, []Send{{Time: 62 * ms, Tid: sender.Tid, Port: port}}, []Arrival{{Time: 63 * ms, Port: port}},
		Read{Request: 1, Index: 4, Port: port, Start: 0, End: 64 * ms})
	checkSteps(t, g, append([]Step{
		step(0, 10, sender, Running, ServerCompute, 0),
		step(10, 15, producer, Running, ServerCompute, 1),
		step(15, 20, acceptor, Running, ServerCompute, 3).with(Thread{}, 0, NoteMeanwhile),
		step(20, 25, worker, Sleep, ServerSleep, 2).with(Thread{}, WakeTimer, ""),
		step(25, 40, worker, Runnable, CPURunqueue, 2).with(stress, 0, ""),
		step(40, 50, worker, Running, ServerCompute, 2),
		step(50, 60, producer, Running, ServerCompute, 1),
	}, tail()...))
}

// A thread whose history ends with a Runnable long before the sleep (an
// idle connection's thread asleep in recv: its switch-out comes with its
// next switch-in) claims nothing: the server was idle, server_sleep.
func TestTimedWaitIdleThreadEndsRunnable(t *testing.T) {
	g := timedWait(t, Wake{Kind: WakeTimer},
		sleepBy(producer, 0, 70, Wake{Kind: WakeThread, Waker: sender}),
		seg(acceptor, Running, 0, 1),
		runq(acceptor, 1, 2))
	checkSteps(t, g, append([]Step{
		step(0, 10, sender, Running, ServerCompute, 0),
		step(10, 60, sender, Sleep, ServerSleep, 0).with(Thread{}, WakeTimer, ""),
	}, tail()...))
}

// The sender waits on a timer while the producer is stopped (a tracer
// stopped one thread; the cgroup freezer, or a group stop, reached the
// producer first): the stop comes before every other claim, even the
// producer's running before it.
func TestTimedWaitProducerStopped(t *testing.T) {
	g := timedWait(t, Wake{Kind: WakeTimer},
		seg(producer, Running, 0, 20),
		seg(producer, Stopped, 20, 55),
		seg(producer, Running, 55, 70),
		runq(acceptor, 30, 40, Holder{stress, 10 * ms}),
	)
	checkSteps(t, g, append([]Step{
		step(0, 10, sender, Running, ServerCompute, 0),
		meanwhileStep(10, 20, producer, Running, ServerCompute),
		meanwhileStep(20, 55, producer, Stopped, ServerStopped),
		meanwhileStep(55, 60, producer, Running, ServerCompute),
	}, tail()...))
}

// monitor naps between short bursts of work (a runtime's monitor thread,
// a spin-then-sleep barrier): its naps, each too short to be recorded,
// are folded into its Running segment.
var monitor = Thread{Tid: 204, Tgid: 200, Comm: "monitor"}

// napper is monitor running from 0 to 80 ms, off its CPU for f of it.
func napper(f Folded) Segment {
	s := seg(monitor, Running, 0, 80)
	s.Folded = f
	return s
}

// A critical-path thread woken by a thread that napped: the part walked
// has its share of the naps (a sleep with no wakeup edge, covered by the
// server's other threads meanwhile), of the folded waits for a CPU
// (cpu_runqueue) and of the folded D (io_block); only the rest is the
// napper's running, given to a sibling's wait by the sibling rule.
func TestFoldedNapsOnThePath(t *testing.T) {
	naps := napper(Folded{Sleep: 40 * ms, Runq: 8 * ms, IO: 8 * ms})
	g := timedWait(t, Wake{Kind: WakeThread, Waker: monitor}, naps)
	checkSteps(t, g, append([]Step{
		step(0, 10, sender, Running, ServerCompute, 0),
		step(10, 25, monitor, Running, ServerCompute, 1),
		step(25, 50, monitor, Sleep, ServerSleep, 1).with(Thread{}, 0, NoteFoldedSleep),
		step(50, 55, monitor, Runnable, CPURunqueue, 1).with(Thread{}, 0, NoteFoldedWait),
		step(55, 60, monitor, IOWait, IOBlock, 1).with(Thread{}, 0, NoteFoldedIO),
	}, tail()...))
	checkSums(t, g)

	// The producer runnable behind a busy process meanwhile: the naps
	// and the running are its wait.
	g = timedWait(t, Wake{Kind: WakeThread, Waker: monitor}, naps, runq(producer, 10, 60, Holder{stress, 50 * ms}))
	checkSteps(t, g, append([]Step{
		step(0, 10, sender, Running, ServerCompute, 0),
		step(10, 25, producer, Runnable, CPURunqueue, 1).with(stress, 0, NoteSiblingWait),
		step(25, 50, producer, Runnable, CPURunqueue, 2).with(stress, 0, NoteMeanwhile),
		step(50, 55, monitor, Runnable, CPURunqueue, 1).with(Thread{}, 0, NoteFoldedWait),
		step(55, 60, monitor, IOWait, IOBlock, 1).with(Thread{}, 0, NoteFoldedIO),
	}, tail()...))
	if g.Ns[CPURunqueue] != 45*ms || g.Ns[ServerCompute] != 12*ms {
		t.Errorf("cpu_runqueue %d ms, server_compute %d ms; want 45 and 12", g.Ns[CPURunqueue]/ms, g.Ns[ServerCompute]/ms)
	}
}

// A thread off its CPU for most of its Running segment in folded naps
// claims nothing for another thread's timed wait (it more likely slept at
// any instant); one that mostly ran claims server_compute.
func TestFoldedNapsClaimNothing(t *testing.T) {
	g := timedWait(t, Wake{Kind: WakeTimer}, napper(Folded{Sleep: 50 * ms}))
	checkSteps(t, g, append([]Step{
		step(0, 10, sender, Running, ServerCompute, 0),
		step(10, 60, sender, Sleep, ServerSleep, 0).with(Thread{}, WakeTimer, ""),
	}, tail()...))
	g = timedWait(t, Wake{Kind: WakeTimer}, napper(Folded{Sleep: 30 * ms}))
	checkSteps(t, g, append([]Step{
		step(0, 10, sender, Running, ServerCompute, 0),
		meanwhileStep(10, 60, monitor, Running, ServerCompute),
	}, tail()...))
}

// A wait for a CPU behind a thread that naps (it woke, preempted the
// waiter, and slept again; the CPU went elsewhere): the holder's folded
// share of the wait is cpu_runqueue with no holder known, the rest its
// running.
func TestRunqueueBehindANapper(t *testing.T) {
	g := only(t, []Segment{
		seg(sender, Running, 0, 20),
		runq(sender, 20, 60, Holder{monitor, 40 * ms}),
		seg(sender, Running, 60, 70),
		napper(Folded{Sleep: 60 * ms}),
	}, nil, []Send{{Time: 62 * ms, Tid: sender.Tid, Port: port}}, []Arrival{{Time: 63 * ms, Port: port}},
		Read{Request: 1, Index: 4, Port: port, Start: 0, End: 64 * ms})
	checkSteps(t, g, append([]Step{
		step(0, 20, sender, Running, ServerCompute, 0),
		step(20, 30, monitor, Running, ServerCompute, 1),
		step(30, 60, sender, Runnable, CPURunqueue, 0),
	}, tail()...))
}
