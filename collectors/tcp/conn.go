package tcp

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/bpfbench/bpfbench/internal/clock"
)

func monoNow() uint64 { return uint64(clock.Now()) }

// Conn is what is known of one followed connection: the kernel's
// per-segment state (from the tracepoints) and the last tcp_info read
// at a refresh (sockets.go).
type Conn struct {
	Cookie uint64
	Local  netip.AddrPort
	Remote netip.AddrPort
	Target uint32
	Closed bool

	SrttUs    uint32
	SndCwnd   uint32
	Ssthresh  uint32
	SndWndMin uint32 // ^0 when no window was seen
	// Retransmits is the larger of the tracepoint count and tcp_info's total_retrans.
	Retransmits uint32
	// ZeroWindowNs is the time the peer advertised a zero window,
	// including an episode still open at the last read.
	ZeroWindowNs       uint64
	ZeroWindowEpisodes uint64
	// RcvqueueFull counts segments the connection dropped because its
	// receive queue was full: the target was not reading fast enough.
	RcvqueueFull uint32
	// RcvSpace and Rcvbuf are the receive autotuning's figures (bytes) at
	// the target's last read that ran it (tcp_rcv_space_adjust).
	RcvSpace uint32
	Rcvbuf   uint32
	// RecoveryEntries and LossEntries count entries into the Recovery and
	// Loss congestion states; CongestionLossNs is the time spent in them,
	// including an episode still open at the last read.
	RecoveryEntries  uint32
	LossEntries      uint32
	CongestionLossNs uint64

	// Sends and SendBytes count the connection's sends (Config.Sends).
	Sends     uint64
	SendBytes uint64

	// From tcp_info, at InfoTime.
	InfoTime      time.Time
	RwndLimited   time.Duration
	SndbufLimited time.Duration
	Busy          time.Duration
	NotsentBytes  uint32
	BytesSent     uint64
	BytesReceived uint64
}

func (c *Conn) minWnd(w uint32) {
	if w < c.SndWndMin {
		c.SndWndMin = w
	}
}

func (c *Conn) fromEvent(e *Event) {
	c.SrttUs, c.SndCwnd, c.Ssthresh = e.SrttUs, e.SndCwnd, e.Ssthresh
	c.minWnd(e.SndWndMin)
	if Kind(e.Kind) == ZeroWindowStart {
		c.minWnd(0)
	}
	c.Retransmits = max(c.Retransmits, e.Retrans)
	c.ZeroWindowNs = max(c.ZeroWindowNs, e.ZwTotalNs)
	c.fromCounters(e.RcvqFull, e.RcvSpace, e.Rcvbuf, e.Recoveries, e.Losses, e.LossTotalNs)
	if Kind(e.Kind) == Close {
		c.Closed = true
	}
}

func (c *Conn) fromCounters(rcvqFull, rcvSpace, rcvbuf, recoveries, losses uint32, lossNs uint64) {
	c.RcvqueueFull = max(c.RcvqueueFull, rcvqFull)
	if rcvSpace != 0 {
		c.RcvSpace, c.Rcvbuf = rcvSpace, rcvbuf
	}
	c.RecoveryEntries = max(c.RecoveryEntries, recoveries)
	c.LossEntries = max(c.LossEntries, losses)
	c.CongestionLossNs = max(c.CongestionLossNs, lossNs)
}

func (c *Conn) fromKernel(v *tcpSockInfo, now uint64) {
	if v.SrttUs != 0 {
		c.SrttUs, c.SndCwnd, c.Ssthresh = v.SrttUs, v.SndCwnd, v.Ssthresh
	}
	c.minWnd(v.SndWndMin)
	c.Retransmits = max(c.Retransmits, v.Retrans)
	zw := v.ZwTotalNs
	if v.ZwStart != 0 && now > v.ZwStart {
		zw += now - v.ZwStart
	}
	c.ZeroWindowNs = max(c.ZeroWindowNs, zw)
	c.ZeroWindowEpisodes = max(c.ZeroWindowEpisodes, v.ZwEpisodes)
	loss := v.LossTotalNs
	if v.LossStart != 0 && now > v.LossStart {
		loss += now - v.LossStart
	}
	c.fromCounters(v.RcvqFull, v.RcvSpace, v.Rcvbuf, v.Recoveries, v.Losses, loss)
}

