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

// Follow adds pid and the processes it has already forked (an nginx
// master and its workers) to the followed set, under ViaSlot, streamed:
// their spans carry their own Tgid. Call it after Start. It returns the
// pids followed.
func (s *Session) Follow(pid int) ([]int, error) {
	if _, err := CheckPid(pid); err != nil {
		return nil, err
	}
	pids := append([]int{pid}, Descendants(pid)...)
	err := s.followUnder(pids, ViaSlot)
	s.via = append(s.via, pids...)
	return pids, err
}

// followUnder has every section that follows by pid (the scheduler
// included) follow pids under slot, streamed.
func (s *Session) followUnder(pids []int, slot uint32) error {
	var errs []error
	for _, sec := range s.sections {
		f, ok := sec.(follower)
		if !ok {
			continue
		}
		for _, p := range pids {
			if err := f.SetTarget(uint32(p), slot, true); err != nil {
				errs = append(errs, fmt.Errorf("%s following pid %d: %w", sec.Name(), p, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Via is the pids Follow added.
func (s *Session) Via() []int { return append([]int(nil), s.via...) }

// Descendants is every process below pid (collectors.Descendants).
func Descendants(pid int) []int { return collectors.Descendants(pid) }
