package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/clock"
	"github.com/bpfbench/bpfbench/session"
)

// Limits bound what remote sessions may take of the agent's node.
type Limits struct {
	// MaxSessions is the number of sessions at once; beyond it a start is
	// answered 429.
	MaxSessions int
	// MaxBufferSpans bounds each session's spans waiting for its client;
	// beyond it the oldest are dropped and counted. With MaxSessions it
	// bounds the memory remote sessions hold (about 200 bytes a span).
	MaxBufferSpans int
	// IdleTimeout stops a session no client has streamed for this long.
	IdleTimeout time.Duration
}

// The default limits.
const (
	DefaultMaxSessions    = 4
	DefaultMaxBufferSpans = 1 << 16
	DefaultIdleTimeout    = 30 * time.Second
)

// DefaultLimits are the limits of agent.* left unset.
func DefaultLimits() Limits {
	return Limits{MaxSessions: DefaultMaxSessions, MaxBufferSpans: DefaultMaxBufferSpans, IdleTimeout: DefaultIdleTimeout}
}

// ClockShiftEnv shifts every time the agent reports by this many
// nanoseconds. It is for tests only: it makes one host look like two
// whose monotonic clocks differ, so the exchange can be checked.
const ClockShiftEnv = "BPFBENCH_TEST_CLOCK_OFFSET_NS"

// The stream's pace: spans are written in batches on a ticker (never a
// wakeup per span), a heartbeat every second.
const (
	flushInterval     = 100 * time.Millisecond
	heartbeatInterval = time.Second
	batchSpans        = 1024
)

// Server serves the session API.
type Server struct {
	sections []session.SectionFactory
	limits   Limits
	log      *slog.Logger
	// shift is added to every agent time on the wire (ClockShiftEnv).
	shift int64
	// pods resolves pod targets (nil: they are refused).
	pods PodResolver

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	sessions map[string]*remoteSession
	closed   bool
}

// NewServer returns a server that builds each session from sections.
// Unset limits take their defaults; ClockShiftEnv is read here.
func NewServer(sections []session.SectionFactory, limits Limits, logger *slog.Logger) (*Server, error) {
	if logger == nil {
		logger = slog.Default()
	}
	d := DefaultLimits()
	if limits.MaxSessions <= 0 {
		limits.MaxSessions = d.MaxSessions
	}
	if limits.MaxBufferSpans <= 0 {
		limits.MaxBufferSpans = d.MaxBufferSpans
	}
	if limits.IdleTimeout <= 0 {
		limits.IdleTimeout = d.IdleTimeout
	}
	s := &Server{sections: sections, limits: limits, log: logger.With("component", "agent"), sessions: map[string]*remoteSession{}}
	if v := os.Getenv(ClockShiftEnv); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s=%q is not a number of nanoseconds (it is for tests only; unset it)", ClockShiftEnv, v)
		}
		s.shift = n
		s.log.Warn("agent clock shifted for a test", "env", ClockShiftEnv, "shift_ns", n)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.janitor()
	return s, nil
}

// Routes are the API's handlers by http.ServeMux pattern, for the
// daemon's listener (prom.Config.Routes).
func (s *Server) Routes() map[string]http.Handler {
	return map[string]http.Handler{
		"POST " + PathSessions:                http.HandlerFunc(s.start),
		"GET " + PathSessions + "/{id}/spans": http.HandlerFunc(s.stream),
		"DELETE " + PathSessions + "/{id}":    http.HandlerFunc(s.stop),
		"GET " + PathClock:                    http.HandlerFunc(s.clock),
	}
}

// Handler serves the routes alone.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for p, h := range s.Routes() {
		mux.Handle(p, h)
	}
	return mux
}

// Active is the number of sessions collecting.
func (s *Server) Active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, rs := range s.sessions {
		if !rs.ended() {
			n++
		}
	}
	return n
}

// Close stops every session and waits for them. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	all := make([]*remoteSession, 0, len(s.sessions))
	for _, rs := range s.sessions {
		all = append(all, rs)
	}
	s.mu.Unlock()
	for _, rs := range all {
		rs.stop("the agent is shutting down")
	}
	s.cancel()
	s.wg.Wait()
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, ErrorResponse{Error: fmt.Sprintf(format, args...)})
}

// clock answers the agent's monotonic clock, read as late as possible.
func (s *Server) clock(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	buf := make([]byte, 0, 48)
	buf = append(buf, `{"mono_ns":`...)
	buf = strconv.AppendInt(buf, clock.Now()+s.shift, 10)
	buf = append(buf, "}\n"...)
	_, _ = w.Write(buf)
}

