// Package tcp is the TCP collector: per-connection congestion window,
// windows, srtt, retransmits, state changes and zero-window episodes of
// target processes, from the tcp_probe, tcp_retransmit_skb and
// inet_sock_set_state tp_btf tracepoints (bpf/tcp.bpf.c), with loss
// recovery (tcp_cong_state_set), receive autotuning (tcp_rcv_space_adjust)
// and receive-queue drops (kfree_skb, sock_rcvqueue_full) where the kernel
// has those tracepoints, enriched with the
// kernel's own tcp_info (rwnd_limited, sndbuf_limited, busy time,
// notsent bytes, bytes sent and received) read at each refresh.
//
// A target's sockets are found through its /proc/<pid>/fd and, in
// bpfbench's own network namespace, socket diag (each socket's inode), in
// another namespace its socket descriptors (pidfd_getfd), as sockets.go
// says, and followed by socket cookie; connections
// accepted on the target's listening ports are followed by the kernel from
// the moment they are established. Client connections a target opens
// between two refreshes are followed from the next refresh on.
package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/bpfbench/bpfbench/result"
	"log/slog"
	"maps"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/internal/hist"
)

// Kind is the kind of an Event, as numbered by bpf/tcp.bpf.c.
type Kind uint8

// The event kinds.
const (
	Open            Kind = 0 // became ESTABLISHED
	Close           Kind = 1 // went to CLOSE; counters are final
	StateChange     Kind = 2 // another state change
	Retransmit      Kind = 3 // one segment retransmitted
	ZeroWindowStart Kind = 4 // the peer's advertised window went to zero
	ZeroWindowEnd   Kind = 5 // the peer's window opened again
	CwndChange      Kind = 6 // snd_cwnd moved by a quarter or more since the last report
	// CongestionLossStart: the connection entered Recovery or Loss (CaState)
	// from Open, Disorder or CWR (OldCaState).
	CongestionLossStart Kind = 7
	// CongestionLossEnd: back below Recovery; DurationNs is the episode.
	CongestionLossEnd Kind = 8
	// Send: a send of a followed server socket (Config.Sends): Bytes by
	// thread Tid. FoldN sends (FoldBytes) followed the connection's
	// previous Send record within the fold window, the last at FoldLastTs:
	// they belong to that record's burst.
	Send Kind = 9
	// Arrival: data arrived at a socket of the load generator
	// (Config.Arrivals, SetClient): Bytes queued by this arrival, Queued
	// bytes unread; folded like sends.
	//
	// A Send or Arrival record of 0 bytes, at the connection's close, only
	// carries what was still folded; its ports may be 0 (match it by
	// Cookie) and its Tid is not the sender's.
	Arrival Kind = 10
	// SendFull: a send of a followed server socket found its buffer full
	// (EAGAIN from a non-blocking socket) at Ts, the first since the last
	// Send that went through; it carries the folded sends like a Send.
	// The connection held the server's data back until its next Send.
	SendFull Kind = 11
	// Request: data arrived at a followed server socket since its last
	// send (Config.Requests): Bytes over FoldN arrivals, the last at Ts,
	// the first DurationNs before it. Its record comes just before the
	// server's next Send on the connection, never folded into the
	// previous burst: a request and the response's first byte.
	Request Kind = 12
	// Release: what a followed server socket wrote into a full peer
	// window (a Send whose Queued >= SndWnd, Config.Requests) was
	// acknowledged at Ts: the reader took it. DurationNs goes back to the
	// first such send.
	Release Kind = 13
)

