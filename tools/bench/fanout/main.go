// Command fanout is the live view's scale workload: a fast streaming
// server and a client that keeps many concurrent streaming connections on
// it (loopback), so that the live view's cost per gap and per span and its
// memory can be read at 100, 1,000 and 10,000 connections with the same
// number of gaps a second (tools/bench/scale.sh).
//
//	fanout serve  --addr 127.0.0.1:8600 [--thread-per-conn]
//	fanout client --addr 127.0.0.1:8600 --conns 1000 --rate 2000 --tokens 8 --duration 30s
//
// The server answers POST /v1/completions with an SSE stream of the
// requested tokens ("max_tokens", and "interval_ms" between two), one
// write each, then "data: [DONE]". Its connections share the Go runtime's
// few threads, or, with --thread-per-conn, each stream runs on a thread
// of its own (runtime.LockOSThread), as a thread-per-connection server's:
// the walk of a gap then covers only its own connection's work. The client opens --conns connections,
// each asking for streams one after another (keep-alive) with the
// interval that makes --rate tokens a second over all connections, their
// starts spread over one interval; at the end it prints one JSON line
// with the streams, tokens and failures.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fanout serve|client [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "client":
		err = client(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q: serve or client", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
}

type request struct {
	MaxTokens  int     `json:"max_tokens"`
	IntervalMs float64 `json:"interval_ms"`
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8600", "listen address")
	perConn := fs.Bool("thread-per-conn", false, "each stream on a thread of its own")
	_ = fs.Parse(args)
	if *perConn {
		debug.SetMaxThreads(30000)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "fanout: serving on %s pid %d\n", ln.Addr(), os.Getpid())
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		if *perConn {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
		}
		stream(w, r)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}

func stream(w http.ResponseWriter, r *http.Request) {
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.MaxTokens <= 0 {
		http.Error(w, "want {\"max_tokens\": N, \"interval_ms\": MS}", http.StatusBadRequest)
		return
	}
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	if fl != nil {
		fl.Flush()
	}
	iv := time.Duration(req.IntervalMs * float64(time.Millisecond))
	t := time.NewTimer(iv)
	defer t.Stop()
	for i := range req.MaxTokens {
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
		t.Reset(iv)
		if _, err := fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\" tok%d\"}]}\n\n", i); err != nil {
			return
		}
		if fl != nil {
			fl.Flush()
		}
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

func client(args []string) error {
	fs := flag.NewFlagSet("client", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8600", "the server")
	conns := fs.Int("conns", 100, "concurrent connections")
	rate := fs.Float64("rate", 2000, "tokens a second over all connections")
	tokens := fs.Int("tokens", 8, "tokens a stream")
	dur := fs.Duration("duration", 30*time.Second, "how long")
	_ = fs.Parse(args)
	if *conns <= 0 || *rate <= 0 || *tokens <= 0 {
		return fmt.Errorf("--conns, --rate and --tokens must be above 0")
	}
	ivMs := float64(*conns) / *rate * 1000
	body, _ := json.Marshal(request{MaxTokens: *tokens, IntervalMs: ivMs})
	ctx, cancel := context.WithTimeout(context.Background(), *dur)
	defer cancel()
	sig, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var streams, toks, fails atomic.Int64
	var lastErr atomic.Value
	var wg sync.WaitGroup
	for i := range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Starts spread over one interval.
			select {
			case <-sig.Done():
				return
			case <-time.After(time.Duration(float64(i) / float64(*conns) * ivMs * float64(time.Millisecond))):
			}
			for sig.Err() == nil {
				n, err := oneConn(sig, *addr, body, &streams)
				toks.Add(int64(n))
				if err != nil && sig.Err() == nil {
					fails.Add(1)
					lastErr.Store(err.Error())
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	out := map[string]any{"conns": *conns, "rate": *rate, "interval_ms": ivMs, "streams": streams.Load(), "tokens": toks.Load(), "failures": fails.Load()}
	if e, ok := lastErr.Load().(string); ok {
		out["last_error"] = e
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// oneConn dials the server and asks for streams on the connection one
// after another until ctx is done or the connection fails; it returns the
// tokens read.
func oneConn(ctx context.Context, addr string, body []byte, streams *atomic.Int64) (int, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	go func() { <-ctx.Done(); c.Close() }()
	br := bufio.NewReaderSize(c, 4096)
	req := fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
	n := 0
	for ctx.Err() == nil {
		if _, err := io.WriteString(c, req); err != nil {
			return n, err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return n, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return n, fmt.Errorf("status %s", resp.Status)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Bytes()
			if !bytes.HasPrefix(line, []byte("data: ")) {
				continue
			}
			if strings.HasPrefix(string(line[6:]), "[DONE]") {
				break
			}
			n++
		}
		// The chunked body's end.
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err := sc.Err(); err != nil {
			return n, err
		}
		streams.Add(1)
	}
	return n, nil
}
