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
	out := map[uint32]uint32{}
	pods := map[uint32]map[PodContainer]int{}
	procPods := map[uint32]PodContainer{}
	needScan := false
	for i, t := range r.Targets {
		if t.Pid != 0 {
			if _, err := os.Stat(proc + "/" + strconv.Itoa(t.Pid)); err == nil {
				if _, dup := out[uint32(t.Pid)]; !dup {
					out[uint32(t.Pid)] = uint32(i + 1)
				}
			}
		} else {
			needScan = true
		}
	}
	if !needScan {
		return out, pods, procPods, nil
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
		var comm string
		var cgroups []string
		var container *podContainer
		for i, t := range r.Targets {
			if _, done := out[uint32(pid)]; done {
				break
			}
			switch {
			case t.Comm != "":
				if comm == "" {
					b, err := os.ReadFile(proc + "/" + e.Name() + "/comm")
					if err != nil {
						continue
					}
					comm = strings.TrimSpace(string(b))
				}
				if comm == t.Comm {
					out[uint32(pid)] = uint32(i + 1)
				}
			case t.Cgroup != "":
				if cgroups == nil {
					cgroups = readCgroups(proc + "/" + e.Name() + "/cgroup")
				}
				for _, cg := range cgroups {
					if cg == t.Cgroup || strings.HasPrefix(cg, strings.TrimSuffix(t.Cgroup, "/")+"/") {
						out[uint32(pid)] = uint32(i + 1)
						break
					}
				}
			case t.Kubernetes():
				if r.Pods == nil {
					continue
				}
				if container == nil {
					if cgroups == nil {
						cgroups = readCgroups(proc + "/" + e.Name() + "/cgroup")
					}
					pc, _ := r.Pods.lookup(containerOf(cgroups))
					container = &pc
				}
				if container.Pod != "" && t.matches(*container) {
					slot := uint32(i + 1)
					out[uint32(pid)] = slot
					if pods[slot] == nil {
						pods[slot] = map[PodContainer]int{}
					}
					pods[slot][container.PodContainer]++
					procPods[uint32(pid)] = container.PodContainer
				}
			}
		}
	}
	return out, pods, procPods, nil
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
