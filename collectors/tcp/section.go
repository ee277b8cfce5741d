package tcp

import (
	"context"
	"fmt"
	"github.com/bpfbench/bpfbench/result"
	"io"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
)

// Connection (result.TCPConnection) is one connection in the `tcp` section. Window and
// congestion figures are the last seen; srtt and cwnd come from tcp_info
// when the connection was still open at the last refresh.
type Connection = result.TCPConnection

// Summary (result.TCP) is the `tcp` section of `bpfbench attach`.
type Summary = result.TCP

// ConnectionOf is the section's view of a connection.
func ConnectionOf(c Conn) Connection {
	wmin := c.SndWndMin
	if wmin == ^uint32(0) {
		wmin = 0
	}
	return Connection{
		Local: c.Local.String(), Remote: c.Remote.String(),
		SrttSeconds: float64(c.SrttUs) / 1e6, SndCwnd: c.SndCwnd, SndWndMin: wmin,
		Retransmits: c.Retransmits, ZeroWindowSeconds: float64(c.ZeroWindowNs) / 1e9,
		RwndLimitedSeconds: c.RwndLimited.Seconds(), SndbufLimitedSeconds: c.SndbufLimited.Seconds(),
		BytesSent: c.BytesSent, BytesReceived: c.BytesReceived,
		RcvqueueFull: c.RcvqueueFull, RcvSpace: c.RcvSpace, Rcvbuf: c.Rcvbuf,
		RecoveryEntries: c.RecoveryEntries, LossEntries: c.LossEntries,
		CongestionLossSeconds: float64(c.CongestionLossNs) / 1e9,
		Sends:                 c.Sends, SendBytes: c.SendBytes,
	}
}

// Section is the TCP part of a session on one process.
type Section struct {
	*Collector
	pid    int
	client bool
}

// ClientSlot is the slot of the load generator's connections in a session
// (the target is slot 1).
const ClientSlot = 2

var _ collectors.Section = (*Section)(nil)

// NewSection follows the TCP connections of opts.Pid, restricted to local
// port opts.Port when it is not 0, refreshing them every opts.Interval.
func NewSection(opts collectors.Options) (*Section, error) {
	if opts.Pid <= 0 {
		return nil, fmt.Errorf("tcp: target pid %d is not a process id", opts.Pid)
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("tcp: --port %d is out of range: give a local port in 1..65535, or 0 for every connection", opts.Port)
	}
	// A session that runs its own load (a Recorder: `bpfbench run`) also
	// follows the arrivals at this process's sockets, the load generator's.
	// A live session (Options.Live) has no load generator: bpfbench
	// itself is only an observer there.
	client := opts.Recorder != nil && !opts.Live && opts.Pid != os.Getpid()
	cfg := Config{Port: uint16(opts.Port), Logger: opts.Logger, Sends: true, Arrivals: client,
		Requests: opts.Live && opts.Recorder != nil}
	if r := opts.Recorder; r != nil {
		cfg.OnEpisode = func(ep Episode) { recordEpisode(r, ep) }
		d := &dataSpans{r: r, last: map[uint64]lastData{}}
		cfg.OnData = d.record
	}
	if opts.Interval > 0 {
		cfg.RefreshInterval = opts.Interval
	}
	return &Section{Collector: New(cfg), pid: opts.Pid, client: client}, nil
}

// Start loads the programs and follows the process's sockets.
func (s *Section) Start(ctx context.Context) error {
	if err := s.Collector.Start(ctx); err != nil {
		return err
	}
	// A refresh logs why it could not read sockets (once) and the summary
	// says it; the other sections run either way.
	_ = s.SetTarget(uint32(s.pid), 1, true)
	if s.client {
		_ = s.SetClient(uint32(os.Getpid()), ClientSlot)
	}
	return nil
}

// Summary is the session's `tcp` JSON section; it refreshes first so that
// tcp_info figures of open connections are current.
func (s *Section) Summary() any {
	if err := s.Refresh(); err != nil {
		s.Log().Debug("refreshing before the summary", "err", err)
	}
	return s.summary()
}

