package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/llmsim/sim"
	"github.com/bpfbench/bpfbench/llmsim/simtest"
	"github.com/bpfbench/bpfbench/loadgen/dataset"
	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// chatServer is a fake OpenAI-compatible chat server: it streams a reply
// unique to each request and remembers what each request (by x-request-id)
// sent and got.
type chatServer struct {
	mu       sync.Mutex
	n        int
	messages map[string][]transport.Message
	replies  map[string]string
	// fail, if set, answers HTTP 500 to the requests it returns true for.
	fail func(msgs []transport.Message) bool
	// delay is how long each reply takes.
	delay time.Duration
}

func newChatServer(t *testing.T, cs *chatServer) string {
	cs.messages, cs.replies = map[string][]transport.Message{}, map[string]string{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Messages  []transport.Message `json:"messages"`
			MaxTokens int                 `json:"max_tokens"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		id := r.Header.Get("X-Request-Id")
		cs.mu.Lock()
		cs.n++
		words := []string{"reply", fmt.Sprint(cs.n)}
		for len(words) < body.MaxTokens {
			words = append(words, "w")
		}
		cs.messages[id] = body.Messages
		fail := cs.fail != nil && cs.fail(body.Messages)
		if !fail {
			cs.replies[id] = strings.Join(words, " ")
		}
		cs.mu.Unlock()
		if fail {
			http.Error(w, "the engine fell over", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i, wd := range words {
			if cs.delay > 0 {
				time.Sleep(cs.delay / time.Duration(len(words)))
			}
			text := wd
			if i > 0 {
				text = " " + wd
			}
			b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]string{"content": text}}}})
			fmt.Fprintf(w, "data: %s\n\n", b)
			fl.Flush()
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

func multiturnConfig(url string, mod func(*Config)) Config {
	cfg := DefaultConfig()
	cfg.Target.URL = url
	cfg.Target.Endpoint = transport.EndpointChat
	cfg.Target.Model = "m"
	cfg.Scenario.NumRequests = 12
	cfg.Scenario.Dataset = dataset.Config{Name: dataset.Multiturn, InputLen: 6, OutputLen: 4}
	cfg.Scenario.Dataset.Multiturn.Turns = dataset.TurnRange{Min: 4, Max: 4}
	if mod != nil {
		mod(&cfg)
	}
	return cfg
}

func runTest(t *testing.T, cfg Config) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// byConversation groups records by conversation, in turn order.
func byConversation(recs []Record) map[int][]Record {
	m := map[int][]Record{}
	for _, r := range recs {
		m[r.Conversation] = append(m[r.Conversation], r)
	}
	for _, rs := range m {
		sort.Slice(rs, func(a, b int) bool { return rs[a].Turn < rs[b].Turn })
	}
	return m
}

func TestMultiturnReplaysServerReplies(t *testing.T) {
	cs := &chatServer{delay: 20 * time.Millisecond}
	url := newChatServer(t, cs)
	const think = 30 * time.Millisecond
	cfg := multiturnConfig(url, func(c *Config) { c.Scenario.Dataset.Multiturn.ThinkTime = think })
	res := runTest(t, cfg)
	if d, err := cfg.DescribeDataset(); err != nil || !reflect.DeepEqual(d, res.Dataset) {
		t.Errorf("DescribeDataset %+v, %v; the run's %+v", d, err, res.Dataset)
	}
	if len(res.Records) != 12 {
		t.Fatalf("%d records, want 12 (3 conversations of 4 turns)", len(res.Records))
	}
	convs := byConversation(res.Records)
	if len(convs) != 3 {
		t.Fatalf("%d conversations, want 3", len(convs))
	}
	for id, rs := range convs {
		var users []string
		for k, r := range rs {
			if !r.Success || r.Turn != k+1 || id < 1 {
				t.Fatalf("conversation %d record %d: turn %d, success %v: %s", id, k, r.Turn, r.Success, r.Error)
			}
			msgs := cs.messages[r.RequestID]
			if len(msgs) != 2*k+1 {
				t.Fatalf("conversation %d turn %d sent %d messages, want %d", id, k+1, len(msgs), 2*k+1)
			}
			// The earlier exchanges: the same user messages, and the
			// replies the server really sent.
			for j := 0; j < k; j++ {
				if msgs[2*j].Role != "user" || msgs[2*j].Content != users[j] {
					t.Errorf("conversation %d turn %d: message %d is %+v, want user %q", id, k+1, 2*j, msgs[2*j], users[j])
				}
				if want := cs.replies[rs[j].RequestID]; msgs[2*j+1].Role != "assistant" || msgs[2*j+1].Content != want {
					t.Errorf("conversation %d turn %d: message %d is %+v, want the server's reply %q", id, k+1, 2*j+1, msgs[2*j+1], want)
				}
			}
			last := msgs[len(msgs)-1]
			if last.Role != "user" || dataset.CountTokens(last.Content) < 1 {
				t.Errorf("conversation %d turn %d: last message %+v", id, k+1, last)
			}
			users = append(users, last.Content)
			// PromptLen counts the whole history.
			words := 0
			for _, m := range msgs {
				words += dataset.CountTokens(m.Content)
			}
			if r.PromptLen != words {
				t.Errorf("conversation %d turn %d: PromptLen %d, history of %d words", id, k+1, r.PromptLen, words)
			}
			// Turns never overlap: each starts after the previous reply
			// ended and the think time passed.
			if k > 0 {
				prev := rs[k-1]
				if r.ScheduledNs < prev.EndNs+int64(think) || r.StartNs < prev.EndNs+int64(think) {
					t.Errorf("conversation %d turn %d scheduled %d, started %d; turn %d ended %d (think %v)",
						id, k+1, r.ScheduledNs, r.StartNs, k, prev.EndNs, think)
				}
			}
		}
	}
	if res.Dataset.Name != dataset.Multiturn || res.Dataset.Hashed != dataset.HashedPrompts || res.Dataset.Params["turns"] != "4" {
		t.Errorf("descriptor %+v", res.Dataset)
	}
}

func TestMultiturnFailedTurnEndsConversation(t *testing.T) {
	// Every second turn fails.
	cs := &chatServer{fail: func(m []transport.Message) bool { return len(m) == 3 }}
	url := newChatServer(t, cs)
	res := runTest(t, multiturnConfig(url, nil))
	if len(res.Records) != 6 {
		t.Fatalf("%d records, want 6 (turns 1 and 2 of 3 conversations)", len(res.Records))
	}
	for id, rs := range byConversation(res.Records) {
		if len(rs) != 2 || !rs[0].Success || rs[1].Success {
			t.Fatalf("conversation %d: %d records, successes %v %v", id, len(rs), rs[0].Success, rs[len(rs)-1].Success)
		}
		r := rs[1]
		want := fmt.Sprintf("(conversation %d ends at this turn: turns 3-4 not sent)", id)
		if r.Failure != transport.FailHTTPStatus || !strings.Contains(r.Error, "HTTP 500") || !strings.Contains(r.Error, want) {
			t.Errorf("conversation %d: the failed turn's record says %s: %q", id, r.Failure, r.Error)
		}
	}
	if res.Metrics.Failed != 3 {
		t.Errorf("%d failed requests, want 3", res.Metrics.Failed)
	}
}

// With --max-concurrency, conversations wait for a free slot: no more than
// C are open at once.
func TestMultiturnConcurrency(t *testing.T) {
	cs := &chatServer{delay: 10 * time.Millisecond}
	url := newChatServer(t, cs)
	res := runTest(t, multiturnConfig(url, func(c *Config) {
		c.Scenario.NumRequests = 16
		c.Scenario.MaxConcurrency = 2
		c.Scenario.Dataset.Multiturn.Turns = dataset.TurnRange{Min: 2, Max: 2}
	}))
	type span struct{ start, end int64 }
	var spans []span
	for _, rs := range byConversation(res.Records) {
		spans = append(spans, span{rs[0].StartNs, rs[len(rs)-1].EndNs})
	}
	if len(spans) != 8 {
		t.Fatalf("%d conversations, want 8", len(spans))
	}
	for _, s := range spans {
		open := 0
		for _, o := range spans {
			if o.start <= s.start && s.start < o.end {
				open++
			}
		}
		if open > 2 {
			t.Fatalf("%d conversations open at once, want at most 2", open)
		}
	}
}

// Recorded replies from a ShareGPT file: the history holds the file's
// replies, not the server's.
func TestMultiturnRecordedReplies(t *testing.T) {
	cs := &chatServer{}
	url := newChatServer(t, cs)
	path := filepath.Join("dataset", "testdata", "multiturn_sharegpt.json")
	res := runTest(t, multiturnConfig(url, func(c *Config) {
		c.Scenario.NumRequests = 5
		c.Scenario.Dataset = dataset.Config{Name: dataset.Multiturn, Path: path, Multiturn: dataset.MultiturnConfig{Replies: dataset.RepliesRecorded}}
	}))
	if len(res.Records) != 5 {
		t.Fatalf("%d records, want 5 (3 + 2 turns)", len(res.Records))
	}
	sawLast := false
	for _, rs := range byConversation(res.Records) {
		for _, r := range rs {
			msgs := cs.messages[r.RequestID]
			if len(rs) == 3 && r.Turn == 3 {
				sawLast = true
				want := []transport.Message{
					{Role: "system", Content: "You are a terse assistant."},
					{Role: "user", Content: "What is a kernel probe?"},
					{Role: "assistant", Content: "A hook on a kernel function that runs a program when the function is entered."},
					{Role: "user", Content: "And a uprobe?"},
					{Role: "assistant", Content: "The same for a function of a user-space binary."},
					{Role: "user", Content: "Which is cheaper?"},
				}
				if !slices.Equal(msgs, want) {
					t.Errorf("turn 3 sent %+v, want %+v", msgs, want)
				}
				if r.MaxTokens != dataset.CountTokens("The kprobe: a uprobe traps into the kernel from user space.") {
					t.Errorf("turn 3 asked for %d tokens, want the recorded reply's length", r.MaxTokens)
				}
			}
		}
	}
	if !sawLast {
		t.Error("no conversation of 3 turns")
	}
	if res.Dataset.Hashed != dataset.HashedFile || res.Dataset.Params["replies"] != dataset.RepliesRecorded {
		t.Errorf("descriptor %+v", res.Dataset)
	}
}

func TestMultiturnDeterministic(t *testing.T) {
	cfg := dataset.Config{Name: dataset.Multiturn, InputLen: 16, OutputLen: 8, RangeRatio: 0.5, Multiturn: dataset.MultiturnConfig{Turns: dataset.TurnRange{Min: 2, Max: 6}}}
	a, err := dataset.LoadConversations(cfg, 40, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := dataset.LoadConversations(cfg, 40, 1)
	c, _ := dataset.LoadConversations(cfg, 40, 2)
	if dataset.HashConversations(a) != dataset.HashConversations(b) || dataset.HashConversations(a) == dataset.HashConversations(c) {
		t.Error("conversation hashes: not equal for one seed, or equal for two")
	}
	turns, lens := 0, map[int]bool{}
	for _, cv := range a {
		turns += len(cv.Turns)
		lens[len(cv.Turns)] = true
		for _, tn := range cv.Turns {
			if dataset.CountTokens(tn.User) != tn.UserLen {
				t.Fatalf("user message of %d words, UserLen %d", dataset.CountTokens(tn.User), tn.UserLen)
			}
		}
	}
	if turns != 40 || len(lens) < 3 {
		t.Errorf("%d turns (want 40), conversation lengths %v", turns, lens)
	}
}

func TestMultiturnChecks(t *testing.T) {
	cfg := multiturnConfig("http://127.0.0.1:1", nil)
	cfg.Target.Endpoint = transport.EndpointCompletions
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--endpoint chat") {
		t.Errorf("multiturn on completions: %v", err)
	}
	var tr dataset.TurnRange
	for _, s := range []string{"0", "5-2", "x", "2-"} {
		if tr.Set(s) == nil {
			t.Errorf("turns %q accepted", s)
		}
	}
	if tr.Set("3-7") != nil || tr != (dataset.TurnRange{Min: 3, Max: 7}) || tr.String() != "3-7" {
		t.Errorf("turns 3-7: %+v", tr)
	}
}

// Against llmsim, which counts a chat request's tokens as the words of its
// messages, every turn's PromptLen is the server's prompt_tokens.
func TestMultiturnLLMSimPromptLen(t *testing.T) {
	url := simtest.Start(t, func(c *sim.Config) { c.DecodeStep = time.Millisecond })
	res := runTest(t, multiturnConfig(url, func(c *Config) { c.Scenario.NumRequests = 8 }))
	for _, r := range res.Records {
		if !r.Success || r.UsagePromptTokens != r.PromptLen || r.OutputTokens != 4 {
			t.Errorf("conversation %d turn %d: success %v, prompt_len %d, server's prompt_tokens %d, %d output tokens: %s",
				r.Conversation, r.Turn, r.Success, r.PromptLen, r.UsagePromptTokens, r.OutputTokens, r.Error)
		}
	}
}

// In duration mode conversations keep coming until the deadline, and no
// turn starts after it.
func TestMultiturnDuration(t *testing.T) {
	cs := &chatServer{delay: 5 * time.Millisecond}
	url := newChatServer(t, cs)
	res := runTest(t, multiturnConfig(url, func(c *Config) {
		c.Scenario.NumRequests = 0
		c.Scenario.Duration = 300 * time.Millisecond
		c.Scenario.MaxConcurrency = 3
	}))
	if len(res.Records) < 12 {
		t.Fatalf("%d records in 300 ms", len(res.Records))
	}
	deadline := res.StartNs + int64(300*time.Millisecond)
	ids := map[int]bool{}
	for _, r := range res.Records {
		ids[r.Conversation] = true
		// A turn is sent when it is due before the deadline; it starts
		// a wakeup later (164 µs past the deadline was seen in CI).
		if !r.Success || r.ScheduledNs >= deadline || r.Conversation < 1 {
			t.Fatalf("record %+v after the deadline or failed", r)
		}
	}
	if len(ids) < 4 {
		t.Errorf("%d conversations", len(ids))
	}
}
