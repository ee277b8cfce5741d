package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The multiturn dataset: chat conversations whose every turn sends the
// whole history so far (the earlier user messages and the assistant's
// replies), as a chat application does.
//
//   - Replies: by default the server's own replies are replayed (what a
//     user's client does), so a conversation is a sequential session: its
//     next turn is sent when the previous reply has ended, plus the think
//     time. With Replies "recorded" the replies are the file's (or, for
//     the synthetic dataset, words of the turn's output length): the
//     history no longer depends on the server, and the turns are still sent
//     one after another.
//   - Arrivals: the arrival process (--rate, --burstiness) starts
//     conversations; --max-concurrency caps the conversations open at once
//     (each has at most one request in flight), so with an infinite rate it
//     is a closed loop of C users. --num-requests counts requests (turns):
//     conversations are taken until their turns add up to it, the last one
//     cut short.
//   - A failed turn ends its conversation: its record says so, and the
//     turns after it are not sent.
//   - Transport: the replies' text is needed, and the raw HTTP/1.1 client
//     keeps none, so the turns go through net/http (as https targets do);
//     the request body is the client's own (model, max_tokens, usage,
//     extra body) with its "messages" replaced by the history.

// Reply sources of the multiturn dataset.
const (
	RepliesServer   = "server"   // the server's replies, each turn after the previous reply
	RepliesRecorded = "recorded" // the file's replies (synthetic words without a file)
)

// defaultTurns is the synthetic conversation's length when none is set.
const defaultTurns = 4

// TurnRange is a number of turns per conversation: N, or MIN-MAX drawn
// uniformly with the seed. Zero is the default (4 turns for synthetic
// conversations, every turn of a file's).
type TurnRange struct{ Min, Max int }

func (t *TurnRange) String() string {
	if t == nil || t.Max == 0 {
		return ""
	}
	if t.Min == t.Max {
		return strconv.Itoa(t.Min)
	}
	return fmt.Sprintf("%d-%d", t.Min, t.Max)
}

// Set parses N or MIN-MAX.
func (t *TurnRange) Set(s string) error {
	lo, hi, isRange := strings.Cut(strings.TrimSpace(s), "-")
	a, err := strconv.Atoi(strings.TrimSpace(lo))
	b := a
	if err == nil && isRange {
		b, err = strconv.Atoi(strings.TrimSpace(hi))
	}
	if err != nil || a < 1 || b < a {
		return fmt.Errorf("turns %q: want N or MIN-MAX with 1 <= MIN <= MAX", s)
	}
	t.Min, t.Max = a, b
	return nil
}

// MultiturnConfig shapes the multiturn dataset. Without Path the user
// messages are synthetic (InputLen, OutputLen and RangeRatio as for the
// random dataset); with Path they come from a ShareGPT-format file.
type MultiturnConfig struct {
	Turns TurnRange
	// ThinkTime is the pause between a reply's end and the next turn.
	ThinkTime time.Duration
	// Replies is RepliesServer (default) or RepliesRecorded.
	Replies string
}

func (m MultiturnConfig) replies() string {
	if m.Replies == "" {
		return RepliesServer
	}
	return m.Replies
}

// Conversation is one multiturn session.
type Conversation struct {
	// System is a system message sent first in every turn (from a file's
	// "system" entry), or empty.
	System string
	Turns  []ConversationTurn
}

// ConversationTurn is one user message and what is known of its reply.
type ConversationTurn struct {
	User      string
	UserLen   int // tokens of User, as the dataset counts them
	OutputLen int // max_tokens asked for
	// Reply is the recorded reply, replayed in the next turns' history
	// with RepliesRecorded; empty otherwise.
	Reply string
}

// HashConversations is the prompts hash of conversations (see
// DatasetInfo.SHA256).
func HashConversations(convs []Conversation) string {
	p := newPromptHash()
	for _, c := range convs {
		p.str(c.System)
		p.num(len(c.Turns))
		for _, t := range c.Turns {
			p.str(t.User)
			p.num(t.OutputLen)
			p.str(t.Reply)
		}
	}
	return p.sum()
}

