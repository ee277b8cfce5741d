package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
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

// ReplyMode is Replies, RepliesServer when unset.
func (m MultiturnConfig) ReplyMode() string {
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
// Info.SHA256).
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
func LoadConversations(cfg Config, n int, seed uint64) ([]Conversation, error) {
	if n <= 0 {
		return nil, errors.New("multiturn dataset: the number of requests is unknown")
	}
	mt := cfg.Multiturn
	recorded := mt.ReplyMode() == RepliesRecorded
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
