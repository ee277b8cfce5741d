package result

import (
	"encoding/json"
	"io"
	"path/filepath"
	"runtime"
	"testing"
)

// longRun is the load part of an hour at 8 req/s: 28,800 requests of 200
// tokens each.
func longRun() *Document {
	const n, tokens = 28800, 200
	d := &Document{Loadgen: Loadgen{BPFBench: &LoadDetail{}}}
	for i := range n {
		r := Request{Index: i, RequestID: "cmpl-0123456789abcdef", ChunkNs: make([]int64, tokens), Success: true}
		itl := make([]float64, tokens-1)
		for j := range r.ChunkNs {
			r.ChunkNs[j] = 1_700_000_000_000_000_000 + int64(i)*125_000_000 + int64(j)*20_000_000
		}
		for j := range itl {
			itl[j] = 0.020001
		}
		d.BPFBench.Records = append(d.BPFBench.Records, r)
		d.ITLs = append(d.ITLs, itl)
		d.TTFTs = append(d.TTFTs, 0.05)
	}
	return d
}

// allocated is what f allocates (runtime.MemStats.TotalAlloc): a bound
// on the heap it adds at its peak.
func allocated(b *testing.B, f func() error) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := f(); err != nil {
		b.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// BenchmarkWriteLongRun: what writing result.json of an hour-long run
// allocates, key by key (WriteFile) against one encoding of the whole
// document (json.Marshal), in MB.
func BenchmarkWriteLongRun(b *testing.B) {
	d := longRun()
	p := filepath.Join(b.TempDir(), "result.json")
	b.ResetTimer()
	b.Run("stream", func(b *testing.B) {
		for range b.N {
			b.ReportMetric(float64(allocated(b, func() error { return d.WriteFile(p) }))/1e6, "MB-allocated")
		}
	})
	b.Run("whole", func(b *testing.B) {
		type whole Document
		for range b.N {
			b.ReportMetric(float64(allocated(b, func() error {
				buf, err := json.Marshal((*whole)(d))
				if err == nil {
					_, err = io.Discard.Write(buf)
				}
				return err
			}))/1e6, "MB-allocated")
		}
	})
}
