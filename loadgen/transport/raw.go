package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/internal/clock"
)

// The raw transport: HTTP/1.1 for http:// targets on non-blocking sockets
// that the Go runtime's poller never sees, driven by a few event loops
// (reactors), each one goroutine around its own epoll instance. A request's
// goroutine hands the request to a reactor and waits for its end; the
// reactor connects (or takes a kept-alive connection), writes the request,
// reads the response with one read of a large buffer per readiness event,
// takes the arrival time when the read returns, removes the chunked
// framing in place and feeds the SSE scanner. Per chunk that is one
// epoll_wait (shared by every connection ready at once), one read, one
// vDSO clock reading, and no goroutine switch, no channel, no timer.

const (
	rawReadBuf   = 256 << 10
	rawMaxHeader = 64 << 10
	rawMaxEvents = 256
	rawErrBody   = 4 << 10
	// rawDialTimeout bounds a connect, as net/http's dialer does.
	rawDialTimeout = int64(30 * time.Second)
	// rawDrainTimeout bounds the wait for the end of a body after [DONE]
	// (a server that keeps the stream open): the connection is closed.
	rawDrainTimeout = int64(time.Second)
)

var (
	errCanceled       = errors.New("request canceled")
	errMalformedHTTP  = errors.New("malformed HTTP response")
	errTransportClose = errors.New("client closed")
)

type rawTransport struct {
	sa        unix.Sockaddr
	family    int
	head      []byte // request line and fixed headers
	keepAlive bool
	stall     int64
	headerTO  int64 // the header timeout (ns; 0: none)
	loops     []*reactor
	next      atomic.Uint32
	closeOnce sync.Once
	reqs      sync.Pool
}

// newRawTransport returns the raw transport for u, or nil when it cannot
// serve it (https, a proxy, a name that does not resolve now): net/http
// does then.
func newRawTransport(u string, headers http.Header, noKeepAlive bool, stall time.Duration) *rawTransport {
	pu, err := url.Parse(u)
	if err != nil || pu.Scheme != "http" {
		return nil
	}
	if req, err := http.NewRequest(http.MethodPost, u, nil); err != nil {
		return nil
	} else if p, err := http.ProxyFromEnvironment(req); err != nil || p != nil {
		return nil
	}
	port := pu.Port()
	if port == "" {
		port = "80"
	}
	pn, err := strconv.Atoi(port)
	if err != nil {
		return nil
	}
	ip := net.ParseIP(pu.Hostname())
	if ip == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ips, err := net.DefaultResolver.LookupIP(ctx, "ip", pu.Hostname())
		cancel()
		if err != nil || len(ips) == 0 {
			return nil
		}
		ip = ips[0]
		for _, x := range ips {
			if x.To4() != nil {
				ip = x
				break
			}
		}
	}
	t := &rawTransport{keepAlive: !noKeepAlive, stall: int64(stall)}
	if ip4 := ip.To4(); ip4 != nil {
		sa := &unix.SockaddrInet4{Port: pn}
		copy(sa.Addr[:], ip4)
		t.sa, t.family = sa, unix.AF_INET
	} else {
		sa := &unix.SockaddrInet6{Port: pn}
		copy(sa.Addr[:], ip.To16())
		t.sa, t.family = sa, unix.AF_INET6
	}
	h := []byte("POST " + pu.RequestURI() + " HTTP/1.1\r\nHost: " + pu.Host + "\r\nUser-Agent: bpfbench\r\n")
	if _, ok := headers["Content-Type"]; !ok {
		h = append(h, "Content-Type: application/json\r\n"...)
	}
	if _, ok := headers["Accept"]; !ok {
		h = append(h, "Accept: text/event-stream\r\n"...)
	}
	if noKeepAlive {
		h = append(h, "Connection: close\r\n"...)
	}
	for k, vs := range headers {
		if http.CanonicalHeaderKey(k) == "X-Request-Id" || http.CanonicalHeaderKey(k) == "Content-Length" {
			continue
		}
		for _, v := range vs {
			h = append(h, k+": "+v+"\r\n"...)
		}
	}
	t.head = h
	n := min(max(runtime.GOMAXPROCS(0)/2, 1), 8)
	for i := 0; i < n; i++ {
		l, err := newReactor(t)
		if err != nil {
			for _, l := range t.loops {
				l.stop()
			}
			return nil
		}
		t.loops = append(t.loops, l)
	}
	t.reqs.New = func() any { return &rawReq{} }
	return t
}

