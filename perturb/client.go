package perturb

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// Client is a streaming client that reads its response slowly (ReadRate
// bytes per second) or stops reading after StopAfter, on a connection
// with a small receive buffer, so that the server's side of it fills up
// and the peer window closes (receive backpressure).
type Client struct {
	// Target is the server's base URL (http://HOST:PORT).
	Target    string
	ReadRate  int
	StopAfter time.Duration
	// RcvBuf is the socket's receive buffer (default 4096 bytes).
	RcvBuf int
	// Model (default: the first one the server lists) and OutputLen, the
	// max_tokens of each request (default 2048).
	Model     string
	OutputLen int
	// Headers are sent with every request (--header), with
	// $OPENAI_API_KEY as the load generator sends it
	// (transport.WithAPIKey).
	Headers http.Header
}

// ClientReport is what a slow client achieved.
type ClientReport struct {
	Local     string  `json:"local"`
	Remote    string  `json:"remote"`
	WallS     float64 `json:"wall_seconds"`
	Requests  int     `json:"requests"`
	BytesRead int64   `json:"bytes_read"`
	// ReadRate is the bytes read per wall second.
	ReadRate float64 `json:"read_bytes_per_second"`
	// StoppedS is when reading stopped (StopAfter), seconds from the start.
	StoppedS float64 `json:"stopped_reading_after_seconds,omitempty"`
	// ServerRwndLimitedS is how long the server's side of the connection
	// was limited by this client's receive window (tcp_info, local
	// servers only; -1 when unknown).
	ServerRwndLimitedS float64 `json:"server_rwnd_limited_seconds"`
}

// Validate checks the settings and fills defaults.
func (c *Client) Validate() error {
	if c.Target == "" {
		return errors.New("no server: give --target http://HOST:PORT")
	}
	u, err := url.Parse(c.Target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("target %q: use http://HOST:PORT (TLS is not supported by the slow client)", c.Target)
	}
	if (c.ReadRate > 0) == (c.StopAfter > 0) {
		return errors.New("give either --read-rate BYTES_PER_SECOND or --stop-after DURATION")
	}
	if c.ReadRate < 0 || c.StopAfter < 0 {
		return errors.New("--read-rate and --stop-after must be positive")
	}
	if c.RcvBuf == 0 {
		c.RcvBuf = 4096
	}
	if c.RcvBuf < 1024 {
		return fmt.Errorf("receive buffer %d: use at least 1024 bytes", c.RcvBuf)
	}
	if c.OutputLen == 0 {
		c.OutputLen = 2048
	}
	return nil
}

// firstModel asks the server which model it serves.
func firstModel(ctx context.Context, base string, h http.Header) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/v1/models", nil)
	if err != nil {
		return "", err
	}
	for k, vs := range h {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("asking %s for its models: %w", base, err)
	}
	defer resp.Body.Close()
	var m struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || len(m.Data) == 0 {
		return "", fmt.Errorf("%s/v1/models lists no model: give --model", base)
	}
	return m.Data[0].ID, nil
}

// Run streams completions from the server, reading them slowly, until ctx
// is done, then reports.
func (c Client) Run(ctx context.Context) (rep ClientReport, err error) {
	if err := c.Validate(); err != nil {
		return ClientReport{}, err
	}
	hdr := transport.WithAPIKey(c.Headers)
	if c.Model == "" {
		m, err := firstModel(ctx, c.Target, hdr)
		if err != nil {
			return ClientReport{}, err
		}
		c.Model = m
	}
	u, _ := url.Parse(c.Target)
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	d := rcvBufDialer(c.RcvBuf)
	rep = ClientReport{ServerRwndLimitedS: -1}
	start := time.Now()
	defer func() {
		rep.WallS = time.Since(start).Seconds()
		if rep.WallS > 0 {
			rep.ReadRate = float64(rep.BytesRead) / rep.WallS
		}
	}()
	req := c.request(u, hdr)
	buf := make([]byte, 1024)
	for ctx.Err() == nil {
		conn, err := d.DialContext(ctx, "tcp", host)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return rep, fmt.Errorf("connecting to %s: %w", host, err)
		}
		if err := c.exchange(ctx, conn, req, buf, start, &rep); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// rcvBufDialer returns a dialer whose sockets have a receive buffer of
// rcvBuf bytes.
func rcvBufDialer(rcvBuf int) net.Dialer {
	return net.Dialer{Timeout: 10 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, rcvBuf)
		}); err != nil {
			return err
		}
		return serr
	}}
}