func (k Kind) String() string {
	switch k {
	case Open:
		return "open"
	case Close:
		return "close"
	case StateChange:
		return "state"
	case Retransmit:
		return "retransmit"
	case ZeroWindowStart:
		return "zero_window_start"
	case ZeroWindowEnd:
		return "zero_window_end"
	case CwndChange:
		return "cwnd"
	case CongestionLossStart:
		return "congestion_loss_start"
	case CongestionLossEnd:
		return "congestion_loss_end"
	case Send:
		return "send"
	case Arrival:
		return "arrival"
	case SendFull:
		return "send_full"
	case Request:
		return "request"
	case Release:
		return "release"
	}
	return fmt.Sprintf("kind%d", uint8(k))
}

// Event is one event of a followed connection, as the kernel wrote it. Ts
// is CLOCK_MONOTONIC ns; the window and congestion fields are the
// connection's state as of the last segment received.
type Event = tcpEvent

// Local is the connection's local address and port.
func (e *Event) Local() netip.AddrPort { return addrPort(e.Family, e.Saddr, e.Sport) }

// Remote is the connection's remote address and port.
func (e *Event) Remote() netip.AddrPort { return addrPort(e.Family, e.Daddr, e.Dport) }

func addrPort(family uint16, a [16]uint8, port uint16) netip.AddrPort {
	if family == 10 { // AF_INET6
		return netip.AddrPortFrom(netip.AddrFrom16(a).Unmap(), port)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(a[:4])), port)
}

// Tracepoints are the tracepoints the collector attaches to; each is
// optional (a kernel without one reports it in Missing). kfree_skb needs
// its rx_sk argument (Linux 6.11 and later).
var Tracepoints = []string{
	"inet_sock_set_state", "tcp_probe", "tcp_retransmit_skb",
	"tcp_cong_state_set", "tcp_rcv_space_adjust", "kfree_skb", "sock_rcvqueue_full",
	"sock_send_length", "sk_data_ready",
}

// DefaultSendFold is the fold window of sends and arrivals: those within
// it of the connection's previous record are summed into its burst.
const DefaultSendFold = 50 * time.Microsecond

// kfreeSkbNoRxSk is what Missing reports for a kernel whose kfree_skb
// tracepoint does not pass the receiving socket.
const kfreeSkbNoRxSk = "kfree_skb(rx_sk)"

// kfreeSkbHasRxSk reports whether the kernel's kfree_skb tracepoint passes
// the receiving socket (skb, location, reason, rx_sk); without it the
// program would not load.
func kfreeSkbHasRxSk() bool {
	spec, err := bpfutil.KernelBTF()
	if err != nil {
		return false
	}
	var td *btf.Typedef
	if err := spec.TypeByName("btf_trace_kfree_skb", &td); err != nil {
		return false
	}
	ptr, ok := td.Type.(*btf.Pointer)
	if !ok {
		return false
	}
	fp, ok := ptr.Target.(*btf.FuncProto)
	return ok && len(fp.Params) >= 5 // the tracepoint's void *data first
}

// MaxTargets bounds the aggregate slots; index 0 is host-wide.
const MaxTargets = bpfutil.MaxTargets

// Config configures a Collector.
type Config struct {
	// HostWide aggregates retransmits and srtt of every socket under slot
	// 0 (the daemon); otherwise only followed sockets count (a session).
	HostWide bool
	// Port follows only connections on this local port (0: all).
	Port uint16
	// RefreshInterval is how often Run looks for the targets' sockets
	// (default 1 s).
	RefreshInterval time.Duration
	// RingBufferBytes sizes the event ring buffer (a power of two, default 4 MiB).
	RingBufferBytes uint32
	// DrainPeriod is how often the ring buffer is read (default 100 ms).
	DrainPeriod time.Duration
	// Sends records each send of a streamed target's connections
	// (sock_send_length: one more program run per sendmsg of the host).
	// Sessions turn it on.
	Sends bool
	// Arrivals records each arrival of data at the load generator's
	// sockets (SetClient; sk_data_ready: one more program run per segment
	// queued on the host). Sessions that run their own load turn it on.
	Arrivals bool
	// Requests records the data arriving at streamed server sockets, as
	// one Request record before the server's next send (sk_data_ready,
	// as Arrivals, summed in the kernel), and the end of each such
	// connection as a Send record of 0 bytes: live traffic's streams.
	Requests bool
	// SendFold is the fold window of sends and arrivals (default
	// DefaultSendFold; negative: none).
	SendFold time.Duration
	// OnData receives each Send and Arrival record, from the reader
	// goroutine; the pointer is valid during the call only.
	OnData func(*Event)
	// OnEvent receives each event of a streamed target from the reader
	// goroutine. It must be quick; the pointer is valid during the call only.
	OnEvent func(*Event)
	// OnEpisode receives each decoded episode (zero window, retransmit,
	// cwnd change) of a streamed target, from the reader goroutine.
	OnEpisode func(Episode)
	Logger    *slog.Logger

	// rename attaches a program to another tracepoint (tests simulate a
	// kernel that lacks one).
	rename map[string]string
}