func (s *Section) summary() Summary {
	conns := s.Connections()
	sort.Slice(conns, func(i, j int) bool {
		if conns[i].Local != conns[j].Local {
			return conns[i].Local.String() < conns[j].Local.String()
		}
		return conns[i].Remote.String() < conns[j].Remote.String()
	})
	out := Summary{Connections: []Connection{}}
	if err := s.SocketError(); err != nil {
		out.Error = err.Error()
	}
	for _, c := range conns {
		out.Connections = append(out.Connections, ConnectionOf(c))
	}
	if d := s.Data(); d != (DataCounts{}) {
		out.Data = &d
	}
	if d := s.Dumps(); d.Dumps > 0 {
		out.Dumps = &d
	}
	return out
}

// WriteInterval writes one line with the totals over the connections.
func (s *Section) WriteInterval(w io.Writer) {
	sum := s.summary()
	var retrans, rcvqFull uint32
	var zw, rwnd, loss float64
	var maxSrtt float64
	for _, c := range sum.Connections {
		retrans += c.Retransmits
		rcvqFull += c.RcvqueueFull
		zw += c.ZeroWindowSeconds
		rwnd += c.RwndLimitedSeconds
		loss += c.CongestionLossSeconds
		maxSrtt = max(maxSrtt, c.SrttSeconds)
	}
	fmt.Fprintf(w, "tcp      conns=%-4d retrans=%-6d zero-window=%-8s rwnd-limited=%-8s loss-recovery=%-8s rcvq-full=%-4d max-srtt=%s\n",
		len(sum.Connections), retrans, dur(zw), dur(rwnd), dur(loss), rcvqFull, dur(maxSrtt))
}

// WriteSummary writes the end-of-session table.
func (s *Section) WriteSummary(w io.Writer) {
	sum := s.Summary().(Summary)
	fmt.Fprintln(w, "TCP")
	if d := sum.Data; d != nil {
		fmt.Fprintf(w, "  sends %d records (%d bytes), client arrivals %d records (%d bytes), %d folded\n",
			d.Sends, d.SendBytes, d.Arrivals, d.ArrivalBytes, d.Folded)
	}
	if sum.Error != "" {
		fmt.Fprintf(w, "  cannot read every socket of the target: %s\n", sum.Error)
	}
	if len(sum.Connections) == 0 {
		fmt.Fprintln(w, "  no connections")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  local\tremote\tsrtt\tcwnd\tsnd_wnd min\tretrans\trecovery/loss\tloss recovery\tzero window\trwnd limited\tsndbuf limited\trcvq full\trcv_space\tsent\treceived\t")
	for _, c := range sum.Connections {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%d\t%d/%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t\n", c.Local, c.Remote, dur(c.SrttSeconds),
			c.SndCwnd, c.SndWndMin, c.Retransmits, c.RecoveryEntries, c.LossEntries, dur(c.CongestionLossSeconds),
			dur(c.ZeroWindowSeconds), dur(c.RwndLimitedSeconds), dur(c.SndbufLimitedSeconds), c.RcvqueueFull, c.RcvSpace,
			c.BytesSent, c.BytesReceived)
	}
	tw.Flush()
}

func dur(sec float64) string {
	if sec == 0 {
		return "0"
	}
	return time.Duration(sec * 1e9).Round(time.Microsecond).String()
}

// SendBufferFull is the Detail of a hold span: a non-blocking server's
// send found the connection's buffer full and the chunk waited for it.
const SendBufferFull = "send_buffer_full"

// recordEpisode turns a finished episode into a span of the connection's
// peer port: zero windows, retransmissions and loss recovery hold the
// sender back (blocking); cwnd changes are marks.
func recordEpisode(r collectors.Recorder, ep Episode) {
	sp := collectors.Span{Kind: collectors.SpanTCP, Start: ep.Start, End: ep.End, Port: ep.Remote.Port(), Detail: ep.Kind.String(),
		Slot: uint8(ep.Target)}
	switch ep.Kind {
	case ZeroWindow, CongestionLoss:
		if ep.End == 0 {
			return // still open: its end event closes it
		}
		sp.Blocking = true
	case Retransmission:
		// A retransmitted segment reaches the peer at least one RTT late.
		sp.End = ep.Start + max(int64(ep.SrttUs)*1000, int64(200_000))
		sp.Blocking = true
	}
	r.Record(sp)
}