// request returns the HTTP/1.1 request for one streamed completion, with
// the extra headers hdr.
func (c Client) request(u *url.URL, hdr http.Header) string {
	body, _ := json.Marshal(map[string]any{
		"model": c.Model, "prompt": "bpfbench slow client", "max_tokens": c.OutputLen,
		"stream": true, "ignore_eos": true,
	})
	var extra strings.Builder
	for k, vs := range hdr {
		for _, v := range vs {
			fmt.Fprintf(&extra, "%s: %s\r\n", http.CanonicalHeaderKey(k), v)
		}
	}
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n%s\r\n%s",
		strings.TrimRight(u.Path, "/")+"/v1/completions", u.Host, len(body), extra.String(), body)
}

// exchange sends req on conn, reads the streamed answer slowly into rep and
// closes conn. It returns nil when ctx ends the exchange.
func (c Client) exchange(ctx context.Context, conn net.Conn, req string, buf []byte, start time.Time, rep *ClientReport) error {
	rep.Requests++
	rep.Local, rep.Remote = conn.LocalAddr().String(), conn.RemoteAddr().String()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	io.WriteString(conn, req)
	r := bufio.NewReaderSize(conn, 1024)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		stop()
		conn.Close()
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("reading the response of %s: %w", c.Target, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		stop()
		conn.Close()
		return fmt.Errorf("%s answered HTTP %d: %s", c.Target, resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	c.readSlowly(ctx, resp.Body, buf, start, rep)
	if rep.StoppedS > 0 {
		// Stopped reading: hold the connection open until the end.
		<-ctx.Done()
	}
	if t, err := serverRwndLimited(conn); err == nil {
		if rep.ServerRwndLimitedS < 0 {
			rep.ServerRwndLimitedS = 0
		}
		rep.ServerRwndLimitedS += t.Seconds()
	}
	stop()
	resp.Body.Close()
	conn.Close()
	return nil
}

// readSlowly reads body into buf at c.ReadRate bytes a second until it
// ends, ctx is done or c.StopAfter has passed since start, counting the
// bytes in rep.
func (c Client) readSlowly(ctx context.Context, body io.Reader, buf []byte, start time.Time, rep *ClientReport) {
	streamStart := time.Now()
	for ctx.Err() == nil {
		if c.StopAfter > 0 && time.Since(start) >= c.StopAfter {
			if rep.StoppedS == 0 {
				rep.StoppedS = time.Since(start).Seconds()
			}
			return
		}
		chunk := buf
		if c.ReadRate > 0 {
			chunk = buf[:min(len(buf), max(c.ReadRate/20, 1))]
			// Pace to ReadRate over this stream.
			due := streamStart.Add(time.Duration(float64(rep.BytesRead) / float64(c.ReadRate) * float64(time.Second)))
			if w := time.Until(due); w > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(w):
				}
				continue
			}
		}
		n, err := body.Read(chunk)
		rep.BytesRead += int64(n)
		if err != nil {
			return
		}
	}
}

// serverRwndLimited reads tcp_info of the server's side of conn through
// socket diag (the server must be local): the time it was limited by our
// receive window.
func serverRwndLimited(conn net.Conn) (time.Duration, error) {
	local, ok1 := conn.LocalAddr().(*net.TCPAddr)
	remote, ok2 := conn.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, errors.New("not TCP")
	}
	family := uint8(unix.AF_INET)
	if local.IP.To4() == nil {
		family = unix.AF_INET6
	}
	socks, err := netlink.SocketDiagTCPInfo(family)
	if err != nil {
		return 0, err
	}
	for _, s := range socks {
		m := s.InetDiagMsg
		if m == nil || s.TCPInfo == nil {
			continue
		}
		if m.ID.SourcePort == uint16(remote.Port) && m.ID.DestinationPort == uint16(local.Port) &&
			m.ID.Source.Equal(remote.IP) && m.ID.Destination.Equal(local.IP) {
			return time.Duration(s.TCPInfo.Rwnd_limited) * time.Microsecond, nil
		}
	}
	return 0, errors.New("the server's side of the connection is not on this host")
}
