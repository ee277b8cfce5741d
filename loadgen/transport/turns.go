package transport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Conversations (loadgen's multiturn dataset): each turn sends the whole
// history so far instead of one user message, and the reply's text is
// kept for the next turn's history. The raw HTTP/1.1 transport keeps no
// text, so such a client sends through net/http (Options.NetHTTP); the
// request body is the client's own (model, max_tokens, usage, extra body)
// with its "messages" replaced by the history.

// Message is one message of a chat request.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Turns holds the turns in flight, by request id: the history each
// one sends and the response bytes it received.
type Turns struct {
	mu    sync.Mutex
	turns map[string]*Turn
}

// Turn is one registered turn: its history and its response so far.
type Turn struct {
	mu       sync.Mutex
	messages []Message
	resp     bytes.Buffer
}

// Register sends msgs as the history of the request whose x-request-id is
// id, until Unregister.
func (t *Turns) Register(id string, msgs []Message) *Turn {
	tio := &Turn{messages: msgs}
	t.mu.Lock()
	t.turns[id] = tio
	t.mu.Unlock()
	return tio
}

// Unregister forgets the turn of request id.
func (t *Turns) Unregister(id string) {
	t.mu.Lock()
	delete(t.turns, id)
	t.mu.Unlock()
}

func (t *Turns) lookup(id string) *Turn {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.turns[id]
}

// turnTransport sends a registered turn's history instead of the client's
// one user message, and keeps a copy of the response body (appended as it
// is read: the client timestamps the read before it parses, and the copy
// is parsed after the turn ends).
type turnTransport struct {
	base  http.RoundTripper
	table *Turns
}

func (t *turnTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tio := t.table.lookup(req.Header.Get("X-Request-Id"))
	if tio == nil || req.Body == nil {
		return t.base.RoundTrip(req)
	}
	orig, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	body, err := withMessages(orig, tio.messages)
	if err != nil {
		return nil, err
	}
	r2 := req.Clone(req.Context())
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	tio.mu.Lock()
	tio.resp.Reset() // a retried attempt starts again
	tio.mu.Unlock()
	resp, err := t.base.RoundTrip(r2)
	if err != nil {
		return nil, err
	}
	resp.Body = &teeBody{ReadCloser: resp.Body, io: tio}
	return resp, nil
}

// withMessages replaces the "messages" of a JSON request body.
func withMessages(body []byte, msgs []Message) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("rewriting the chat request body: %w", err)
	}
	b, err := json.Marshal(msgs)
	if err != nil {
		return nil, fmt.Errorf("encoding the conversation: %w", err)
	}
	m["messages"] = b
	return json.Marshal(m)
}

type teeBody struct {
	io.ReadCloser
	io *Turn
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.io.mu.Lock()
		b.io.resp.Write(p[:n])
		b.io.mu.Unlock()
	}
	return n, err
}

// ReplyText returns the assistant's text in a streamed chat response body:
// the concatenated content of the first choice's deltas (or message, or
// text).
func (t *Turn) ReplyText() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var p SSEParser
	p.Feed(t.resp.Bytes())
	var b strings.Builder
	add := func(data []byte) {
		if string(data) == "[DONE]" {
			return
		}
		var c struct {
			Choices []struct {
				Delta   *Message `json:"delta"`
				Message *Message `json:"message"`
				Text    string   `json:"text"`
			} `json:"choices"`
		}
		if json.Unmarshal(data, &c) != nil || len(c.Choices) == 0 {
			return
		}
		ch := c.Choices[0]
		switch {
		case ch.Delta != nil:
			b.WriteString(ch.Delta.Content)
		case ch.Message != nil:
			b.WriteString(ch.Message.Content)
		default:
			b.WriteString(ch.Text)
		}
	}
	for {
		ev, ok := p.Next()
		if !ok {
			break
		}
		add(ev.Data)
	}
	if ev, ok, partial := p.Flush(); ok && !partial {
		add(ev.Data)
	}
	return b.String()
}

// Turns returns the table of the turns in flight and routes the client's
// net/http transports through it: a request whose x-request-id is
// registered there sends the registered history.
func (c *Client) Turns() *Turns {
	t := &Turns{turns: map[string]*Turn{}}
	for _, hc := range []*http.Client{c.hc, c.fresh} {
		base := hc.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		hc.Transport = &turnTransport{base: base, table: t}
	}
	return t
}
