package testutil

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cgroup2Mount is where the unified cgroup hierarchy is mounted ("" when
// it is not).
func Cgroup2Mount() string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 2 && f[2] == "cgroup2" {
			return f[1]
		}
	}
	return ""
}

// MkCgroup creates the cgroup rel (a path, parents made as needed) under
// the hierarchy mounted at mnt and returns its directory. At the test's
// end the processes still in it go back to the root cgroup and the
// directories it made are removed, deepest first: rel itself retried
// while a process that just left it lingers, its parents when empty.
func MkCgroup(t testing.TB, mnt, rel string) string {
	t.Helper()
	dir := filepath.Join(mnt, rel)
	var made []string
	for d := dir; d != mnt && d != "/" && d != "."; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		made = append(made, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("creating a cgroup under %s: %v", mnt, err)
	}
	t.Cleanup(func() {
		for _, pid := range CgroupProcs(dir) {
			_ = os.WriteFile(filepath.Join(mnt, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		}
		for i, d := range made {
			if i > 0 {
				_ = os.Remove(d) // kept while another test's cgroups are in it
				continue
			}
			if !Until(2*time.Second, func() bool { return os.Remove(d) == nil }) {
				t.Errorf("removing the test's cgroup %s: %v", d, os.Remove(d))
			}
		}
	})
	return dir
}

// MoveToCgroup moves pid into the cgroup dir, or fails t.
func MoveToCgroup(t testing.TB, dir string, pid int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("moving pid %d into the cgroup %s: %v", pid, dir, err)
	}
}

// CgroupProcs are the processes in the cgroup dir.
func CgroupProcs(dir string) []int {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}