// dataSpans turns send and arrival records into spans. A record's folded
// sends (FoldN, FoldBytes, FoldLastTs) belong to the burst of the
// connection's previous record, whose time, thread and ports it keeps.
type dataSpans struct {
	r    collectors.Recorder
	last map[uint64]lastData // by socket cookie; only the reader goroutine uses it
	full map[uint64]int64    // by socket cookie: when its send buffer was found full
}

type lastData struct {
	ts          int64
	tid         uint32
	local, peer uint16
}

// maxDataConns bounds the connections remembered for their folded bursts;
// past it the map starts again (a burst tail is then lost).
const maxDataConns = 1 << 14

func (d *dataSpans) record(e *Event) {
	if Kind(e.Kind) == Release {
		// A hold of the connection: the chunks written into the full
		// window waited for the reader from the first of them; the
		// reader has taken those up to Seq.
		ts := int64(e.Ts)
		d.r.Record(collectors.Span{Kind: collectors.SpanTCP, Start: ts - int64(e.DurationNs), End: ts,
			Port: e.Dport, LocalPort: e.Sport, Conn: e.Cookie, Detail: collectors.PeerWindowFull, Blocking: true, Seq: e.Seq, Slot: uint8(e.Target)})
		return
	}
	if Kind(e.Kind) == Request {
		ts := int64(e.Ts)
		d.r.Record(collectors.Span{Kind: collectors.SpanRequest, Start: ts - int64(e.DurationNs), End: ts,
			Port: e.Dport, LocalPort: e.Sport, Conn: e.Cookie, Bytes: e.Bytes, Slot: uint8(e.Target)})
		return
	}
	kind := collectors.SpanSend
	if Kind(e.Kind) == Arrival {
		kind = collectors.SpanArrival
	}
	client := kind == collectors.SpanArrival
	prev, ok := d.last[e.Cookie]
	if e.FoldN > 0 && ok {
		d.r.Record(collectors.Span{Kind: kind, Start: prev.ts, End: max(int64(e.FoldLastTs), prev.ts), Tid: prev.tid,
			Port: prev.peer, LocalPort: prev.local, Conn: e.Cookie, Bytes: e.FoldBytes, Detail: "folded", Client: client, Slot: uint8(e.Target)})
	}
	ts := int64(e.Ts)
	if Kind(e.Kind) == SendFull {
		if d.full == nil || len(d.full) >= maxDataConns {
			d.full = map[uint64]int64{}
		}
		d.full[e.Cookie] = ts
		return
	}
	if from, full := d.full[e.Cookie]; full && kind == collectors.SpanSend {
		// The send that went through ends the wait for the buffer: the
		// connection held the chunk back (a hold, like a zero window).
		delete(d.full, e.Cookie)
		if e.Bytes > 0 && ts > from {
			d.r.Record(collectors.Span{Kind: collectors.SpanTCP, Start: from, End: ts, Port: e.Dport, LocalPort: e.Sport,
				Conn: e.Cookie, Detail: SendBufferFull, Blocking: true, Slot: uint8(e.Target)})
		}
	}
	if e.Bytes == 0 {
		// The flush at close: nothing more follows on the connection.
		if ok && !client {
			d.r.Record(collectors.Span{Kind: collectors.SpanClose, Start: ts, End: ts, Port: prev.peer, LocalPort: prev.local, Conn: e.Cookie, Slot: uint8(e.Target)})
		}
		delete(d.last, e.Cookie)
		delete(d.full, e.Cookie)
		return
	}
	sp := collectors.Span{Kind: kind, Start: ts, End: ts, Tid: e.Tid, Port: e.Dport, LocalPort: e.Sport, Conn: e.Cookie,
		Bytes: e.Bytes, Client: client, Seq: e.Seq, Slot: uint8(e.Target)}
	if !client && e.Queued > 0 && e.Queued >= e.SndWnd {
		// What was sent before it fills the peer's window: the chunk
		// waits in the send queue for the reader (Config.Requests).
		sp.Detail = collectors.PeerWindowFull
	}
	d.r.Record(sp)
	if !ok && len(d.last) >= maxDataConns {
		clear(d.last)
	}
	d.last[e.Cookie] = lastData{ts: ts, tid: e.Tid, local: e.Sport, peer: e.Dport}
}
