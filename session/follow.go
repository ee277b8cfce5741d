package session

import (
	"errors"
	"fmt"

	"github.com/bpfbench/bpfbench/collectors"
)

// ViaSlot is the slot a gateway in front of the target (a proxy) is
// followed under: its own aggregates, next to the target's (1) and the
// load generator's (2).
const ViaSlot = 3

// schedFollower is the scheduler's SetTarget (the tree hands it no
// children: it follows forks in the kernel, but not a process it was not
// given).
type schedFollower interface {
	SetTarget(tgid uint32, idx uint32, stream bool) error
}

// Follow adds pid and the processes it has already forked (an nginx
// master and its workers) to the followed set, under ViaSlot, streamed:
// their spans carry their own Tgid. Call it after Start. It returns the
// pids followed.
func (s *Session) Follow(pid int) ([]int, error) {
	if _, err := CheckPid(pid); err != nil {
		return nil, err
	}
	pids := append([]int{pid}, Descendants(pid)...)
	var errs []error
	for _, sec := range s.sections {
		f, ok := sec.(schedFollower)
		if !ok {
			continue
		}
		for _, p := range pids {
			if err := f.SetTarget(uint32(p), ViaSlot, true); err != nil {
				errs = append(errs, fmt.Errorf("%s following pid %d: %w", sec.Name(), p, err))
			}
		}
	}
	s.via = append(s.via, pids...)
	return pids, errors.Join(errs...)
}

// Via is the pids Follow added.
func (s *Session) Via() []int { return append([]int(nil), s.via...) }

// Descendants is every process below pid (collectors.Descendants).
func Descendants(pid int) []int { return collectors.Descendants(pid) }