func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	var req StartRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "decoding the session request: %v", err)
		return
	}
	pid, port, roots, err := resolve(req.Target)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	var pod *PodRef
	if req.Pod != nil {
		p, got, code, err := s.resolvePod(r.Context(), *req.Pod)
		if err != nil {
			writeError(w, code, "%v", err)
			return
		}
		pid, pod = p, &got
	}
	if req.TCPPort != 0 {
		port = req.TCPPort
	}
	if port < 0 || port > 65535 {
		writeError(w, http.StatusBadRequest, "tcp_port %d is out of range: use 1-65535", port)
		return
	}
	// Reserve the slot before the sections load: loading takes time, and
	// concurrent starts must not pass the limit together.
	id := newID()
	ctx, cancel := context.WithCancel(s.ctx)
	rs := &remoteSession{id: id, buf: newSpanBuffer(s.limits.MaxBufferSpans), done: make(chan struct{}), cancel: cancel}
	rs.touch()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "the agent is shutting down")
		return
	}
	// Ended sessions whose client has not read their end yet hold their
	// buffers too: at most as many again.
	running := 0
	for _, o := range s.sessions {
		if !o.ended() {
			running++
		}
	}
	if running >= s.limits.MaxSessions || len(s.sessions) >= 2*s.limits.MaxSessions {
		n := running
		s.mu.Unlock()
		w.Header().Set("Retry-After", "10")
		writeError(w, http.StatusTooManyRequests, "the agent already runs %d sessions, its agent.max_sessions: stop one or raise the limit", n)
		return
	}
	s.sessions[id] = rs
	s.mu.Unlock()
	release := func() {
		cancel()
		s.mu.Lock()
		delete(s.sessions, id)
		s.mu.Unlock()
	}
	opts := collectors.Options{Pid: pid, Roots: roots, Port: port, CUDALibs: req.CUDALibs, Interval: time.Second,
		Logger: s.log.With("session", id), Recorder: rs.buf}
	sess, err := session.NewSession(opts, s.sections)
	if err != nil {
		release()
		code := http.StatusInternalServerError
		var pe *session.ProcessError
		if errors.As(err, &pe) {
			code = http.StatusBadRequest
		}
		writeError(w, code, "building the session on pid %d: %v", pid, err)
		return
	}
	if err := sess.Start(s.ctx); err != nil {
		release()
		writeError(w, http.StatusInternalServerError, "starting the session on pid %d: %v", pid, err)
		return
	}
	rs.sess = sess
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.run(ctx, rs)
	}()
	if pod != nil {
		s.log.Info("session started", "session", id, "pid", pid, "comm", sess.Comm(), "pod", pod.String(), "remote", r.RemoteAddr)
	} else {
		s.log.Info("session started", "session", id, "pid", pid, "comm", sess.Comm(), "remote", r.RemoteAddr)
	}
	unavailable := sess.Unavailable()
	for name, why := range unavailable {
		unavailable[name] = ExplainPermission(why)
	}
	writeJSON(w, http.StatusCreated, StartResponse{
		ID: id, Pid: pid, Comm: sess.Comm(), StartNs: sess.StartNs() + s.shift,
		Anchor:      clock.Anchor{Wall: sess.Anchor().Wall, MonotonicNs: sess.Anchor().MonotonicNs + s.shift},
		Unavailable: unavailable, Pod: pod,
	})
}

// run runs a session until it is stopped or its target exits, then
// closes its sections.
func (s *Server) run(ctx context.Context, rs *remoteSession) {
	go func() {
		select {
		case <-rs.sess.Exited():
			rs.stop(fmt.Sprintf("target pid %d (%s) exited", rs.sess.Pid(), rs.sess.Comm()))
		case <-ctx.Done():
		}
	}()
	err := rs.sess.Run(ctx, 0, nil)
	if err != nil && !errors.Is(err, context.Canceled) {
		rs.setReason(fmt.Sprintf("collection failed: %v", err))
	}
	end := clock.Now()
	if err := rs.sess.Close(); err != nil {
		s.log.Warn("closing a session", "session", rs.id, "err", err)
	}
	rs.finish(end, rs.sess.Summary())
	s.log.Info("session ended", "session", rs.id, "reason", rs.reasonNow(), "sent", rs.buf.sentNow(), "dropped", rs.buf.droppedNow())
}

