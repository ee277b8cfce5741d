// Package affinity says how many CPUs a process may run on (its affinity,
// which a cpuset narrows), for the critical path's sibling rule.
package affinity

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Counter counts the CPUs of processes, each read again once it is older
// than Max (a process's affinity can change: taskset, a cpuset resized).
// The zero value reads every 10 s; it is safe for concurrent use.
type Counter struct {
	Max time.Duration
	mu  sync.Mutex
	got map[uint32]entry
}

type entry struct {
	n  int
	at time.Time
}

// CPUs is how many CPUs process tgid may run on; 0 when it cannot be
// read (the process is gone).
func (c *Counter) CPUs(tgid uint32) int {
	now := time.Now()
	max := c.Max
	if max <= 0 {
		max = 10 * time.Second
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.got[tgid]; ok && now.Sub(e.at) < max {
		return e.n
	}
	if c.got == nil || len(c.got) > 4096 {
		c.got = map[uint32]entry{}
	}
	var set unix.CPUSet
	n := 0
	if unix.SchedGetaffinity(int(tgid), &set) == nil {
		n = set.Count()
	}
	c.got[tgid] = entry{n, now}
	return n
}
