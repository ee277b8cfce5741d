package live

import (
	"testing"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/correlate/critpath"
)

const ms = int64(1e6)

func req(local, peer uint16, at int64, bytes uint64) collectors.Span {
	return collectors.Span{Kind: collectors.SpanRequest, Start: at, End: at, LocalPort: local, Port: peer, Bytes: bytes}
}

func send(local, peer uint16, at int64) collectors.Span {
	return collectors.Span{Kind: collectors.SpanSend, Start: at, End: at, LocalPort: local, Port: peer, Bytes: 100, Tid: 7}
}

func feedStreams(s *Streams, sps ...collectors.Span) []critpath.Read {
	var out []critpath.Read
	for _, sp := range sps {
		switch sp.Kind {
		case collectors.SpanRequest:
			s.Request(sp)
		case collectors.SpanClose:
			s.Close(sp)
		case collectors.SpanSend:
			out = s.Send(sp, out)
		}
	}
	return out
}

type gapWant struct {
	request, index int
	start, end     int64
}

func check(t *testing.T, got []critpath.Read, want []gapWant) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d gaps, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Request != w.request || g.Index != w.index || g.Start != w.start || g.End != w.end || !g.AtSend {
			t.Errorf("gap %d: request %d index %d [%d, %d] (at send %v), want request %d index %d [%d, %d]",
				i, g.Request, g.Index, g.Start/ms, g.End/ms, g.AtSend, w.request, w.index, w.start/ms, w.end/ms)
		}
	}
}

// A keep-alive connection carries several requests one after the other:
// each request's first write is its time to first byte, each later write
// ends a gap from the one before, and the wait between two requests (the
// client's think time) is no gap.
func TestStreamsKeepAlive(t *testing.T) {
	s := NewStreams()
	got := feedStreams(s,
		req(8000, 50000, 100*ms, 300), send(8000, 50000, 130*ms), send(8000, 50000, 140*ms), send(8000, 50000, 150*ms),
		req(8000, 50000, 900*ms, 300), send(8000, 50000, 920*ms), send(8000, 50000, 935*ms),
	)
	check(t, got, []gapWant{
		{1, 0, 100 * ms, 130 * ms}, {1, 1, 130 * ms, 140 * ms}, {1, 2, 140 * ms, 150 * ms},
		{2, 0, 900 * ms, 920 * ms}, {2, 1, 920 * ms, 935 * ms},
	})
	if st := s.Stats; st.Requests != 2 || st.FirstBytes != 2 || st.Gaps != 3 {
		t.Errorf("stats %+v", st)
	}
}

// Streams on two connections are apart, even interleaved; the pieces of
// one chunk (within FragmentGap) are one write; a burst folded by the
// kernel is a piece of its chunk.
func TestStreamsInterleavedAndPieces(t *testing.T) {
	s := NewStreams()
	folded := send(8000, 1, 111*ms)
	folded.Detail = "folded"
	got := feedStreams(s,
		req(8000, 1, 0, 100), req(8000, 2, 5*ms, 100),
		send(8000, 1, 10*ms), send(8000, 2, 12*ms),
		send(8000, 1, 110*ms), folded, send(8000, 1, 110*ms+ms/2), // the chunk's pieces
		send(8000, 2, 115*ms),
		send(8000, 1, 130*ms),
	)
	check(t, got, []gapWant{
		{1, 0, 0, 10 * ms}, {2, 0, 5 * ms, 12 * ms},
		{1, 1, 10 * ms, 110 * ms}, {2, 1, 12 * ms, 115 * ms},
		{1, 2, 110 * ms, 130 * ms},
	})
	if s.Stats.Pieces != 1 {
		t.Errorf("%d pieces, want 1 (the fold is no write of its own)", s.Stats.Pieces)
	}
}

// Two clients on different hosts (or network namespaces) with the same
// ephemeral port are two connections of the server: their sockets'
// cookies tell them apart where their ports cannot.
func TestStreamsSamePortTwoConnections(t *testing.T) {
	s := NewStreams()
	on := func(sp collectors.Span, cookie uint64) collectors.Span { sp.Conn = cookie; return sp }
	got := feedStreams(s,
		on(req(8000, 40000, 0, 100), 11), on(req(8000, 40000, 5*ms, 100), 22),
		on(send(8000, 40000, 10*ms), 11), on(send(8000, 40000, 12*ms), 22),
		on(send(8000, 40000, 110*ms), 11), on(send(8000, 40000, 115*ms), 22),
	)
	check(t, got, []gapWant{
		{1, 0, 0, 10 * ms}, {2, 0, 5 * ms, 12 * ms},
		{1, 1, 10 * ms, 110 * ms}, {2, 1, 12 * ms, 115 * ms},
	})
	if s.Len() != 2 {
		t.Errorf("%d connections, want 2", s.Len())
	}
	s.Close(on(collectors.Span{Kind: collectors.SpanClose, LocalPort: 8000, Port: 40000}, 11))
	if s.Len() != 1 {
		t.Errorf("after one closed: %d connections, want 1", s.Len())
	}
}

