package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bpfbench/bpfbench/internal/clock"
	"github.com/bpfbench/bpfbench/internal/manifest"
	"github.com/bpfbench/bpfbench/loadgen/kserve"
	"github.com/bpfbench/bpfbench/loadgen/kserve/inference"
)

// Protocols.
const (
	// ProtocolOpenAI is the OpenAI-compatible HTTP API with SSE streaming.
	ProtocolOpenAI = "openai"
	// ProtocolKServeGRPC is the KServe v2 / Triton gRPC protocol: one
	// decoupled ModelStreamInfer stream per request (package kserve).
	ProtocolKServeGRPC = "kserve-grpc"
)

// Endpoints.
const (
	EndpointCompletions = "completions"
	EndpointChat        = "chat"
)

// Request is one prompt to send.
type Request struct {
	Prompt    string
	PromptLen int // input tokens, as far as the dataset knows
	OutputLen int // max_tokens to ask for
	// OffsetNs is the send time relative to the start of the run, for trace
	// replay; -1 (or 0 outside a trace) when the arrival process decides.
	OffsetNs int64
	// SlowRead makes this request a slow-reading client: after its first
	// chunk it stops reading for this long, on its own connection with a
	// small receive buffer, so the server's side of the connection fills
	// up and its peer window closes (receive backpressure).
	SlowRead time.Duration
}

// slowReadRcvBuf is the receive buffer of a slow-reading request's socket.
const slowReadRcvBuf = 4096

// Client sends streaming requests to one OpenAI-compatible server and
// measures them. It is safe for concurrent use.
type Client struct {
	hc        *http.Client
	slow      *http.Client
	fresh     *http.Client // a new connection for every request: retries
	raw       *rawTransport
	url       string
	endpoint  string
	model     string
	ignoreEOS bool
	usage     bool
	headers   http.Header
	timeout   time.Duration
	stall     time.Duration
	headerTO  time.Duration
	extra     map[string]any
	bufs      sync.Pool
	// grpc serves --protocol kserve-grpc; url, hc and raw are then unused.
	grpc *kserve.Client
	// traceparent: every request is sent with a traceparent header of
	// its own (setTraceContext).
	traceparent bool
}

// Options are where and how requests are sent: the target, the API, the
// model and what each request asks for, its timeouts and headers, and the
// transport. They are loadgen.Config's Target.
type Options struct {
	// URL is the server's base URL, e.g. http://127.0.0.1:8000 (a /v1/...
	// path is kept as is); with ProtocolKServeGRPC, HOST:PORT (or
	// grpc://HOST:PORT).
	URL      string
	Endpoint string // EndpointCompletions (default) or EndpointChat
	// Protocol is ProtocolOpenAI (default, "" too) or ProtocolKServeGRPC;
	// Endpoint, NoUsage, ExtraBody, Logprobs and NetHTTP do not apply to
	// the latter.
	Protocol string
	Model    string
	// IgnoreEOS asks the server to generate exactly max_tokens. Like vLLM,
	// a run of a generated dataset always sets it.
	IgnoreEOS bool
	// NoUsage leaves out stream_options.include_usage.
	NoUsage bool
	Headers http.Header
	Timeout time.Duration // total per request; 0 means none
	// StallTimeout is the longest silence within a response; 0 means none.
	StallTimeout time.Duration
	// HeaderTimeout bounds the wait for the response headers from the
	// request's start (HTTP); 0 means none.
	HeaderTimeout time.Duration
	NoKeepAlive   bool
	ExtraBody     map[string]any
	// Logprobs asks for the top-K log-probabilities of every token (0:
	// off); the stream keeps the first token's (logprobs.go).
	Logprobs int
	MaxConns int
	// NetHTTP sends every request through net/http; otherwise http://
	// targets (without a proxy) use the raw HTTP/1.1 transport on
	// non-blocking sockets (raw.go), and https through net/http.
	NetHTTP bool
	// NoTraceparent sends no W3C traceparent header. Otherwise every
	// request carries a trace id and a span id of its own (kept in its
	// Record, set there beforehand or drawn at random), so that a server
	// that traces puts its spans under the request's, unless Headers has a
	// Traceparent: that one is sent to every request as it is, or none at
	// all when its value is empty (--header traceparent=).
	NoTraceparent bool
}

