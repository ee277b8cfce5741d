package tcp

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testproc"
)

func TestMain(m *testing.M) {
	testproc.Register("tcpserve", childServe)
	testproc.Register("tcpsink", childSink)
	testproc.Register("idle", func(_ []string, ready func(...int), wait func()) {
		ready(unix.Gettid())
		wait()
	})
	testproc.Main()
	os.Exit(m.Run())
}

// childServe listens on args[1] inside network namespace args[0] ("" for
// the current one) and sends 64 KiB to every client every args[2]
// microseconds (0: as fast as it can). It prints its port through ready.
func childServe(args []string, ready func(...int), wait func()) {
	ln := make(chan net.Listener)
	go func() {
		runtime.LockOSThread() // this thread stays in the namespace
		if args[0] != "" {
			ns, err := netns.GetFromName(args[0])
			if err != nil {
				panic(err)
			}
			if err := netns.Set(ns); err != nil {
				panic(err)
			}
		}
		l, err := net.Listen("tcp4", args[1])
		if err != nil {
			panic(err)
		}
		ln <- l
		select {}
	}()
	l := <-ln
	pace, _ := strconv.Atoi(args[2])
	ready(l.Addr().(*net.TCPAddr).Port)
	wait()
	buf := make([]byte, 64<<10)
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			for {
				if pace > 0 {
					time.Sleep(time.Duration(pace) * time.Microsecond)
				}
				if _, err := c.Write(buf); err != nil {
					c.Close()
					return
				}
			}
		}()
	}
}

// childSink listens on args[1] inside network namespace args[0] and reads
// the first byte of every connection: 'd' drains the connection; 's'
// shrinks its SO_RCVBUF to 4 KiB, below what the window already
// advertised lets the peer send, and never reads again, so that segments
// arrive for a full receive queue. It prints its port through ready.
func childSink(args []string, ready func(...int), wait func()) {
	ln := make(chan net.Listener)
	go func() {
		runtime.LockOSThread() // this thread stays in the namespace
		ns, err := netns.GetFromName(args[0])
		if err != nil {
			panic(err)
		}
		if err := netns.Set(ns); err != nil {
			panic(err)
		}
		l, err := net.Listen("tcp4", args[1])
		if err != nil {
			panic(err)
		}
		ln <- l
		select {}
	}()
	l := <-ln
	ready(l.Addr().(*net.TCPAddr).Port)
	wait()
	var held []net.Conn
	var mu sync.Mutex
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			var b [1]byte
			if _, err := io.ReadFull(c, b[:]); err != nil {
				c.Close()
				return
			}
			if b[0] == 's' {
				if err := c.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
					panic(err)
				}
				mu.Lock()
				held = append(held, c) // open, unread
				mu.Unlock()
				return
			}
			drain(c)
			c.Close()
		}()
	}
}

// tcpExt reads TcpExt counters of network namespace ns.
func tcpExt(t *testing.T, ns string, names ...string) map[string]uint64 {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/netstat").Output()
	if err != nil {
		t.Fatalf("reading /proc/net/netstat of %s: %v", ns, err)
	}
	lines := strings.Split(string(out), "\n")
	res := map[string]uint64{}
	for i := 0; i+1 < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "TcpExt:") || !strings.HasPrefix(lines[i+1], "TcpExt:") {
			continue
		}
		keys, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		for j := 1; j < len(keys) && j < len(vals); j++ {
			for _, n := range names {
				if keys[j] == n {
					res[n], _ = strconv.ParseUint(vals[j], 10, 64)
				}
			}
		}
		break
	}
	return res
}