func (t *rawTransport) close() {
	t.closeOnce.Do(func() {
		for _, l := range t.loops {
			l.stop()
		}
	})
}

// rawReq is one request in a reactor's hands. The reactor owns it, and the
// Record, from submission until done is closed.
type rawReq struct {
	rec      *Record
	st       streamState
	wire     []byte
	retried  bool
	finished bool
	err      error
	conn     *rconn
	lastByte int64
	done     chan struct{}
}

func (t *rawTransport) do(ctx context.Context, c *Client, body []byte, rec *Record) {
	req := t.reqs.Get().(*rawReq)
	w := append(req.wire[:0], t.head...)
	w = append(w, "Content-Length: "...)
	w = strconv.AppendInt(w, int64(len(body)), 10)
	if rec.RequestID != "" {
		w = append(w, "\r\nX-Request-Id: "...)
		w = append(w, rec.RequestID...)
	}
	if c.traceparent {
		w = append(w, "\r\nTraceparent: 00-"...)
		w = append(w, rec.TraceID...)
		w = append(w, '-')
		w = append(w, rec.SpanID...)
		w = append(w, "-01"...)
	}
	w = append(w, "\r\n\r\n"...)
	req.wire = append(w, body...)
	req.rec = rec
	req.st.reset(rec, c.endpoint == EndpointChat)
	req.retried, req.finished, req.err, req.conn = false, false, nil, nil
	req.done = make(chan struct{})
	l := t.loops[int(t.next.Add(1))%len(t.loops)]
	rec.StartNs = clock.Fast()
	req.lastByte = rec.StartNs
	l.submit(rawOp{kind: opStart, req: req})
	canceled := false
	select {
	case <-req.done:
	case <-ctx.Done():
		l.submit(rawOp{kind: opCancel, req: req})
		canceled = true
		<-req.done
	}
	if rec.Failure == "" {
		if req.err != nil {
			var stalled atomic.Bool
			stalled.Store(errors.Is(req.err, errStall))
			failErr(ctx, rec, &stalled, req.err)
		} else {
			req.st.complete()
		}
	}
	if !canceled {
		// (A canceled request stays out of the pool: its cancel
		// operation may still be queued.)
		req.rec, req.st.rec, req.err, req.conn = nil, nil, nil, nil
		t.reqs.Put(req)
	}
}

const (
	opStart = iota
	opCancel
	opStop
)

type rawOp struct {
	kind int
	req  *rawReq
}

// Connection states.
const (
	csConnecting = iota // non-blocking connect in progress
	csWriting           // writing the request
	csHead              // reading the status line and headers
	csBody              // reading the body for the request
	csDraining          // the request ended ([DONE]); reading the rest of the body to keep the connection
	csIdle              // kept alive, no request
)

// Body framings.
const (
	fLength = iota
	fChunked
	fClose
)

// Chunked decoder states.
const (
	chSize = iota
	chExt
	chData
	chDataEnd
	chTrailer
)

type rconn struct {
	fd      int
	gen     int32
	dialNs  int64 // when the connect started; in csDraining, when the draining did
	port    int
	state   int
	closed  bool
	reused  bool // carried a response before: a request on it may find it closed
	wantOut bool // EPOLLOUT is in the registered events
	req     *rawReq
	woff    int
	idleAt  int

	head      []byte
	status    int
	keepAlive bool
	framing   int
	remain    int64 // fLength: body bytes left; fChunked: bytes left in the chunk
	cst       int
	digits    int
	lineLen   int
	leftover  bool // bytes after the end of the body: the connection cannot be reused
	errBody   []byte
}

