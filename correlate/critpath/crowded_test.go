package critpath

import "testing"

// Two threads of a pool time-slice one CPU, each spinning for the other,
// while a busy task holds the process's other CPU: the sending thread's
// running while its sibling waits behind it is the sibling's wait for a
// CPU (cpu_runqueue, the outsider named, NoteSiblingCrowded). With as
// many of the targets' threads running as the process has CPUs, the same
// wait is the server contending with itself (server_compute); with the
// CPUs not known, too.
func TestSiblingCrowdedBehindItsOwn(t *testing.T) {
	cpus := func(n int) func(uint32) int { return func(uint32) int { return n } }
	gap := func(opt Options, third Segment) Gap {
		return onlyWith(t, opt, []Segment{
			runq(thA, 0, 10, Holder{stress, 10 * ms}),
			seg(thA, Running, 10, 50),
			seg(thB, Running, 0, 10),
			runq(thB, 10, 40, Holder{thA, 30 * ms}),
			seg(thB, Running, 40, 50),
			third,
		}, nil, []Send{{Time: 45 * ms, Tid: thA.Tid, Port: port}}, []Arrival{{Time: 46 * ms, Port: port}},
			Read{Request: 1, Index: 2, Port: port, Start: 5 * ms, End: 47 * ms})
	}
	g := gap(Options{CPUs: cpus(2)}, seg(thC, Sleep, 0, 50))
	checkSteps(t, g, []Step{
		step(5, 10, thA, Runnable, CPURunqueue, 0).with(stress, 0, ""),
		step(10, 40, thB, Runnable, CPURunqueue, 0).with(stress, 0, NoteSiblingCrowded),
		step(40, 45, thA, Running, ServerCompute, 0),
		step(45, 46, Thread{}, None, NetBackpressure, 0),
		step(46, 47, Thread{}, None, Client, 0),
	})
	// A third thread of the server ran on the other CPU from 20 to 30 ms:
	// then the wait is the server's own.
	third := []Segment{seg(thC, Sleep, 0, 20), seg(thC, Running, 20, 30), seg(thC, Sleep, 30, 50)}
	g = gap(Options{CPUs: cpus(2)}, third[1])
	if g.Ns[CPURunqueue] != 25*ms || g.Ns[ServerCompute] != 15*ms {
		t.Errorf("a third thread ran 10 ms: cpu_runqueue %d ms, server_compute %d ms; want 25 and 15\n%s", g.Ns[CPURunqueue]/ms, g.Ns[ServerCompute]/ms, dump(g.Steps))
	}
	for _, opt := range []Options{{CPUs: cpus(1)}, {}} {
		if g = gap(opt, third[0]); g.Ns[CPURunqueue] != 5*ms || g.Ns[ServerCompute] != 35*ms {
			t.Errorf("one CPU, or the CPUs unknown: cpu_runqueue %d ms, server_compute %d ms; want 5 and 35\n%s", g.Ns[CPURunqueue]/ms, g.Ns[ServerCompute]/ms, dump(g.Steps))
		}
	}
}
