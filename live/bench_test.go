package live

import (
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"

	"github.com/bpfbench/bpfbench/collectors"
)

// engineSpans is a synthetic span stream shaped like llama-server `-t 1
// -np 4` saturated by 8 streams under `attach` (measured: ~6,000 spans/s,
// ~400 gaps/s, about a dozen server threads): a main loop thread runs a
// decode step, wakes the HTTP thread of each of 4 active streams, each of
// them waits for the CPU behind it (a sibling) or an outside task, sends
// its chunk and sleeps again; six more threads of the pool wake on timers
// every 2 ms. Every sched span carries a little steal and interrupt time,
// as on this host. Each stream sends 96 tokens, closes, and a new request
// arrives on a new port. The stream is seed-deterministic.
func engineSpans(seconds int) []collectors.Span {
	const (
		pid   = 8260
		lport = 8080
		ms    = int64(1e6)
	)
	rng := rand.New(rand.NewPCG(1, 2))
	var out []collectors.Span
	now := int64(1e9)
	lastOut := map[uint32]int64{}
	sched := func(tid uint32, wake, in int64, ctx string, waker uint32, holder uint32) {
		if in > wake {
			sp := collectors.Span{Kind: collectors.SpanRunqueue, Start: wake, End: in, Tid: tid, Tgid: pid, Blocking: true}
			if holder != 0 {
				sp.HolderTid, sp.HolderTgid, sp.HolderComm = holder, pid, "llama-server"
				if holder > 90000 {
					sp.HolderTgid, sp.HolderComm = holder, "python3"
				}
			}
			out = append(out, sp)
		}
		lo := lastOut[tid]
		if lo == 0 {
			lo = wake - 5*ms
		}
		sp := collectors.Span{Kind: collectors.SpanOffCPU, Start: lo, End: in, Tid: tid, Tgid: pid, Detail: "sleep",
			WakeTs: wake, WakeCtx: ctx, StealNs: rng.Int64N(20_000), IRQNetNs: rng.Int64N(5_000)}
		if ctx == "task" {
			sp.WakerTid, sp.WakerTgid, sp.WakerComm = waker, pid, "llama-server"
		}
		out = append(out, sp)
	}
	type stream struct {
		port   uint16
		tokens int
		tid    uint32
	}
	var streams [4]stream
	next := uint16(40000)
	for i := range streams {
		streams[i] = stream{port: next, tid: uint32(8272 + i)}
		out = append(out, collectors.Span{Kind: collectors.SpanRequest, Start: now - ms, End: now - ms, LocalPort: lport, Port: next, Bytes: 400})
		next++
	}
	pool := []uint32{8273 + 4, 8278, 8279, 8315, 8341, 8342}
	poolNext := make([]int64, len(pool))
	end := now + int64(seconds)*1e9
	for now < end {
		// The main thread's decode step: woken by the last HTTP thread,
		// sometimes behind another process.
		var in int64 = now
		var holder uint32
		if rng.IntN(4) == 0 {
			in += rng.Int64N(300_000)
			holder = 99001
		}
		sched(pid, now, in, "task", streams[3].tid, holder)
		step := 2*ms + rng.Int64N(ms)
		lastOut[pid] = in + step
		t := in + step
		for i := range streams {
			s := &streams[i]
			wake := t + int64(i)*20_000
			run := wake + rng.Int64N(150_000)
			sched(s.tid, wake, run, "task", pid, pid)
			send := run + 30_000
			out = append(out, collectors.Span{Kind: collectors.SpanSend, Start: send, End: send, Tid: s.tid, Tgid: pid,
				LocalPort: lport, Port: s.port, Bytes: uint64(100 + rng.IntN(40))})
			lastOut[s.tid] = send + 10_000
			s.tokens++
			if s.tokens == 96 {
				out = append(out, collectors.Span{Kind: collectors.SpanClose, Start: send + 20_000, End: send + 20_000,
					Tid: s.tid, Tgid: pid, LocalPort: lport, Port: s.port})
				s.port, s.tokens = next, 0
				next++
				if next == 0 {
					next = 40000
				}
				out = append(out, collectors.Span{Kind: collectors.SpanRequest, Start: send + ms, End: send + ms,
					LocalPort: lport, Port: s.port, Bytes: 400})
			}
		}
		stepEnd := t + 4*ms + rng.Int64N(3*ms)
		// The pool's threads, woken by timers every 2 ms.
		for j, tid := range pool {
			for poolNext[j] < stepEnd {
				w := max(poolNext[j], now)
				r := w + rng.Int64N(50_000)
				sched(tid, w, r, "hardirq:timer", 0, pid)
				lastOut[tid] = r + 20_000
				poolNext[j] = w + 2*ms
			}
		}
		now = stepEnd
	}
	// In time order, as the readers deliver them within a read.
	return out
}

