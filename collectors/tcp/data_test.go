package tcp

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testproc"
)

func init() {
	testproc.Register("tcpchunks", childChunks)
}

const (
	spacedChunks = 20
	burstChunks  = 10
	burstSize    = 10
)

func chunkSize(i int) int { return 100 + 37*i }

// childChunks listens on 127.0.0.1, accepts one connection and writes
// spacedChunks chunks of chunkSize(i) bytes 5 ms apart, then burstChunks
// chunks of burstSize bytes back to back, each with one write(2) on one
// locked thread, whose tid it prints; then it waits for the peer to close.
func childChunks(_ []string, ready func(...int), wait func()) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	ready(l.Addr().(*net.TCPAddr).Port)
	wait()
	c, err := l.Accept()
	if err != nil {
		panic(err)
	}
	f, err := c.(*net.TCPConn).File() // a blocking fd: one write(2) per chunk
	if err != nil {
		panic(err)
	}
	c.Close()
	fd := int(f.Fd())
	runtime.LockOSThread()
	fmt.Println(unix.Gettid())
	for i := range spacedChunks {
		if _, err := unix.Write(fd, make([]byte, chunkSize(i))); err != nil {
			panic(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	b := make([]byte, burstSize)
	for range burstChunks {
		if _, err := unix.Write(fd, b); err != nil {
			panic(err)
		}
	}
	_ = unix.Shutdown(fd, unix.SHUT_WR)
	_, _ = unix.Read(fd, b) // until the peer closes
}

// The server's sends are recorded with its ports and what it wrote; the
// load generator's (this process's) arrivals with the same ports, mirrored.
func TestSendsAndArrivals(t *testing.T) {
	privtest.Require(t)
	sendsAndArrivals(t, nil)
}

// A kernel without sock_send_length and sk_data_ready (6.1), simulated
// by renaming them to tracepoints no kernel has: the collector traces
// sock_sendmsg's return and sock_def_readable's entry instead, and the
// same sends and arrivals are recorded. A kernel that refuses fentry and
// fexit (this project's CI host) names both tracepoints missing and
// records no send nor arrival, the rest loaded.
func TestSendsAndArrivalsStandIns(t *testing.T) {
	privtest.Require(t)
	sendsAndArrivals(t, map[string]string{"sock_send_length": "sock_send_length_gone", "sk_data_ready": "sk_data_ready_gone"})
}

// loadedStandIns checks what the collector loaded for the renamed
// tracepoints and reports whether the stand-ins were (false: none renamed,
// or the kernel refuses fentry/fexit).
func loadedStandIns(t *testing.T, c *Collector, rename map[string]string) bool {
	t.Helper()
	rep := c.Report()
	// kfree_skb without its rx_sk argument (before 6.11) is named
	// missing whatever the test renames.
	rep.Missing = slices.DeleteFunc(rep.Missing, func(tp string) bool { return tp == kfreeSkbNoRxSk })
	t.Logf("loaded: %+v", rep)
	if len(rename) == 0 {
		return false
	}
	switch {
	case len(rep.Variants) == 2 && len(rep.Missing) == 0:
		t.Logf("stand-ins: %v", rep.Variants)
		return true
	case len(rep.Variants) == 0 && slices.Equal(rep.Missing, []string{"sk_data_ready_gone", "sock_send_length_gone"}):
		t.Logf("this kernel refuses fentry/fexit: both missing, as on a kernel without them")
		return false
	}
	t.Fatalf("with both tracepoints gone: variants %v, missing %v; want both stand-ins, or both missing", rep.Variants, rep.Missing)
	return false
}

func sendsAndArrivals(t *testing.T, rename map[string]string) {
	server := testproc.Start(t, "tcpchunks")
	port := server.Tids[0]
	var mu sync.Mutex
	var data []Event
	c := New(Config{Sends: true, Arrivals: true, rename: rename, OnData: func(e *Event) {
		mu.Lock()
		data = append(data, *e)
		mu.Unlock()
	}})
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	defer c.Close()
	standIns := loadedStandIns(t, c, rename)
	if err := c.SetTarget(uint32(server.Pid()), 1, true); err != nil {
		t.Fatal(err)
	}
	if err := c.SetClient(uint32(os.Getpid()), 2); err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	server.Go(t)
	conn, err := net.Dial("tcp4", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	clientPort := uint16(conn.LocalAddr().(*net.TCPAddr).Port)
	want := burstChunks * burstSize
	for i := range spacedChunks {
		want += chunkSize(i)
	}
	if len(got) != want {
		t.Fatalf("read %d bytes, want %d", len(got), want)
	}
	time.Sleep(200 * time.Millisecond) // two drains
	conn.Close()
	out := server.Wait(t, 10*time.Second)
	stop()
	tid, _ := strconv.Atoi(strings.TrimSpace(out))

	var sends []Event
	var sent, arrived, arrivals uint64
	var folded uint32
	mu.Lock()
	defer mu.Unlock()
	for _, e := range data {
		if e.Bytes == 0 { // the flush at close
			if e.FoldN == 0 {
				t.Errorf("a %v record of 0 bytes carries nothing", Kind(e.Kind))
			}
			if Kind(e.Kind) == Arrival {
				arrived += e.FoldBytes
			} else {
				sent += e.FoldBytes
				folded += e.FoldN
			}
			continue
		}
		switch Kind(e.Kind) {
		case Send:
			if e.Sport != uint16(port) || e.Dport != clientPort || e.Target != 1 {
				t.Errorf("send %v -> %v slot %d, want :%d -> :%d slot 1", e.Local(), e.Remote(), e.Target, port, clientPort)
			}
			if int(e.Tid) != tid {
				t.Errorf("send by thread %d, want the writer %d", e.Tid, tid)
			}
			sends = append(sends, e)
			sent += e.Bytes + e.FoldBytes
		case Arrival:
			if e.Sport != clientPort || e.Dport != uint16(port) || e.Target != 2 {
				t.Errorf("arrival %v <- %v slot %d, want :%d <- :%d slot 2", e.Local(), e.Remote(), e.Target, clientPort, port)
			}
			arrivals++
			arrived += e.Bytes + e.FoldBytes
		}
	}
	for _, e := range sends {
		folded += e.FoldN
	}
	t.Logf("%d send records (%d sends folded), %d bytes; %d arrival records, %d bytes; %d written", len(sends), folded, sent, arrivals, arrived, want)
	if len(rename) > 0 && !standIns {
		if len(sends) != 0 || arrivals != 0 {
			t.Errorf("%d sends and %d arrivals recorded without their tracepoints nor stand-ins", len(sends), arrivals)
		}
		return
	}
	if len(sends) < spacedChunks {
		t.Fatalf("%d send records, want at least the %d spaced chunks", len(sends), spacedChunks)
	}
	for i := range spacedChunks {
		if int(sends[i].Bytes) != chunkSize(i) {
			t.Errorf("send %d of %d bytes, want %d", i, sends[i].Bytes, chunkSize(i))
		}
		if i > 0 && sends[i].FoldN != 0 {
			t.Errorf("send %d carries %d folded sends of chunks 5 ms apart", i, sends[i].FoldN)
		}
	}
	if int(sent) != want {
		t.Errorf("sends add up to %d bytes, want %d", sent, want)
	}
	if len(sends)+int(folded) != spacedChunks+burstChunks {
		t.Errorf("%d sends recorded or folded, want %d", len(sends)+int(folded), spacedChunks+burstChunks)
	}
	if int(arrived) != want || arrivals < spacedChunks {
		t.Errorf("arrivals: %d records of %d bytes, want at least %d records and %d bytes", arrivals, arrived, spacedChunks, want)
	}
	if d := c.Data(); d.SendBytes != sent || d.ArrivalBytes != arrived {
		t.Errorf("Data() = %+v, want %d bytes sent and %d arrived", d, sent, arrived)
	}
}