// janitor stops sessions no client has streamed for IdleTimeout, and
// forgets ended ones nobody came back for.
func (s *Server) janitor() {
	defer s.wg.Done()
	t := time.NewTicker(max(time.Second, s.limits.IdleTimeout/10))
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		var idle []*remoteSession
		s.mu.Lock()
		for id, rs := range s.sessions {
			if rs.idleFor() < s.limits.IdleTimeout {
				continue
			}
			select {
			case <-rs.done:
				delete(s.sessions, id)
			default:
				idle = append(idle, rs)
			}
		}
		s.mu.Unlock()
		for _, rs := range idle {
			s.log.Info("stopping an idle session", "session", rs.id, "idle_timeout", s.limits.IdleTimeout)
			rs.stop(fmt.Sprintf("no client streamed it for agent.idle_timeout (%v)", s.limits.IdleTimeout))
		}
	}
}

func (s *Server) lookup(w http.ResponseWriter, r *http.Request) *remoteSession {
	id := r.PathValue("id")
	s.mu.Lock()
	rs := s.sessions[id]
	s.mu.Unlock()
	if rs == nil {
		writeError(w, http.StatusNotFound, "no session %q on this agent (it ended, or was stopped for being idle)", id)
	}
	return rs
}

// stream writes the session's spans in batches and a heartbeat every
// second until the session has ended and every span was sent.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	rs := s.lookup(w, r)
	if rs == nil {
		return
	}
	if !rs.streaming.CompareAndSwap(false, true) {
		writeError(w, http.StatusConflict, "session %s is already streamed by another client", rs.id)
		return
	}
	defer func() { rs.touch(); rs.streaming.Store(false) }()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	t := time.NewTicker(flushInterval)
	defer t.Stop()
	lastBeat := time.Time{}
	for {
		ended := false
		select {
		case <-r.Context().Done():
			return
		case <-rs.done:
			ended = true
		case <-t.C:
		}
		for {
			batch := rs.buf.take(batchSpans)
			if len(batch) == 0 {
				break
			}
			for i := range batch {
				batch[i].Start += s.shift
				batch[i].End += s.shift
				if batch[i].WakeTs != 0 {
					batch[i].WakeTs += s.shift
				}
			}
			if err := enc.Encode(Line{Spans: batch}); err != nil {
				return
			}
		}
		if ended || time.Since(lastBeat) >= heartbeatInterval {
			hb := rs.heartbeat(s.shift)
			hb.End = ended
			if err := enc.Encode(Line{Heartbeat: &hb}); err != nil {
				return
			}
			lastBeat = time.Now()
		}
		if err := rc.Flush(); err != nil {
			return
		}
		rs.touch()
		if ended {
			s.forget(rs, false)
			return
		}
	}
}

// stop ends the session and answers its summary once its sections closed.
func (s *Server) stop(w http.ResponseWriter, r *http.Request) {
	rs := s.lookup(w, r)
	if rs == nil {
		return
	}
	rs.stop("stopped by the client")
	select {
	case <-rs.done:
	case <-r.Context().Done():
		return
	}
	// A stream that has not yet delivered the end (or not yet begun: the
	// client may stop at once) still finds the session.
	s.forget(rs, true)
	hb := rs.heartbeat(s.shift)
	writeJSON(w, http.StatusOK, StopResponse{
		ID: rs.id, EndNs: hb.EndNs, Reason: hb.Reason, Dropped: hb.Dropped, Sent: hb.Sent, Summary: rs.summaryNow(),
	})
}

// forget drops a session once its client both asked for its stop and
// received its end (the janitor drops the others after IdleTimeout).
func (s *Server) forget(rs *remoteSession, stopped bool) {
	rs.mu.Lock()
	if stopped {
		rs.stopAsked = true
	} else {
		rs.delivered = true
	}
	both := rs.stopAsked && rs.delivered
	rs.mu.Unlock()
	if both {
		s.mu.Lock()
		delete(s.sessions, rs.id)
		s.mu.Unlock()
	}
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// resolve finds the pid a target names, the port its network sections
// follow (the target's port, when it is given by port) and, for a cgroup,
// the roots of its other process trees (collectors.ResolveCgroup).
func resolve(t Target) (pid, port int, roots []int, err error) {
	n := 0
	for _, set := range []bool{t.Pid != 0, t.Port != 0, t.Cgroup != "", t.Pod != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return 0, 0, nil, errors.New("give exactly one target: pid, port, cgroup or pod")
	}
	switch {
	case t.Pod != nil:
		return 0, 0, nil, nil // the server's PodResolver
	case t.Pid != 0:
		return t.Pid, 0, nil, nil
	case t.Port != 0:
		pid, err := session.ListenerPid(t.Port)
		return pid, t.Port, nil, err
	default:
		ct, err := collectors.ResolveCgroup(t.Cgroup)
		return ct.Pid, 0, ct.Roots, err
	}
}
