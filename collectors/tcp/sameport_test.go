package tcp

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testproc"
	"github.com/bpfbench/bpfbench/live"
)

func init() {
	testproc.Register("tcptwo", childTwo)
}

const twoChunks = 10

// childTwo listens on every address, accepts two connections and writes
// twoChunks chunks of 64 bytes on each, the two interleaved, a chunk
// every 3 ms; then it closes both.
func childTwo(_ []string, ready func(...int), wait func()) {
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		panic(err)
	}
	ready(l.Addr().(*net.TCPAddr).Port)
	wait()
	var cs [2]net.Conn
	for i := range cs {
		if cs[i], err = l.Accept(); err != nil {
			panic(err)
		}
	}
	b := make([]byte, 64)
	for range twoChunks {
		for _, c := range cs {
			if _, err := c.Write(b); err != nil {
				panic(err)
			}
			time.Sleep(3 * time.Millisecond)
		}
	}
	for _, c := range cs {
		c.Close()
	}
}

// spanLog is a collectors.Recorder that keeps the spans.
type spanLog struct {
	mu  sync.Mutex
	sps []collectors.Span
}

func (l *spanLog) Record(sp collectors.Span) { l.mu.Lock(); l.sps = append(l.sps, sp); l.mu.Unlock() }

// Two clients with the same port on two addresses (two hosts behind one
// server, as far as its sockets tell) stream from one server: the
// server's sends carry two socket cookies, and the live view's grouping
// makes two streams of twoChunks-1 gaps each, not one stream of the two
// interleaved.
func TestSamePortTwoClients(t *testing.T) {
	privtest.Require(t)
	server := testproc.Start(t, "tcptwo")
	port := strconv.Itoa(server.Tids[0])
	log := &spanLog{}
	d := &dataSpans{r: log, last: map[uint64]lastData{}}
	var mu sync.Mutex
	c := New(Config{Sends: true, OnData: func(e *Event) { mu.Lock(); d.record(e); mu.Unlock() }})
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	defer c.Close()
	if err := c.SetTarget(uint32(server.Pid()), 1, true); err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	server.Go(t)
	// One client port on 127.0.0.2 and 127.0.0.3.
	first, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Fatal(err)
	}
	cport := first.Addr().(*net.TCPAddr).Port
	first.Close()
	var conns []net.Conn
	for _, ip := range []net.IP{net.IPv4(127, 0, 0, 2), net.IPv4(127, 0, 0, 3)} {
		dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip, Port: cport}}
		cn, err := dl.Dial("tcp4", "127.0.0.1:"+port)
		if err != nil {
			t.Fatalf("dial from %v:%d: %v", ip, cport, err)
		}
		conns = append(conns, cn)
	}
	var wg sync.WaitGroup
	for _, cn := range conns {
		wg.Go(func() { _, _ = io.Copy(io.Discard, cn) })
	}
	wg.Wait()
	server.Wait(t, 10*time.Second)
	time.Sleep(200 * time.Millisecond) // two drains
	stop()

	log.mu.Lock()
	defer log.mu.Unlock()
	cookies := map[uint64]int{}
	s := live.NewStreams()
	var gaps int
	for _, sp := range log.sps {
		if sp.Kind != collectors.SpanSend || sp.Detail == "folded" {
			continue
		}
		if sp.Port != uint16(cport) {
			t.Errorf("a send to port %d, want both clients' %d", sp.Port, cport)
		}
		cookies[sp.Conn]++
		gaps += len(s.Send(sp, nil))
	}
	t.Logf("sends by cookie %v; streams: %+v", cookies, s.Stats)
	if len(cookies) != 2 || cookies[0] != 0 {
		t.Fatalf("sends by socket cookie %v, want two cookies", cookies)
	}
	if s.Len() != 2 || s.Stats.Unrequested != 2 || gaps != 2*(twoChunks-1) {
		t.Errorf("%d connections, %d streams, %d gaps; want 2, 2 and %d", s.Len(), s.Stats.Unrequested, gaps, 2*(twoChunks-1))
	}
}