type targetInfo struct {
	idx    uint32
	stream bool
	client bool
	// scanned: the client's sockets were listed once; the kernel follows
	// every connection it makes after that, so refreshes skip it.
	scanned bool
}

// Collector loads and runs the TCP programs and follows the sockets of
// its targets.
type Collector struct {
	*bpfutil.Base
	cfg  Config
	objs tcpObjects

	mu      sync.Mutex
	targets map[uint32]targetInfo
	conns   map[uint64]*Conn // by cookie
	listens map[tcpListenKey]struct{}
	data    DataCounts
	dumps   DumpCounts
	// lastDump is when the targets' sockets were last dumped; a refresh
	// dumps again once dumpPeriod has passed (refresh).
	lastDump   time.Time
	dumpPeriod time.Duration
	unlistened bool // a server target had no listening socket at the last dump
	closed     atomic.Bool
	// sockErr is why the last dump could not read every target's sockets
	// (nil: it could); it is logged when it changes.
	sockErr error
}

// DumpCounts (result.TCPDumpCounts) measure the socket dumps of the refreshes. A dump walks the
// kernel's whole established-socket hash table (9 ms of a CPU here with
// 262,144 buckets, whatever the number of sockets), so refreshes dump
// only as often as keeps them within dumpBudget of a CPU: in between they
// read the followed sockets' kernel state alone, and the kernel follows
// the connections accepted on the listening ports it knows.
type DumpCounts = result.TCPDumpCounts

const (
	// dumpBudget is the share of a CPU the socket dumps may take.
	dumpBudget = 0.001
	// maxDumpPeriod bounds the time between two dumps: sockets that a
	// target opens other than by accepting on a known listening port
	// (its own connects, a new listening port) are found within it.
	maxDumpPeriod = 30 * time.Second
)

// DataCounts (result.TCPDataCounts) count the Send and Arrival records and their bytes (folded
// ones included).
type DataCounts = result.TCPDataCounts

// New returns a collector; Start loads it.
func New(cfg Config) *Collector {
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = time.Second
	}
	return &Collector{
		cfg: cfg, Base: bpfutil.NewBase("tcp", cfg.Logger),
		targets: map[uint32]targetInfo{}, conns: map[uint64]*Conn{}, listens: map[tcpListenKey]struct{}{},
	}
}

// Variants are the tcp programs that stand in for tracepoints older
// kernels lack (6.1 has neither): sock_send_length by the return of tcp_sendmsg,
// sk_data_ready by the entry of sock_def_readable.
var Variants = map[string]bpfutil.Variant{
	"tcp_sendmsg_exit":        {Of: "sock_send_length"},
	"sock_def_readable_entry": {Of: "sk_data_ready"},
}

