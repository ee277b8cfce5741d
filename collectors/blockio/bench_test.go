package blockio

import (
	"context"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

// randReads runs workers threads of 4 KiB O_DIRECT random reads on dev for
// d and returns the reads per second.
func randReads(b *testing.B, dev string, size int64, workers int, d time.Duration) float64 {
	var total atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_DIRECT, 0)
			if err != nil {
				b.Error(err)
				return
			}
			defer f.Close()
			buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
			if err != nil {
				b.Error(err)
				return
			}
			defer unix.Munmap(buf)
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			blocks := size / 4096
			n := int64(0)
			for ; n&63 != 0 || time.Now().Before(stop); n++ {
				if _, err := unix.Pread(int(f.Fd()), buf, rng.Int64N(blocks)*4096); err != nil {
					b.Error(err)
					return
				}
			}
			total.Add(n)
		}()
	}
	wg.Wait()
	return float64(total.Load()) / d.Seconds()
}

// BenchmarkODirectRandRead measures the collector's overhead on 4 KiB
// O_DIRECT random reads of a loop device: IOPS without a collector, with
// the daemon's (host-wide aggregation, the benchmark a configured target)
// and with a session streaming the benchmark's own requests, in
// interleaved rounds of one run. Run it with -benchtime=1x.
func BenchmarkODirectRandRead(b *testing.B) {
	privtest.Require(b)
	const size = 256 << 20
	dev := loopFile(b, size)
	const round = 2 * time.Second
	var none, host, sess []float64
	for range b.N {
		for range 3 {
			none = append(none, randReads(b, dev, size, 2, round))

			h := NewHost(nil, func() map[uint32]string { return map[uint32]string{0: "host", 1: "bench"} })
			if err := h.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			_ = h.SetTarget(uint32(os.Getpid()), 1)
			host = append(host, randReads(b, dev, size, 2, round))
			h.Close()

			c := New(Config{OnEvent: func(*Event) {}})
			if err := c.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			_ = c.SetTarget(uint32(os.Getpid()), 1, true)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			sess = append(sess, randReads(b, dev, size, 2, round))
			cancel()
			<-done
			c.Close()
		}
	}
	n, h, s := median(none), median(host), median(sess)
	b.ReportMetric(n, "iops_without")
	b.ReportMetric(h, "iops_daemon")
	b.ReportMetric(s, "iops_session")
	b.ReportMetric(100*(1-h/n), "%overhead_daemon")
	b.ReportMetric(100*(1-s/n), "%overhead_session")
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
