package tcp

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
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

// BenchmarkReadSockets compares the two ways a refresh reads a target's
// sockets, on this process holding a listener and n connections to it (2n
// sockets): one socket-diag dump of the namespace (it walks the kernel's
// whole established hash, whatever n) matched against /proc/self/fd, and
// a read of each socket through a duplicate of its descriptor
// (pidfd_getfd, getsockopt). Each op is one refresh's read of the target.
func BenchmarkReadSockets(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		var conns []net.Conn
		for range n {
			c, err := net.Dial("tcp4", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			a, err := ln.Accept()
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c, a)
		}
		self, err := nsInode("/proc/self/ns/net")
		if err != nil {
			b.Fatal(err)
		}
		// CPU time of the reading thread, as the refresh measures it: the
		// machine may be busy.
		cpu := func(b *testing.B, read func() int) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			t0 := threadCPU()
			for b.Loop() {
				if got := read(); got < 2*n {
					b.Fatalf("%d sockets read, want %d", got, 2*n)
				}
			}
			us := float64(threadCPU()-t0) / 1e3 / float64(b.N)
			b.ReportMetric(us, "cpu-µs/op")
			b.ReportMetric(us/float64(2*n), "cpu-µs/socket")
		}
		b.Run(fmt.Sprintf("socket-diag/%d-sockets", 2*n), func(b *testing.B) {
			cpu(b, func() int {
				s, err := newSockReader().sockets(os.Getpid())
				if err != nil {
					b.Fatal(err)
				}
				return len(s)
			})
		})
		b.Run(fmt.Sprintf("pidfd_getfd/%d-sockets", 2*n), func(b *testing.B) {
			cpu(b, func() int {
				fds, err := socketFDs(os.Getpid())
				if err != nil {
					b.Fatal(err)
				}
				s, err := readFDs(os.Getpid(), fds, self)
				if err != nil {
					b.Fatal(err)
				}
				return len(s)
			})
		})
		for _, c := range conns {
			c.Close()
		}
		ln.Close()
	}
}