// Start loads the programs whose tracepoints the kernel has and attaches
// them; missing tracepoints are logged and listed by Missing. On error it
// releases everything it took.
func (c *Collector) Start(context.Context) error {
	rename := c.cfg.rename
	if _, ok := rename["kfree_skb"]; !ok && !kfreeSkbHasRxSk() {
		rename = map[string]string{"kfree_skb": kfreeSkbNoRxSk}
		for k, v := range c.cfg.rename {
			rename[k] = v
		}
	}
	var skip []string
	if !c.cfg.Sends {
		skip = append(skip, "sock_send_length")
	}
	if !c.cfg.Arrivals && !c.cfg.Requests {
		skip = append(skip, "sk_data_ready")
	}
	fold := c.cfg.SendFold
	if fold == 0 {
		fold = DefaultSendFold
	}
	if err := c.Load(bpfutil.Object{Spec: loadTcp, Objs: &c.objs, RingBytes: c.cfg.RingBufferBytes, Skip: skip,
		Consts: map[string]any{tcpVarHostWide: c.cfg.HostWide, tcpVarSendFoldNs: uint64(max(fold, 0)),
			tcpVarLiveRequests: c.cfg.Requests}, Rename: rename, Variants: Variants}); err != nil {
		return err
	}
	// Runs before the objects close: a summary's refresh after Close still
	// reads tcp_info, and its map updates fail without being errors.
	c.OnClose(func() error { c.closed.Store(true); return nil })
	return nil
}

// SetClient follows the TCP connections of tgid, the load generator, under
// slot idx: those it connects from now on (in the kernel, at connect) and
// those it has now (listed once, here). They send only Arrival records.
func (c *Collector) SetClient(tgid, idx uint32) error {
	if err := bpfutil.CheckSlot(idx); err != nil {
		return err
	}
	if err := c.objs.ClientIdx.Set(idx); err != nil {
		return fmt.Errorf("setting the client slot: %w", err)
	}
	if err := c.objs.ClientTgid.Set(tgid); err != nil {
		return fmt.Errorf("setting the client pid: %w", err)
	}
	c.mu.Lock()
	c.targets[tgid] = targetInfo{idx: idx, stream: true, client: true}
	c.mu.Unlock()
	return c.Refresh()
}

// Data counts the Send and Arrival records so far.
func (c *Collector) Data() DataCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.data
}

// Run refreshes the targets' sockets every RefreshInterval and drains the
// ring buffer into OnEvent and OnEpisode until ctx is done (after
// delivering what the kernel wrote until then) or Close.
func (c *Collector) Run(ctx context.Context) error {
	if !c.Started() {
		return errors.New("tcp collector not started")
	}
	refreshDone := make(chan struct{})
	rctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); <-refreshDone }()
	go func() {
		defer close(refreshDone)
		tk := time.NewTicker(c.cfg.RefreshInterval)
		defer tk.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tk.C:
				_ = c.refresh(false) // logged there, once
			}
		}
	}()
	return bpfutil.Drain(ctx, c.Base, c.cfg.DrainPeriod, c.handle)
}

func (c *Collector) handle(e *Event) {
	if c.cfg.OnEvent != nil {
		c.cfg.OnEvent(e)
	}
	if k := Kind(e.Kind); k == Send || k == Arrival || k == SendFull || k == Request || k == Release {
		c.mu.Lock()
		switch k {
		case Release:
			c.data.Releases++
			c.mu.Unlock()
			if c.cfg.OnData != nil {
				c.cfg.OnData(e)
			}
			return
		case Request:
			c.data.Requests++
			c.data.RequestBytes += e.Bytes
			c.mu.Unlock()
			if c.cfg.OnData != nil {
				c.cfg.OnData(e)
			}
			return
		case SendFull:
			c.data.SendsFull++
		case Send:
			c.data.Sends++
			c.data.SendBytes += e.Bytes + e.FoldBytes
			if conn := c.conns[e.Cookie]; conn != nil {
				conn.Sends += 1 + uint64(e.FoldN)
				conn.SendBytes += e.Bytes + e.FoldBytes
			}
		default:
			c.data.Arrivals++
			c.data.ArrivalBytes += e.Bytes + e.FoldBytes
		}
		c.data.Folded += uint64(e.FoldN)
		c.mu.Unlock()
		if c.cfg.OnData != nil {
			c.cfg.OnData(e)
		}
		return
	}
	c.mu.Lock()
	conn := c.conns[e.Cookie]
	if conn == nil && Kind(e.Kind) != Close {
		if c.cfg.Port == 0 || e.Sport == c.cfg.Port {
			conn = &Conn{Cookie: e.Cookie, Local: e.Local(), Remote: e.Remote(), Target: e.Target, SndWndMin: ^uint32(0)}
			c.conns[e.Cookie] = conn
		}
	}
	if conn != nil {
		conn.fromEvent(e)
	}
	c.mu.Unlock()
	if c.cfg.OnEpisode != nil && (c.cfg.Port == 0 || e.Sport == c.cfg.Port) {
		if ep, ok := EpisodeOf(e); ok {
			c.cfg.OnEpisode(ep)
		}
	}
}

