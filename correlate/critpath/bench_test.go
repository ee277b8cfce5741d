package critpath

import (
	"sync"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/correlate"
)

// The benchmarks stream one synthetic run (16 server threads, 64
// connections, 20 s) through this engine and through correlate's union
// engine, each given the same run in its own input shape, in time order,
// flushed every 256 events 5 ms behind, the floor 400 ms behind. Compare
// them side by side:
//
//	go test -run '^$' -bench 'CritPath|UnionEngine' -benchtime 3x ./correlate/critpath/
//
// (CritPathCrowded: the same with the crowded sibling rule on.)
var benchRun = sync.OnceValue(func() *timeline {
	return genTimeline(42, 16, 20_000*ms, 64)
})

func BenchmarkCritPath(b *testing.B) { benchCritPath(b, Options{Keep: 500 * ms}) }

// BenchmarkCritPathCrowded is BenchmarkCritPath with the processes'
// CPUs known (two): the crowded sibling rule's cost is the difference.
func BenchmarkCritPathCrowded(b *testing.B) {
	benchCritPath(b, Options{Keep: 500 * ms, CPUs: func(uint32) int { return 2 }})
}

func benchCritPath(b *testing.B, opt Options) {
	tl := benchRun()
	ev := tl.events()
	slicesSortStable(ev)
	b.ResetTimer()
	var gaps int
	start := time.Now()
	for range b.N {
		e := New(opt)
		gaps = 0
		for i, x := range ev {
			tl.add(e, x)
			if i%256 == 0 {
				e.SetFloor(x.at - 400*ms)
				gaps += len(e.Flush(x.at - 5*ms))
			}
		}
		gaps += len(e.Flush(maxNs))
	}
	el := float64(time.Since(start).Nanoseconds()) / float64(b.N)
	b.ReportMetric(el/float64(len(ev)), "ns/event")
	b.ReportMetric(el/float64(gaps), "ns/gap")
	b.ReportMetric(float64(len(ev)), "events")
}

// unionInput is the run as correlate's engine takes it: run-queue waits
// (cpu_runqueue), D states (io_block), CUDA calls (gpu_sync), and each
// chunk's send-to-arrival on its port (net_backpressure), with the
// intervals.
func unionInput(tl *timeline) ([]correlate.Activity, []correlate.Interval) {
	var acts []correlate.Activity
	for _, s := range tl.segs {
		switch s.State {
		case Runnable:
			acts = append(acts, correlate.Activity{Cause: correlate.CPURunqueue, Start: s.Start, End: s.End, Tid: s.Thread.Tid})
		case IOWait:
			acts = append(acts, correlate.Activity{Cause: correlate.IOBlock, Start: s.Start, End: s.End, Tid: s.Thread.Tid})
		}
	}
	for _, c := range tl.cuda {
		acts = append(acts, correlate.Activity{Cause: correlate.GPUSync, Start: c.Start, End: c.End, Tid: c.Tid})
	}
	si := map[uint16]int{}
	byPort := map[uint16][]Send{}
	for _, s := range tl.sends {
		byPort[s.Port] = append(byPort[s.Port], s)
	}
	for _, a := range tl.arrs {
		ss := byPort[a.Port]
		i := si[a.Port]
		if i < len(ss) && ss[i].Time < a.Time {
			acts = append(acts, correlate.Activity{Cause: correlate.NetBackpressure, Start: ss[i].Time, End: a.Time, Port: a.Port})
		}
		si[a.Port] = i + 1
	}
	var ivs []correlate.Interval
	for _, r := range tl.reads {
		ivs = append(ivs, correlate.Interval{Request: r.Request, Index: r.Index, Start: r.Start, End: r.End, Port: r.Port})
	}
	return acts, ivs
}

func BenchmarkUnionEngine(b *testing.B) {
	tl := benchRun()
	acts, ivs := unionInput(tl)
	type uev struct {
		at  int64
		act bool
		i   int
	}
	var ev []uev
	for i, a := range acts {
		ev = append(ev, uev{a.End, true, i})
	}
	for i, iv := range ivs {
		ev = append(ev, uev{iv.End, false, i})
	}
	sortBy(ev, func(x uev) int64 { return x.at })
	b.ResetTimer()
	var gaps int
	start := time.Now()
	for range b.N {
		e := correlate.NewEngine(correlate.Baseline{})
		gaps = 0
		count := func(correlate.Measurement) { gaps++ }
		for i, x := range ev {
			if x.act {
				e.AddActivity(acts[x.i])
			} else {
				e.AddInterval(ivs[x.i])
			}
			if i%256 == 0 {
				e.SetFloor(x.at - 400*ms)
				e.Measure(x.at-5*ms, count)
			}
		}
		e.SetFloor(maxNs)
		e.Measure(maxNs, count)
	}
	el := float64(time.Since(start).Nanoseconds()) / float64(b.N)
	b.ReportMetric(el/float64(len(ev)), "ns/event")
	b.ReportMetric(el/float64(gaps), "ns/gap")
	b.ReportMetric(float64(len(ev)), "events")
}