// NewClient returns a client for opts.
func NewClient(opts Options) (*Client, error) {
	u, err := opts.endpointURL()
	if err != nil {
		return nil, err
	}
	headers := opts.Headers
	if opts.Protocol != ProtocolKServeGRPC {
		headers = WithAPIKey(headers) // $OPENAI_API_KEY
	}
	headers, ownTraceparent := traceparentHeader(headers)
	tr := newHTTPTransport(opts.NoKeepAlive)
	slowTr := tr.Clone()
	slowTr.DisableKeepAlives = true
	slowTr.DialContext = slowReadDialer().DialContext
	freshTr := tr.Clone()
	freshTr.DisableKeepAlives = true
	c := &Client{
		hc:        &http.Client{Transport: tr},
		slow:      &http.Client{Transport: slowTr},
		fresh:     &http.Client{Transport: freshTr},
		url:       u,
		endpoint:  opts.Endpoint,
		model:     opts.Model,
		ignoreEOS: opts.IgnoreEOS,
		usage:     !opts.NoUsage,
		headers:   headers,
		timeout:   opts.Timeout,
		stall:     opts.StallTimeout,
		headerTO:  opts.HeaderTimeout,
		extra:     opts.logprobsBody(),

		traceparent: !opts.NoTraceparent && !ownTraceparent,
	}
	c.bufs.New = func() any { return &readState{buf: make([]byte, 64<<10)} }
	if opts.Protocol == ProtocolKServeGRPC {
		if c.grpc, err = kserve.New(kserve.Options{Target: opts.URL, Model: opts.Model, NewConnPerRequest: opts.NoKeepAlive}); err != nil {
			return nil, err
		}
		return c, nil
	}
	if !opts.NetHTTP {
		// http:// targets without a proxy: the raw HTTP/1.1 transport.
		c.raw = newRawTransport(u, headers, opts.NoKeepAlive, opts.StallTimeout)
		if c.raw != nil {
			c.raw.headerTO = int64(opts.HeaderTimeout)
		}
	}
	return c, nil
}

// endpointURL checks the protocol and the target, and returns the
// endpoint's URL for the OpenAI protocol ("" for gRPC).
func (opts *Options) endpointURL() (string, error) {
	switch opts.Protocol {
	case ProtocolOpenAI, "":
		return EndpointURL(opts.URL, opts.Endpoint)
	case ProtocolKServeGRPC:
		_, err := kserve.Target(opts.URL)
		return "", err
	default:
		return "", fmt.Errorf("unknown protocol %q: use %s or %s", opts.Protocol, ProtocolOpenAI, ProtocolKServeGRPC)
	}
}

// newHTTPTransport returns the net/http transport of a client: many idle
// connections per host, no compression, large buffers.
func newHTTPTransport(noKeepAlive bool) *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   30 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		DisableKeepAlives:   noKeepAlive,
		ReadBufferSize:      64 << 10,
		WriteBufferSize:     16 << 10,
		ForceAttemptHTTP2:   false,
	}
}

// slowReadDialer returns the dialer of slow-reading requests: sockets with
// a receive buffer of slowReadRcvBuf bytes.
func slowReadDialer() *net.Dialer {
	return &net.Dialer{
		Timeout: 30 * time.Second,
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, slowReadRcvBuf)
			})
			if err != nil {
				return err
			}
			return serr
		},
	}
}

// traceparentHeader reports whether h has a traceparent header; when its
// values are all empty, it returns h without it.
func traceparentHeader(h http.Header) (http.Header, bool) {
	found, empty := false, true
	for k, vs := range h {
		if http.CanonicalHeaderKey(k) != "Traceparent" {
			continue
		}
		found = true
		for _, v := range vs {
			empty = empty && strings.TrimSpace(v) == ""
		}
	}
	if !found || !empty {
		return h, found
	}
	out := make(http.Header, len(h))
	for k, vs := range h {
		if http.CanonicalHeaderKey(k) != "Traceparent" {
			out[k] = vs
		}
	}
	return out, true
}

