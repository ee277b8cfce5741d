package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// ReadTimeout bounds the time a client takes to send a request's
	// body (the start's); past it the connection is closed. The span
	// stream is long-lived and has no such bound.
	ReadTimeout time.Duration
}

// The default limits.
const (
	DefaultMaxSessions    = 4
	DefaultMaxBufferSpans = 1 << 16
	DefaultIdleTimeout    = 30 * time.Second
	DefaultReadTimeout    = 10 * time.Second
)

// DefaultLimits are the limits of agent.* left unset.
func DefaultLimits() Limits {
	return Limits{MaxSessions: DefaultMaxSessions, MaxBufferSpans: DefaultMaxBufferSpans, IdleTimeout: DefaultIdleTimeout, ReadTimeout: DefaultReadTimeout}
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
	// allow is what sessions may follow (SetAllow; nil: nothing); self
	// is the agent's own pid, never followed; proc is where processes
	// are read ("/proc").
	allow atomic.Pointer[Allow]
	self  int
	proc  string

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
	if limits.ReadTimeout <= 0 {
		limits.ReadTimeout = d.ReadTimeout
	}
	s := &Server{sections: sections, limits: limits, log: logger.With("component", "agent"), sessions: map[string]*remoteSession{},
		self: os.Getpid(), proc: "/proc"}
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

// SetAllow replaces what sessions may follow (the daemon's agent.allow;
// a reload calls it again). Until it is called, and with an empty Allow,
// every start is refused with 403. Sessions already running go on.
func (s *Server) SetAllow(a Allow) {
	a.Comms, a.Cgroups, a.Targets = slices.Clone(a.Comms), slices.Clone(a.Cgroups), slices.Clone(a.Targets)
	s.allow.Store(&a)
}

// Allowed is what sessions may follow now.
func (s *Server) Allowed() Allow {
	if a := s.allow.Load(); a != nil {
		return *a
	}
	return Allow{}
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

// start starts a session on the request's target: it resolves and
// checks the target, reserves a slot, loads the sections and answers the
// session's id and clock.
func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	req, ok := s.readStart(w, r)
	if !ok {
		return
	}
	t, ok := s.resolveStart(w, r, req)
	if !ok {
		return
	}
	// Reserve the slot before the sections load: loading takes time, and
	// concurrent starts must not pass the limit together.
	id := newID()
	ctx, cancel := context.WithCancel(s.ctx)
	rs := &remoteSession{id: id, buf: newSpanBuffer(s.limits.MaxBufferSpans), done: make(chan struct{}), cancel: cancel}
	rs.touch()
	if code, msg := s.reserve(rs); code != 0 {
		cancel()
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "10")
		}
		writeError(w, code, "%s", msg)
		return
	}
	sess, ok := s.startSession(w, rs, t)
	if !ok {
		return
	}
	rs.sess = sess
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.run(ctx, rs)
	}()
	if t.pod != nil {
		s.log.Info("session started", "session", id, "pid", t.pid, "comm", sess.Comm(), "pod", t.pod.String(), "remote", r.RemoteAddr)
	} else {
		s.log.Info("session started", "session", id, "pid", t.pid, "comm", sess.Comm(), "remote", r.RemoteAddr)
	}
	unavailable := sess.Unavailable()
	for name, why := range unavailable {
		unavailable[name] = sanitize(ExplainPermission(why))
	}
	writeJSON(w, http.StatusCreated, StartResponse{
		ID: id, Pid: t.pid, Comm: sess.Comm(), StartNs: sess.StartNs() + s.shift,
		Anchor:      clock.Anchor{Wall: sess.Anchor().Wall, MonotonicNs: sess.Anchor().MonotonicNs + s.shift},
		Unavailable: unavailable, Pod: t.pod,
	})
}

// startTarget is the process a start follows: its pid, the TCP port, the
// roots of its cgroups, the CUDA libraries allowed and the pod it was
// named by (nil: none).
type startTarget struct {
	pid, port int
	roots     []int
	libs      []string
	pod       *PodRef
}

// resolveStart resolves req's target and checks that the agent may follow
// it; when not, it has answered the error.
func (s *Server) resolveStart(w http.ResponseWriter, r *http.Request, req StartRequest) (startTarget, bool) {
	pid, port, roots, err := resolve(req.Target)
	if err != nil {
		// A cgroup the agent may not follow is refused whether or not
		// it exists.
		if a := s.allow.Load(); strings.HasPrefix(req.Cgroup, "/") && !a.cgroupAllowed(req.Cgroup) {
			s.refuse(w, r, &ForbiddenError{msg: fmt.Sprintf(refuseCgroup, clip(req.Cgroup)), Detail: err.Error()})
			return startTarget{}, false
		}
		writeError(w, http.StatusBadRequest, "%v", err)
		return startTarget{}, false
	}
	var pod *PodRef
	if req.Pod != nil {
		p, got, code, err := s.resolvePod(r.Context(), *req.Pod)
		if err != nil {
			writeError(w, code, "%v", err)
			return startTarget{}, false
		}
		pid, pod = p, &got
	}
	if req.TCPPort != 0 {
		port = req.TCPPort
	}
	if port < 0 || port > 65535 {
		writeError(w, http.StatusBadRequest, "tcp_port %d is out of range: use 1-65535", port)
		return startTarget{}, false
	}
	if err := s.permitAll(pid, roots); err != nil {
		var fe *ForbiddenError
		if req.Cgroup != "" && errors.As(err, &fe) && fe.msg != refuseEmpty {
			fe.msg = fmt.Sprintf(refuseCgroup, clip(req.Cgroup)) + " (" + fe.msg + ")"
		}
		s.refuse(w, r, err)
		return startTarget{}, false
	}
	libs, err := s.checkLibs(pid, roots, req.CUDALibs)
	if err != nil {
		s.refuse(w, r, err)
		return startTarget{}, false
	}
	return startTarget{pid: pid, port: port, roots: roots, libs: libs, pod: pod}, true
}

