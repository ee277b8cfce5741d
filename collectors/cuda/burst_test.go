package cuda

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/uprobecost"
)

// The pipeline's accounting on a small ring (64 KiB: 819 records of this
// collector's 72 bytes plus an 8-byte header): every call the kernel
// counted is either delivered or counted lost, exactly. A burst that fits
// in the ring loses nothing even when the reader does not run at all (so
// a timed drain loses nothing below the ring's size per drain period);
// past the ring's size, the excess is counted.
func TestRingBurstAccounting(t *testing.T) {
	privtest.Require(t)
	const ring = 64 << 10
	const fits = ring / 80
	cost := uprobecost.Cost{EmulatedNs: 1, SingleStepNs: 1} // the budget keeps every launch probe
	for _, c := range []struct {
		name     string
		launches int
		reader   bool // the reader drains during the burst
	}{
		{"fits, no reader", fits / 2, false},
		{"overflows, no reader", 4 * fits, false},
		{"4 rings, reader running", 4 * fits, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := startDriver(t, "driver", "--launches", strconv.Itoa(c.launches), "--syncs", "1")
			s, err := NewSectionConfig(collectors.Options{Pid: d.pid()}, SectionConfig{
				StreamLaunches: true, RingBufferBytes: ring, Budget: Budget{Ratio: 1, Cost: &cost},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Start(context.Background()); err != nil {
				t.Fatalf("%+v", err)
			}
			defer s.Close()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			if c.reader {
				go func() { done <- s.Run(ctx) }()
				time.Sleep(100 * time.Millisecond) // the reader is in its loop
			}
			d.release(t)
			r := d.result(t)
			if !c.reader {
				go func() { done <- s.Run(ctx) }()
			}
			// Run delivers everything written before it returns.
			time.Sleep(50 * time.Millisecond)
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			counts, err := s.Counts(1)
			if err != nil {
				t.Fatal(err)
			}
			var calls uint64
			for _, n := range counts {
				calls += n.Count
			}
			ps, err := s.PipeStats()
			if err != nil {
				t.Fatal(err)
			}
			ds := s.DrainStats()
			t.Logf("%d launches + %d syncs: kernel counted %d calls; delivered %d, lost %d, forced wakeups %d, reader wakeups %d",
				r.Launches, r.Syncs, calls, ds.Records, ps.Lost, ps.ForcedWakeups, ds.Wakeups)
			if want := r.Launches + r.Syncs; calls != want {
				t.Fatalf("the kernel counted %d calls, the driver made %d", calls, want)
			}
			if ds.Records+ps.Lost != calls {
				t.Errorf("delivered %d + lost %d != %d calls", ds.Records, ps.Lost, calls)
			}
			switch {
			case c.launches <= fits && ps.Lost != 0:
				t.Errorf("a burst that fits the ring lost %d records", ps.Lost)
			case !c.reader && c.launches > fits && ps.Lost == 0:
				t.Errorf("a burst of %d records into a ring of %d lost nothing", calls, fits)
			}
			if c.launches > fits && ps.ForcedWakeups == 0 {
				t.Errorf("a burst past a quarter of the ring forced no wakeup")
			}
		})
	}
}