// newTraceContext draws a W3C trace id and span id (lowercase hex, never
// all zero) from the runtime's ChaCha8 source, which is seeded from the
// system's randomness and needs no lock.
func newTraceContext() (traceID, spanID string) {
	var b [24]byte
	for {
		binary.LittleEndian.PutUint64(b[0:], rand.Uint64())
		binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
		binary.LittleEndian.PutUint64(b[16:], rand.Uint64())
		if binary.LittleEndian.Uint64(b[0:])|binary.LittleEndian.Uint64(b[8:]) != 0 && binary.LittleEndian.Uint64(b[16:]) != 0 {
			return hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])
		}
	}
}

// setTraceContext gives rec the trace context it is sent with, keeping
// one the caller set.
func (c *Client) setTraceContext(rec *Record) {
	if !c.traceparent {
		return
	}
	if len(rec.TraceID) != 32 || len(rec.SpanID) != 16 {
		rec.TraceID, rec.SpanID = newTraceContext()
	}
}

// traceparent is rec's traceparent header value (version 00, sampled).
func traceparent(rec *Record) string {
	return "00-" + rec.TraceID + "-" + rec.SpanID + "-01"
}

// BaseURL is the target as a URL: http:// when it names no scheme
// (127.0.0.1:8000), without trailing slashes. A scheme other than http
// or https, or a URL without a host, is an error naming --target.
func BaseURL(target string) (string, error) {
	base := target
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	switch {
	case err != nil || u.Host == "":
		return "", fmt.Errorf("--target %q: give the server's base URL, e.g. http://127.0.0.1:8000", target)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("--target %q: use an http:// or https:// URL (a KServe gRPC server: --protocol kserve-grpc)", target)
	}
	return strings.TrimRight(base, "/"), nil
}

// EndpointURL builds the request URL from a base URL and an endpoint kind.
func EndpointURL(target, endpoint string) (string, error) {
	if target == "" {
		return "", errors.New("no target URL: pass --target http://HOST:PORT")
	}
	target, err := BaseURL(target)
	if err != nil {
		return "", err
	}
	path := ""
	switch endpoint {
	case EndpointCompletions, "":
		path = "/v1/completions"
	case EndpointChat:
		path = "/v1/chat/completions"
	default:
		return "", fmt.Errorf("unknown endpoint %q: use completions or chat", endpoint)
	}
	if strings.HasSuffix(target, "/completions") {
		return target, nil
	}
	if strings.HasSuffix(target, "/v1") {
		return target + strings.TrimPrefix(path, "/v1"), nil
	}
	return target + path, nil
}

// Close releases idle connections.
func (c *Client) Close() {
	c.hc.CloseIdleConnections()
	c.slow.CloseIdleConnections()
	c.fresh.CloseIdleConnections()
	if c.raw != nil {
		c.raw.close()
	}
	if c.grpc != nil {
		c.grpc.Close()
	}
}

type readState struct {
	buf []byte
	s   streamState
}

// body builds the JSON request body.
func (c *Client) body(r *Request) ([]byte, error) {
	m := map[string]any{
		"model":       c.model,
		"stream":      true,
		"temperature": 0.0,
		"max_tokens":  r.OutputLen,
	}
	if c.usage {
		m["stream_options"] = map[string]any{"include_usage": true}
	}
	if c.ignoreEOS {
		m["ignore_eos"] = true
	}
	if c.endpoint == EndpointChat {
		m["messages"] = []map[string]string{{"role": "user", "content": r.Prompt}}
		m["max_completion_tokens"] = r.OutputLen
	} else {
		m["prompt"] = r.Prompt
	}
	for k, v := range c.extra {
		m[k] = v
	}
	return json.Marshal(m)
}