// startSession builds and starts the session of rs, a reserved slot, on
// t; when that fails, it has given the slot back and answered the error.
func (s *Server) startSession(w http.ResponseWriter, rs *remoteSession, t startTarget) (*session.Session, bool) {
	release := func() {
		rs.cancel()
		s.mu.Lock()
		delete(s.sessions, rs.id)
		s.mu.Unlock()
	}
	opts := collectors.Options{Pid: t.pid, Roots: t.roots, Port: t.port, CUDALibs: t.libs, Interval: time.Second,
		Logger: s.log.With("session", rs.id), Recorder: rs.buf}
	sess, err := session.NewSession(opts, s.sections)
	if err != nil {
		release()
		code := http.StatusInternalServerError
		var pe *session.ProcessError
		if errors.As(err, &pe) {
			code = http.StatusBadRequest
		}
		writeError(w, code, "building the session on pid %d: %s", t.pid, sanitize(err.Error()))
		return nil, false
	}
	if err := sess.Start(s.ctx); err != nil {
		release()
		writeError(w, http.StatusInternalServerError, "starting the session on pid %d: %s", t.pid, sanitize(err.Error()))
		return nil, false
	}
	return sess, true
}

// maxStartBody bounds a start's body.
const maxStartBody = 64 << 10

// readStart reads a start's body within ReadTimeout and maxStartBody: a
// client that sends it slower has its connection closed.
func (s *Server) readStart(w http.ResponseWriter, r *http.Request) (StartRequest, bool) {
	var req StartRequest
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(s.limits.ReadTimeout)); err != nil {
		s.log.Debug("no read deadline on a session request", "err", err)
	}
	body := http.MaxBytesReader(w, r.Body, maxStartBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	if err == nil {
		// The rest of the body (at most the limit) is read under the
		// same deadline, so no trickle outlives the handler.
		_, err = io.Copy(io.Discard, body)
	}
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusRequestTimeout, "the session request's body took longer than agent.read_timeout (%v): send it at once", s.limits.ReadTimeout)
			return req, false
		}
		writeError(w, http.StatusBadRequest, "decoding the session request: %v", err)
		return req, false
	}
	// Loading the sections is not bounded by the client's deadline.
	_ = rc.SetReadDeadline(time.Time{})
	return req, true
}

// refuse answers a target the agent may not follow with 403 (the reason
// goes to the log) and any other error with 400.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, err error) {
	var fe *ForbiddenError
	if !errors.As(err, &fe) {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	s.log.Info("session refused", "why", fe.msg, "detail", fe.Detail, "remote", r.RemoteAddr)
	writeError(w, http.StatusForbidden, "%s", fe.msg)
}

// reserve holds a slot for rs, or says why not (status and message).
// Sessions collecting count against agent.max_sessions; ended ones whose
// client has not read their end hold their buffers and count against
// twice that; ended ones the client stopped give way to a new session at
// once (a stream of theirs begun later finds them while there is room).
func (s *Server) reserve(rs *remoteSession) (int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return http.StatusServiceUnavailable, "the agent is shutting down"
	}
	running, held := 0, 0
	var stopped []*remoteSession
	for _, o := range s.sessions {
		switch {
		case !o.ended():
			running++
		case o.stopped():
			stopped = append(stopped, o)
		default:
			held++
		}
	}
	if running >= s.limits.MaxSessions {
		return http.StatusTooManyRequests, fmt.Sprintf("the agent already runs %d sessions, its agent.max_sessions: stop one or raise the limit", running)
	}
	if running+held >= 2*s.limits.MaxSessions {
		return http.StatusTooManyRequests, fmt.Sprintf("the agent holds %d ended sessions whose clients have not read their end: read or stop them, or wait agent.idle_timeout", held)
	}
	slices.SortFunc(stopped, func(a, b *remoteSession) int { return int(a.lastSeen.Load() - b.lastSeen.Load()) })
	for _, o := range stopped {
		if len(s.sessions) < 2*s.limits.MaxSessions {
			break
		}
		delete(s.sessions, o.id)
	}
	s.sessions[rs.id] = rs
	return 0, ""
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
		rs.setReason("collection failed: " + sanitize(err.Error()))
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
	case t.Pid < 0:
		return 0, 0, nil, fmt.Errorf("pid %d is not a process id", t.Pid)
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
