package session

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/collectors/bpfutil"
)

// A session that follows several targets at once: the daemon's live
// views share one set of programs, maps and links however many targets
// they follow. The session's own target (Options.Pid and Roots) is slot 1;
// AddTarget follows another under a slot of its own, which the spans of
// the scheduler (the thread's process) and of the TCP collector (the
// socket's) carry as Span.Slot, so a reader tells the targets apart. A
// process a target forks joins its slot (the scheduler copies the parent's
// in the kernel, and the tree hands the child to the other sections under
// the slot its fork span carries).

// rootSetter is a section that scans the target's trees itself (cuda:
// for the CUDA libraries its processes map) and can be given the other
// targets' roots.
type rootSetter interface {
	SetRoots(roots []int)
}

// FirstSharedSlot is the lowest slot AddTarget takes: 1 is the session's
// own target. The load generator's slot (2) and a gateway's (ViaSlot) are
// a run's; a session that follows several targets has neither.
const FirstSharedSlot = 2

// AddTarget follows pid, the roots and every process below them under
// slot (FirstSharedSlot..bpfutil.MaxTargets-1) in every section that
// follows by pid, the scheduler included, and has the sections that scan
// for libraries scan them too. It adds no program and no link (but for
// the CUDA libraries only these processes map). Call it after Start. It
// returns the processes followed.
func (s *Session) AddTarget(pid int, roots []int, slot uint32) ([]int, error) {
	if slot < FirstSharedSlot || slot >= bpfutil.MaxTargets {
		return nil, fmt.Errorf("slot %d out of range %d..%d", slot, FirstSharedSlot, bpfutil.MaxTargets-1)
	}
	if _, err := CheckPid(pid); err != nil {
		return nil, err
	}
	pids := collectors.Tree(pid, roots)
	err := s.followUnder(pids, slot)
	s.sharedMu.Lock()
	if s.shared == nil {
		s.shared = map[int]bool{}
	}
	s.shared[pid] = true
	for _, r := range roots {
		s.shared[r] = true
	}
	s.sharedMu.Unlock()
	s.setRoots()
	return pids, err
}

// RemoveTarget stops following pids (a target's processes, as AddTarget
// or its forks made them) in every section that can forget one.
func (s *Session) RemoveTarget(pids []int) error {
	var errs []error
	for _, sec := range s.sections {
		u, ok := sec.(unfollower)
		if !ok {
			continue
		}
		for _, p := range pids {
			if err := u.DeleteTarget(uint32(p)); err != nil {
				errs = append(errs, fmt.Errorf("%s forgetting pid %d: %w", sec.Name(), p, err))
			}
		}
	}
	s.sharedMu.Lock()
	for _, p := range pids {
		delete(s.shared, p)
	}
	s.sharedMu.Unlock()
	s.setRoots()
	return errors.Join(errs...)
}

// setRoots gives the sections that scan trees the session's roots and
// the added targets'.
func (s *Session) setRoots() {
	s.sharedMu.Lock()
	roots := slices.Sorted(maps.Keys(s.shared))
	s.sharedMu.Unlock()
	roots = append(slices.Clone(s.opts.Roots), roots...)
	for _, sec := range s.sections {
		if r, ok := sec.(rootSetter); ok {
			r.SetRoots(roots)
		}
	}
}