// Do sends r and fills rec. rec.Index, RequestID, ScheduledNs and Warmup are
// set by the caller (and TraceID and SpanID may be); Do sets the rest. Failures are recorded in rec, never
// returned.
func (c *Client) Do(ctx context.Context, r *Request, rec *Record) {
	rec.PromptLen = r.PromptLen
	rec.MaxTokens = r.OutputLen
	if cap(rec.ChunkNs) == 0 {
		rec.ChunkNs = make([]int64, 0, r.OutputLen+2)
	}
	c.setTraceContext(rec)
	var (
		body []byte
		err  error
	)
	if c.grpc == nil {
		if body, err = c.body(r); err != nil {
			fail(rec, FailOther, fmt.Sprintf("encoding the request body: %v", err))
			return
		}
	}
	var cancelCause context.CancelCauseFunc
	ctx, cancelCause = context.WithCancelCause(ctx)
	defer cancelCause(nil)
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.timeout, errTimeout)
		defer cancel()
	}
	if c.grpc != nil {
		c.doGRPC(ctx, r, rec)
		return
	}
	if c.raw != nil && r.SlowRead <= 0 {
		c.raw.do(ctx, c, body, rec)
		return
	}
	c.doHTTP(ctx, cancelCause, r, body, rec)
}

// httpAttempt holds the trace hooks' readings of one attempt; the hooks run
// on the transport's goroutines, so they publish through atomics.
type httpAttempt struct {
	connNs, sentNs, firstNs atomic.Int64
	port                    atomic.Int32
	reused                  atomic.Bool
}

func (a *httpAttempt) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			a.connNs.Store(clock.Fast())
			a.reused.Store(info.Reused)
			if t, ok := info.Conn.LocalAddr().(*net.TCPAddr); ok {
				a.port.Store(int32(t.Port))
			}
		},
		WroteRequest:         func(httptrace.WroteRequestInfo) { a.sentNs.Store(clock.Fast()) },
		GotFirstResponseByte: func() { a.firstNs.Store(clock.Fast()) },
	}
}

func (a *httpAttempt) publish(rec *Record) {
	rec.ConnNs, rec.SentNs, rec.FirstByteNs = a.connNs.Load(), a.sentNs.Load(), a.firstNs.Load()
	rec.LocalPort, rec.ConnReused = int(a.port.Load()), a.reused.Load()
}

// doHTTP is Do through net/http: https targets, slow-reading requests,
// targets behind a proxy.
func (c *Client) doHTTP(ctx context.Context, cancelCause context.CancelCauseFunc, r *Request, body []byte, rec *Record) {
	h := &httpCall{c: c, cancelCause: cancelCause}
	if c.stall > 0 {
		h.stallTimer = time.AfterFunc(c.stall, func() {
			h.stalled.Store(true)
			cancelCause(errStall)
		})
		defer h.stallTimer.Stop()
	}
	// The header timer runs from the first attempt's start until net/http
	// has parsed the response headers.
	stopHeaderTimer := func() bool { return false }
	if c.headerTO > 0 {
		ht := time.AfterFunc(c.headerTO, func() { cancelCause(errHeaderTimeout) })
		defer ht.Stop()
		stopHeaderTimer = ht.Stop
	}
	resp, att, ok := h.send(ctx, r, body, rec)
	if !ok {
		return
	}
	stopHeaderTimer()
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		rec.EndNs = clock.Fast()
		fail(rec, FailHTTPStatus, fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(msg))))
		return
	}
	st := c.bufs.Get().(*readState)
	defer c.bufs.Put(st)
	readErr := h.read(ctx, r, resp, rec, st)
	rec.EndNs = clock.Fast()
	att.publish(rec)
	if rec.Failure != "" {
		return
	}
	if readErr != nil {
		failErr(ctx, rec, &h.stalled, readErr)
		return
	}
	st.s.complete()
}

// httpCall is one request through net/http: its stall timer, reset by
// every byte.
type httpCall struct {
	c           *Client
	cancelCause context.CancelCauseFunc
	stalled     atomic.Bool
	stallTimer  *time.Timer // nil: no stall timeout
}

func (h *httpCall) resetStall() {
	if h.stallTimer != nil {
		h.stallTimer.Reset(h.c.stall)
	}
}

