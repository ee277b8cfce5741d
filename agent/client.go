package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/clock"
	"github.com/bpfbench/bpfbench/result"
)

// ClientOptions say how a Client reaches an agent.
type ClientOptions struct {
	// HTTP is the client to use (TLS settings, timeouts); nil: a client
	// of its own with keep-alive connections.
	HTTP *http.Client
	// Username and Password are sent as basic auth when set.
	Username, Password string
	// Rounds is the round trips of each clock exchange (default 32).
	Rounds int
	// ClockInterval is how often the exchange is repeated during a
	// session to follow drift (default 5 s).
	ClockInterval time.Duration
	Logger        *slog.Logger
}

// Client talks to one agent.
type Client struct {
	agent string // as given: HOST:PORT or a URL
	base  string
	http  *http.Client
	opts  ClientOptions
	log   *slog.Logger
}

// ErrTooManySessions is returned when the agent is at agent.max_sessions.
var ErrTooManySessions = errors.New("the agent runs as many sessions as it allows")

// ErrForbidden is returned when the agent may not follow the target
// (its agent.allow) or open a library the request names.
var ErrForbidden = errors.New("the agent may not follow this target")

// ErrUnauthorized is returned when the agent asks for credentials.
var ErrUnauthorized = errors.New("the agent refused the credentials")

// NewClient returns a client of the agent at addr: HOST:PORT (plain
// HTTP) or an http:// or https:// URL.
func NewClient(addr string, opts ClientOptions) *Client {
	base := strings.TrimSuffix(addr, "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		base = "http://" + base
	}
	if opts.HTTP == nil {
		opts.HTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}}
	}
	if opts.Rounds <= 0 {
		opts.Rounds = 32
	}
	if opts.ClockInterval <= 0 {
		opts.ClockInterval = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Client{agent: addr, base: base, http: opts.HTTP, opts: opts, log: opts.Logger.With("component", "agent", "agent", addr)}
}

// Agent is the agent's address as given.
func (c *Client) Agent() string { return c.agent }

func (c *Client) request(ctx context.Context, method, p string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+p, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.opts.Username != "" {
		req.SetBasicAuth(c.opts.Username, c.opts.Password)
	}
	return req, nil
}

// do sends a request and decodes a JSON answer of status want.
func (c *Client) do(ctx context.Context, method, p string, in, out any, want int) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	req, err := c.request(ctx, method, p, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("agent %s: %w", c.agent, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		return c.statusError(method+" "+p, resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("agent %s: decoding the answer to %s %s: %w", c.agent, method, p, err)
	}
	return nil
}

func (c *Client) statusError(what string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	msg := strings.TrimSpace(string(b))
	var e ErrorResponse
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		return fmt.Errorf("agent %s: %s: %w (%s): give the user and password of its web configuration", c.agent, what, ErrUnauthorized, resp.Status)
	case http.StatusTooManyRequests:
		return fmt.Errorf("agent %s: %s: %w: %s", c.agent, what, ErrTooManySessions, msg)
	case http.StatusForbidden:
		return fmt.Errorf("agent %s: %s: %w (%s): %s", c.agent, what, ErrForbidden, resp.Status, msg)
	}
	return fmt.Errorf("agent %s: %s: %s: %s", c.agent, what, resp.Status, msg)
}

// granularity is the coarser of the two clocks' read resolutions, as
// clock_getres reports it here (the agent's is assumed the same).
func granularity() int64 {
	var ts unix.Timespec
	if unix.ClockGetres(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 1000
	}
	return max(1, ts.Nano())
}

// Samples takes n round trips of GET /api/v1/clock over a kept-alive
// connection (the first, which may open it, is not kept).
func (c *Client) Samples(ctx context.Context, n int) ([]Sample, error) {
	req, err := c.request(ctx, http.MethodGet, PathClock, nil)
	if err != nil {
		return nil, err
	}
	out := make([]Sample, 0, n)
	var r ClockReading
	for i := 0; i <= n; i++ {
		t0 := clock.Now()
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, fmt.Errorf("agent %s: reading its clock: %w", c.agent, err)
		}
		if resp.StatusCode != http.StatusOK {
			err := c.statusError("GET "+PathClock, resp)
			resp.Body.Close()
			return nil, err
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 256))
		t1 := clock.Now()
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("agent %s: reading its clock: %w", c.agent, err)
		}
		if err := json.Unmarshal(body, &r); err != nil {
			return nil, fmt.Errorf("agent %s: decoding its clock %q: %w", c.agent, body, err)
		}
		if i > 0 {
			out = append(out, Sample{T0: t0, Agent: r.MonoNs, T1: t1})
		}
	}
	return out, nil
}

