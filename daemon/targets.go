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
}

// Resolve returns, for every process matching a target, its slot (the
// target's index + 1). A process matching several targets takes the first.
func (r Resolver) Resolve() (map[uint32]uint32, error) {
	proc := r.Proc
	if proc == "" {
		proc = "/proc"
	}
	out := map[uint32]uint32{}
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
		return out, nil
	}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var comm string
		var cgroups []string
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
			}
		}
	}
	return out, nil
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