// SetTarget follows the TCP sockets of tgid under slot idx
// (1..MaxTargets-1) and, with stream, sends their events through the ring
// buffer. It looks for the target's sockets at once.
func (c *Collector) SetTarget(tgid uint32, idx uint32, stream bool) error {
	if err := bpfutil.CheckSlot(idx); err != nil {
		return err
	}
	c.mu.Lock()
	c.targets[tgid] = targetInfo{idx: idx, stream: stream}
	c.mu.Unlock()
	return c.Refresh()
}

// DeleteTarget stops following tgid's new sockets. Deleting an unknown
// tgid is not an error.
func (c *Collector) DeleteTarget(tgid uint32) error {
	c.mu.Lock()
	delete(c.targets, tgid)
	c.mu.Unlock()
	return nil
}

// Refresh looks for the targets' sockets now: it follows the new ones in
// the kernel and reads every followed connection's tcp_info.
func (c *Collector) Refresh() error { return c.refresh(true) }

// refresh is Refresh; unless forced, it dumps the sockets only when the
// dump period has passed (or a server target is not listening yet) and
// otherwise reads the followed sockets' kernel state alone.
func (c *Collector) refresh(force bool) error {
	c.mu.Lock()
	now := time.Now()
	if !force && !c.unlistened && !c.lastDump.IsZero() && now.Sub(c.lastDump) < c.dumpPeriod {
		c.mu.Unlock()
		c.readKernelState()
		return nil
	}
	targets := make(map[uint32]targetInfo, len(c.targets))
	for k, v := range c.targets {
		targets[k] = v
	}
	c.mu.Unlock()
	d := sockDump{now: now, listens: map[tcpListenKey]struct{}{}, slots: map[uint32]bool{}}
	runtime.LockOSThread()
	cpu0 := threadCPU()
	reader := newSockReader() // on this thread: its namespace is the one dumped without setns
	for pid, ti := range targets {
		if ti.client && ti.scanned {
			continue
		}
		c.followTarget(&d, reader, pid, ti)
	}
	cost := threadCPU() - cpu0
	runtime.UnlockOSThread()
	err := errors.Join(d.errs...)
	prev := c.recordDump(&d, err, reader.read, cost)
	c.logSockErr(prev, err)
	c.readKernelState()
	return err
}

// sockDump is what one refresh's dump of the targets' sockets found.
type sockDump struct {
	now  time.Time
	errs []error
	// listens is every listening port followed.
	listens map[tcpListenKey]struct{}
	// slots tells, for each server slot, whether one of its processes
	// listens.
	slots map[uint32]bool
}