// send sends the request until its response headers have come: once, or
// twice when the first attempt found its kept-alive connection closed.
// When it fails, rec says why and ok is false.
func (h *httpCall) send(ctx context.Context, r *Request, body []byte, rec *Record) (resp *http.Response, att *httpAttempt, ok bool) {
	c := h.c
	var tp string
	if c.traceparent {
		tp = traceparent(rec)
	}
	for attempt := 0; ; attempt++ {
		att = &httpAttempt{}
		req, err := c.newHTTPRequest(httptrace.WithClientTrace(ctx, att.trace()), body, rec.RequestID, tp)
		if err != nil {
			fail(rec, FailOther, fmt.Sprintf("building the request: %v", err))
			return nil, nil, false
		}
		hc := c.hc
		switch {
		case r.SlowRead > 0:
			hc = c.slow
		case attempt > 0:
			hc = c.fresh
		}
		rec.StartNs = clock.Fast()
		resp, err = hc.Do(req)
		att.publish(rec)
		if err == nil {
			rec.HeadersNs = clock.Fast() // net/http has parsed the headers
			return resp, att, true
		}
		if attempt == 0 && rec.ConnReused && rec.FirstByteNs == 0 && ctx.Err() == nil && isStaleConnErr(err) {
			// The server had closed the kept-alive connection: send
			// again, once, on a new one, and time the retry.
			rec.RetriedStaleConn = true
			h.resetStall()
			continue
		}
		rec.EndNs = clock.Fast()
		failErr(ctx, rec, &h.stalled, err)
		return nil, nil, false
	}
}

// newHTTPRequest builds the POST of body with the client's headers, the
// request's id and its traceparent (tp, when not empty).
func (c *Client) newHTTPRequest(ctx context.Context, body []byte, requestID, tp string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range c.headers {
		req.Header[k] = v
	}
	if requestID != "" {
		req.Header.Set("X-Request-Id", requestID)
	}
	if tp != "" {
		req.Header.Set("Traceparent", tp)
	}
	return req, nil
}

// read reads the response body into st's stream until it ends, pausing
// once after the first chunk for a slow-reading request; it returns the
// read error that ended it, nil at EOF or the stream's end.
func (h *httpCall) read(ctx context.Context, r *Request, resp *http.Response, rec *Record, st *readState) error {
	s := &st.s
	s.reset(rec, h.c.endpoint == EndpointChat)
	paused := r.SlowRead <= 0
	for {
		if !paused && len(rec.ChunkNs) > 0 {
			paused = true
			if h.stallTimer != nil {
				h.stallTimer.Stop()
			}
			from := clock.Fast()
			select {
			case <-time.After(r.SlowRead):
			case <-ctx.Done():
			}
			rec.PausedNs = &[2]int64{from, clock.Fast()}
			h.resetStall()
		}
		n, err := resp.Body.Read(st.buf)
		now := clock.Fast()
		if n > 0 {
			h.resetStall()
			if !s.feed(st.buf[:n], now) {
				if s.done {
					// Read the end of the body (the chunked terminator),
					// so that net/http keeps the connection.
					drain := time.AfterFunc(time.Second, func() { h.cancelCause(errDrain) })
					io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
					drain.Stop()
				}
				return nil
			}
		}
		if err != nil {
			s.eof(now)
			if !errors.Is(err, io.EOF) {
				return err
			}
			return nil
		}
	}
}

// isStaleConnErr reports whether err is what a request gets from a
// kept-alive connection the server had already closed: EOF or a reset on
// the write or on the first read.
func isStaleConnErr(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "server closed idle connection") ||
		strings.Contains(msg, "transport connection broken")
}

var (
	errTimeout = errors.New("request timeout")
	errStall   = errors.New("stall timeout")
	// errHeaderTimeout: the response headers were not complete within
	// the header timeout.
	errHeaderTimeout = errors.New("header timeout")
	errDrain         = errors.New("the body went on after [DONE]")
)

func fail(r *Record, kind, msg string) {
	r.Success = false
	r.Failure = kind
	r.Error = msg
}

