package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bpfbench/bpfbench/loadgen/dataset"
	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// rawServer is a test HTTP/1.1 server on a plain listener, for behaviours
// net/http/httptest cannot reproduce (closing a kept-alive connection
// after reading a request). serve is called for every request with the
// connection's request count (0 for the first); it returns false to stop
// serving the connection.
type rawServer struct {
	url    string
	conns  atomic.Int32
	mu     sync.Mutex
	bodies []string
}

func startRawServer(t *testing.T, serve func(c net.Conn, req *http.Request, body []byte, n int) bool) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{url: "http://" + ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 0; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, _ := io.ReadAll(req.Body)
					s.mu.Lock()
					s.bodies = append(s.bodies, string(body))
					s.mu.Unlock()
					if !serve(c, req, body, n) {
						return
					}
				}
			}()
		}
	}()
	return s
}

// writeSSE writes a keep-alive chunked SSE response, one HTTP chunk per event.
func writeSSE(w io.Writer, events []string) error {
	bw := bufio.NewWriter(w)
	bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n")
	for _, ev := range events {
		msg := "data: " + ev + "\n\n"
		fmt.Fprintf(bw, "%x\r\n%s\r\n", len(msg), msg)
	}
	bw.WriteString("0\r\n\r\n")
	return bw.Flush()
}

// llamaEvents is a llama.cpp server stream of n tokens (tools/server,
// server-task.cpp): the tokens, then for completions a last chunk with
// empty text, a finish_reason and the usage; for chat a last chunk with an
// empty delta and a finish_reason, then a usage-only chunk (choices: []);
// then [DONE]. chatUsageInFinish puts the usage in the chat finish chunk
// instead, as older versions did.
func llamaEvents(chat bool, n, prompt int, chatUsageInFinish ...bool) []string {
	var evs []string
	for i := 0; i < n; i++ {
		if chat {
			evs = append(evs, fmt.Sprintf(`{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" w%d"}}],"created":1,"id":"chatcmpl-x","model":"tiny","object":"chat.completion.chunk"}`, i))
		} else {
			evs = append(evs, fmt.Sprintf(`{"choices":[{"text":" w%d","index":0,"logprobs":null,"finish_reason":null}],"created":1,"model":"tiny","object":"text_completion","id":"cmpl-x"}`, i))
		}
	}
	usage := fmt.Sprintf(`"usage":{"completion_tokens":%d,"prompt_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":0}},"timings":{"predicted_n":%d}`, n, prompt, n+prompt, n)
	switch {
	case !chat:
		evs = append(evs, `{"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],"created":1,"model":"tiny","system_fingerprint":"b1","object":"text_completion",`+usage+`,"id":"cmpl-x"}`)
	case len(chatUsageInFinish) > 0 && chatUsageInFinish[0]:
		evs = append(evs, `{"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":1,"id":"chatcmpl-x","model":"tiny","object":"chat.completion.chunk",`+usage+`}`)
	default:
		evs = append(evs, `{"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":1,"id":"chatcmpl-x","model":"tiny","system_fingerprint":"b1","object":"chat.completion.chunk"}`,
			`{"choices":[],"created":1,"id":"chatcmpl-x","model":"tiny","system_fingerprint":"b1","object":"chat.completion.chunk",`+usage+`}`)
	}
	return append(evs, "[DONE]")
}

func transports() []bool { return []bool{false, true} }

func transportName(netHTTP bool) string {
	if netHTTP {
		return "nethttp"
	}
	return "raw"
}

// The last chunk of a llama.cpp stream carries a finish_reason, no text
// and (completions) the final usage: it is not a token, and its arrival is
// not a token's.
func TestLlamaCppFinalUsageChunkIsNotAToken(t *testing.T) {
	const tokens = 96
	for _, shape := range []struct{ chat, usageInFinish bool }{{false, false}, {true, false}, {true, true}} {
		chat := shape.chat
		srv := startRawServer(t, func(c net.Conn, _ *http.Request, _ []byte, _ int) bool {
			return writeSSE(c, llamaEvents(chat, tokens, 8, shape.usageInFinish)) == nil
		})
		for _, netHTTP := range transports() {
			name := fmt.Sprintf("chat=%v,usage-in-finish=%v/%s", chat, shape.usageInFinish, transportName(netHTTP))
			cfg := DefaultConfig()
			cfg.Target.URL = srv.url
			cfg.Target.NetHTTP = netHTTP
			cfg.Scenario.NumRequests = 3
			cfg.Scenario.MaxConcurrency = 1
			cfg.Scenario.Dataset.OutputLen = tokens
			if chat {
				cfg.Target.Endpoint = transport.EndpointChat
			}
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Metrics.Completed != 3 {
				t.Fatalf("%s: %d completed: %v", name, res.Metrics.Completed, res.Failures())
			}
			for _, r := range res.Records {
				if len(r.ChunkNs) != tokens || r.OutputTokens != tokens || r.TokenSource != transport.TokensFromUsage {
					t.Errorf("%s: %d chunks timestamped, %d output tokens from %s; want %d from usage", name, len(r.ChunkNs), r.OutputTokens, r.TokenSource, tokens)
				}
				if r.UsagePromptTokens != 8 {
					t.Errorf("%s: usage prompt tokens %d, want 8", name, r.UsagePromptTokens)
				}
				if !chat && r.LastNs != r.ChunkNs[len(r.ChunkNs)-1] {
					t.Errorf("%s: last timestamp %d is not the last token's %d", name, r.LastNs, r.ChunkNs[len(r.ChunkNs)-1])
				}
			}
			if m := res.Metrics; m.TotalOutput != 3*tokens || m.ITL.N != 3*(tokens-1) {
				t.Errorf("%s: %d output tokens, %d ITL gaps; want %d and %d", name, m.TotalOutput, m.ITL.N, 3*tokens, 3*(tokens-1))
			}
		}
	}
}