func (c *Conn) fromInfo(s diagSocket, now time.Time) {
	ti := s.info
	if ti == nil {
		return
	}
	c.InfoTime = now
	c.SrttUs, c.SndCwnd, c.Ssthresh = ti.rtt, ti.sndCwnd, ti.sndSsthresh
	c.Retransmits = max(c.Retransmits, ti.totalRetrans)
	c.minWnd(ti.sndWnd)
	c.RwndLimited = time.Duration(ti.rwndLimited) * time.Microsecond
	c.SndbufLimited = time.Duration(ti.sndbufLimited) * time.Microsecond
	c.Busy = time.Duration(ti.busyTime) * time.Microsecond
	c.NotsentBytes = ti.notsentBytes
	c.BytesSent = ti.bytesSent
	c.BytesReceived = ti.bytesReceived
}

// EpisodeKind says what held a connection back.
type EpisodeKind uint8

// The episode kinds.
const (
	// ZeroWindow: the peer advertised a zero receive window from Start to
	// End (End == 0 while it is still open).
	ZeroWindow EpisodeKind = iota
	// Retransmission: a segment was retransmitted at Start (== End).
	Retransmission
	// CwndReduction and CwndGrowth: snd_cwnd moved from PrevCwnd to
	// SndCwnd at Start (== End).
	CwndReduction
	CwndGrowth
	// CongestionLoss: the connection was in loss recovery (the Recovery
	// or Loss congestion state, CAState says which it entered) from Start
	// to End (End == 0 while it still is): the sender was held back
	// retransmitting.
	CongestionLoss
)

// CAState is a TCP congestion state (enum tcp_ca_state).
type CAState uint8

// The congestion states.
const (
	CAOpen     CAState = 0
	CADisorder CAState = 1
	CACWR      CAState = 2
	CARecovery CAState = 3
	CALoss     CAState = 4
)

func (s CAState) String() string {
	switch s {
	case CAOpen:
		return "open"
	case CADisorder:
		return "disorder"
	case CACWR:
		return "cwr"
	case CARecovery:
		return "recovery"
	case CALoss:
		return "loss"
	}
	return fmt.Sprintf("ca_state%d", uint8(s))
}

func (k EpisodeKind) String() string {
	switch k {
	case ZeroWindow:
		return "zero_window"
	case Retransmission:
		return "retransmit"
	case CwndReduction:
		return "cwnd_reduction"
	case CongestionLoss:
		return "congestion_loss"
	}
	return "cwnd_growth"
}

// Episode is a discrete network event of one connection on the
// CLOCK_MONOTONIC timeline, with the connection's 4-tuple so that it can
// be joined with the request that used the connection.
type Episode struct {
	Kind       EpisodeKind
	Start, End int64 // CLOCK_MONOTONIC ns; End == 0: still open
	Local      netip.AddrPort
	Remote     netip.AddrPort
	Cookie     uint64
	Target     uint32
	SndCwnd    uint32
	PrevCwnd   uint32
	SndWnd     uint32
	SrttUs     uint32
	// CAState is the congestion state a CongestionLoss episode entered
	// (Recovery or Loss).
	CAState CAState
}

// EpisodeOf decodes the episode an event starts, ends or is.
func EpisodeOf(e *Event) (Episode, bool) {
	ep := Episode{
		Local: e.Local(), Remote: e.Remote(), Cookie: e.Cookie, Target: e.Target,
		SndCwnd: e.SndCwnd, PrevCwnd: e.PrevCwnd, SndWnd: e.SndWnd, SrttUs: e.SrttUs,
		Start: int64(e.Ts), End: int64(e.Ts),
	}
	switch Kind(e.Kind) {
	case ZeroWindowStart:
		ep.Kind, ep.End = ZeroWindow, 0
	case ZeroWindowEnd:
		ep.Kind, ep.Start = ZeroWindow, int64(e.Ts-e.DurationNs)
	case Close:
		if e.DurationNs == 0 {
			return Episode{}, false
		}
		ep.Kind, ep.Start = ZeroWindow, int64(e.Ts-e.DurationNs)
	case Retransmit:
		ep.Kind = Retransmission
	case CongestionLossStart:
		ep.Kind, ep.End, ep.CAState = CongestionLoss, 0, CAState(e.CaState)
	case CongestionLossEnd:
		ep.Kind, ep.Start, ep.CAState = CongestionLoss, int64(e.Ts-e.DurationNs), CAState(e.OldCaState)
	case CwndChange:
		if e.PrevCwnd == 0 {
			return Episode{}, false // the first report of a connection
		}
		ep.Kind = CwndGrowth
		if e.SndCwnd < e.PrevCwnd {
			ep.Kind = CwndReduction
		}
	default:
		return Episode{}, false
	}
	return ep, true
}