// failErr classifies a transport error.
func failErr(ctx context.Context, r *Record, stalled *atomic.Bool, err error) {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errHeaderTimeout) || errors.Is(err, errHeaderTimeout):
		fail(r, FailHeaderTimeout, fmt.Sprintf("no complete response headers within the header timeout: %v", err))
	case stalled.Load() || errors.Is(cause, errStall):
		fail(r, FailStall, fmt.Sprintf("no data for the stall timeout: %v", err))
	case errors.Is(cause, errTimeout):
		fail(r, FailTimeout, fmt.Sprintf("request timeout: %v", err))
	case ctx.Err() != nil:
		fail(r, FailCanceled, fmt.Sprintf("canceled: %v", err))
	case isConnectErr(err) && r.FirstByteNs == 0 && r.SentNs == 0:
		fail(r, FailConnect, err.Error())
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF):
		fail(r, FailCut, fmt.Sprintf("connection cut mid-stream: %v", err))
	default:
		if r.FirstByteNs != 0 {
			fail(r, FailCut, fmt.Sprintf("reading the stream: %v", err))
		} else {
			fail(r, FailOther, err.Error())
		}
	}
}

// grpcCall turns the events of one ModelStreamInfer stream into a Record.
type grpcCall struct {
	rec    *Record
	stall  *time.Timer
	header *time.Timer // the header timeout, stopped by the stream's headers or first response
	wait   time.Duration
	final  bool // triton_final_response seen
	failed bool // a response failed the request (rec.Failure set)
}

func (g *grpcCall) Started(now int64, port int) { g.rec.ConnNs, g.rec.LocalPort = now, port }
func (g *grpcCall) Sent(now int64)              { g.rec.SentNs = now }

func (g *grpcCall) Headers(now int64) {
	g.touch()
	g.rec.HeadersNs, g.rec.FirstByteNs, g.rec.Status = now, now, http.StatusOK
}

func (g *grpcCall) touch() {
	if g.header != nil {
		g.header.Stop()
	}
	if g.stall != nil {
		g.stall.Reset(g.wait)
	}
}

func (g *grpcCall) Response(now int64, r *inference.ModelStreamInferResponse) bool {
	g.touch()
	rec := g.rec
	if rec.FirstByteNs == 0 {
		rec.FirstByteNs = now
	}
	text, hasOutput, final, errMsg, err := kserve.Text(r)
	switch {
	case err != nil:
		fail(rec, FailMalformed, err.Error())
		g.failed = true
		return false
	case errMsg != "":
		fail(rec, FailStreamError, "error in stream: "+errMsg)
		g.failed = true
		return false
	}
	if ir := r.GetInferResponse(); rec.ResponseID == "" && ir != nil {
		rec.ResponseID, rec.ResponseModel = ir.GetId(), ir.GetModelName()
	}
	// An empty final response (no outputs, or empty text) ends the
	// request without a token, as a last SSE chunk without text does.
	if hasOutput && !(final && len(text) == 0) {
		rec.ChunkNs = append(rec.ChunkNs, now)
		rec.LastNs = now
		rec.TextBytes += len(text)
	}
	g.final = final
	return !final
}

// doGRPC is Do over one ModelStreamInfer stream.
func (c *Client) doGRPC(ctx context.Context, r *Request, rec *Record) {
	ctx, cancelCause := context.WithCancelCause(ctx)
	defer cancelCause(nil)
	g := &grpcCall{rec: rec, wait: c.stall}
	var stalled atomic.Bool
	if c.stall > 0 {
		g.stall = time.AfterFunc(c.stall, func() {
			stalled.Store(true)
			cancelCause(errStall)
		})
		defer g.stall.Stop()
	}
	if c.headerTO > 0 {
		// As over HTTP: the stream's response headers (or its first
		// response, where a server sends them together) within the
		// header timeout.
		g.header = time.AfterFunc(c.headerTO, func() { cancelCause(errHeaderTimeout) })
		defer g.header.Stop()
	}
	req := &kserve.Request{ID: rec.RequestID, Prompt: r.Prompt, MaxTokens: r.OutputLen, IgnoreEOS: c.ignoreEOS, Metadata: c.grpcMetadata(rec)}
	rec.StartNs = clock.Fast()
	err := c.grpc.Stream(ctx, req, g)
	rec.EndNs = clock.Fast()
	if rec.Failure != "" || !grpcOK(ctx, rec, &stalled, err) {
		return
	}
	if len(rec.ChunkNs) == 0 {
		fail(rec, FailNoTokens, "never received a response with text_output")
		return
	}
	rec.OutputTokens = len(rec.ChunkNs)
	rec.TokenSource = TokensFromChunks
	rec.Success = true
}