// MeasureClock runs one exchange of Rounds round trips and estimates the
// agent's offset from the fastest.
func (c *Client) MeasureClock(ctx context.Context) (ClockEstimate, error) {
	s, err := c.Samples(ctx, c.opts.Rounds)
	if err != nil {
		return ClockEstimate{}, err
	}
	e, _ := Estimate(s, granularity())
	e.Wall = clock.NewAnchor().ToWall(e.AtNs)
	return e, nil
}

// Session is a session on the agent, followed from here.
type Session struct {
	c    *Client
	Info StartResponse

	spans  chan []collectors.Span
	cancel context.CancelFunc
	done   chan struct{} // the stream ended

	mu        sync.Mutex
	estimates []ClockEstimate
	offset    int64
	lastSpan  int64 // local ns: End of the last span received
	lastBeat  int64 // local ns: when the last heartbeat or batch arrived
	last      Heartbeat
	ended     bool // the agent sent the end of the session
	err       error
}

// Start measures the agent's clock, starts a session on target and
// begins streaming its spans.
func (c *Client) Start(ctx context.Context, req StartRequest) (*Session, error) {
	est, err := c.MeasureClock(ctx)
	if err != nil {
		return nil, err
	}
	c.log.Info("agent clock", "offset_ns", est.OffsetNs, "bound_ns", est.BoundNs, "rtt_min_ns", est.RTTMinNs)
	s := &Session{c: c, spans: make(chan []collectors.Span, 64), done: make(chan struct{}),
		estimates: []ClockEstimate{est}, offset: est.OffsetNs}
	if err := c.do(ctx, http.MethodPost, PathSessions, req, &s.Info, http.StatusCreated); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.follow(sctx)
	go s.followClock(sctx)
	return s, nil
}

// ToLocal maps an agent time onto the local clock with the estimate in force.
func (s *Session) ToLocal(agentNs int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return agentNs - s.offset
}

// Spans delivers the session's spans in batches, already on the local
// clock; it is closed when the stream ends (then Err says how).
func (s *Session) Spans() <-chan []collectors.Span { return s.spans }

// Done is closed when the stream has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while streaming and after a complete session; a stream cut
// short (the agent died, the network failed) is a *StreamError.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// StreamError says a session's stream ended before the session did, and
// when collection was last seen alive (local CLOCK_MONOTONIC ns).
type StreamError struct {
	Agent string
	// LastContactNs is when the last line arrived; LastSpanNs the End of
	// the last span received (0: none).
	LastContactNs, LastSpanNs int64
	LastContact               time.Time
	Err                       error
}

func (e *StreamError) Error() string {
	return fmt.Sprintf("agent %s: the span stream ended before the session (%v); collection last seen at %s (monotonic %d ns), last span ending at %d ns",
		e.Agent, e.Err, e.LastContact.Format(time.RFC3339Nano), e.LastContactNs, e.LastSpanNs)
}

func (e *StreamError) Unwrap() error { return e.Err }

