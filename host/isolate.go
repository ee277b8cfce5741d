// Package host is what bpfbench does to the machine outside its own
// processes: the CPU isolation of validate and demo (affinity, priority),
// and the leftovers its state directory records (the simulated server's
// network namespace, a shaped interface, noted files), listed and removed.
package host

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
)

// The isolation of validate and demo: bpfbench (the load generator, the
// readers) runs apart from the server's CPUs where it can and at a higher
// priority, so that an injection delays the server and not the client's
// clock.

// AffinityOf returns the CPUs pid may run on (0: this process).
func AffinityOf(pid int) ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &set); err != nil {
		return nil, fmt.Errorf("reading the CPUs of pid %d: %w", pid, err)
	}
	return setCPUs(&set), nil
}

// setCPUs lists the CPUs of set.
func setCPUs(set *unix.CPUSet) []int {
	var out []int
	for c := 0; c < 1024; c++ {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}

// ReniceSelf sets the nice level of every thread of this process (the
// threads it creates later inherit it).
func ReniceSelf(nice int) error {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, e := range ents {
		var tid int
		fmt.Sscan(e.Name(), &tid)
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
			return fmt.Errorf("setting nice %d on thread %d: %w", nice, tid, err)
		}
	}
	return nil
}

// otherCPUs lists the CPUs bpfbench may run on that are not in cpus.
func otherCPUs(cpus []int) []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	for _, c := range cpus {
		set.Clear(c)
	}
	return setCPUs(&set)
}

// KeepOff restricts bpfbench to the CPUs it may run on outside cpus (the
// server's) and returns them; none when every CPU it may run on is in
// cpus, and then it restricts nothing.
func KeepOff(cpus []int) ([]int, error) {
	rest := otherCPUs(cpus)
	if len(rest) == 0 {
		return nil, nil
	}
	if err := bpfutil.RestrictToCPUs(rest); err != nil {
		return nil, err
	}
	return rest, nil
}

// SharedCPUs lists the CPUs in both a and b.
func SharedCPUs(a, b []int) []int {
	var out []int
	for _, x := range a {
		for _, y := range b {
			if x == y {
				out = append(out, x)
			}
		}
	}
	return out
}
