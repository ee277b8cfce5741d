package tcp

import (
	"context"
	"io"
	"net"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

// loopback measures bytes per second over one loopback connection for d,
// writing chunk bytes at a time (the reader echoes nothing back).
func loopback(b *testing.B, ln net.Listener, chunk int, d time.Duration) float64 {
	acc := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			acc <- 0
			return
		}
		n, _ := io.Copy(io.Discard, c)
		acc <- n
	}()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, chunk)
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		for range 64 {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
	}
	c.Close()
	return float64(<-acc) / d.Seconds()
}

// BenchmarkLoopback measures the collector's overhead on a loopback bulk
// transfer (64 KiB writes) and on many small messages (64-byte writes):
// throughput without a collector, with the daemon's (host-wide, the
// benchmark a target) and with a session following and streaming the
// benchmark's own connections, in interleaved rounds of one run. Run it
// with -benchtime=1x.
func BenchmarkLoopback(b *testing.B) {
	privtest.Require(b)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		name  string
		chunk int
	}{{"bulk", 64 << 10}, {"small", 64}} {
		b.Run(tc.name, func(b *testing.B) {
			var none, host, sess []float64
			for range b.N {
				for range 3 {
					none = append(none, loopback(b, ln, tc.chunk, time.Second))

					h := NewHost(nil, func() map[uint32]string { return map[uint32]string{0: "host", 1: "bench"} })
					if err := h.Start(context.Background()); err != nil {
						b.Fatal(err)
					}
					_ = h.SetTarget(uint32(os.Getpid()), 1)
					host = append(host, loopback(b, ln, tc.chunk, time.Second))
					h.Close()

					c := New(Config{OnEpisode: func(Episode) {}})
					if err := c.Start(context.Background()); err != nil {
						b.Fatal(err)
					}
					_ = c.SetTarget(uint32(os.Getpid()), 1, true)
					ctx, cancel := context.WithCancel(context.Background())
					done := make(chan error, 1)
					go func() { done <- c.Run(ctx) }()
					sess = append(sess, loopback(b, ln, tc.chunk, time.Second))
					cancel()
					<-done
					c.Close()
				}
			}
			n, h, s := median(none), median(host), median(sess)
			b.ReportMetric(n/1e6, "MB/s_without")
			b.ReportMetric(h/1e6, "MB/s_daemon")
			b.ReportMetric(s/1e6, "MB/s_session")
			b.ReportMetric(100*(1-h/n), "%overhead_daemon")
			b.ReportMetric(100*(1-s/n), "%overhead_session")
		})
	}
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