type reactor struct {
	t       *rawTransport
	epfd    int
	evfd    int
	mu      sync.Mutex
	stopped bool // under mu: the loop has ended
	ops     []rawOp
	spare   []rawOp
	conns   []*rconn // by fd
	idle    []*rconn
	active  int
	dialing int // connections in csConnecting
	drains  int // connections in csDraining
	gen     int32
	buf     []byte
	events  []unix.EpollEvent
	exited  chan struct{}
	lastScn int64
}

func newReactor(t *rawTransport) (*reactor, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	evfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(evfd), Pad: -1}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(evfd)
		return nil, err
	}
	l := &reactor{
		t:      t,
		epfd:   epfd,
		evfd:   evfd,
		buf:    make([]byte, rawReadBuf),
		events: make([]unix.EpollEvent, rawMaxEvents),
		exited: make(chan struct{}),
	}
	go l.run()
	return l, nil
}

var evOne = [8]byte{1}

func (l *reactor) submit(op rawOp) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		// The client was closed: the request fails at once.
		if op.kind == opStart && !op.req.finished {
			op.req.finished = true
			op.req.err = errTransportClose
			op.req.rec.EndNs = clock.Fast()
			close(op.req.done)
		}
		return
	}
	l.ops = append(l.ops, op)
	// Under the lock: shutdown closes the eventfd only after it has set
	// stopped, so this never writes to a closed (or reused) descriptor.
	unix.Write(l.evfd, evOne[:])
}

func (l *reactor) stop() {
	l.submit(rawOp{kind: opStop})
	<-l.exited
}

// readFd is read(2) without the scheduler's system call bookkeeping: the
// socket is non-blocking, so the call never blocks.
func readFd(fd int, b []byte) (int, syscall.Errno) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

func (l *reactor) run() {
	defer close(l.exited)
	for {
		timeout := -1
		if w := l.t.watch(); w > 0 && l.active > 0 {
			timeout = int(max(w/4/1e6, 1))
		}
		if (l.dialing > 0 || l.drains > 0) && (timeout < 0 || timeout > 1000) {
			timeout = 1000
		}
		n, err := unix.EpollWait(l.epfd, l.events, timeout)
		if err != nil && err != unix.EINTR {
			l.shutdown(err)
			return
		}
		for i := 0; i < n; i++ {
			ev := &l.events[i]
			fd := int(ev.Fd)
			if fd == l.evfd {
				if l.drainOps() {
					l.shutdown(errTransportClose)
					return
				}
				continue
			}
			if fd >= len(l.conns) {
				continue
			}
			c := l.conns[fd]
			if c == nil || c.gen != ev.Pad {
				continue
			}
			if ev.Events&unix.EPOLLOUT != 0 && (c.state == csConnecting || c.state == csWriting) {
				l.onWritable(c)
				if c.closed {
					continue
				}
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				l.onReadable(c)
			}
		}
		if (l.t.watch() > 0 && l.active > 0) || l.dialing > 0 || l.drains > 0 {
			l.scanStalls()
		}
	}
}

// drainOps runs the submitted operations; it reports a stop.
func (l *reactor) drainOps() bool {
	var b [8]byte
	unix.Read(l.evfd, b[:])
	l.mu.Lock()
	ops := l.ops
	l.ops = l.spare[:0]
	l.mu.Unlock()
	stop := false
	for i, op := range ops {
		switch op.kind {
		case opStart:
			l.start(op.req)
		case opCancel:
			if !op.req.finished {
				if c := op.req.conn; c != nil && c.req == op.req {
					l.closeConn(c)
				}
				l.finish(op.req, errCanceled)
			}
		case opStop:
			stop = true
		}
		ops[i] = rawOp{}
	}
	l.spare = ops
	return stop
}

func (l *reactor) shutdown(err error) {
	for _, c := range l.conns {
		if c == nil {
			continue
		}
		if c.req != nil {
			l.finish(c.req, err)
		}
		l.closeConn(c)
	}
	l.mu.Lock()
	l.stopped = true
	for _, op := range l.ops {
		if op.kind == opStart && !op.req.finished {
			l.finish(op.req, err)
		}
	}
	l.ops = nil
	unix.Close(l.epfd)
	unix.Close(l.evfd)
	l.mu.Unlock()
}