// LoadConversations returns conversations whose turns add up to n (n > 0),
// the last one cut short; a file's conversations are shuffled with the
// seed and cycled.
func LoadConversations(cfg DatasetConfig, n int, seed uint64) ([]Conversation, error) {
	if n <= 0 {
		return nil, errors.New("multiturn dataset: the number of requests is unknown")
	}
	mt := cfg.Multiturn
	recorded := mt.replies() == RepliesRecorded
	var base []Conversation
	rng := rand.New(rand.NewPCG(seed, 0x6d756c74))
	if cfg.Path != "" {
		var err error
		if base, err = readShareGPTConversations(cfg.Path, mt.Turns.Max, cfg.ShareGPTOutputLen); err != nil {
			return nil, err
		}
		if len(base) == 0 {
			return nil, fmt.Errorf("multiturn dataset %s holds no conversation with a user message and a reply", cfg.Path)
		}
		rng.Shuffle(len(base), func(i, j int) { base[i], base[j] = base[j], base[i] })
		if !recorded {
			for i := range base {
				for k := range base[i].Turns {
					base[i].Turns[k].Reply = ""
				}
			}
		}
	}
	replyRng := rand.New(rand.NewPCG(seed, 0x7265706c))
	lo, hi := mt.Turns.Min, mt.Turns.Max
	if hi == 0 {
		lo, hi = defaultTurns, defaultTurns
	}
	in, out := max(cfg.InputLen, 1), max(cfg.OutputLen, 1)
	var convs []Conversation
	for left, i := n, 0; left > 0; i++ {
		var c Conversation
		if base != nil {
			b := base[i%len(base)]
			c = Conversation{System: b.System, Turns: append([]ConversationTurn(nil), b.Turns...)}
		} else {
			c.Turns = make([]ConversationTurn, lo+rng.IntN(hi-lo+1))
			for k := range c.Turns {
				il := sampleLen(rng, in, cfg.RangeRatio)
				t := ConversationTurn{User: RandomPrompt(rng, il), UserLen: il, OutputLen: sampleLen(rng, out, cfg.RangeRatio)}
				if recorded {
					t.Reply = RandomPrompt(replyRng, t.OutputLen)
				}
				c.Turns[k] = t
			}
		}
		if len(c.Turns) > left {
			c.Turns = c.Turns[:left]
		}
		left -= len(c.Turns)
		convs = append(convs, c)
	}
	return convs, nil
}

// readShareGPTConversations reads a ShareGPT-format JSON array into
// conversations: a leading "system" message, then pairs of a user message
// ("human", "user") and a reply ("gpt", "assistant", "chatgpt", "bard",
// "model"), up to the first entry out of that order; at most maxTurns
// turns (0: all).
func readShareGPTConversations(path string, maxTurns, fixedOut int) ([]Conversation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("opening dataset: %w", err)
	}
	var entries []shareGPTEntry
	if err := json.Unmarshal(b, &entries); err != nil {
		return nil, fmt.Errorf("parsing ShareGPT JSON %s: %w", path, err)
	}
	var convs []Conversation
	for _, e := range entries {
		msgs := e.Conversations
		if len(msgs) == 0 {
			msgs = e.Conversation
		}
		var c Conversation
		if len(msgs) > 0 && strings.EqualFold(msgs[0].From, "system") {
			c.System = msgs[0].Value
			msgs = msgs[1:]
		}
		for k := 0; k+1 < len(msgs); k += 2 {
			if !isUserRole(msgs[k].From) || !isAssistantRole(msgs[k+1].From) {
				break
			}
			out := max(CountTokens(msgs[k+1].Value), 1)
			if fixedOut > 0 {
				out = fixedOut
			}
			c.Turns = append(c.Turns, ConversationTurn{User: msgs[k].Value, UserLen: CountTokens(msgs[k].Value), OutputLen: out, Reply: msgs[k+1].Value})
			if maxTurns > 0 && len(c.Turns) == maxTurns {
				break
			}
		}
		if len(c.Turns) > 0 {
			convs = append(convs, c)
		}
	}
	return convs, nil
}

func isUserRole(r string) bool {
	r = strings.ToLower(r)
	return r == "human" || r == "user"
}

func isAssistantRole(r string) bool {
	switch strings.ToLower(r) {
	case "gpt", "assistant", "chatgpt", "bard", "model":
		return true
	}
	return false
}

// chatMessage is one message of a chat request.
type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// turnTable holds the turns in flight, by request id: the history each
// one sends and the response bytes it received.
type turnTable struct {
	mu    sync.Mutex
	turns map[string]*turnIO
}

type turnIO struct {
	mu       sync.Mutex
	messages []chatMessage
	resp     bytes.Buffer
}

func (t *turnTable) register(id string, msgs []chatMessage) *turnIO {
	tio := &turnIO{messages: msgs}
	t.mu.Lock()
	t.turns[id] = tio
	t.mu.Unlock()
	return tio
}

func (t *turnTable) unregister(id string) {
	t.mu.Lock()
	delete(t.turns, id)
	t.mu.Unlock()
}

