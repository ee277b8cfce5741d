package daemon

import (
	"os"
	"strconv"
	"strings"
)

// Resolver matches configured targets against /proc.
type Resolver struct {
	Proc    string // "/proc" unless testing
	Targets []Target
	// Pods are this node's containers, for Kubernetes targets (nil: the
	// pods are not listed yet, and no Kubernetes target matches).
	Pods *PodIndex
}

// Resolve returns, for every process matching a target, its slot (the
// target's index + 1). A process matching several targets takes the first.
func (r Resolver) Resolve() (map[uint32]uint32, error) {
	slots, _, err := r.ResolvePods()
	return slots, err
}

// ResolvePods is Resolve that also returns, for each slot of a Kubernetes
// target, the pod containers its processes are in.
func (r Resolver) ResolvePods() (map[uint32]uint32, map[uint32]map[PodContainer]int, error) {
	slots, pods, _, err := r.resolve()
	return slots, pods, err
}

// resolve is ResolvePods that also returns the pod container of every
// process a Kubernetes target matched.
func (r Resolver) resolve() (map[uint32]uint32, map[uint32]map[PodContainer]int, map[uint32]PodContainer, error) {
	proc := r.Proc
	if proc == "" {
		proc = "/proc"
	}
	res := resolution{slots: map[uint32]uint32{}, pods: map[uint32]map[PodContainer]int{}, procPods: map[uint32]PodContainer{}}
	if !r.resolvePids(proc, res.slots) {
		return res.slots, res.pods, res.procPods, nil
	}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		r.match(&res, proc, e.Name(), uint32(pid))
	}
	return res.slots, res.pods, res.procPods, nil
}

// resolution is what resolve found: each process's slot, each
// Kubernetes slot's pod containers and each of its processes' container.
type resolution struct {
	slots    map[uint32]uint32
	pods     map[uint32]map[PodContainer]int
	procPods map[uint32]PodContainer
}

// resolvePids gives the slots of the targets named by pid to those
// processes that exist, and reports whether other targets need /proc
// scanned.
func (r Resolver) resolvePids(proc string, slots map[uint32]uint32) (needScan bool) {
	for i, t := range r.Targets {
		if t.Pid != 0 {
			if _, err := os.Stat(proc + "/" + strconv.Itoa(t.Pid)); err == nil {
				if _, dup := slots[uint32(t.Pid)]; !dup {
					slots[uint32(t.Pid)] = uint32(i + 1)
				}
			}
		} else {
			needScan = true
		}
	}
	return needScan
}

// match gives process pid (its /proc entry name) the slot of the first
// target whose comm, cgroup or pod container it matches, reading its
// comm, cgroups and container once, when a target first needs them.
func (r Resolver) match(res *resolution, proc, name string, pid uint32) {
	var comm string
	var cgroups []string
	var container *podContainer
	for i, t := range r.Targets {
		if _, done := res.slots[pid]; done {
			break
		}
		switch {
		case t.Comm != "":
			if comm == "" {
				b, err := os.ReadFile(proc + "/" + name + "/comm")
				if err != nil {
					continue
				}
				comm = strings.TrimSpace(string(b))
			}
			if comm == t.Comm {
				res.slots[pid] = uint32(i + 1)
			}
		case t.Cgroup != "":
			if cgroups == nil {
				cgroups = readCgroups(proc + "/" + name + "/cgroup")
			}
			if inCgroup(cgroups, t.Cgroup) {
				res.slots[pid] = uint32(i + 1)
			}
		case t.Kubernetes():
			if r.Pods == nil {
				continue
			}
			if container == nil {
				if cgroups == nil {
					cgroups = readCgroups(proc + "/" + name + "/cgroup")
				}
				pc, _ := r.Pods.lookup(containerOf(cgroups))
				container = &pc
			}
			if container.Pod != "" && t.matches(*container) {
				slot := uint32(i + 1)
				res.slots[pid] = slot
				if res.pods[slot] == nil {
					res.pods[slot] = map[PodContainer]int{}
				}
				res.pods[slot][container.PodContainer]++
				res.procPods[pid] = container.PodContainer
			}
		}
	}
}

// inCgroup reports whether one of cgroups is cg or below it.
func inCgroup(cgroups []string, cg string) bool {
	for _, c := range cgroups {
		if c == cg || strings.HasPrefix(c, strings.TrimSuffix(cg, "/")+"/") {
			return true
		}
	}
	return false
}

// readCgroups returns the cgroup paths of a process, one per hierarchy.
func readCgroups(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return []string{}
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 {
			out = append(out, parts[2])
		}
	}
	return out
}
