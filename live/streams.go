// Package live feeds a session's spans to the critical-path engine
// (correlate/critpath/feed, which `bpfbench run` shares) and builds the live view of traffic that
// bpfbench does not generate: a server's writes grouped into response
// streams, each gap between two writes walked back from the send as `run`
// walks a client's reads, against a rolling baseline of the server's own
// quiet windows (Tracker). `attach` and the daemon show it.
package live

import (
	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/correlate/critpath"
)

// MinRequestBytes is the least data that starts a request. A client's
// HTTP/2 control frames in the middle of a response (WINDOW_UPDATE 13
// bytes, PING 17, SETTINGS' acknowledgement 9, RST_STREAM 13: a 9-byte
// frame header and at most 8 bytes) do not end the stream; an HTTP/1.1
// request line with its Host header, or an HTTP/2 HEADERS frame with a
// method and a path, is longer.
const MinRequestBytes = 24

// FragmentGap is the longest pause between two sends of one chunk: a
// server writes a chunk in pieces (HTTP chunked framing, then the data)
// back to back, and tokens are a step apart (critpath's own rule).
const FragmentGap = int64(1_000_000)

// Defaults of Streams.
const (
	DefaultMaxConns = 1 << 16
	// DefaultIdle: a connection with no data for this long is forgotten.
	DefaultIdle = int64(300e9)
	// ActiveWindow: a stream that sent within it is active.
	ActiveWindow = int64(10e9)
)

// StreamStats count what the grouping saw.
type StreamStats struct {
	// Requests: requests that started a stream (their first write is a
	// time to first byte); Controls: data too short to be one
	// (MinRequestBytes), which did not end the stream it came in.
	Requests uint64 `json:"requests"`
	Controls uint64 `json:"control_arrivals"`
	// Unrequested: streams whose request came before bpfbench looked (or
	// was not seen): their first write starts them, with no first-byte
	// time.
	Unrequested uint64 `json:"unrequested_streams"`
	// Gaps: gaps between two writes of a stream; FirstBytes: times to
	// first byte; Pieces: writes within FragmentGap of the one before (a
	// chunk's pieces), no gap of their own.
	Gaps       uint64 `json:"gaps"`
	FirstBytes uint64 `json:"first_bytes"`
	Pieces     uint64 `json:"pieces"`
	// Held: writes into a full peer window (collectors.PeerWindowFull),
	// which reach the reader when it takes them (a release), not when
	// written; Releases: the gaps a release ended.
	Held     uint64 `json:"held_writes"`
	Releases uint64 `json:"releases"`
	// Closed: connections that ended; Expired: forgotten after DefaultIdle
	// with nothing; Evicted: forgotten over the bound of connections.
	Closed  uint64 `json:"closed"`
	Expired uint64 `json:"expired"`
	Evicted uint64 `json:"evicted"`
}

// connKey names a connection: its socket's cookie where the span has
// one (two clients on different hosts, or network namespaces, may use the
// same ephemeral port), its two ports otherwise.
type connKey struct {
	local, peer uint16
	cookie      uint64
}

func keyOf(sp collectors.Span) connKey { return connKey{sp.LocalPort, sp.Port, sp.Conn} }

// conn is a connection's current stream.
type conn struct {
	request int   // the stream's request number (0: none yet)
	index   int   // the next gap's token index
	chunk   int64 // the current chunk's first write
	piece   int64 // its last write
	// held are the writes into a full peer window not taken yet, oldest
	// first: the end of each in the stream (Span.Seq) and when it was
	// written.
	held    []heldWrite
	relSeq  uint32 // the last release's acknowledged sequence
	relSet  bool
	pending bool  // a request came in since the last write
	reqAt   int64 // its last byte
	reqLen  uint64
	seen    int64 // the last data either way
}

type heldWrite struct {
	seq uint32
	at  int64
}

// maxHeld bounds a connection's held writes; past it the newest stands for
// the writes after it (they are taken with it).
const maxHeld = 1024

// Streams groups a server's writes into response streams: one connection,
// one request at a time (HTTP/1.1, SSE). A request's data in, then the
// writes out: the first write after a request is its time to first byte,
// each later one ends a gap from the one before. Writes within
// FragmentGap of each other are one chunk. HTTP/2 and gRPC are grouped by
// connection: their streams share it, and a gap is between two writes of
// any of them. Memory is one small entry per open connection, at most
// MaxConns. It is not safe for concurrent use.
type Streams struct {
	MaxConns int
	Idle     int64
	Stats    StreamStats

	conns map[connKey]*conn
	next  int
}

// NewStreams returns a grouping with the defaults.
func NewStreams() *Streams {
	return &Streams{MaxConns: DefaultMaxConns, Idle: DefaultIdle, conns: map[connKey]*conn{}}
}

// Len is the connections held.
func (s *Streams) Len() int { return len(s.conns) }

func (s *Streams) conn(sp collectors.Span) *conn {
	k := keyOf(sp)
	c := s.conns[k]
	if c == nil {
		if len(s.conns) >= s.MaxConns {
			s.Expire(sp.End)
		}
		for k := range s.conns {
			if len(s.conns) < s.MaxConns {
				break
			}
			delete(s.conns, k) // any: the bound holds whatever the traffic
			s.Stats.Evicted++
		}
		c = &conn{}
		s.conns[k] = c
	}
	c.seen = max(c.seen, sp.End)
	return c
}