// watch is the shorter of the stall and header timeouts that are set (ns;
// 0: neither).
func (t *rawTransport) watch() int64 {
	w := t.stall
	if t.headerTO > 0 && (w == 0 || t.headerTO < w) {
		w = t.headerTO
	}
	return w
}

func (l *reactor) scanStalls() {
	now := clock.Fast()
	if w := l.t.watch(); now-l.lastScn < max(w/8, int64(time.Millisecond)) && w > 0 {
		return
	}
	l.lastScn = now
	for _, c := range l.conns {
		if c != nil && c.state == csDraining && now-c.dialNs >= rawDrainTimeout {
			l.closeConn(c)
			continue
		}
		if c == nil || c.req == nil {
			continue
		}
		switch req := c.req; {
		case l.t.headerTO > 0 && c.state <= csHead && now-req.rec.StartNs >= l.t.headerTO:
			l.closeConn(c)
			l.finish(req, errHeaderTimeout)
		case l.t.stall > 0 && now-req.lastByte >= l.t.stall:
			l.closeConn(c)
			l.finish(req, errStall)
		case c.state == csConnecting && now-c.dialNs >= rawDialTimeout:
			l.closeConn(c)
			l.finish(req, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", unix.ETIMEDOUT)})
		}
	}
}

// start gives req a connection and writes it.
func (l *reactor) start(req *rawReq) {
	var c *rconn
	if l.t.keepAlive && !req.retried {
		for len(l.idle) > 0 && c == nil {
			c = l.idle[len(l.idle)-1]
			l.idle = l.idle[:len(l.idle)-1]
			c.idleAt = -1
		}
	}
	if c == nil {
		var err error
		if c, err = l.dial(); err != nil {
			l.finish(req, err)
			return
		}
	}
	rec := req.rec
	c.req, req.conn = req, c
	l.active++
	c.woff = 0
	rec.ConnNs = clock.Fast()
	rec.ConnReused = c.reused
	rec.LocalPort = c.port
	if c.state == csIdle {
		c.state = csWriting
	}
	if c.state == csWriting {
		l.write(c)
	}
}

func (l *reactor) dial() (*rconn, error) {
	fd, err := unix.Socket(l.t.family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", err)}
	}
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	c := &rconn{fd: fd, state: csWriting, idleAt: -1}
	if err := unix.Connect(fd, l.t.sa); err == unix.EINPROGRESS {
		c.state = csConnecting
		c.dialNs = clock.Fast()
	} else if err != nil {
		unix.Close(fd)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)}
	}
	l.gen++
	c.gen = l.gen
	events := uint32(unix.EPOLLIN | unix.EPOLLRDHUP)
	if c.state == csConnecting {
		events |= unix.EPOLLOUT
		c.wantOut = true
	}
	ev := unix.EpollEvent{Events: events, Fd: int32(fd), Pad: c.gen}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("epoll_ctl", err)}
	}
	if sa, err := unix.Getsockname(fd); err == nil {
		switch s := sa.(type) {
		case *unix.SockaddrInet4:
			c.port = s.Port
		case *unix.SockaddrInet6:
			c.port = s.Port
		}
	}
	for fd >= len(l.conns) {
		l.conns = append(l.conns, make([]*rconn, len(l.conns)+64)...)
	}
	l.conns[fd] = c
	if c.state == csConnecting {
		l.dialing++
	}
	return c, nil
}

func (l *reactor) setOut(c *rconn, on bool) {
	if c.wantOut == on {
		return
	}
	c.wantOut = on
	events := uint32(unix.EPOLLIN | unix.EPOLLRDHUP)
	if on {
		events |= unix.EPOLLOUT
	}
	ev := unix.EpollEvent{Events: events, Fd: int32(c.fd), Pad: c.gen}
	unix.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, c.fd, &ev)
}

