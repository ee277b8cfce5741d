package collectors

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Descendants is every process below pid, from /proc/PID/task/*/children
// (a server of several processes: vLLM's API server and EngineCore, a
// frontend and its engine). Processes that end while it reads are left
// out.
func Descendants(pid int) []int {
	var out []int
	seen := map[int]bool{pid: true}
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
		for _, t := range tasks {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/task/" + t.Name() + "/children")
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				c, err := strconv.Atoi(f)
				if err != nil || seen[c] {
					continue
				}
				seen[c] = true
				out = append(out, c)
				queue = append(queue, c)
			}
		}
	}
	return out
}

// Tree is pid, the other roots of the target (Options.Roots) and every
// process below any of them, each once, pid first.
func Tree(pid int, roots []int) []int {
	out := []int{pid}
	seen := map[int]bool{pid: true}
	add := func(p int) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, p := range Descendants(pid) {
		add(p)
	}
	for _, r := range roots {
		add(r)
		for _, p := range Descendants(r) {
			add(p)
		}
	}
	return out
}

// CgroupError says why a cgroup selects no target.
type CgroupError struct{ Msg string }

func (e *CgroupError) Error() string { return e.Msg }

// CgroupTarget is a cgroup's processes as a session's target: Pid, the
// root of its first process tree (the lowest pid whose parent is outside
// the cgroup), and Roots, those of its other trees (a process joined from
// outside: docker exec, a second ExecStart). Path is the cgroup as
// /proc/PID/cgroup writes it; Procs how many processes it held.
type CgroupTarget struct {
	Path  string
	Pid   int
	Roots []int
	Procs int
}

// ResolveCgroup finds the processes of cgroup arg and below it, in any
// hierarchy: arg as /proc/PID/cgroup writes it (/system.slice/vllm.service)
// or as its directory under a mounted cgroup file system
// (/sys/fs/cgroup/system.slice/vllm.service, /sys/fs/cgroup/pids/x).
func ResolveCgroup(arg string) (CgroupTarget, error) {
	return resolveCgroup("/proc", "/proc/self/mountinfo", arg)
}

func resolveCgroup(proc, mountinfo, arg string) (CgroupTarget, error) {
	path, err := cgroupPath(mountinfo, arg)
	if err != nil {
		return CgroupTarget{}, err
	}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return CgroupTarget{}, err
	}
	in := map[int]bool{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(proc + "/" + e.Name() + "/cgroup")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			// hierarchy-ID:controller-list:cgroup-path
			parts := strings.SplitN(line, ":", 3)
			if len(parts) == 3 && (parts[2] == path || strings.HasPrefix(parts[2], strings.TrimSuffix(path, "/")+"/")) {
				in[pid] = true
				break
			}
		}
	}
	t := CgroupTarget{Path: path, Procs: len(in)}
	if len(in) == 0 {
		return t, &CgroupError{fmt.Sprintf("cgroup %s holds no process (give the path /proc/PID/cgroup shows for the server, e.g. /system.slice/vllm.service, or its directory under /sys/fs/cgroup)", path)}
	}
	var roots []int
	for pid := range in {
		if !in[ParentPid(proc, pid)] {
			roots = append(roots, pid)
		}
	}
	slices.Sort(roots)
	t.Pid, t.Roots = roots[0], roots[1:]
	return t, nil
}

// cgroupPath is arg as /proc/PID/cgroup writes it: a directory under a
// cgroup or cgroup2 mount loses the mount point (and takes the mount's
// root); anything else must be absolute already.
func cgroupPath(mountinfo, arg string) (string, error) {
	if !strings.HasPrefix(arg, "/") {
		return "", &CgroupError{fmt.Sprintf("cgroup %q: give an absolute path, as /proc/PID/cgroup shows it (/system.slice/vllm.service) or under /sys/fs/cgroup", arg)}
	}
	arg = filepath.Clean(arg)
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		return arg, nil
	}
	best, root := "", ""
	for _, line := range strings.Split(string(b), "\n") {
		// id parent major:minor root mountpoint options ... - fstype source super
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if sep < 5 || sep+1 >= len(f) || (f[sep+1] != "cgroup" && f[sep+1] != "cgroup2") {
			continue
		}
		mp := f[4]
		if (arg == mp || strings.HasPrefix(arg, mp+"/")) && len(mp) > len(best) {
			best, root = mp, f[3]
		}
	}
	if best == "" {
		return arg, nil
	}
	return filepath.Join(root, "/"+strings.TrimPrefix(arg, best)), nil
}

// ParentPid is the parent of pid in proc ("/proc"; 0 when unknown).
func ParentPid(proc string, pid int) int {
	f := statFields(proc, pid)
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// statFields are the fields of proc/PID/stat after the command's name
// (f[0] is the state, field 3), nil when it cannot be read: a name may
// hold spaces and parentheses, so the fields start after the last ')'.
func statFields(proc string, pid int) []string {
	b, err := os.ReadFile(proc + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}