// llama.cpp's server advertises keep-alive but closes the connection after
// a stream: a request that finds its kept-alive connection closed before
// any response byte is sent again once, on a new connection, and counted.
func TestStaleKeepAliveConnectionRetried(t *testing.T) {
	for _, reset := range []bool{false, true} {
		var closedAt sync.Map // request count -> when the server dropped it
		var dropped atomic.Int32
		srv := startRawServer(t, func(c net.Conn, _ *http.Request, _ []byte, n int) bool {
			if n > 0 {
				// The next request on a kept-alive connection: drop it
				// without a byte, by FIN or by RST.
				if reset {
					c.(*net.TCPConn).SetLinger(0)
				}
				closedAt.Store(dropped.Add(1), Mono())
				return false
			}
			return writeSSE(c, llamaEvents(false, 5, 4)) == nil
		})
		for _, netHTTP := range transports() {
			name := fmt.Sprintf("reset=%v/%s", reset, transportName(netHTTP))
			dropped.Store(0)
			srv.conns.Store(0)
			cfg := DefaultConfig()
			cfg.Target.URL = srv.url
			cfg.Target.NetHTTP = netHTTP
			cfg.Scenario.NumRequests = 4
			cfg.Scenario.MaxConcurrency = 1
			cfg.Scenario.Dataset.OutputLen = 5
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Metrics.Completed != 4 {
				t.Fatalf("%s: %d completed: %v", name, res.Metrics.Completed, res.Failures())
			}
			// The raw transport keeps the retry's connection, which the
			// next request finds closed in turn; net/http retries on a
			// connection of its own that it does not keep, so every
			// other request finds a stale one.
			want := []bool{false, true, true, true}
			if netHTTP {
				want = []bool{false, true, false, true}
			}
			retries := 0
			for _, w := range want {
				if w {
					retries++
				}
			}
			if got := res.Metrics.RetriedStaleConns; got != retries {
				t.Errorf("%s: %d retried stale connections, want %d", name, got, retries)
			}
			if got := srv.conns.Load(); got != 4 {
				t.Errorf("%s: %d connections, want 4 (one for the first request, one per drop)", name, got)
			}
			last := int64(0)
			drop := int32(0)
			for i, r := range res.Records {
				if r.OutputTokens != 5 || len(r.ChunkNs) != 5 {
					t.Errorf("%s: request %d: %d tokens in %d chunks", name, i, r.OutputTokens, len(r.ChunkNs))
				}
				if r.StartNs <= last {
					t.Errorf("%s: request %d starts before the previous one ended", name, i)
				}
				last = r.EndNs
				if r.RetriedStaleConn != want[i] {
					t.Errorf("%s: request %d: retried %v, want %v", name, i, r.RetriedStaleConn, want[i])
				}
				if !r.RetriedStaleConn {
					continue
				}
				// The timing is the retry's: it starts after the server
				// dropped the stale connection, on a new connection.
				drop++
				v, _ := closedAt.Load(drop)
				if at, _ := v.(int64); r.StartNs <= at || r.ConnReused {
					t.Errorf("%s: request %d: start %d, stale connection dropped at %d, reused %v", name, i, r.StartNs, at, r.ConnReused)
				}
			}
			b, err := json.Marshal(res.JSON())
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), fmt.Sprintf(`"retried_stale_connections":%d`, retries)) {
				t.Errorf("%s: result JSON without retried_stale_connections %d", name, retries)
			}
		}
	}
}

// Requests carry ignore_eos: true when asked (--ignore-eos, and always for
// the random dataset, as vLLM's client does), so that output lengths are
// the ones asked for.
func TestIgnoreEOSSent(t *testing.T) {
	srv := startRawServer(t, func(c net.Conn, _ *http.Request, _ []byte, _ int) bool {
		return writeSSE(c, llamaEvents(false, 2, 4)) == nil
	})
	path := filepath.Join(t.TempDir(), "prompts.jsonl")
	if err := os.WriteFile(path, []byte(`{"prompt":"hello there","output_len":2}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dataset   string
		ignoreEOS bool
		want      bool
	}{{dataset.Random, false, true}, {dataset.JSONL, false, false}, {dataset.JSONL, true, true}} {
		for _, netHTTP := range transports() {
			srv.mu.Lock()
			srv.bodies = nil
			srv.mu.Unlock()
			cfg := DefaultConfig()
			cfg.Target.URL = srv.url
			cfg.Target.NetHTTP = netHTTP
			cfg.Scenario.NumRequests = 2
			cfg.Scenario.Dataset.Name = tc.dataset
			cfg.Scenario.Dataset.Path = path
			cfg.Scenario.Dataset.OutputLen = 2
			cfg.Target.IgnoreEOS = tc.ignoreEOS
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Metrics.Completed != 2 {
				t.Fatalf("%v: %v", tc, res.Failures())
			}
			srv.mu.Lock()
			for _, b := range srv.bodies {
				var body map[string]any
				if err := json.Unmarshal([]byte(b), &body); err != nil {
					t.Fatalf("request body %q: %v", b, err)
				}
				if got := body["ignore_eos"] == true; got != tc.want {
					t.Errorf("%s %v: ignore_eos in %s: %v, want %v", transportName(netHTTP), tc, b, got, tc.want)
				}
				if body["max_tokens"] != 2.0 || body["stream"] != true {
					t.Errorf("%s: body %s", transportName(netHTTP), b)
				}
			}
			srv.mu.Unlock()
		}
	}
}
