// Package owner names the process that created something on the machine
// (a network namespace, a qdisc) in that thing's state file, so that a
// later bpfbench tells a dead owner's leftovers from a running one's: a
// pid alone is not enough once pids wrap, so the process's start time
// (field 22 of /proc/PID/stat, in clock ticks since boot) goes with it.
//
// A process that records state starts, once, a reaper (Recorded): a
// process of its own that outlives it and removes what it left when it
// dies, however it dies (SIGKILL included), so that nothing waits for the
// next bpfbench to be swept.
package owner

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Owner is a process: its pid and its start time.
type Owner struct {
	Pid int `json:"pid"`
	// Start is the process's start time in clock ticks since boot; 0 in
	// the state files of earlier releases (the pid alone is checked).
	Start uint64 `json:"pid_start,omitempty"`
}

// Self is this process.
func Self() Owner {
	o := Owner{Pid: os.Getpid()}
	o.Start, _ = StartTime(o.Pid)
	return o
}

// Alive says whether the owner still runs: its pid exists (a zombie is
// not running) with the same start time.
func (o Owner) Alive() bool {
	if o.Pid <= 0 {
		return false
	}
	st, state, err := stat(o.Pid)
	if err != nil || state == "Z" || state == "X" {
		return false
	}
	return o.Start == 0 || st == o.Start
}

func (o Owner) String() string { return "pid " + strconv.Itoa(o.Pid) }

// StartTime is pid's start time in clock ticks since boot.
func StartTime(pid int) (uint64, error) {
	st, _, err := stat(pid)
	return st, err
}

// stat reads pid's start time and state from /proc/PID/stat.
func stat(pid int) (start uint64, state string, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, "", errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field 22 (starttime) is f[19].
	if len(f) < 20 {
		return 0, "", errors.New("short /proc stat")
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("start time in /proc/%d/stat: %w", pid, err)
	}
	return start, f[0], nil
}

var (
	mu     sync.Mutex
	reaper func(dir string) error
	reaped = map[string]bool{}
)

// SetReaper sets how Recorded starts a reaper for a state directory (the
// CLI's main does: `bpfbench` runs one). Without one, what a killed
// process left waits for the next bpfbench's sweep.
func SetReaper(start func(dir string) error) {
	mu.Lock()
	defer mu.Unlock()
	reaper = start
}

// Recorded says this process has written a state file into dir: the first
// time for dir, the reaper starts. An error starting it is returned (the
// state stays recorded; the next bpfbench sweeps it).
func Recorded(dir string) error {
	mu.Lock()
	defer mu.Unlock()
	if reaper == nil || reaped[dir] {
		return nil
	}
	reaped[dir] = true
	return reaper(dir)
}

// WaitExit waits until pid exits (a pidfd, Linux 5.3): at once when it
// is gone already.
func WaitExit(pid int) error {
	fd, err := pidfdOpen(pid)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	return waitReadable(fd)
}