func (l *reactor) onWritable(c *rconn) {
	if c.state == csConnecting {
		if e, err := unix.GetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || e != 0 {
			if err == nil {
				err = syscall.Errno(e)
			}
			req := c.req
			l.closeConn(c)
			if req != nil {
				l.finish(req, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)})
			}
			return
		}
		c.state = csWriting
		l.dialing--
	}
	if c.req == nil {
		l.setOut(c, false)
		return
	}
	l.write(c)
}

func (l *reactor) write(c *rconn) {
	req := c.req
	for c.woff < len(req.wire) {
		n, err := unix.SendmsgN(c.fd, req.wire[c.woff:], nil, nil, unix.MSG_NOSIGNAL)
		if err == unix.EAGAIN {
			l.setOut(c, true)
			return
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			l.closeConn(c)
			if c.reused && !req.retried && (err == unix.EPIPE || err == unix.ECONNRESET) {
				l.retry(req)
				return
			}
			l.finish(req, &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", err)})
			return
		}
		c.woff += n
	}
	req.rec.SentNs = clock.Fast()
	c.state = csHead
	c.head = c.head[:0]
	l.setOut(c, false)
}

// retry sends req again on a new connection: the kept-alive one it was
// given turned out closed before any response byte.
func (l *reactor) retry(req *rawReq) {
	if c := req.conn; c != nil && c.req == req {
		c.req = nil
		l.active--
	}
	req.conn = nil
	req.retried = true
	rec := req.rec
	rec.RetriedStaleConn = true
	rec.ConnNs, rec.SentNs, rec.FirstByteNs, rec.HeadersNs, rec.LocalPort, rec.ConnReused = 0, 0, 0, 0, 0, false
	rec.StartNs = clock.Fast()
	req.lastByte = rec.StartNs
	l.start(req)
}

func (l *reactor) onReadable(c *rconn) {
	for {
		n, errno := readFd(c.fd, l.buf)
		now := clock.Fast()
		if errno == unix.EAGAIN {
			return
		}
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 || n == 0 {
			var err error
			if errno != 0 {
				err = os.NewSyscallError("read", errno)
			}
			l.onEOF(c, err, now)
			return
		}
		l.onBytes(c, l.buf[:n], now)
		if c.closed || n < len(l.buf) {
			// Level-triggered: epoll says when more comes.
			return
		}
	}
}

func (l *reactor) onEOF(c *rconn, err error, now int64) {
	req := c.req
	if req == nil {
		l.closeConn(c)
		return
	}
	rec := req.rec
	if c.reused && rec.FirstByteNs == 0 && !req.retried &&
		(err == nil || errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.EPIPE)) {
		l.closeConn(c)
		l.retry(req)
		return
	}
	switch {
	case c.state == csBody && c.framing == fClose && err == nil:
		// The body ends with the connection.
		l.closeConn(c)
		l.endBody(req, now)
		return
	case err != nil:
	case c.state == csBody:
		err = io.ErrUnexpectedEOF
	default:
		err = io.EOF
	}
	l.closeConn(c)
	if c.state == csBody && c.status == http.StatusOK {
		req.st.eof(now)
	}
	l.finish(req, err)
}

func (l *reactor) onBytes(c *rconn, b []byte, now int64) {
	switch c.state {
	case csIdle:
		// A kept-alive connection does not talk: closed or broken.
		l.closeConn(c)
		return
	case csConnecting, csWriting:
		// An answer before the whole request went out (an error status).
		if c.state == csConnecting {
			l.dialing--
		}
		c.state = csHead
		c.head = c.head[:0]
		l.setOut(c, false)
	}
	if req := c.req; req != nil {
		if req.rec.FirstByteNs == 0 {
			req.rec.FirstByteNs = now
		}
		req.lastByte = now
	}
	if c.state == csHead {
		c.head = append(c.head, b...)
		for c.state == csHead {
			i := bytes.Index(c.head, []byte("\r\n\r\n"))
			if i < 0 {
				if len(c.head) > rawMaxHeader {
					l.fail(c, errMalformedHTTP)
				}
				return
			}
			if !c.parseHead(c.head[:i]) {
				l.fail(c, errMalformedHTTP)
				return
			}
			rest := c.head[i+4:]
			if c.status >= 100 && c.status < 200 && c.status != http.StatusSwitchingProtocols {
				c.head = c.head[:copy(c.head, rest)]
				continue
			}
			c.state = csBody
			if c.req != nil {
				c.req.rec.Status = c.status
				c.req.rec.HeadersNs = now
			}
			b = rest
		}
		defer func() { c.head = c.head[:0] }()
		if c.framing == fLength && c.remain == 0 {
			l.bodyEnd(c, now)
			return
		}
	}
	l.body(c, b, now)
}

