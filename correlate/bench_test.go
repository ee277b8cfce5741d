package correlate

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// peakHeap samples the heap in use; the largest sample is the peak.
type peakHeap struct{ peak uint64 }

func newPeakHeap() *peakHeap { p := &peakHeap{}; p.sample(); return p }

func (p *peakHeap) sample() {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	p.peak = max(p.peak, m.HeapInuse)
}

func (p *peakHeap) mb() float64 { return float64(p.peak) / (1 << 20) }

// runEvents generates the events of a run in time order: n activity spans
// of every cause and, every 8 spans, a 10 ms token interval ending now.
func runEvents(n int, act func(Activity), iv func(Interval, int64)) {
	r := rand.New(rand.NewPCG(11, uint64(n)))
	now := int64(0)
	for i := range n {
		st := now + r.Int64N(int64(ms))
		act(Activity{Cause: Cause(i % int(NumCauses)), Start: st, End: st + r.Int64N(3*ms) + 1, Port: uint16(i % 64)})
		if i%8 == 0 {
			d := 10 * ms
			if i%800 == 0 {
				d = 40 * ms
			}
			iv(Interval{Request: i / 512, Index: 1 + i%512/8, Start: now - d, End: now, Port: uint16(i % 64)}, now)
		}
		now += ms / 8
	}
}

// BenchmarkRunPath runs 10 million activity spans (and 1.25 million token
// intervals) through the two ways `bpfbench run` can correlate: batch
// holds every span and interval until the end, then estimates the
// baseline and attributes; stream measures each interval once the
// watermark passes it, keeps the compact measurement, forgets the spans
// and attributes at the end. Both report ns per event and the peak heap.
//
//	go test -run '^$' -bench RunPath -benchtime 1x ./correlate/
func BenchmarkRunPath(b *testing.B) {
	const n = 10_000_000
	report := func(b *testing.B, start time.Time, peak *peakHeap, s Summary) {
		el := time.Since(start)
		b.ReportMetric(float64(el.Nanoseconds())/n, "ns/event")
		b.ReportMetric(peak.mb(), "peak-heap-MB")
		if len(s.Requests) == 0 {
			b.Fatal("nothing attributed")
		}
	}
	b.Run("batch", func(b *testing.B) {
		for range b.N {
			runtime.GC()
			peak := newPeakHeap()
			start := time.Now()
			var acts []Activity
			var ivs []Interval
			i := 0
			runEvents(n, func(a Activity) {
				acts = append(acts, a)
				if i++; i%(1<<16) == 0 {
					peak.sample()
				}
			}, func(iv Interval, _ int64) { ivs = append(ivs, iv) })
			base := EstimateBaseline(ivs, acts)
			peak.sample()
			e := NewEngine(base)
			for _, a := range acts {
				e.AddActivity(a)
			}
			for _, iv := range ivs {
				e.AddInterval(iv)
			}
			peak.sample()
			blames := e.Flush()
			peak.sample()
			s := Summarize(blames, base, []float64{50, 90, 99})
			peak.sample()
			report(b, start, peak, s)
		}
	})
	b.Run("stream", func(b *testing.B) {
		for range b.N {
			runtime.GC()
			peak := newPeakHeap()
			start := time.Now()
			e := NewEngine(Baseline{})
			var log Log
			i := 0
			runEvents(n, func(a Activity) {
				e.AddActivity(a)
				if i++; i%(1<<16) == 0 {
					peak.sample()
				}
			}, func(iv Interval, now int64) {
				e.AddInterval(iv)
				e.SetFloor(now - 40*ms)
				e.Measure(now-3*ms, log.Append)
			})
			e.SetFloor(maxNs)
			e.Measure(maxNs, log.Append)
			base := log.Baseline()
			peak.sample()
			s := SummarizeSeq(log.Blames(base), base, []float64{50, 90, 99})
			peak.sample()
			report(b, start, peak, s)
		}
	})
}