// grpcMetadata returns the stream's metadata: the client's headers, the
// request id and the request's traceparent.
func (c *Client) grpcMetadata(rec *Record) metadata.MD {
	md := metadata.MD{}
	for k, vs := range c.headers {
		md[strings.ToLower(k)] = vs
	}
	if rec.RequestID != "" {
		md.Set("x-request-id", rec.RequestID)
	}
	if c.traceparent {
		md.Set("traceparent", traceparent(rec))
	}
	return md
}

// grpcOK reports whether the stream ended well by err; otherwise it
// records why it failed: a timeout (stalled, the request's or the
// server's enforcing of it), a cut or the server's status.
func grpcOK(ctx context.Context, rec *Record, stalled *atomic.Bool, err error) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, kserve.ErrNoFinal):
		if ctx.Err() == nil && deadlineWithin(ctx, grpcDeadlineSlack) {
			// The server ended its handler at the request's deadline (it
			// came as grpc-timeout), status OK, a moment before the
			// client's own timer fired: the request timed out.
			select {
			case <-ctx.Done():
			case <-time.After(grpcDeadlineSlack):
			}
		}
		if ctx.Err() != nil {
			failErr(ctx, rec, stalled, err)
			return false
		}
		fail(rec, FailCut, err.Error())
	case ctx.Err() != nil: // the stall timer, the request's timeout, or the run's end
		failErr(ctx, rec, stalled, err)
	case status.Code(err) == codes.DeadlineExceeded && deadlineWithin(ctx, grpcDeadlineSlack):
		// The server enforced the request's deadline (it came as
		// grpc-timeout) a moment before the client's own timer fired.
		select {
		case <-ctx.Done():
		case <-time.After(grpcDeadlineSlack):
		}
		failErr(ctx, rec, stalled, err)
	default:
		st := status.Convert(err)
		switch {
		case st.Code() == codes.Unavailable && rec.HeadersNs == 0 && len(rec.ChunkNs) == 0:
			fail(rec, FailConnect, fmt.Sprintf("gRPC %s: %s", st.Code(), st.Message()))
		case st.Code() == codes.Unavailable || st.Code() == codes.Internal && isGRPCTransportCut(st.Message()):
			fail(rec, FailCut, fmt.Sprintf("connection cut mid-stream: gRPC %s: %s", st.Code(), st.Message()))
		default:
			fail(rec, FailGRPCStatus, fmt.Sprintf("gRPC %s: %s", st.Code(), st.Message()))
		}
	}
	return false
}

// grpcDeadlineSlack is how far before a request's deadline a
// DeadlineExceeded status from the server is still that deadline's.
const grpcDeadlineSlack = 50 * time.Millisecond

// deadlineWithin reports whether ctx has a deadline less than d away.
func deadlineWithin(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < d
}

// isGRPCTransportCut reports whether an Internal status is gRPC-Go's
// report of a transport that broke (a reset stream), not the server's own.
func isGRPCTransportCut(msg string) bool {
	return strings.Contains(msg, "RST_STREAM") || strings.Contains(msg, "stream terminated")
}

func isConnectErr(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED)
}

// Redacted is target as a result or a line may show it: a URL's password
// (https://user:secret@host) replaced by "xxxxx", as in the run's
// manifest (manifest.RedactURL); anything else as it is.
func Redacted(target string) string { return manifest.RedactURL(target) }