// netPair is a pair of network namespaces joined by a veth pair: the server
// side (10.x.y.1 on vethA in nsA) and the client side (10.x.y.2 in nsB).
// A routed pair (newRoutedLink) has a router namespace nsR between them.
type netPair struct {
	nsA, nsB   string
	vethA      string
	serverAddr string
	nsR, toB   string // the router's namespace and its link toward the client
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func newLink(t *testing.T) *netPair { return makeLink(t, false) }

// newRoutedLink joins the server's namespace to the client's through a
// router namespace that forwards between two veth pairs: the server at
// 10.x.y.1/25, the router at .2 and .129, the client at .130/25. A queue
// shaped on the router drops segments the way a bottleneck on the path does:
// the sender learns of them only from its acks, and retransmits. A qdisc on
// the sender's own link does not: the stack hears of its drop at once and
// reduces its window without a retransmission, and TCP small queues keep the
// local queue from filling at all.
func newRoutedLink(t *testing.T) *netPair { return makeLink(t, true) }

func makeLink(t *testing.T, routed bool) *netPair {
	t.Helper()
	privtest.RequireTool(t, "ip", "apt-get install iproute2")
	id := os.Getpid()%100000 + 100000*0
	l := &netPair{
		nsA:   fmt.Sprintf("bbtcpA%d", id),
		nsB:   fmt.Sprintf("bbtcpB%d", id),
		vethA: fmt.Sprintf("bbva%d", id),
	}
	vethB := fmt.Sprintf("bbvb%d", id)
	subnet := fmt.Sprintf("10.%d.%d", 100+id%100, (id/100)%250)
	l.serverAddr = subnet + ".1"
	spaces := []string{l.nsA, l.nsB}
	if routed {
		l.nsR, l.toB = fmt.Sprintf("bbtcpR%d", id), fmt.Sprintf("bbrb%d", id)
		spaces = append(spaces, l.nsR)
	}
	t.Cleanup(func() {
		for _, ns := range spaces {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	for _, ns := range spaces {
		ipCmd(t, "netns", "add", ns)
		ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	}
	links := [][2]string{{l.nsA, l.vethA}, {l.nsB, vethB}}
	if !routed {
		ipCmd(t, "link", "add", l.vethA, "netns", l.nsA, "type", "veth", "peer", "name", vethB, "netns", l.nsB)
		ipCmd(t, "-n", l.nsA, "addr", "add", subnet+".1/24", "dev", l.vethA)
		ipCmd(t, "-n", l.nsB, "addr", "add", subnet+".2/24", "dev", vethB)
	} else {
		fromA := fmt.Sprintf("bbra%d", id)
		ipCmd(t, "link", "add", l.vethA, "netns", l.nsA, "type", "veth", "peer", "name", fromA, "netns", l.nsR)
		ipCmd(t, "link", "add", l.toB, "netns", l.nsR, "type", "veth", "peer", "name", vethB, "netns", l.nsB)
		ipCmd(t, "-n", l.nsA, "addr", "add", subnet+".1/25", "dev", l.vethA)
		ipCmd(t, "-n", l.nsR, "addr", "add", subnet+".2/25", "dev", fromA)
		ipCmd(t, "-n", l.nsR, "addr", "add", subnet+".129/25", "dev", l.toB)
		ipCmd(t, "-n", l.nsB, "addr", "add", subnet+".130/25", "dev", vethB)
		links = append(links, [2]string{l.nsR, fromA}, [2]string{l.nsR, l.toB})
	}
	for _, ln := range links {
		ipCmd(t, "-n", ln[0], "link", "set", ln[1], "up")
	}
	if routed {
		ipCmd(t, "-n", l.nsA, "route", "add", "default", "via", subnet+".2")
		ipCmd(t, "-n", l.nsB, "route", "add", "default", "via", subnet+".129")
		if out, err := exec.Command("ip", "netns", "exec", l.nsR, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward").CombinedOutput(); err != nil {
			t.Fatalf("forwarding in %s: %v: %s", l.nsR, err, out)
		}
	}
	return l
}

// shape puts a tbf qdisc on the router's link toward the client, through
// netlink: the bottleneck of the server's sends.
func (l *netPair) shape(t *testing.T, rate uint64, limit, burst uint32) {
	t.Helper()
	if l.nsR == "" {
		t.Fatal("shape needs a routed link (newRoutedLink)")
	}
	ns, err := netns.GetFromName(l.nsR)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lk, err := h.LinkByName(l.toB)
	if err != nil {
		t.Fatal(err)
	}
	q := &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: lk.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       rate,
		Limit:      limit,
		Buffer:     netlink.Xmittime(rate, burst),
	}
	if err := h.QdiscAdd(q); err != nil {
		t.Fatalf("adding tbf to %s: %v", l.toB, err)
	}
}

// dial connects from the client namespace, with SO_RCVBUF rcvbuf when it is not 0.
func (l *netPair) dial(t *testing.T, port int, rcvbuf int) *net.TCPConn {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is left in the client namespace and dies with the goroutine.
		ns, err := netns.GetFromName(l.nsB)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			ch <- res{nil, err}
			return
		}
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			if rcvbuf == 0 {
				return nil
			}
			return rc.Control(func(fd uintptr) {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf)
			})
		}}
		c, err := d.Dial("tcp4", net.JoinHostPort(l.serverAddr, strconv.Itoa(port)))
		ch <- res{c, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("dialing %s:%d: %v", l.serverAddr, port, r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return r.c.(*net.TCPConn)
}

// drain reads c until it is closed.
func drain(c net.Conn) { _, _ = io.Copy(io.Discard, c) }

// episodes collects what OnEpisode delivers.
type episodes struct {
	mu  sync.Mutex
	eps []Episode
}

func (e *episodes) add(ep Episode) {
	e.mu.Lock()
	e.eps = append(e.eps, ep)
	e.mu.Unlock()
}

func (e *episodes) of(remote netip.AddrPort, kinds ...EpisodeKind) []Episode {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Episode
	for _, ep := range e.eps {
		if ep.Local.Port() == 0 || ep.Remote != remote {
			continue
		}
		for _, k := range kinds {
			if ep.Kind == k {
				out = append(out, ep)
			}
		}
	}
	return out
}

// run starts a collector in the background; stop returns after Run did.
func run(t *testing.T, c *Collector) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		if n := c.Lost(); n != 0 {
			t.Errorf("%d events lost", n)
		}
	}
}