// parseHead reads the status line and the headers the transport needs.
func (c *rconn) parseHead(h []byte) bool {
	line, rest, _ := bytes.Cut(h, []byte("\r\n"))
	if !bytes.HasPrefix(line, []byte("HTTP/1.")) || len(line) < 12 || line[8] != ' ' {
		return false
	}
	// Three digits, then the end or a space (Atoi would take "+20").
	if len(line) > 12 && line[12] != ' ' || line[9] < '1' || line[9] > '9' {
		return false
	}
	st := 0
	for _, d := range line[9:12] {
		if d < '0' || d > '9' {
			return false
		}
		st = st*10 + int(d-'0')
	}
	c.status = st
	c.keepAlive = line[7] == '1'
	c.framing = fClose
	c.remain = 0
	c.cst, c.digits, c.lineLen = chSize, 0, 0
	c.leftover = false
	c.errBody = c.errBody[:0]
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		switch {
		case asciiEqualFold(k, "content-length"):
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil || n < 0 {
				return false
			}
			if c.framing != fChunked {
				c.framing, c.remain = fLength, n
			}
		case asciiEqualFold(k, "transfer-encoding"):
			if bytes.Contains(bytes.ToLower(v), []byte("chunked")) {
				c.framing, c.remain = fChunked, 0
			}
		case asciiEqualFold(k, "connection"):
			lv := bytes.ToLower(v)
			if bytes.Contains(lv, []byte("close")) {
				c.keepAlive = false
			} else if bytes.Contains(lv, []byte("keep-alive")) {
				c.keepAlive = true
			}
		}
	}
	if c.framing == fClose {
		c.keepAlive = false
	}
	return true
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		x := b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if x != s[i] {
			return false
		}
	}
	return true
}

// body takes body bytes off the wire framing and delivers them.
func (l *reactor) body(c *rconn, b []byte, now int64) {
	switch c.framing {
	case fClose:
		l.deliver(c, b, now)
	case fLength:
		n := int(min(int64(len(b)), c.remain))
		c.remain -= int64(n)
		c.leftover = n < len(b)
		l.deliver(c, b[:n], now)
		if !c.closed && c.remain == 0 {
			l.bodyEnd(c, now)
		}
	case fChunked:
		for len(b) > 0 && !c.closed {
			seg, rest, end, ok := c.chunk(b)
			if !ok {
				l.fail(c, errMalformedHTTP)
				return
			}
			if len(seg) > 0 {
				l.deliver(c, seg, now)
			}
			b = rest
			if end {
				c.leftover = len(rest) > 0
				if !c.closed {
					l.bodyEnd(c, now)
				}
				return
			}
		}
	}
}