func (s *Session) follow(ctx context.Context) {
	defer close(s.done)
	defer close(s.spans)
	s.mu.Lock()
	s.lastBeat = clock.Now()
	s.mu.Unlock()
	err := s.stream(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	s.err = &StreamError{Agent: s.c.agent, LastContactNs: s.lastBeat, LastSpanNs: s.lastSpan,
		LastContact: clock.NewAnchor().ToWall(s.lastBeat), Err: err}
}

func (s *Session) stream(ctx context.Context) error {
	req, err := s.c.request(ctx, http.MethodGet, PathSessions+"/"+s.Info.ID+"/spans", nil)
	if err != nil {
		return err
	}
	resp, err := s.c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s.c.statusError("streaming session "+s.Info.ID, resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("decoding a stream line: %w", err)
		}
		now := clock.Now()
		s.mu.Lock()
		off := s.offset
		s.lastBeat = now
		if l.Heartbeat != nil {
			s.last = *l.Heartbeat
			s.ended = l.Heartbeat.End
		}
		s.mu.Unlock()
		if len(l.Spans) > 0 {
			for i := range l.Spans {
				sp := &l.Spans[i]
				sp.Start -= off
				sp.End -= off
				if sp.WakeTs != 0 {
					sp.WakeTs -= off
				}
			}
			end := l.Spans[len(l.Spans)-1].End
			select {
			case s.spans <- l.Spans:
			case <-ctx.Done():
				return ctx.Err()
			}
			s.mu.Lock()
			s.lastSpan = max(s.lastSpan, end)
			s.mu.Unlock()
		}
		if l.Heartbeat != nil && l.Heartbeat.End {
			return nil
		}
	}
	return sc.Err()
}

// followClock repeats the exchange every ClockInterval while streaming.
func (s *Session) followClock(ctx context.Context) {
	t := time.NewTicker(s.c.opts.ClockInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		e, err := s.c.MeasureClock(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.c.log.Warn("measuring the agent's clock", "err", err)
			}
			continue
		}
		s.mu.Lock()
		s.estimates = append(s.estimates, e)
		s.offset = e.OffsetNs
		s.mu.Unlock()
		s.c.log.Debug("agent clock", "offset_ns", e.OffsetNs, "bound_ns", e.BoundNs, "rtt_min_ns", e.RTTMinNs)
	}
}

// Clock is the report of every clock estimate so far.
func (s *Session) Clock() ClockReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Report(s.c.agent, append([]ClockEstimate(nil), s.estimates...), s.c.opts.ClockInterval)
}

// Collection is what a run records of one agent's session: result.json's
// agents[] element (result.Agent), the part the session knows filled by
// Stop (StartNs and StoppedNs on the run's clock, StoppedAt in wall time,
// the sections' summaries typed), the run's own part left to the run.
type Collection = result.Agent

// collectorsOf types an agent's section summaries, as they crossed the wire.
func collectorsOf(m map[string]any) *result.Collectors {
	c := &result.Collectors{}
	for k, v := range m {
		c.Set(k, v)
	}
	return c
}

// Stop ends the session on the agent, waits for the stream to deliver
// what remained, and reports the collection. The error is the stream's
// (a *StreamError when it was cut short) or the stop's.
func (s *Session) Stop(ctx context.Context) (Collection, error) {
	var stop StopResponse
	stopErr := s.c.do(ctx, http.MethodDelete, PathSessions+"/"+s.Info.ID, nil, &stop, http.StatusOK)
	select {
	case <-s.done:
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	col := Collection{Agent: s.c.agent, Session: s.Info.ID, Pid: s.Info.Pid, Comm: s.Info.Comm, Complete: s.ended,
		StartNs: s.Info.StartNs - s.offset, Lost: s.last.Lost, Dropped: s.last.Dropped, Spans: s.last.Sent,
		Unavailable: s.Info.Unavailable, Summary: collectorsOf(stop.Summary), Reason: s.last.Reason}
	if s.ended {
		col.StoppedNs = s.last.EndNs - s.offset
	} else {
		col.StoppedNs = s.lastBeat
	}
	if stopErr == nil {
		col.Reason = stop.Reason
		col.StoppedNs = stop.EndNs - s.offset
		// The stop may be answered before the stream wrote its last
		// batches: the stream's end heartbeat, written after them, counts
		// every span sent; without it the stop's counts are the best known.
		if !s.ended {
			col.Dropped, col.Spans = stop.Dropped, stop.Sent
		}
	}
	col.StoppedAt = clock.NewAnchor().ToWall(col.StoppedNs)
	err := s.err
	if err == nil && stopErr != nil {
		err = stopErr
	}
	if err != nil {
		col.Error = err.Error()
	}
	return col, err
}