func connTo(t *testing.T, conns []Conn, client net.Conn) Conn {
	t.Helper()
	want := client.LocalAddr().(*net.TCPAddr).AddrPort()
	for _, c := range conns {
		if c.Remote.Addr().Unmap() == want.Addr().Unmap() && c.Remote.Port() == want.Port() {
			return c
		}
	}
	t.Fatalf("no connection to %v among %d followed", want, len(conns))
	return Conn{}
}

// TestZeroWindowOfOneSlowReader: the target sends to two clients; one
// stops reading. The zero-window episode and rwnd_limited time belong to
// that connection alone.
func TestZeroWindowOfOneSlowReader(t *testing.T) {
	privtest.Require(t)
	l := newLink(t)
	// 64 KiB every 10 ms: a reader keeps up with it easily.
	child := testproc.Start(t, "tcpserve", l.nsA, l.serverAddr+":0", "10000")
	port := child.Tids[0]

	sec, err := NewSection(collectors.Options{Pid: child.Pid(), Port: port, Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var eps episodes
	sec.cfg.OnEpisode = eps.add
	if err := sec.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	defer sec.Close()
	stop := run(t, sec.Collector)
	child.Go(t)

	fast := l.dial(t, port, 0)
	slow := l.dial(t, port, 16<<10)
	stallFrom := time.Now() // the slow reader never reads: it stalls from here
	go drain(fast)
	time.Sleep(2 * time.Second)
	stalled := time.Since(stallFrom) // the receiver's stall, up to the Refresh that reads tcp_info
	if err := sec.Refresh(); err != nil {
		t.Fatal(err)
	}
	stop()

	conns := sec.Connections()
	f, s := connTo(t, conns, fast), connTo(t, conns, slow)
	t.Logf("fast reader: %+v", ConnectionOf(f))
	t.Logf("slow reader: %+v (stalled %v)", ConnectionOf(s), stalled)
	// Its window is full a few ms after the dial (64 KiB every 10 ms into
	// 16 KiB): most of the stall is a zero window and the sender's
	// rwnd_limited time (both within 1% of it here; half is the bound).
	if time.Duration(s.ZeroWindowNs) < stalled/2 || s.ZeroWindowEpisodes == 0 {
		t.Errorf("slow reader: zero window %v in %d episodes, want >= half the %v it stalled", time.Duration(s.ZeroWindowNs), s.ZeroWindowEpisodes, stalled)
	}
	if s.RwndLimited < stalled/2 {
		t.Errorf("slow reader: rwnd_limited %v, want >= half the %v it stalled", s.RwndLimited, stalled)
	}
	if s.SndWndMin != 0 {
		t.Errorf("slow reader: snd_wnd_min %d, want 0", s.SndWndMin)
	}
	if f.ZeroWindowNs != 0 || f.ZeroWindowEpisodes != 0 {
		t.Errorf("fast reader: zero window %v in %d episodes, want none", time.Duration(f.ZeroWindowNs), f.ZeroWindowEpisodes)
	}
	if f.RwndLimited*10 > s.RwndLimited {
		t.Errorf("fast reader rwnd_limited %v is not small next to the slow reader's %v", f.RwndLimited, s.RwndLimited)
	}
	slowAddr := slow.LocalAddr().(*net.TCPAddr).AddrPort()
	fastAddr := fast.LocalAddr().(*net.TCPAddr).AddrPort()
	zs := eps.of(slowAddr, ZeroWindow)
	if len(zs) == 0 || zs[0].Start <= 0 || zs[0].Local.Port() != uint16(port) {
		t.Errorf("zero-window episodes of the slow reader: %+v, want one starting on the CLOCK_MONOTONIC timeline", zs)
	}
	if zf := eps.of(fastAddr, ZeroWindow); len(zf) != 0 {
		t.Errorf("zero-window episodes of the fast reader: %+v, want none", zf)
	}

	// The JSON section has both connections and nothing else.
	sum := sec.Summary().(Summary)
	if len(sum.Connections) != 2 {
		t.Errorf("section has %d connections, want 2: %+v", len(sum.Connections), sum)
	}
	for _, c := range sum.Connections {
		if c.Remote == slowAddr.String() && c.ZeroWindowSeconds < stalled.Seconds()/2 {
			t.Errorf("section: slow reader zero_window_seconds %v, want >= half the %v it stalled", c.ZeroWindowSeconds, stalled)
		}
		if c.Remote == fastAddr.String() && (c.ZeroWindowSeconds != 0 || c.BytesSent == 0) {
			t.Errorf("section: fast reader %+v, want no zero window and bytes sent", c)
		}
	}
}

// TestShapedLink: tbf on the server's side raises srtt, reduces the
// congestion window, and its small queue drops packets, which the sender
// retransmits; the sender is busy the whole time.
func TestShapedLink(t *testing.T) {
	privtest.Require(t)
	l := newRoutedLink(t)
	child := testproc.Start(t, "tcpserve", l.nsA, l.serverAddr+":0", "0")
	port := child.Tids[0]

	var eps episodes
	c := New(Config{OnEpisode: eps.add})
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	defer c.Close()
	host := NewHost(nil, func() map[uint32]string { return map[uint32]string{0: "host", 2: "server"} })
	if err := host.Start(context.Background()); err != nil {
		t.Fatalf("host start: %+v", err)
	}
	defer host.Close()
	if err := c.SetTarget(uint32(child.Pid()), 1, true); err != nil {
		t.Fatal(err)
	}
	if err := host.SetTarget(uint32(child.Pid()), 2); err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	child.Go(t)

	free := l.dial(t, port, 0)
	go drain(free)
	time.Sleep(700 * time.Millisecond)
	if err := c.Refresh(); err != nil {
		t.Fatal(err)
	}
	base := connTo(t, c.Connections(), free)
	free.Close()

	l.shape(t, 250_000, 20_000, 3_000) // 2 Mbit/s, 20 kB queue: up to 80 ms
	shaped := l.dial(t, port, 0)
	sendFrom := time.Now() // the server sends without pause from here, through the shaped link
	go drain(shaped)
	time.Sleep(3 * time.Second)
	sending := time.Since(sendFrom) // the time it had data to send, up to the Refresh that reads tcp_info
	if err := c.Refresh(); err != nil {
		t.Fatal(err)
	}
	stop()
	sh := connTo(t, c.Connections(), shaped)
	t.Logf("unshaped: %+v busy %v", ConnectionOf(base), base.Busy)
	t.Logf("shaped:   %+v busy %v of %v sending", ConnectionOf(sh), sh.Busy, sending)

	if sh.SrttUs < 10_000 || sh.SrttUs < 5*base.SrttUs {
		t.Errorf("shaped srtt %dµs, want >= 10ms and >= 5x the unshaped %dµs", sh.SrttUs, base.SrttUs)
	}
	if sh.Busy < sending*2/3 {
		t.Errorf("shaped sender busy %v, want >= 2/3 of the %v it had data to send", sh.Busy, sending)
	}
	if sh.SndbufLimited+sh.Busy == 0 {
		t.Error("shaped sender shows neither sndbuf_limited nor busy time")
	}
	if sh.Retransmits == 0 {
		t.Error("no retransmits through a 20 kB tbf queue")
	}
	shapedAddr := shaped.LocalAddr().(*net.TCPAddr).AddrPort()
	rt := eps.of(shapedAddr, Retransmission)
	red := eps.of(shapedAddr, CwndReduction)
	t.Logf("shaped: %d retransmit episodes, %d cwnd reductions", len(rt), len(red))
	if len(rt) == 0 || len(red) == 0 {
		t.Errorf("shaped: %d retransmit episodes and %d cwnd reductions, want some of each", len(rt), len(red))
	}
	if sh.SndCwnd >= base.SndCwnd {
		t.Errorf("shaped cwnd %d, want below the unshaped %d", sh.SndCwnd, base.SndCwnd)
	}
	// Drops in the tbf queue put the sender into loss recovery.
	loss := eps.of(shapedAddr, CongestionLoss)
	var closed int
	for _, ep := range loss {
		if ep.End != 0 {
			closed++
			if ep.Start <= 0 || ep.End < ep.Start || (ep.CAState != CARecovery && ep.CAState != CALoss) {
				t.Errorf("congestion loss episode %+v, want Start <= End on the CLOCK_MONOTONIC timeline, left Recovery or Loss", ep)
			}
		}
	}
	t.Logf("shaped: %d recovery and %d loss entries, %d congestion loss episode events (%d closed), %v in recovery",
		sh.RecoveryEntries, sh.LossEntries, len(loss), closed, time.Duration(sh.CongestionLossNs))
	if sh.RecoveryEntries+sh.LossEntries == 0 || closed == 0 || sh.CongestionLossNs == 0 {
		t.Errorf("shaped: %d recovery and %d loss entries, %d closed episodes, %v in recovery; want some of each",
			sh.RecoveryEntries, sh.LossEntries, closed, time.Duration(sh.CongestionLossNs))
	}
	if cs := ConnectionOf(sh); cs.RecoveryEntries+cs.LossEntries == 0 || cs.CongestionLossSeconds == 0 {
		t.Errorf("section: shaped %+v, want recovery/loss entries and time", cs)
	}

	st, err := host.Stats(2)
	if err != nil {
		t.Fatal(err)
	}
	if st.Retransmits == 0 || st.Srtt.Count == 0 || st.LossEpisodes == 0 || st.LossNs == 0 {
		t.Errorf("daemon aggregates of the target: %+v, want retransmits, srtt samples and loss recovery", st)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(host); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Errorf("gather: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	for _, p := range []int{-1, 65536, 100000} {
		if _, err := NewSection(collectors.Options{Pid: 1, Port: p}); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("port %d: err %v, want an out-of-range error", p, err)
		}
	}
	if _, err := NewSection(collectors.Options{Pid: 0}); err == nil {
		t.Error("pid 0 accepted")
	}
}

// TestTargetWithoutSockets: an empty section, not an error.
func TestTargetWithoutSockets(t *testing.T) {
	privtest.Require(t)
	child := testproc.Start(t, "idle")
	sec, err := NewSection(collectors.Options{Pid: child.Pid()})
	if err != nil {
		t.Fatal(err)
	}
	if err := sec.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	defer sec.Close()
	if err := sec.Refresh(); err != nil {
		t.Errorf("refresh: %v", err)
	}
	sum := sec.Summary().(Summary)
	if sum.Connections == nil || len(sum.Connections) != 0 {
		t.Errorf("summary %+v, want an empty list", sum)
	}
}

// TestMissingTracepoint simulates a kernel without tcp_retransmit_skb:
// the collector names it and the other tracepoints still report.
func TestMissingTracepoint(t *testing.T) {
	privtest.Require(t)
	child := testproc.Start(t, "tcpserve", "", "127.0.0.1:0", "0")
	port := child.Tids[0]
	var (
		mu    sync.Mutex
		kinds = map[Kind]int{}
	)
	c := New(Config{
		Sends: true, Arrivals: true,
		rename:  map[string]string{"tcp_retransmit_skb": "tcp_retransmit_skb_gone"},
		OnEvent: func(e *Event) { mu.Lock(); kinds[Kind(e.Kind)]++; mu.Unlock() },
	})
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	defer c.Close()
	if m := c.Missing(); len(m) != 1 || m[0] != "tcp_retransmit_skb_gone" {
		t.Errorf("Missing() = %v, want [tcp_retransmit_skb_gone]", m)
	}
	if n := len(c.LinkIDs()); n != len(Tracepoints)-1 {
		t.Errorf("%d links, want %d", n, len(Tracepoints)-1)
	}
	if err := c.SetTarget(uint32(child.Pid()), 1, true); err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	child.Go(t)
	conn, err := net.Dial("tcp4", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, conn, 4<<20); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	time.Sleep(200 * time.Millisecond)
	stop()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("events by kind: %v", kinds)
	if kinds[Open] != 1 || kinds[Close] != 1 || kinds[CwndChange] == 0 {
		t.Errorf("events by kind %v, want one open, one close and cwnd reports", kinds)
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	privtest.Require(t)
	c := New(Config{Sends: true, Arrivals: true})
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	progs, links := c.ProgramIDs(), c.LinkIDs()
	if n := len(Tracepoints); len(progs) != n || len(links) != n {
		t.Fatalf("loaded %d programs and %d links, want %d and %d (missing: %v)", len(progs), len(links), n, n, c.Missing())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	privtest.AssertReleased(t, progs, links)
}

// TestReceiveQueue: the target drains one connection and stops reading
// another after shrinking its SO_RCVBUF below what the peer may still send.
// The segments the kernel drops for the full receive queue (the network
// namespace's own TCPRcvQDrop and TCPOFODrop) are that connection's, and
// the drained one shows the receive autotuning of a bulk receive.
func TestReceiveQueue(t *testing.T) {
	privtest.Require(t)
	l := newLink(t)
	child := testproc.Start(t, "tcpsink", l.nsA, l.serverAddr+":0")
	port := child.Tids[0]

	c := New(Config{Port: uint16(port)})
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	defer c.Close()
	for _, tp := range []string{"kfree_skb", "tcp_rcv_space_adjust"} {
		for _, m := range c.Missing() {
			if m == tp || m == kfreeSkbNoRxSk {
				privtest.Skip(t, "this kernel lacks "+m)
			}
		}
	}
	host := NewHost(nil, func() map[uint32]string { return map[uint32]string{0: "host", 2: "server"} })
	if err := host.Start(context.Background()); err != nil {
		t.Fatalf("host start: %+v", err)
	}
	defer host.Close()
	if err := c.SetTarget(uint32(child.Pid()), 1, true); err != nil {
		t.Fatal(err)
	}
	if err := host.SetTarget(uint32(child.Pid()), 2); err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	child.Go(t)
	before := tcpExt(t, l.nsA, "TCPRcvQDrop", "TCPOFODrop")

	fast := l.dial(t, port, 0)
	stalled := l.dial(t, port, 0)
	// The stalled connection's first byte alone: the server shrinks its
	// receive buffer while the window it advertised is still open.
	if _, err := stalled.Write([]byte{'s'}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	send := func(conn *net.TCPConn, first byte, d time.Duration) {
		buf := make([]byte, 64<<10)
		buf[0] = first
		_ = conn.SetWriteDeadline(time.Now().Add(d))
		for {
			if _, err := conn.Write(buf); err != nil {
				return
			}
			buf[0] = 'x'
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); send(fast, 'd', 1500*time.Millisecond) }()
	go func() { defer wg.Done(); send(stalled, 'x', 1500*time.Millisecond) }()
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	if err := c.Refresh(); err != nil {
		t.Fatal(err)
	}
	stop()
	after := tcpExt(t, l.nsA, "TCPRcvQDrop", "TCPOFODrop")
	drops := after["TCPRcvQDrop"] - before["TCPRcvQDrop"] + after["TCPOFODrop"] - before["TCPOFODrop"]

	conns := c.Connections()
	f, s := connTo(t, conns, fast), connTo(t, conns, stalled)
	t.Logf("drained: %+v", ConnectionOf(f))
	t.Logf("stalled: %+v", ConnectionOf(s))
	t.Logf("server namespace: TCPRcvQDrop+TCPOFODrop %d (before %v, after %v)", drops, before, after)
	if drops == 0 {
		t.Fatal("the server's namespace dropped nothing for a full receive queue: no ground truth")
	}
	if uint64(s.RcvqueueFull) != drops {
		t.Errorf("stalled: rcvqueue_full %d, want the namespace's %d", s.RcvqueueFull, drops)
	}
	if f.RcvqueueFull != 0 {
		t.Errorf("drained: rcvqueue_full %d, want 0", f.RcvqueueFull)
	}
	if f.RcvSpace == 0 || f.Rcvbuf == 0 || f.BytesReceived < 1<<20 {
		t.Errorf("drained: rcv_space %d, rcvbuf %d after %d bytes received, want a bulk receive's autotuning",
			f.RcvSpace, f.Rcvbuf, f.BytesReceived)
	}
	sum := ConnectionOf(s)
	if uint64(sum.RcvqueueFull) != drops {
		t.Errorf("section: stalled rcvqueue_full %d, want %d", sum.RcvqueueFull, drops)
	}

	st, err := host.Stats(2)
	if err != nil {
		t.Fatal(err)
	}
	if st.RcvqueueFull != drops {
		t.Errorf("daemon: rcvqueue_full of the target %d, want %d", st.RcvqueueFull, drops)
	}
	if got := rcvqueueFullMetric(t, host, "server"); got != float64(drops) {
		t.Errorf("bpfbench_tcp_rcvqueue_full_total{target=\"server\"} = %v, want %d", got, drops)
	}
}

// rcvqueueFullMetric is bpfbench_tcp_rcvqueue_full_total of target in the
// daemon's metrics, -1 when absent.
func rcvqueueFullMetric(t *testing.T, host *Host, target string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(host); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var got float64 = -1
	for _, mf := range mfs {
		if mf.GetName() != "bpfbench_tcp_rcvqueue_full_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "target" && lp.GetValue() == target {
					got = m.GetCounter().GetValue()
				}
			}
		}
	}
	return got
}