// A pipelined burst: two requests in one arrival are one request to the
// grouping (their boundary is in the bytes, which it does not read); a
// request arriving while a response streams ends that stream, and the
// next write is the new request's first byte. A client's HTTP/2 control
// frames (a WINDOW_UPDATE, 13 bytes) in the middle of a response do not.
func TestStreamsPipelinedAndControlFrames(t *testing.T) {
	s := NewStreams()
	got := feedStreams(s,
		req(8000, 3, 0, 600), // two requests in one burst
		send(8000, 3, 10*ms), send(8000, 3, 20*ms),
		req(8000, 3, 25*ms, 13), // a WINDOW_UPDATE
		send(8000, 3, 30*ms),
		req(8000, 3, 35*ms, 300), // the next request, pipelined
		send(8000, 3, 40*ms), send(8000, 3, 50*ms),
	)
	check(t, got, []gapWant{
		{1, 0, 0, 10 * ms}, {1, 1, 10 * ms, 20 * ms}, {1, 2, 20 * ms, 30 * ms},
		{2, 0, 35 * ms, 40 * ms}, {2, 1, 40 * ms, 50 * ms},
	})
	if s.Stats.Controls != 1 {
		t.Errorf("%d control arrivals, want 1", s.Stats.Controls)
	}
}

// A connection that ends mid-stream leaves its gaps walked and nothing
// held; a stream whose request came before bpfbench looked starts at its
// first write, with no first byte.
func TestStreamsCloseMidStreamAndUnrequested(t *testing.T) {
	s := NewStreams()
	got := feedStreams(s,
		req(8000, 4, 0, 100), send(8000, 4, 10*ms), send(8000, 4, 20*ms),
		collectors.Span{Kind: collectors.SpanClose, End: 25 * ms, LocalPort: 8000, Port: 4},
		send(8000, 5, 30*ms), send(8000, 5, 45*ms), // begun before
	)
	check(t, got, []gapWant{{1, 0, 0, 10 * ms}, {1, 1, 10 * ms, 20 * ms}, {2, 1, 30 * ms, 45 * ms}})
	if s.Stats.Closed != 1 || s.Stats.Unrequested != 1 {
		t.Errorf("stats %+v", s.Stats)
	}
	if s.Len() != 1 {
		t.Errorf("%d connections held, want 1 (the closed one forgotten)", s.Len())
	}
}

// 10,000 streams open at once, then 10,000 more on new connections: the
// state stays within the bound, and connections with nothing for the idle
// time are forgotten.
func TestStreamsBounded(t *testing.T) {
	s := NewStreams()
	s.MaxConns = 12000
	var n int
	for i := range 10000 {
		n += len(feedStreams(s, req(8000, uint16(i), int64(i), 100), send(8000, uint16(i), int64(i)+ms)))
	}
	if n != 10000 || s.Len() != 10000 || s.Active(20*ms) != 10000 {
		t.Fatalf("%d first bytes, %d held, %d active; want 10000 each", n, s.Len(), s.Active(20*ms))
	}
	for i := range 10000 {
		feedStreams(s, req(9000, uint16(i), 400e9, 100), send(9000, uint16(i), 400e9+ms))
		if s.Len() > s.MaxConns {
			t.Fatalf("%d connections held over the bound %d", s.Len(), s.MaxConns)
		}
	}
	// The first 10,000 had nothing for 400 s (over DefaultIdle): the
	// first connection over the bound expired them all at once.
	if s.Len() != 10000 || s.Stats.Expired != 10000 || s.Stats.Evicted != 0 {
		t.Errorf("%d held, %d expired, %d evicted; want 10000, 10000, 0", s.Len(), s.Stats.Expired, s.Stats.Evicted)
	}
	// With none idle, the bound evicts.
	s.MaxConns = 5000
	feedStreams(s, req(9100, 1, 401e9, 100))
	if s.Len() > 5000 || s.Stats.Evicted == 0 {
		t.Errorf("%d held over the bound 5000, %d evicted", s.Len(), s.Stats.Evicted)
	}
}

// Writes into a full peer window reach the reader when it takes them:
// the gap ends at the release that acknowledges them, walked back from the
// write (SentAt); a release of data written before the oldest write kept
// (a backlog older than the look) ends a gap too, and an ordinary write
// after the window opened ends one as usual.
func TestStreamsHeldWrites(t *testing.T) {
	s := NewStreams()
	held := func(at int64, seq uint32) collectors.Span {
		sp := send(8000, 6, at)
		sp.Detail, sp.Seq = collectors.PeerWindowFull, seq
		return sp
	}
	release := func(at int64, ack uint32) collectors.Span {
		return collectors.Span{Kind: collectors.SpanTCP, Start: at, End: at, LocalPort: 8000, Port: 6,
			Detail: collectors.PeerWindowFull, Blocking: true, Seq: ack}
	}
	var got []critpath.Read
	got = feedStreams(s, req(8000, 6, 0, 100), send(8000, 6, 10*ms), held(20*ms, 1000), held(30*ms, 2000), held(40*ms, 3000))
	got = s.Release(release(900*ms, 500), got)                   // older data: a gap all the same
	got = s.Release(release(1500*ms, 2000), got)                 // the first two held writes
	got = s.Release(release(1600*ms, 2000), got)                 // nothing more taken: no gap
	got = append(got, feedStreams(s, send(8000, 6, 1700*ms))...) // the window open again
	want := []gapWant{{1, 0, 0, 10 * ms}, {1, 1, 10 * ms, 900 * ms}, {1, 2, 900 * ms, 1500 * ms}, {1, 3, 1500 * ms, 1700 * ms}}
	check(t, got, want)
	// The backlog's release: written by the oldest held write's time at
	// the latest.
	for i, sent := range []int64{0, 20 * ms, 30 * ms, 0} {
		if i < len(got) && got[i].SentAt != sent {
			t.Errorf("gap %d: sent at %d ms, want %d ms", i, got[i].SentAt/ms, sent/ms)
		}
	}
	if s.Stats.Held != 3 || s.Stats.Releases != 2 {
		t.Errorf("stats %+v", s.Stats)
	}
}
