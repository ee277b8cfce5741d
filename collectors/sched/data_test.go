package sched

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testproc"
)

func init() { testproc.Register("unixdata", childUnixData) }

const dataWrites = 20

// childUnixData passes dataWrites bytes through a unix socketpair from a
// writer thread (a write every 5 ms) to a reader thread that polls
// without ever sleeping (MSG_DONTWAIT in a loop, as an event loop busy
// with other work): no wakeup joins them. It prints, per write, the
// number of reads that returned data, then, per write, the monotonic
// times just before and just after it.
func childUnixData(_ []string, ready func(...int), wait func()) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		panic(err)
	}
	wtid, rtid := make(chan int, 1), make(chan int, 1)
	start := make(chan struct{})
	var wg sync.WaitGroup
	var stamps []string
	reads := 0
	wg.Add(2)
	go func() { // the writer
		defer wg.Done()
		runtime.LockOSThread()
		wtid <- unix.Gettid()
		<-start
		for range dataWrites {
			time.Sleep(5 * time.Millisecond)
			t0 := monoNs()
			if _, err := unix.Write(fds[0], []byte{1}); err != nil {
				panic(err)
			}
			stamps = append(stamps, fmt.Sprintf("%d %d", t0, monoNs()))
		}
	}()
	go func() { // the reader
		defer wg.Done()
		runtime.LockOSThread()
		rtid <- unix.Gettid()
		<-start
		b := make([]byte, 16)
		for got := 0; got < dataWrites; {
			n, _, err := unix.Recvfrom(fds[1], b, unix.MSG_DONTWAIT)
			if err == nil && n > 0 {
				got += n
				reads++
			}
		}
	}()
	w, r := <-wtid, <-rtid
	ready(w, r)
	wait()
	close(start)
	wg.Wait()
	fmt.Println(reads)
	fmt.Println(strings.Join(stamps, "\n"))
}

// TestUnixDataEdges: every read of the polling reader that returned data
// is one data record naming the writer, stamped within the writer's own
// times around the last write it consumed.
func TestUnixDataEdges(t *testing.T) {
	privtest.Require(t)
	child := testproc.Start(t, "unixdata")
	writer, reader := uint32(child.Tids[0]), uint32(child.Tids[1])
	var mu sync.Mutex
	var recs []Event
	c := New(Config{DataEdges: true, OnEvent: func(e *Event) {
		if RecKind(e.Kind) == RecData {
			mu.Lock()
			recs = append(recs, *e)
			mu.Unlock()
		}
	}})
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetTarget(uint32(child.Pid()), 1, true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	child.Go(t)
	out := child.Wait(t, 30*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	reads, _ := strconv.Atoi(lines[0])
	var stamps [][2]int64
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		a, _ := strconv.ParseInt(f[0], 10, 64)
		b, _ := strconv.ParseInt(f[1], 10, 64)
		stamps = append(stamps, [2]int64{a, b})
	}
	if n := c.Lost(); n != 0 {
		t.Errorf("%d records lost", n)
	}
	if ps, err := c.PipeStats(); err != nil || ps.Unmatched != 0 {
		t.Errorf("%d reads matched no write (%v)", ps.Unmatched, err)
	}
	if len(recs) != reads || len(stamps) != dataWrites {
		for i, st := range stamps {
			t.Logf("write %d: %d..%d", i, st[0], st[1])
		}
		for i, e := range recs {
			t.Logf("record %d: read at %d (tid %d) of the write stamped %d (tid %d)", i, e.Ts, e.Tid, e.WakeTs, e.WakerTid)
		}
		for _, p := range c.Programs() {
			if st, err := p.Stats(); err == nil && st.RecursionMisses > 0 {
				t.Logf("program %s: %d runs missed (recursion)", p, st.RecursionMisses)
			}
		}
		t.Fatalf("%d data records for %d reads of %d writes (%d stamps)", len(recs), reads, dataWrites, len(stamps))
	}
	for i, e := range recs {
		if e.Tid != reader || e.WakerTid != writer || e.Tgid != uint32(child.Pid()) || e.WakerTgid != uint32(child.Pid()) {
			t.Errorf("record %d: reader %d writer %d (pids %d, %d), want %d from %d in pid %d", i, e.Tid, e.WakerTid, e.Tgid, e.WakerTgid, reader, writer, child.Pid())
		}
		w := int64(e.WakeTs)
		found := false
		for _, st := range stamps {
			found = found || (w >= st[0] && w <= st[1])
		}
		if !found || int64(e.Ts) < w {
			t.Errorf("record %d: written at %d, read at %d: within none of the writer's writes", i, w, e.Ts)
		}
	}
	t.Logf("%d data records, writer %d -> reader %d; first read %.1f µs after its write", len(recs), writer, reader, float64(recs[0].Ts-recs[0].WakeTs)/1e3)
}
