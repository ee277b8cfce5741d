package pipeline

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// threadNames names the target's threads for the timeline from
// /proc/PID/task/TID/comm. A thread not yet known rescans the process's
// threads once (so one that has exited keeps "thread TID"); names are read
// when a thread's first span is written, while it usually still runs.
type threadNames struct {
	pid   int
	names map[uint32]string
}

func newThreadNames(pid int) *threadNames {
	t := &threadNames{pid: pid, names: map[uint32]string{}}
	t.scan()
	return t
}

func (t *threadNames) scan() {
	if t.pid <= 0 {
		return
	}
	dir := fmt.Sprintf("/proc/%d/task", t.pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		tid, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(dir + "/" + e.Name() + "/comm"); err == nil {
			t.names[uint32(tid)] = strings.TrimSpace(string(b))
		}
	}
}

// name is the thread's command name, or "thread TID" when it cannot be read.
func (t *threadNames) name(tid uint32) string {
	if t == nil {
		return fmt.Sprintf("thread %d", tid)
	}
	if n, ok := t.names[tid]; ok {
		return n
	}
	t.scan()
	n, ok := t.names[tid]
	if !ok {
		// A thread of another followed process (a child, a gateway):
		// /proc/TID is there for every thread, listed or not.
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", tid)); err == nil {
			n, ok = strings.TrimSpace(string(b)), true
		}
	}
	if !ok || n == "" {
		n = fmt.Sprintf("thread %d", tid)
	}
	t.names[tid] = n
	return n
}

// label is the name with the tid, for tracks whose name Perfetto does not
// suffix with one (counters).
func (t *threadNames) label(tid uint32) string {
	n := t.name(tid)
	if strings.HasPrefix(n, "thread ") {
		return n
	}
	return fmt.Sprintf("%s %d", n, tid)
}