// followTarget reads the sockets of pid, the target ti, and follows them
// in the kernel: a client's connections, a server's listening ports and
// its connections (on the configured port).
func (c *Collector) followTarget(d *sockDump, reader *sockReader, pid uint32, ti targetInfo) {
	socks, err := reader.sockets(int(pid))
	if err != nil {
		// Follow what could be read; a target whose sockets could not
		// all be read does not count as one not listening yet.
		d.errs = append(d.errs, err)
	}
	if err == nil && ti.client {
		c.mu.Lock()
		if t, ok := c.targets[pid]; ok && t.client {
			t.scanned = true
			c.targets[pid] = t
		}
		c.mu.Unlock()
	}
	flags := bpfutil.StreamFlags(ti.stream)
	if ti.client {
		flags |= bpfutil.TargetClient
	}
	if !ti.client && err == nil {
		d.slots[ti.idx] = d.slots[ti.idx] || slices.ContainsFunc(socks, func(s diagSocket) bool { return s.state == tcpListen })
	}
	for _, s := range socks {
		if ti.client {
			// The load generator's connections: arrivals only.
			if s.state != tcpListen {
				v := tcpSockInfo{Idx: ti.idx, Flags: flags, SndWndMin: ^uint32(0)}
				if err := c.objs.Socks.Update(s.cookie, v, ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
					d.errs = c.mapErr(d.errs, fmt.Errorf("following client socket %v -> %v: %w", s.local, s.remote, err))
				}
			}
			continue
		}
		if s.state == tcpListen {
			k := tcpListenKey{Netns: s.netns, Port: s.local.Port()}
			d.listens[k] = struct{}{}
			if err := c.objs.ListenPorts.Put(k, tcpTarget{Idx: ti.idx, Flags: flags}); err != nil {
				d.errs = c.mapErr(d.errs, fmt.Errorf("following listening port %d: %w", k.Port, err))
			}
			continue
		}
		if c.cfg.Port != 0 && s.local.Port() != c.cfg.Port {
			continue
		}
		c.followConn(d, ti.idx, flags, s)
	}
}

// followConn follows s, a server target's connection (slot idx), in the
// kernel and records its state from the dump.
func (c *Collector) followConn(d *sockDump, idx uint32, flags uint32, s diagSocket) {
	v := tcpSockInfo{Idx: idx, Flags: flags, SndWndMin: ^uint32(0)}
	if err := c.objs.Socks.Update(s.cookie, v, ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
		d.errs = c.mapErr(d.errs, fmt.Errorf("following socket %v -> %v: %w", s.local, s.remote, err))
	}
	c.mu.Lock()
	conn := c.conns[s.cookie]
	if conn == nil {
		conn = &Conn{Cookie: s.cookie, Local: s.local, Remote: s.remote, Target: idx, SndWndMin: ^uint32(0)}
		c.conns[s.cookie] = conn
	}
	conn.fromInfo(s, d.now)
	c.mu.Unlock()
}

// recordDump keeps the dump's outcome (err; with read, its cost and the
// next dump's period), forgets listening ports the targets no longer
// have, and returns the previous refresh's error.
func (c *Collector) recordDump(d *sockDump, err error, read bool, cost time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.sockErr
	c.sockErr = err
	if read {
		c.dumps.Dumps++
		c.dumps.CPUSeconds += cost.Seconds()
		c.dumpPeriod = min(max(c.cfg.RefreshInterval, time.Duration(float64(cost)/dumpBudget)), maxDumpPeriod)
		c.dumps.PeriodS = c.dumpPeriod.Seconds()
	}
	c.lastDump, c.unlistened = d.now, slices.Contains(slices.Collect(maps.Values(d.slots)), false)
	for k := range c.listens {
		if _, ok := d.listens[k]; !ok {
			_ = c.objs.ListenPorts.Delete(k)
		}
	}
	c.listens = d.listens
	return prev
}

// mapErr appends err, a map update's, to errs unless the collector is
// closed (its maps are).
func (c *Collector) mapErr(errs []error, err error) []error {
	if c.closed.Load() {
		return errs
	}
	return append(errs, err)
}

