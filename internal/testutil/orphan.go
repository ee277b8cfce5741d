package testutil

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// EndWithParent ends this process once its parent has gone (it is
// re-parented): a test binary whose go command was killed, or a CLI child
// of a test binary that timed out, would otherwise run on and hold CPUs,
// servers and network namespaces on the host the next tests share. With
// descendants set (a test binary) it first sends SIGTERM to every process
// below it but those keep names by their command line (a reaper that
// outlives its parent by design), so that busy loops, servers and CLI
// children end too, and exits after a grace; without (a CLI child) it
// sends itself SIGTERM, which stops it as any SIGTERM does. It checks
// every second, in tests only.
func EndWithParent(descendants bool, keep func(argv []string) bool) {
	parent := os.Getppid()
	go func() {
		for os.Getppid() == parent {
			time.Sleep(time.Second)
		}
		fmt.Fprintf(os.Stderr, "testutil: parent %d has gone: ending %d\n", parent, os.Getpid())
		if !descendants {
			_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
			time.Sleep(10 * time.Second)
			os.Exit(2)
		}
		for _, pid := range Descendants(os.Getpid()) {
			if keep == nil || !keep(cmdline(pid)) {
				_ = syscall.Kill(pid, syscall.SIGTERM)
			}
		}
		time.Sleep(3 * time.Second)
		os.Exit(2)
	}()
}

// Descendants returns the processes below pid (children, theirs, ...),
// from /proc.
func Descendants(pid int) []int {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if i < 0 || len(f) < 2 {
			continue
		}
		self, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], self)
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

func cmdline(pid int) []string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}
