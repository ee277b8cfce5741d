package agent

import (
	"context"

	"github.com/bpfbench/bpfbench/internal/clock"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/session"
)

// spanBuffer is a session's Recorder: the spans waiting for the client,
// at most max; past it the oldest are dropped and counted. Record never
// blocks the sections' readers.
type spanBuffer struct {
	mu      sync.Mutex
	q       []collectors.Span
	head    int
	max     int
	dropped uint64
	sent    uint64
}

func newSpanBuffer(max int) *spanBuffer { return &spanBuffer{max: max} }

// Record implements collectors.Recorder.
func (b *spanBuffer) Record(sp collectors.Span) {
	b.mu.Lock()
	if len(b.q)-b.head >= b.max {
		b.head++
		b.dropped++
	}
	if b.head > 0 && b.head >= len(b.q)/2 && len(b.q) >= 64 {
		n := copy(b.q, b.q[b.head:])
		clear(b.q[n:])
		b.q = b.q[:n]
		b.head = 0
	}
	b.q = append(b.q, sp)
	b.mu.Unlock()
}

// take removes and returns up to n of the oldest spans.
func (b *spanBuffer) take(n int) []collectors.Span {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := min(n, len(b.q)-b.head)
	if k == 0 {
		return nil
	}
	out := make([]collectors.Span, k)
	copy(out, b.q[b.head:b.head+k])
	b.head += k
	if b.head == len(b.q) {
		clear(b.q)
		b.q = b.q[:0]
		b.head = 0
	}
	b.sent += uint64(k)
	return out
}

func (b *spanBuffer) sentNow() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sent
}

func (b *spanBuffer) droppedNow() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped
}

// remoteSession is a session of the agent and what its client sees of it.
type remoteSession struct {
	id        string
	sess      *session.Session
	buf       *spanBuffer
	cancel    context.CancelFunc
	streaming atomic.Bool
	lastSeen  atomic.Int64 // unix ns of the last client contact

	mu       sync.Mutex
	stopOnce sync.Once
	reason   string
	endNs    int64
	summary  map[string]any
	// stopAsked: the client asked for the stop; delivered: a stream wrote
	// the end. With both the session is forgotten.
	stopAsked, delivered bool
	done                 chan struct{} // closed when the sections are closed
}

func (rs *remoteSession) touch() { rs.lastSeen.Store(time.Now().UnixNano()) }
func (rs *remoteSession) idleFor() time.Duration {
	return time.Duration(time.Now().UnixNano() - rs.lastSeen.Load())
}

// stop ends collection; the first reason given is kept.
func (rs *remoteSession) stop(reason string) {
	rs.setReason(reason)
	rs.stopOnce.Do(func() {
		if rs.cancel != nil {
			rs.cancel()
		}
	})
}

func (rs *remoteSession) setReason(reason string) {
	rs.mu.Lock()
	if rs.reason == "" {
		rs.reason = reason
	}
	rs.mu.Unlock()
}

func (rs *remoteSession) reasonNow() string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.reason
}

func (rs *remoteSession) summaryNow() map[string]any {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.summary
}

func (rs *remoteSession) finish(endNs int64, summary map[string]any) {
	rs.mu.Lock()
	rs.endNs = endNs
	rs.summary = summary
	if rs.reason == "" {
		rs.reason = "collection ended"
	}
	rs.mu.Unlock()
	close(rs.done)
}

// stopped reports whether the client asked for the session's stop.
func (rs *remoteSession) stopped() bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.stopAsked
}

func (rs *remoteSession) ended() bool {
	select {
	case <-rs.done:
		return true
	default:
		return false
	}
}

func (rs *remoteSession) heartbeat(shift int64) Heartbeat {
	hb := Heartbeat{MonoNs: clock.Now() + shift}
	if rs.sess != nil {
		hb.Lost = rs.sess.Lost()
	}
	rs.buf.mu.Lock()
	hb.Dropped, hb.Sent = rs.buf.dropped, rs.buf.sent
	rs.buf.mu.Unlock()
	rs.mu.Lock()
	if rs.endNs != 0 {
		hb.EndNs = rs.endNs + shift
		hb.Reason = rs.reason
	}
	rs.mu.Unlock()
	return hb
}
