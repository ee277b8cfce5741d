package transport

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
)

// completionEvents is a llama.cpp completions stream of n tokens: the
// tokens, a last chunk with empty text, a finish_reason and the usage,
// then [DONE] (loadgen's llamacpp_test.go has the chat ones too).
func completionEvents(n, prompt int) []string {
	var evs []string
	for i := 0; i < n; i++ {
		evs = append(evs, fmt.Sprintf(`{"choices":[{"text":" w%d","index":0,"logprobs":null,"finish_reason":null}],"created":1,"model":"tiny","object":"text_completion","id":"cmpl-x"}`, i))
	}
	usage := fmt.Sprintf(`"usage":{"completion_tokens":%d,"prompt_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":0}},"timings":{"predicted_n":%d}`, n, prompt, n+prompt, n)
	evs = append(evs, `{"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],"created":1,"model":"tiny","system_fingerprint":"b1","object":"text_completion",`+usage+`,"id":"cmpl-x"}`)
	return append(evs, "[DONE]")
}

func transports() []bool { return []bool{false, true} }

func transportName(netHTTP bool) string {
	if netHTTP {
		return "nethttp"
	}
	return "raw"
}

// rawServer (as loadgen's llamacpp_test.go) is a test HTTP/1.1 server on a plain listener, for behaviours
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
