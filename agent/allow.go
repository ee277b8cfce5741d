package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Allow is what the agent's sessions may follow (the daemon's
// agent.allow). A process is allowed when its command name is one of
// Comms, when one of its cgroups is one of Cgroups or below it, or when
// it belongs to one of the daemon's Targets (by name). An empty Allow
// allows nothing. Whatever it lists, the agent never follows itself nor
// a kernel thread.
type Allow struct {
	Comms   []string
	Cgroups []string
	Targets []string
	// InTargets reports whether process pid belongs to one of the named
	// daemon targets (the daemon's resolution); nil: none does.
	InTargets func(pid int, names []string) bool
}

// Empty reports whether a allows nothing.
func (a *Allow) Empty() bool {
	return a == nil || len(a.Comms) == 0 && len(a.Cgroups) == 0 && len(a.Targets) == 0
}

// String lists what a allows, for logs.
func (a *Allow) String() string {
	if a.Empty() {
		return "nothing"
	}
	var parts []string
	for _, l := range []struct {
		key  string
		vals []string
	}{{"comms", a.Comms}, {"cgroups", a.Cgroups}, {"targets", a.Targets}} {
		if len(l.vals) > 0 {
			parts = append(parts, l.key+" "+strings.Join(l.vals, ","))
		}
	}
	return strings.Join(parts, "; ")
}

// cgroupAllowed reports whether cgroup path p is one of a's cgroups or
// below one.
func (a *Allow) cgroupAllowed(p string) bool {
	if a == nil || p == "" {
		return false
	}
	p = filepath.Clean(p)
	for _, c := range a.Cgroups {
		if under(p, c) {
			return true
		}
	}
	return false
}

// under reports whether cgroup path p is prefix or below it, by whole
// path components (/a/bc is not below /a/b).
func under(p, prefix string) bool {
	prefix = filepath.Clean(prefix)
	return p == prefix || prefix == "/" || strings.HasPrefix(p, prefix+"/")
}

// The refusals of a target the agent may not follow (403). One message
// for a process that is not allowed and one that does not exist, so that
// the API tells nothing of the node's processes.
const (
	refuseEmpty = "this agent follows no process: agent.allow in the daemon's configuration is empty " +
		"(list the comms, cgroups or targets its sessions may follow there)"
	refuseSelf    = "pid %d is the agent itself, which no session may follow"
	refuseKthread = "pid %d is a kernel thread, which no session may follow"
	refuseProcess = "pid %d is not a process this agent may follow: agent.allow in the daemon's configuration " +
		"lists no comm, cgroup or target of it (add one there and reload the daemon)"
	refuseCgroup = "cgroup %s is not one this agent may follow: agent.allow in the daemon's configuration " +
		"lists neither it, a cgroup above it, nor the comms or targets of its processes"
)

// ForbiddenError is a target the agent may not follow; the API answers it
// with 403 and Error (Detail goes to the daemon's log only).
type ForbiddenError struct {
	msg string
	// Detail says why, with what the agent read of the process.
	Detail string
}

func (e *ForbiddenError) Error() string { return e.msg }

// procInfo is what the agent reads of a process to decide.
type procInfo struct {
	tgid    int
	kthread bool
	comm    string
	cgroups []string
}

// pfKthread is PF_KTHREAD in /proc/PID/stat's flags.
const pfKthread = 0x00200000

// readProcInfo reads pid's thread group, kernel-thread flag, command name
// and cgroups under proc ("/proc").
func readProcInfo(proc string, pid int) (procInfo, error) {
	dir := proc + "/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return procInfo{}, err
	}
	// pid (comm) state ppid pgrp session tty tpgid flags ...: comm may
	// hold spaces and parentheses, so the fields start after the last ')'.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return procInfo{}, fmt.Errorf("%s/stat: no command name", dir)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 7 {
		return procInfo{}, fmt.Errorf("%s/stat: %d fields", dir, len(f))
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	if err != nil {
		return procInfo{}, fmt.Errorf("%s/stat: flags %q", dir, f[6])
	}
	info := procInfo{tgid: pid, kthread: flags&pfKthread != 0}
	if b, err := os.ReadFile(dir + "/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
				if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
					info.tgid = n
				}
				break
			}
		}
	}
	if b, err := os.ReadFile(dir + "/comm"); err == nil {
		info.comm = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile(dir + "/cgroup"); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			// hierarchy-ID:controller-list:cgroup-path
			if parts := strings.SplitN(line, ":", 3); len(parts) == 3 {
				info.cgroups = append(info.cgroups, parts[2])
			}
		}
	}
	return info, nil
}

// permit decides whether a session may follow pid: never the agent itself
// nor a kernel thread, otherwise what Allow lists.
func (s *Server) permit(pid int) error {
	a := s.allow.Load()
	info, err := readProcInfo(s.proc, pid)
	if err != nil {
		if a.Empty() {
			return &ForbiddenError{msg: refuseEmpty, Detail: "agent.allow is empty"}
		}
		return &ForbiddenError{msg: fmt.Sprintf(refuseProcess, pid), Detail: fmt.Sprintf("reading the process: %v", err)}
	}
	if info.tgid == s.self || pid == s.self {
		return &ForbiddenError{msg: fmt.Sprintf(refuseSelf, pid), Detail: "the agent's own process"}
	}
	if info.tgid != pid {
		// A thread: its process decides (threads name themselves).
		if leader, err := readProcInfo(s.proc, info.tgid); err == nil {
			info = leader
		}
	}
	if info.kthread {
		return &ForbiddenError{msg: fmt.Sprintf(refuseKthread, pid), Detail: "kernel thread " + info.comm}
	}
	if a.Empty() {
		return &ForbiddenError{msg: refuseEmpty, Detail: "agent.allow is empty"}
	}
	if slices.Contains(a.Comms, info.comm) {
		return nil
	}
	for _, cg := range info.cgroups {
		if a.cgroupAllowed(cg) {
			return nil
		}
	}
	if len(a.Targets) > 0 && a.InTargets != nil && a.InTargets(info.tgid, a.Targets) {
		return nil
	}
	return &ForbiddenError{msg: fmt.Sprintf(refuseProcess, pid),
		Detail: fmt.Sprintf("comm %q, cgroups %v, in none of the targets %v", info.comm, info.cgroups, a.Targets)}
}

// permitAll checks the processes a session would start on: its pid and
// the roots of its other process trees (a cgroup's).
func (s *Server) permitAll(pid int, roots []int) error {
	for _, p := range append([]int{pid}, roots...) {
		if err := s.permit(p); err != nil {
			return err
		}
	}
	return nil
}