// BenchmarkTrackerIntake is the live view's intake per span on the
// engine-shaped stream, its queueing (Tracker.Record) and its taking in a
// batch at each advance (take): ns/span, cpu-ns/span and allocs/span are
// the cost for each span taken, past the first 3 s (the history's growth
// to its size). The walks run every 100 ms of the stream's time as
// attach's do, with the timer stopped (the walk is not the intake's cost;
// BenchmarkTrackerWalk times it).
func BenchmarkTrackerIntake(b *testing.B) {
	spans := engineSpans(10)
	var n, mallocs uint64
	var cpu int64
	var ms runtime.MemStats
	// The host is shared: the process's CPU time (the garbage collector's
	// included) says more than the wall clock.
	mark := func() (uint64, int64) {
		runtime.ReadMemStats(&ms)
		return ms.Mallocs, processCPU()
	}
	// The first 3 s are not timed: a session's history grows once, to
	// the size it keeps (the lag and the open gaps), then holds.
	warm := spans[0].End + 3e9
	for b.Loop() {
		b.StopTimer()
		tr := NewTracker(Options{})
		tick := spans[0].End + 100e6
		i := 0
		for ; spans[i].End < warm; i++ {
			if spans[i].End > tick {
				tr.Advance(tick)
				tick += 100e6
			}
			tr.Record(spans[i])
		}
		n += uint64(len(spans) - i)
		m0, c0 := mark()
		b.StartTimer()
		for ; i < len(spans); i++ {
			if spans[i].End > tick {
				tr.takeNow() // the batch an advance takes first
				b.StopTimer()
				m1, c1 := mark()
				mallocs, cpu = mallocs+m1-m0, cpu+c1-c0
				tr.Advance(tick)
				tick += 100e6
				m0, c0 = mark()
				b.StartTimer()
			}
			tr.Record(spans[i])
		}
		tr.takeNow()
		b.StopTimer()
		m1, c1 := mark()
		mallocs, cpu = mallocs+m1-m0, cpu+c1-c0
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/span")
	b.ReportMetric(float64(cpu)/float64(n), "cpu-ns/span")
	b.ReportMetric(float64(mallocs)/float64(n), "allocs/span")
}

// processCPU is the process's CPU time (user and system), ns.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkTrackerWalk is the whole live view on the engine-shaped
// stream, intake and walks: ns/gap is the lot over the gaps walked.
func BenchmarkTrackerWalk(b *testing.B) {
	spans := engineSpans(10)
	b.ReportAllocs()
	var gaps uint64
	c0 := processCPU()
	for b.Loop() {
		tr := NewTracker(Options{})
		tick := spans[0].End + 100e6
		for i := range spans {
			if spans[i].End > tick {
				tr.Advance(tick)
				tick += 100e6
			}
			tr.Record(spans[i])
		}
		tr.Finish()
		gaps += tr.itl.Count() + tr.ttfb.Count()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(gaps), "ns/gap")
	b.ReportMetric(float64(processCPU()-c0)/float64(gaps), "cpu-ns/gap")
}

// BenchmarkTrackerWalkRecording is BenchmarkTrackerWalk with the daemon's
// flight recorder (Options.Recorder) and its default trigger checked
// every 500 ms of the stream, as the daemon runs them: its ns/gap against
// BenchmarkTrackerWalk's, in the same run, is what recording incidents
// adds to the live view.
func BenchmarkTrackerWalkRecording(b *testing.B) {
	spans := engineSpans(10)
	b.ReportAllocs()
	var gaps uint64
	c0 := processCPU()
	for b.Loop() {
		rec := NewRecorder(0, 0)
		tr := NewTracker(Options{Recorder: rec})
		w := &Watch{Trigger: DefaultTrigger()}
		tick, check := spans[0].End+100e6, spans[0].End+500e6
		for i := range spans {
			if spans[i].End > tick {
				tr.Advance(tick)
				tick += 100e6
			}
			if spans[i].End > check {
				w.Check(rec, tr.Normal, check)
				check += 500e6
			}
			tr.Record(spans[i])
		}
		tr.Finish()
		gaps += tr.itl.Count() + tr.ttfb.Count()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(gaps), "ns/gap")
	b.ReportMetric(float64(processCPU()-c0)/float64(gaps), "cpu-ns/gap")
}
