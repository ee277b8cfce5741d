package session

import (
	"log/slog"
	"sync"

	"github.com/bpfbench/bpfbench/collectors"
)

// follower is a section that follows a process by pid in userspace and
// can be given another (blockio, tcp). The scheduler follows the tree in
// the kernel itself; cuda's SetTarget takes its own flags and is not
// handed children (its uprobes attach per library, not per pid).
type follower interface {
	SetTarget(tgid uint32, idx uint32, stream bool) error
}

// unfollower can stop following a process that exited.
type unfollower interface {
	DeleteTarget(tgid uint32) error
}

// treeSlot is the slot children are followed under: the target's.
const treeSlot = 1

// maxTreeQueue bounds the forks and exits waiting to be handed over;
// past it they are dropped and counted.
const maxTreeQueue = 1024

// tree passes every span to the recorder and hands each process the
// scheduler saw the target fork (SpanFork "fork") to the sections that
// follow by pid, and each exit to those that can forget one. The hand-over
// runs on its own goroutine: a section's SetTarget may scan /proc, and the
// readers must not wait for it.
type tree struct {
	next collectors.Recorder
	log  *slog.Logger

	mu       sync.Mutex
	queue    []collectors.Span
	wake     chan struct{}
	done     chan struct{}
	running  bool
	sections []follower
	names    []string
	children map[uint32]bool
	dropped  uint64
	handed   uint64
}

func newTree(next collectors.Recorder, log *slog.Logger) *tree {
	return &tree{next: next, log: log, wake: make(chan struct{}, 1), children: map[uint32]bool{}}
}

// Record passes sp on, and queues a fork or exit for the hand-over.
func (t *tree) Record(sp collectors.Span) {
	t.next.Record(sp)
	if sp.Kind != collectors.SpanFork || sp.Client {
		return
	}
	t.mu.Lock()
	if !t.running || len(t.queue) >= maxTreeQueue {
		t.dropped++
		t.mu.Unlock()
		return
	}
	t.queue = append(t.queue, sp)
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// start hands children to the sections that started, until stop.
func (t *tree) start(sections []collectors.Section) {
	t.mu.Lock()
	for _, sec := range sections {
		if sec.Name() == "sched" {
			continue
		}
		if f, ok := sec.(follower); ok {
			t.sections = append(t.sections, f)
			t.names = append(t.names, sec.Name())
		}
	}
	if len(t.sections) == 0 {
		t.mu.Unlock()
		return
	}
	t.running = true
	t.done = make(chan struct{})
	t.mu.Unlock()
	go t.loop()
}

func (t *tree) loop() {
	defer close(t.done)
	for range t.wake {
		t.mu.Lock()
		q := t.queue
		t.queue = nil
		stopped := !t.running
		t.mu.Unlock()
		for _, sp := range q {
			t.hand(sp)
		}
		if stopped {
			return
		}
	}
}

func (t *tree) hand(sp collectors.Span) {
	pid := sp.Tgid
	if pid == 0 {
		pid = sp.Tid
	}
	if sp.Detail == "exit" {
		if !t.children[pid] {
			return
		}
		delete(t.children, pid)
		for i, f := range t.sections {
			if u, ok := f.(unfollower); ok {
				if err := u.DeleteTarget(pid); err != nil {
					t.log.Debug("forgetting an exited child", "section", t.names[i], "pid", pid, "err", err)
				}
			}
		}
		return
	}
	t.children[pid] = true
	t.mu.Lock()
	t.handed++
	t.mu.Unlock()
	// The child's slot is its parent's (the scheduler copied it).
	slot := uint32(sp.Slot)
	if slot == 0 {
		slot = treeSlot
	}
	for i, f := range t.sections {
		if err := f.SetTarget(pid, slot, true); err != nil {
			t.log.Info("following a forked child", "section", t.names[i], "pid", pid, "parent", sp.WakerTgid, "err", err)
		}
	}
}

// stop ends the hand-over; forks still queued are handed first.
func (t *tree) stop() {
	t.mu.Lock()
	if !t.running {
		t.mu.Unlock()
		return
	}
	t.running = false
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
	<-t.done
}

// Children is the number of forked children handed to the sections, and
// of forks dropped (the queue full, or before the sections started).
func (s *Session) Children() (handed, dropped uint64) {
	if s.tree == nil {
		return 0, 0
	}
	s.tree.mu.Lock()
	defer s.tree.mu.Unlock()
	return s.tree.handed, s.tree.dropped
}

// adopt follows the target's existing descendants and its other roots
// (with theirs) in every section that follows by pid, the scheduler
// included (it learns only of forks it sees): a server made of processes
// started before the session (vLLM's API server and EngineCore), or a
// cgroup's processes, is one target.
func adopt(pid int, roots []int, sections []collectors.Section, log *slog.Logger) []uint32 {
	var kids []uint32
	for _, d := range collectors.Tree(pid, roots)[1:] {
		kids = append(kids, uint32(d))
	}
	for _, k := range kids {
		for _, sec := range sections {
			f, ok := sec.(follower)
			if !ok {
				continue
			}
			if err := f.SetTarget(k, treeSlot, true); err != nil {
				log.Info("following a child started before the session", "section", sec.Name(), "pid", k, "err", err)
			}
		}
	}
	return kids
}
