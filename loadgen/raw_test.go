package loadgen

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// Bodies framed by Content-Length or by the connection's end, and error
// statuses, through the raw transport.
func TestRawFramings(t *testing.T) {
	body := strings.Join(llamaEvents(false, 3, 2), "\n\ndata: ")
	body = "data: " + body + "\n\n"
	for _, tc := range []struct {
		name, resp string
		ok         bool
	}{
		{"content-length", fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(body), body), true},
		{"close", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + body, true},
		{"continue", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body, true},
		{"status", "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 9\r\n\r\noverload!", false},
	} {
		srv := startRawServer(t, func(c net.Conn, _ *http.Request, _ []byte, _ int) bool {
			c.Write([]byte(tc.resp))
			return !strings.Contains(tc.resp, "close")
		})
		cfg := DefaultConfig()
		cfg.Target.URL = srv.url
		cfg.Scenario.NumRequests = 3
		cfg.Scenario.MaxConcurrency = 1
		cfg.Scenario.Dataset.OutputLen = 3
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !tc.ok {
			if res.Metrics.Failures[transport.FailHTTPStatus] != 3 || !strings.Contains(res.Records[0].Error, "HTTP 503: overload!") {
				t.Errorf("%s: %v %v", tc.name, res.Metrics.Failures, res.Failures())
			}
			continue
		}
		if res.Metrics.Completed != 3 || res.Metrics.TotalOutput != 9 || res.Metrics.Chunks != 9 {
			t.Errorf("%s: %d completed, %d tokens, %d chunks: %v", tc.name, res.Metrics.Completed, res.Metrics.TotalOutput, res.Metrics.Chunks, res.Failures())
		}
	}
}
