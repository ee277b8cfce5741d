package loadgen

import (
	"bufio"
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// Every count, length, rate and duration of the load options is checked
// against its range, and the error names the flag and the range.
func TestValidateRanges(t *testing.T) {
	base := func() Config {
		c := DefaultConfig()
		c.Target.URL = "http://127.0.0.1:1"
		return c
	}
	if c := base(); c.Validate() != nil {
		t.Fatalf("the defaults are refused: %v", c.Validate())
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"rate 0", func(c *Config) { c.Scenario.Rate = 0 }, "--rate 0: give a rate in requests/s above 0, or inf"},
		{"rate -1", func(c *Config) { c.Scenario.Rate = -1 }, "--rate -1: give a rate"},
		{"rate NaN", func(c *Config) { c.Scenario.Rate = math.NaN() }, "--rate NaN"},
		{"burstiness 0", func(c *Config) { c.Scenario.Burstiness = 0 }, "--burstiness 0: give a gamma shape above 0"},
		{"num-requests", func(c *Config) { c.Scenario.NumRequests = -1 }, "--num-requests -1: give 0"},
		{"max-concurrency", func(c *Config) { c.Scenario.MaxConcurrency = -2 }, "--max-concurrency -2"},
		{"warmup", func(c *Config) { c.Scenario.Warmup = -1 }, "--warmup -1"},
		{"output-len -5", func(c *Config) { c.Scenario.Dataset.OutputLen = -5 }, "--output-len -5: give 1 or more tokens"},
		{"output-len 0", func(c *Config) { c.Scenario.Dataset.OutputLen = 0 }, "--output-len 0: give 1 or more tokens"},
		{"input-len 0", func(c *Config) { c.Scenario.Dataset.InputLen = 0 }, "--input-len 0: give 1 or more tokens"},
		{"duration", func(c *Config) { c.Scenario.Duration = -time.Second }, "--duration -1s: give 0"},
		{"timeout", func(c *Config) { c.Target.Timeout = -time.Second }, "--timeout -1s: give 0 (none) or more"},
		{"stall-timeout", func(c *Config) { c.Target.StallTimeout = -time.Second }, "--stall-timeout -1s: give 0 (never) or more"},
		{"header-timeout", func(c *Config) { c.Target.HeaderTimeout = -time.Second }, "--header-timeout -1s"},
		{"think-time", func(c *Config) { c.Scenario.Dataset.Multiturn.ThinkTime = -time.Second }, "--think-time -1s"},
		{"range-ratio", func(c *Config) { c.Scenario.Dataset.RangeRatio = 1 }, "--range-ratio 1: give a fraction in [0, 1)"},
		{"sharegpt-output-len", func(c *Config) { c.Scenario.Dataset.ShareGPTOutputLen = -1 }, "--sharegpt-output-len -1"},
		{"rag-passages", func(c *Config) { c.Scenario.Dataset.RAG.Passages = -1 }, "--rag-passages -1"},
		{"no target", func(c *Config) { c.Target.URL = "" }, "--target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.mod(&c)
			err := c.Validate()
			var ce *ConfigError
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ce) {
				t.Errorf("error %v (%T), want a ConfigError saying %q", err, err, tc.want)
			}
		})
	}
	// What 0 means where it means something.
	c := base()
	c.Target.Timeout, c.Target.StallTimeout, c.Target.HeaderTimeout, c.Scenario.Rate = 0, 0, 0, math.Inf(1)
	if err := c.Validate(); err != nil {
		t.Errorf("timeouts of 0 (none): %v", err)
	}
	// A trace or the Go API's requests carry their own lengths.
	c = base()
	c.Scenario.Dataset.OutputLen, c.Scenario.Requests = 0, []Request{{Prompt: "x", OutputLen: 2}}
	if err := c.Validate(); err != nil {
		t.Errorf("requests of the Go API without --output-len: %v", err)
	}
	if d := DefaultConfig(); d.Target.StallTimeout != time.Minute || d.Target.HeaderTimeout != 5*time.Minute {
		t.Errorf("default stall timeout %v, header timeout %v", d.Target.StallTimeout, d.Target.HeaderTimeout)
	}
}

// listenSilent accepts connections, reads each request's head and hands
// the connection to serve.
func listenSilent(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					l, err := br.ReadString('\n')
					if err != nil || l == "\r\n" {
						break
					}
				}
				serve(c)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// A server that never finishes its headers (it trickles a header line
// faster than the stall timeout) fails the request at the header timeout,
// on both transports; a silent one fails it at the stall timeout.
func TestHeaderAndStallTimeouts(t *testing.T) {
	trickle := listenSilent(t, func(c net.Conn) {
		c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"))
		for i := 0; i < 200; i++ {
			time.Sleep(20 * time.Millisecond)
			if _, err := c.Write([]byte("X-Pad: x\r\n")); err != nil {
				return
			}
		}
	})
	silent := listenSilent(t, func(c net.Conn) { time.Sleep(4 * time.Second) })
	// (net/http shows no byte before the whole head: there the stall
	// timer runs until the headers are in, and it is off for the trickle.)
	const stall = 300 * time.Millisecond
	for _, tc := range []struct {
		name, url string
		netHTTP   bool
		stall     time.Duration
		want      string
	}{
		{"trickle raw", trickle, false, stall, transport.FailHeaderTimeout},
		{"trickle net/http", trickle, true, 0, transport.FailHeaderTimeout},
		{"silent raw", silent, false, stall, transport.FailStall},
		{"silent net/http", silent, true, stall, transport.FailStall},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := transport.NewClient(transport.Options{URL: tc.url, Endpoint: transport.EndpointCompletions, Model: "m", NetHTTP: tc.netHTTP,
				Timeout: 30 * time.Second, StallTimeout: tc.stall, HeaderTimeout: 600 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var rec Record
			start := time.Now()
			c.Do(context.Background(), &Request{Prompt: "x", OutputLen: 2}, &rec)
			took := time.Since(start)
			if rec.Success || rec.Failure != tc.want || took > 3*time.Second {
				t.Errorf("failure %q (%s) after %v, want %q within the timeout", rec.Failure, rec.Error, took, tc.want)
			}
		})
	}
}