func (t *turnTable) lookup(id string) *turnIO {
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
	table *turnTable
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
func withMessages(body []byte, msgs []chatMessage) ([]byte, error) {
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
	io *turnIO
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

// replyText returns the assistant's text in a streamed chat response body:
// the concatenated content of the first choice's deltas (or message, or
// text).
func (t *turnIO) replyText() string {
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
				Delta   *chatMessage `json:"delta"`
				Message *chatMessage `json:"message"`
				Text    string       `json:"text"`
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

// multiturnRun sends the conversations of one run.
type multiturnRun struct {
	convs    []Conversation
	reqs     []Request // every turn's user message, in order
	table    *turnTable
	think    int64
	recorded bool
}

// isMultiturn reports whether c's requests are multiturn conversations.
func (c *Config) isMultiturn() bool {
	return c.Dataset.Name == DatasetMultiturn && c.TracePath == "" && len(c.Requests) == 0
}

func newMultiturnRun(c *Config) (*multiturnRun, error) {
	convs, err := LoadConversations(c.Dataset, c.planCount(), c.Seed)
	if err != nil {
		return nil, err
	}
	m := &multiturnRun{convs: convs, table: &turnTable{turns: map[string]*turnIO{}},
		think: int64(c.Dataset.Multiturn.ThinkTime), recorded: c.Dataset.Multiturn.replies() == RepliesRecorded}
	for _, cv := range convs {
		for _, t := range cv.Turns {
			m.reqs = append(m.reqs, Request{Prompt: t.User, PromptLen: t.UserLen, OutputLen: t.OutputLen, OffsetNs: -1})
		}
	}
	return m, nil
}

// wrap routes the client's net/http transports through the turn table.
func (m *multiturnRun) wrap(c *Client) {
	for _, hc := range []*http.Client{c.hc, c.fresh} {
		base := hc.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		hc.Transport = &turnTransport{base: base, table: m.table}
	}
}

// run starts the conversations at the arrival process's times from start
// and returns the records of every turn sent, once all have ended.
func (m *multiturnRun) run(ctx context.Context, cfg *Config, client *Client, arr *Arrivals, start, deadline int64, sem chan struct{}, durationMode bool) []*Record {
	var (
		mu      sync.Mutex
		records []*Record
		next    int
		wg      sync.WaitGroup
		done    atomic.Int64
	)
	total := len(m.reqs)
	if durationMode {
		total = 0
	}
	newRecord := func(conv, turn int, due int64) *Record {
		mu.Lock()
		defer mu.Unlock()
		rec := &Record{Index: next, RequestID: cfg.RequestIDPrefix + strconv.Itoa(next), ScheduledNs: due, Conversation: conv, Turn: turn}
		next++
		records = append(records, rec)
		return rec
	}
	finish := func(rec *Record) {
		if cfg.OnRecord != nil {
			cfg.OnRecord(rec)
		}
		n := done.Add(1)
		if cfg.Progress != nil {
			cfg.Progress(int(n), total)
		}
	}
	var offsets []int64
	if !durationMode {
		offsets = arr.Offsets(len(m.convs))
	}
	p := &pacer{ctx: ctx, arr: arr, offsets: offsets, start: start, deadline: deadline, durationMode: durationMode, sem: sem}
	for i := 0; durationMode || i < len(m.convs); i++ {
		at, ok := p.wait(i)
		if !ok {
			break
		}
		wg.Add(1)
		go func(id int, conv *Conversation) {
			defer wg.Done()
			if sem != nil {
				defer func() { <-sem }()
			}
			m.converse(ctx, client, id, conv, at, deadline, newRecord, finish)
		}(i+1, &m.convs[i%len(m.convs)])
	}
	wg.Wait()
	return records
}

// converse sends one conversation's turns one after another.
func (m *multiturnRun) converse(ctx context.Context, client *Client, id int, conv *Conversation, at, deadline int64,
	newRecord func(conv, turn int, due int64) *Record, finish func(*Record)) {
	var history []chatMessage
	histLen := 0
	if conv.System != "" {
		history = append(history, chatMessage{Role: "system", Content: conv.System})
		histLen = CountTokens(conv.System)
	}
	due := at
	for k, t := range conv.Turns {
		if k > 0 {
			if deadline > 0 && due >= deadline {
				return
			}
			if !sleepUntil(due, ctx.Done()) {
				return
			}
		}
		history = append(history, chatMessage{Role: "user", Content: t.User})
		histLen += t.UserLen
		rec := newRecord(id, k+1, due)
		tio := m.table.register(rec.RequestID, append([]chatMessage(nil), history...))
		req := Request{Prompt: t.User, PromptLen: histLen, OutputLen: t.OutputLen, OffsetNs: -1}
		client.Do(ctx, &req, rec)
		m.table.unregister(rec.RequestID)
		if !rec.Success {
			if k+1 < len(conv.Turns) {
				rec.Error += fmt.Sprintf(" (conversation %d ends at this turn: turns %d-%d not sent)", id, k+2, len(conv.Turns))
			}
			finish(rec)
			return
		}
		finish(rec)
		reply := t.Reply
		if !m.recorded {
			reply = tio.replyText()
		}
		history = append(history, chatMessage{Role: "assistant", Content: reply})
		histLen += CountTokens(reply)
		due = rec.EndNs + m.think
	}
}
