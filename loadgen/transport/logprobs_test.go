package transport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
)

const (
	completionsLogprobsChunk = `{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" Paris","logprobs":{"text_offset":[0],"token_logprobs":[-0.3],"tokens":[" Paris"],"top_logprobs":[{" Paris":-0.3," Lyon":-2.1," the":-2.5}]},"finish_reason":null,"stop_reason":null}]}`
	chatRoleChunk            = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`
	chatLogprobsChunk        = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":{"content":[{"token":"Hi","logprob":-0.5,"bytes":[72,105],"top_logprobs":[{"token":"Hello","logprob":-1.2,"bytes":[72]},{"token":"Hi","logprob":-0.5,"bytes":[72,105]}]}],"refusal":null},"finish_reason":null}]}`
)

func TestParseFirstTokenLogprobs(t *testing.T) {
	for _, tc := range []struct {
		name, chunk string
		want        []float32
	}{
		{"completions", completionsLogprobsChunk, []float32{-0.3, -2.1, -2.5}},
		{"chat", chatLogprobsChunk, []float32{-0.5, -1.2}},
		{"chat role chunk", chatRoleChunk, nil},
		{"completions without", benchChunk, nil},
		{"chat without top", `{"choices":[{"delta":{"content":"a"},"logprobs":{"content":[{"token":"a","logprob":-1,"top_logprobs":[]}]}}]}`, nil},
		{"completions null top", `{"choices":[{"text":"a","logprobs":{"tokens":["a"],"token_logprobs":[-1],"top_logprobs":null}}]}`, nil},
		{"not JSON", `{"choices":[{"top_logprobs":`, nil},
	} {
		got := parseFirstTokenLogprobs([]byte(tc.chunk))
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The stream keeps the first token's logprobs, after a role-only chunk.
func TestStreamFirstTokenLogprobs(t *testing.T) {
	later := strings.Replace(chatLogprobsChunk, `"logprob":-1.2`, `"logprob":-0.5`, 1)
	body := "data: " + chatRoleChunk + "\n\ndata: " + chatLogprobsChunk + "\n\ndata: " + later + "\n\ndata: [DONE]\n\n"
	var rec Record
	var s streamState
	s.reset(&rec, true)
	s.feed([]byte(body), 1)
	s.complete()
	if !rec.Success || rec.FirstToken == nil {
		t.Fatalf("success %v, first token %+v: %s", rec.Success, rec.FirstToken, rec.Error)
	}
	if fmt.Sprint(rec.FirstToken.Top) != "[-0.5 -1.2]" || math.Abs(rec.FirstToken.Entropy-NormalizedEntropy([]float32{-0.5, -1.2})) > 1e-12 {
		t.Errorf("first token %+v", rec.FirstToken)
	}
	b, _ := json.Marshal(&rec)
	if !bytes.Contains(b, []byte(`"first_token_logprobs":{"top":[-0.5,-1.2],"entropy":`)) {
		t.Errorf("record JSON: %s", b)
	}
}

func TestLogprobsBody(t *testing.T) {
	extra := map[string]any{"seed": 3}
	c := Options{Endpoint: EndpointCompletions, Logprobs: 5, ExtraBody: extra}
	if got := fmt.Sprint(c.logprobsBody()); got != "map[logprobs:5 seed:3]" {
		t.Errorf("completions: %s", got)
	}
	c.Endpoint = EndpointChat
	if got := fmt.Sprint(c.logprobsBody()); got != "map[logprobs:true seed:3 top_logprobs:5]" {
		t.Errorf("chat: %s", got)
	}
	if len(extra) != 1 {
		t.Errorf("ExtraBody changed: %v", extra)
	}
	c.Logprobs = 0
	if got := c.logprobsBody(); fmt.Sprint(got) != "map[seed:3]" {
		t.Errorf("off: %v", got)
	}
}
