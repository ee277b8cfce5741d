package daemon

import (
	"sync"
	"sync/atomic"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/collectors/bpfutil"
)

// spanRouter hands each span of the shared live session to the tracker of
// the target it belongs to: by its slot where the collector knows it (the
// scheduler's spans: the thread's process; the TCP collector's: the
// socket's), else by its thread's slot as the scheduler's spans gave it
// (CUDA calls, block requests), or, while the session follows one target,
// that target's. A span of no target (its slot taken out, its thread not
// named yet while several targets are followed) is counted and dropped.
type spanRouter struct {
	mu     sync.RWMutex
	bySlot [bpfutil.MaxTargets]collectors.Recorder
	n      int   // slots routed
	only   uint8 // the slot routed when n is 1
	tids   map[uint32]uint8

	unrouted atomic.Uint64
}

// maxRouterThreads bounds the threads remembered; past it the map starts
// again (a thread's spans without a slot are then dropped until its next
// switch-in names it).
const maxRouterThreads = 1 << 16

func newSpanRouter() *spanRouter { return &spanRouter{tids: map[uint32]uint8{}} }

// set routes slot's spans to r (nil: none).
func (s *spanRouter) set(slot uint32, r collectors.Recorder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bySlot[slot] = r
	s.n = 0
	for i, r := range s.bySlot {
		if r != nil {
			s.n++
			s.only = uint8(i)
		}
	}
}

// Record implements collectors.Recorder.
func (s *spanRouter) Record(sp collectors.Span) {
	slot := sp.Slot
	s.mu.RLock()
	learn := false
	switch {
	case slot == 0:
		slot = s.tids[sp.Tid]
		if slot == 0 && s.n == 1 {
			slot = s.only
		}
	case slot != 0 && sp.Tid != 0 && sp.Tgid != 0:
		learn = s.tids[sp.Tid] != slot
	}
	r := s.bySlot[slot]
	s.mu.RUnlock()
	if learn {
		s.mu.Lock()
		if len(s.tids) >= maxRouterThreads {
			clear(s.tids)
		}
		s.tids[sp.Tid] = slot
		s.mu.Unlock()
	}
	if r == nil || slot == 0 {
		s.unrouted.Add(1)
		return
	}
	r.Record(sp)
}