// Request takes a SpanRequest: the data that came in since the server's
// last write on the connection.
func (s *Streams) Request(sp collectors.Span) {
	c := s.conn(sp)
	c.pending, c.reqAt = true, sp.End
	c.reqLen += sp.Bytes
}

// Close takes a SpanClose: the connection ended, mid-stream or not.
func (s *Streams) Close(sp collectors.Span) {
	k := keyOf(sp)
	if _, ok := s.conns[k]; ok {
		delete(s.conns, k)
		s.Stats.Closed++
	}
}

// Send takes a SpanSend of the server and appends the gap it ends, if
// any, to out: the first byte of a request (Index 0, from the request's
// last byte in) or the gap from the stream's previous chunk.
func (s *Streams) Send(sp collectors.Span, out []critpath.Read) []critpath.Read {
	if sp.Detail == "folded" {
		// Sends folded into the burst of the record before: pieces of
		// its chunk.
		if c := s.conns[keyOf(sp)]; c != nil {
			c.piece, c.seen = max(c.piece, sp.End), max(c.seen, sp.End)
		}
		return out
	}
	c := s.conn(sp)
	t := sp.End
	if c.pending {
		if c.reqLen >= MinRequestBytes {
			s.next++
			c.request, c.index, c.chunk, c.piece = s.next, 1, t, t
			s.Stats.Requests++
			s.Stats.FirstBytes++
			out = append(out, critpath.Read{Request: c.request, Index: 0, Port: sp.Port, Start: min(c.reqAt, t), End: t, AtSend: true})
			c.pending, c.reqLen = false, 0
			return out
		}
		s.Stats.Controls++
		c.pending, c.reqLen = false, 0
	}
	if c.request == 0 {
		s.next++
		c.request, c.index, c.chunk, c.piece = s.next, 1, t, t
		s.Stats.Unrequested++
		return out
	}
	if sp.Detail == collectors.PeerWindowFull {
		// Written into a full window: it reaches the reader when the
		// reader takes it (Release), not now.
		if len(c.held) < maxHeld {
			c.held = append(c.held, heldWrite{seq: sp.Seq, at: t})
		} else {
			c.held[len(c.held)-1] = heldWrite{seq: sp.Seq, at: t}
		}
		c.piece = max(c.piece, t)
		s.Stats.Held++
		return out
	}
	if t-c.piece < FragmentGap {
		c.piece = max(c.piece, t)
		s.Stats.Pieces++
		return out
	}
	c.held = c.held[:0] // the window opened: what was held leaves with it
	s.Stats.Gaps++
	out = append(out, critpath.Read{Request: c.request, Index: c.index, Port: sp.Port, Start: c.chunk, End: t, AtSend: true})
	c.index++
	c.chunk, c.piece = t, t
	return out
}

// Release takes a hold of the connection that ended as the reader took
// what the server had written into its full window (a SpanTCP of Detail
// collectors.PeerWindowFull): the held writes reach the reader now, and
// the gap from the chunk before them ends here. It appends that gap to out.
func (s *Streams) Release(sp collectors.Span, out []critpath.Read) []critpath.Read {
	c := s.conns[keyOf(sp)]
	if c == nil || len(c.held) == 0 || c.request == 0 || sp.End <= c.chunk {
		return out
	}
	if c.relSet && int32(sp.Seq-c.relSeq) <= 0 {
		return out // nothing more taken
	}
	c.relSeq, c.relSet = sp.Seq, true
	c.seen = max(c.seen, sp.End)
	// The writes the reader has now taken all of (sequence numbers wrap).
	n := 0
	for n < len(c.held) && int32(sp.Seq-c.held[n].seq) >= 0 {
		n++
	}
	// None of them: the reader took data written before the oldest
	// (a backlog older than the session's look, or than the writes
	// kept): it reached the reader now all the same, written at the
	// oldest's time at the latest.
	sent := c.held[max(n-1, 0)].at
	s.Stats.Gaps++
	s.Stats.Releases++
	out = append(out, critpath.Read{Request: c.request, Index: c.index, Port: sp.Port, Start: c.chunk, End: sp.End,
		AtSend: true, SentAt: sent})
	c.index++
	c.chunk = sp.End
	c.held = append(c.held[:0], c.held[n:]...)
	return out
}

// Expire forgets the connections with no data since now-Idle.
func (s *Streams) Expire(now int64) {
	for k, c := range s.conns {
		if now-c.seen > s.Idle {
			delete(s.conns, k)
			s.Stats.Expired++
		}
	}
}

// Active counts the streams that wrote within ActiveWindow before now.
func (s *Streams) Active(now int64) int {
	n := 0
	for _, c := range s.conns {
		if c.request != 0 && now-c.piece < ActiveWindow {
			n++
		}
	}
	return n
}

// Floor is the earliest start of a gap still to come from a stream that
// wrote within keep before now (the engine keeps history back to it).
func (s *Streams) Floor(now, keep int64) int64 {
	f := now
	for _, c := range s.conns {
		if c.request != 0 && now-c.piece < keep {
			f = min(f, c.chunk)
		}
		if c.pending && now-c.reqAt < keep {
			f = min(f, c.reqAt)
		}
	}
	return f
}
