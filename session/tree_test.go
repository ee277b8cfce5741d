package session

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/bpfbench/bpfbench/collectors"
)

type fakeSection struct {
	name string
	mu   sync.Mutex
	set  []uint32
	del  []uint32
}

func (f *fakeSection) Start(context.Context) error { return nil }
func (f *fakeSection) Run(context.Context) error   { return nil }
func (f *fakeSection) Close() error                { return nil }
func (f *fakeSection) Name() string                { return f.name }
func (f *fakeSection) WriteInterval(io.Writer)     {}
func (f *fakeSection) WriteSummary(io.Writer)      {}
func (f *fakeSection) Summary() any                { return nil }
func (f *fakeSection) Lost() uint64                { return 0 }
func (f *fakeSection) SetTarget(tgid, idx uint32, stream bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if idx != treeSlot || !stream {
		panic("wrong slot or stream")
	}
	f.set = append(f.set, tgid)
	return nil
}
func (f *fakeSection) DeleteTarget(tgid uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.del = append(f.del, tgid)
	return nil
}

type countRec struct {
	mu sync.Mutex
	n  int
}

func (c *countRec) Record(collectors.Span) { c.mu.Lock(); c.n++; c.mu.Unlock() }

// Forks the scheduler reports reach the sections that follow by pid
// (not the scheduler itself), exits of known children are forgotten, and
// every span still reaches the recorder.
func TestTreeHandsChildren(t *testing.T) {
	rec := &countRec{}
	tr := newTree(rec, slog.New(slog.NewTextHandler(io.Discard, nil)))
	sched, tcp := &fakeSection{name: "sched"}, &fakeSection{name: "tcp"}
	tr.start([]collectors.Section{sched, tcp})
	tr.Record(collectors.Span{Kind: collectors.SpanRunqueue, Tid: 1})
	tr.Record(collectors.Span{Kind: collectors.SpanFork, Tid: 42, Tgid: 42, Detail: "fork", WakerTgid: 7})
	tr.Record(collectors.Span{Kind: collectors.SpanFork, Tid: 43, Tgid: 43, Detail: "fork", Client: true})
	tr.Record(collectors.Span{Kind: collectors.SpanFork, Tid: 42, Tgid: 42, Detail: "exit"})
	tr.Record(collectors.Span{Kind: collectors.SpanFork, Tid: 44, Tgid: 44, Detail: "exit"})
	tr.stop()
	tr.stop()
	if rec.n != 5 {
		t.Errorf("recorder got %d spans, want 5", rec.n)
	}
	if len(sched.set) != 0 {
		t.Errorf("the scheduler was handed %v; it follows the tree in the kernel", sched.set)
	}
	if !slices.Equal(tcp.set, []uint32{42}) || !slices.Equal(tcp.del, []uint32{42}) {
		t.Errorf("tcp: set %v deleted %v, want [42] [42]", tcp.set, tcp.del)
	}
	if tr.handed != 1 {
		t.Errorf("handed %d, want 1", tr.handed)
	}
}