// logSockErr logs a refresh's error once: when it differs from the last
// refresh's, and when it is gone.
func (c *Collector) logSockErr(prev, err error) {
	switch {
	case err != nil && (prev == nil || prev.Error() != err.Error()):
		c.Log().Warn("reading the targets' sockets", "err", err)
	case err == nil && prev != nil:
		c.Log().Info("reading the targets' sockets works again")
	}
}

// SocketError is why the last refresh could not read every target's
// sockets, or nil.
func (c *Collector) SocketError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sockErr
}

// readKernelState copies the kernel's per-connection state into the
// connections still followed.
func (c *Collector) readKernelState() {
	var (
		k  uint64
		v  tcpSockInfo
		ns = monoNow()
	)
	c.mu.Lock()
	defer c.mu.Unlock()
	it := c.objs.Socks.Iterate()
	for it.Next(&k, &v) {
		conn := c.conns[k]
		if conn == nil {
			continue
		}
		conn.fromKernel(&v, ns)
	}
}

// Connections reports every connection followed so far (open or closed),
// after a Refresh.
func (c *Collector) Connections() []Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Conn, 0, len(c.conns))
	for _, conn := range c.conns {
		if c.cfg.Port != 0 && conn.Local.Port() != c.cfg.Port {
			continue
		}
		out = append(out, *conn)
	}
	return out
}

// Stats is the in-kernel aggregate of one target slot.
type Stats struct {
	Retransmits        uint64
	ZeroWindowNs       uint64
	ZeroWindowEpisodes uint64
	// RcvqueueFull counts segments dropped because a receive queue was full.
	RcvqueueFull uint64
	// LossEpisodes counts entries into Recovery or Loss from below;
	// LossNs is the time spent there (closed episodes, followed sockets).
	LossEpisodes uint64
	LossNs       uint64
	// Srtt is sampled once per segment received.
	Srtt hist.Log2
}

// Stats reads the in-kernel aggregate of slot idx (0 = host-wide).
func (c *Collector) Stats(idx uint32) (Stats, error) {
	var per []tcpTstats
	if err := c.objs.Stats.Lookup(idx, &per); err != nil {
		return Stats{}, fmt.Errorf("reading tcp stats of slot %d: %w", idx, err)
	}
	var s Stats
	for i := range per {
		p := &per[i]
		s.Retransmits += p.Retrans
		s.ZeroWindowNs += p.ZwNs
		s.ZeroWindowEpisodes += p.ZwEpisodes
		s.RcvqueueFull += p.RcvqFull
		s.LossEpisodes += p.LossEpisodes
		s.LossNs += p.LossNs
		s.Srtt.Add(hist.Log2{Slots: p.Srtt[:], Count: p.SrttCount, SumNs: p.SrttSumNs})
	}
	return s, nil
}

func cookieOf(c [2]uint32) uint64 {
	var b [8]byte
	binary.NativeEndian.PutUint32(b[:4], c[0])
	binary.NativeEndian.PutUint32(b[4:], c[1])
	return binary.NativeEndian.Uint64(b[:])
}

// threadCPU is the calling thread's CPU time (the caller locks it).
func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Dumps reports the refreshes' socket dumps so far.
func (c *Collector) Dumps() DumpCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dumps
}

// Probe loads and attaches the collector's programs as the commands do
// (host-wide as the daemon, else as a session: sends, arrivals and
// requests), then releases them; `bpfbench check` runs it.
func Probe(hostWide bool) (bpfutil.LoadReport, error) {
	c := New(Config{HostWide: hostWide, Sends: !hostWide, Arrivals: !hostWide, Requests: !hostWide, RingBufferBytes: 1 << 16, Logger: slog.New(slog.DiscardHandler)})
	if err := c.Start(context.Background()); err != nil {
		return bpfutil.LoadReport{}, err
	}
	defer c.Close()
	return c.Report(), nil
}