// chunk decodes chunked framing from b: it returns the next piece of
// chunk data (possibly empty), the bytes after it, and whether the body's
// end (the last chunk and the trailers) was reached.
func (c *rconn) chunk(b []byte) (seg, rest []byte, end, ok bool) {
	for len(b) > 0 {
		switch c.cst {
		case chData:
			n := int(min(int64(len(b)), c.remain))
			c.remain -= int64(n)
			if c.remain == 0 {
				c.cst = chDataEnd
			}
			return b[:n], b[n:], false, true
		case chSize, chExt:
			x := b[0]
			b = b[1:]
			if x == '\n' {
				if c.digits == 0 {
					return nil, nil, false, false
				}
				if c.remain == 0 {
					c.cst, c.lineLen = chTrailer, 0
				} else {
					c.cst = chData
				}
				continue
			}
			if c.cst == chExt || x == '\r' {
				continue
			}
			switch {
			case '0' <= x && x <= '9':
				c.remain = c.remain<<4 | int64(x-'0')
			case 'a' <= x && x <= 'f':
				c.remain = c.remain<<4 | int64(x-'a'+10)
			case 'A' <= x && x <= 'F':
				c.remain = c.remain<<4 | int64(x-'A'+10)
			case x == ';' || x == ' ' || x == '\t':
				c.cst = chExt
				continue
			default:
				return nil, nil, false, false
			}
			if c.digits++; c.digits > 15 {
				return nil, nil, false, false
			}
		case chDataEnd:
			x := b[0]
			b = b[1:]
			switch x {
			case '\r':
			case '\n':
				c.cst, c.digits, c.remain = chSize, 0, 0
			default:
				return nil, nil, false, false
			}
		case chTrailer:
			x := b[0]
			b = b[1:]
			switch x {
			case '\n':
				if c.lineLen == 0 {
					return nil, b, true, true
				}
				c.lineLen = 0
			case '\r':
			default:
				c.lineLen++
			}
		}
	}
	return nil, b, false, true
}

// deliver hands body bytes to the request, if one still wants them.
func (l *reactor) deliver(c *rconn, b []byte, now int64) {
	req := c.req
	if req == nil || len(b) == 0 {
		return
	}
	if c.status != http.StatusOK {
		if room := rawErrBody - len(c.errBody); room > 0 {
			c.errBody = append(c.errBody, b[:min(room, len(b))]...)
		}
		return
	}
	if req.st.feed(b, now) {
		return
	}
	// [DONE] or a failing chunk: the request ends here.
	c.req = nil
	l.active--
	if req.st.failed {
		l.closeConn(c)
	} else {
		c.state = csDraining
		c.dialNs = now // (since when it drains)
		l.drains++
	}
	l.finish(req, nil)
}

// bodyEnd is the end of a response body: the request ends, and the
// connection is kept for the next one if the server allows it.
func (l *reactor) bodyEnd(c *rconn, now int64) {
	req := c.req
	if req != nil {
		c.req = nil
		l.active--
	}
	if c.state == csDraining {
		l.drains--
		c.state = csBody
	}
	if l.t.keepAlive && c.keepAlive && !c.leftover {
		c.state = csIdle
		c.reused = true
		c.idleAt = len(l.idle)
		l.idle = append(l.idle, c)
	} else {
		l.closeConn(c)
	}
	if req != nil {
		l.endBody(req, now)
	}
}

func (l *reactor) endBody(req *rawReq, now int64) {
	c := req.conn
	if c != nil && c.status != http.StatusOK {
		fail(req.rec, FailHTTPStatus, fmt.Sprintf("HTTP %d: %s", c.status, strings.TrimSpace(string(c.errBody))))
	} else {
		req.st.eof(now)
	}
	l.finish(req, nil)
}

// fail ends the connection and its request with err.
func (l *reactor) fail(c *rconn, err error) {
	req := c.req
	l.closeConn(c)
	if req != nil {
		l.finish(req, err)
	}
}

func (l *reactor) closeConn(c *rconn) {
	if c.closed {
		return
	}
	c.closed = true
	switch c.state {
	case csConnecting:
		l.dialing--
	case csDraining:
		l.drains--
	}
	if c.req != nil {
		c.req = nil
		l.active--
	}
	if c.idleAt >= 0 {
		last := l.idle[len(l.idle)-1]
		l.idle[c.idleAt] = last
		last.idleAt = c.idleAt
		l.idle = l.idle[:len(l.idle)-1]
		c.idleAt = -1
	}
	if c.fd < len(l.conns) && l.conns[c.fd] == c {
		l.conns[c.fd] = nil
	}
	unix.Close(c.fd)
}

// finish ends req: its goroutine takes over the Record again.
func (l *reactor) finish(req *rawReq, err error) {
	if req.finished {
		return
	}
	if c := req.conn; c != nil && c.req == req {
		c.req = nil
		l.active--
	}
	req.finished = true
	req.err = err
	req.rec.EndNs = clock.Fast()
	close(req.done)
}
