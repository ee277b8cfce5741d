package loadgen

import (
	"context"
	"fmt"

	"github.com/bpfbench/bpfbench/loadgen/dataset"
	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// multiturnRun sends the conversations of one run.
type multiturnRun struct {
	convs    []dataset.Conversation
	reqs     []Request        // every turn's user message, in order
	turns    *transport.Turns // the client's, set once it is made
	think    int64
	recorded bool
}

// isMultiturn reports whether c's requests are multiturn conversations.
func (c *Config) isMultiturn() bool {
	return c.Scenario.Dataset.Name == dataset.Multiturn && c.Scenario.TracePath == "" && len(c.Scenario.Requests) == 0
}

func newMultiturnRun(c *Config) (*multiturnRun, error) {
	convs, err := dataset.LoadConversations(c.Scenario.Dataset, c.planCount(), c.Scenario.Seed)
	if err != nil {
		return nil, err
	}
	m := &multiturnRun{convs: convs,
		think: int64(c.Scenario.Dataset.Multiturn.ThinkTime), recorded: c.Scenario.Dataset.Multiturn.ReplyMode() == dataset.RepliesRecorded}
	for _, cv := range convs {
		for _, t := range cv.Turns {
			m.reqs = append(m.reqs, Request{Prompt: t.User, PromptLen: t.UserLen, OutputLen: t.OutputLen, OffsetNs: -1})
		}
	}
	return m, nil
}

// run starts the conversations at the arrival process's times from the
// run's start; the caller waits for r.wg.
func (m *multiturnRun) run(ctx context.Context, r *runner) {
	var offsets []int64
	if !r.durationMode {
		offsets = r.arr.Offsets(len(m.convs))
	}
	p := r.pacer(ctx, offsets)
	for i := 0; r.durationMode || i < len(m.convs); i++ {
		at, ok := p.wait(i)
		if !ok {
			break
		}
		r.wg.Add(1)
		go func(id int, conv *dataset.Conversation, slotWait int64) {
			defer r.wg.Done()
			if r.sem != nil {
				defer func() { <-r.sem }()
			}
			m.converse(ctx, r, id, conv, at, slotWait)
		}(i+1, &m.convs[i%len(m.convs)], p.slotWait)
	}
}

// converse sends one conversation's turns one after another.
func (m *multiturnRun) converse(ctx context.Context, r *runner, id int, conv *dataset.Conversation, at, slotWait int64) {
	var history []transport.Message
	histLen := 0
	if conv.System != "" {
		history = append(history, transport.Message{Role: "system", Content: conv.System})
		histLen = dataset.CountTokens(conv.System)
	}
	due := at
	for k, t := range conv.Turns {
		if k > 0 {
			if r.deadline > 0 && due >= r.deadline {
				return
			}
			if !sleepUntil(due, ctx.Done()) {
				return
			}
		}
		history = append(history, transport.Message{Role: "user", Content: t.User})
		histLen += t.UserLen
		rec := r.newRecord(due)
		rec.Conversation, rec.Turn = id, k+1
		if k == 0 {
			rec.SlotWaitNs = slotWait
		}
		tio := m.turns.Register(rec.RequestID, append([]transport.Message(nil), history...))
		req := Request{Prompt: t.User, PromptLen: histLen, OutputLen: t.OutputLen, OffsetNs: -1}
		r.client.Do(ctx, &req, rec)
		m.turns.Unregister(rec.RequestID)
		if !rec.Success {
			if k+1 < len(conv.Turns) {
				rec.Error += fmt.Sprintf(" (conversation %d ends at this turn: turns %d-%d not sent)", id, k+2, len(conv.Turns))
			}
			r.finished(rec)
			return
		}
		r.finished(rec)
		reply := t.Reply
		if !m.recorded {
			reply = tio.ReplyText()
		}
		history = append(history, transport.Message{Role: "assistant", Content: reply})
		histLen += dataset.CountTokens(reply)
		due = rec.EndNs + m.think
	}
}
