package transport

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"testing"
)

// The chunked decoder gives the same bytes however the body is cut into reads.
func TestRawChunkedAnySplit(t *testing.T) {
	want := "data: {\"a\":1}\n\ndata: [DONE]\n\n"
	wire := "7\r\ndata: {\r\n" + fmt.Sprintf("%x;ext=1\r\n%s\r\n", len(want)-7, want[7:]) + "0\r\nTrailer: x\r\n\r\n"
	for cut := 0; cut <= len(wire); cut++ {
		var c rconn
		var got bytes.Buffer
		end := false
		for _, piece := range []string{wire[:cut], wire[cut:]} {
			b := []byte(piece)
			for len(b) > 0 && !end {
				seg, rest, e, ok := c.chunk(b)
				if !ok {
					t.Fatalf("cut %d: malformed", cut)
				}
				got.Write(seg)
				b, end = rest, e
			}
		}
		if !end || got.String() != want {
			t.Fatalf("cut %d: end %v, got %q", cut, end, got.String())
		}
	}
	var c rconn
	if _, _, _, ok := c.chunk([]byte("zz\r\n")); ok {
		t.Error("a bad chunk size was accepted")
	}
}

// Closing the client fails the requests in flight and those sent later,
// without hanging.
func TestRawClientClose(t *testing.T) {
	release := make(chan struct{})
	srv := startRawServer(t, func(c net.Conn, _ *http.Request, _ []byte, _ int) bool {
		<-release // never answer until the test ends
		return false
	})
	defer close(release)
	c, err := NewClient(Options{URL: srv.url, Endpoint: EndpointCompletions, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if c.raw == nil {
		t.Fatal("no raw transport for an http:// target")
	}
	done := make(chan Record)
	go func() {
		var rec Record
		c.Do(context.Background(), &Request{Prompt: "x", OutputLen: 2}, &rec)
		done <- rec
	}()
	for srv.conns.Load() == 0 {
		runtime.Gosched()
	}
	c.Close()
	if rec := <-done; rec.Success || rec.Failure == "" || rec.EndNs == 0 {
		t.Errorf("request in flight at Close: %+v", rec)
	}
	var rec Record
	c.Do(context.Background(), &Request{Prompt: "x", OutputLen: 2}, &rec)
	if rec.Success || rec.Failure == "" {
		t.Errorf("request after Close: %+v", rec)
	}
}

// A server that keeps the body open after [DONE]: the request ends at
// [DONE], and the connection is closed after a while instead of kept.
func TestRawDrainTimeout(t *testing.T) {
	gone := make(chan struct{})
	srv := startRawServer(t, func(c net.Conn, _ *http.Request, _ []byte, _ int) bool {
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for _, ev := range completionEvents(2, 1) {
			msg := "data: " + ev + "\n\n"
			fmt.Fprintf(c, "%x\r\n%s\r\n", len(msg), msg)
		}
		// No last chunk: wait for the client to give up on the body.
		var b [1]byte
		c.Read(b[:])
		close(gone)
		return false
	})
	c, err := NewClient(Options{URL: srv.url, Endpoint: EndpointCompletions, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var rec Record
	c.Do(context.Background(), &Request{Prompt: "x", OutputLen: 2}, &rec)
	if !rec.Success || rec.OutputTokens != 2 {
		t.Fatalf("request: %+v", rec)
	}
	<-gone // the client closed the connection
}
