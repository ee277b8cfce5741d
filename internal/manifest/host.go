package manifest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

func (c *collector) kernel() {
	rel, err := os.ReadFile(filepath.Join(c.proc, "sys/kernel/osrelease"))
	if err != nil {
		c.note(fmt.Errorf("reading the kernel release: %w", err))
		return
	}
	k := &Kernel{Release: strings.TrimSpace(string(rel))}
	if v, err := os.ReadFile(filepath.Join(c.proc, "sys/kernel/version")); err == nil {
		k.Version = strings.TrimSpace(string(v))
	}
	c.m.Kernel = k
}

func (c *collector) cpu() {
	b, err := os.ReadFile(filepath.Join(c.proc, "cpuinfo"))
	if err != nil {
		c.note(fmt.Errorf("reading the CPU model: %w", err))
		return
	}
	cpu := &CPU{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "processor":
			cpu.Count++
		case "model name", "Model", "uarch", "cpu model":
			if cpu.Model == "" {
				cpu.Model = strings.TrimSpace(v)
			}
		}
	}
	c.m.CPU = cpu
	files, _ := filepath.Glob(filepath.Join(c.sys, "devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"))
	for _, f := range files {
		g, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if cpu.Governors == nil {
			cpu.Governors = map[string]int{}
		}
		cpu.Governors[strings.TrimSpace(string(g))]++
	}
	if cpu.Governors == nil {
		c.note(fmt.Errorf("reading the CPU frequency governor: %s has no cpufreq (a VM, or a driver that offers none)",
			filepath.Join(c.sys, "devices/system/cpu")))
	}
}

// cgroupLine is one line of /proc/PID/cgroup.
type cgroupLine struct {
	controllers []string
	path        string
}

func parseCgroups(b []byte) []cgroupLine {
	var out []cgroupLine
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var ctl []string
		if parts[1] != "" {
			ctl = strings.Split(parts[1], ",")
		}
		out = append(out, cgroupLine{ctl, parts[2]})
	}
	return out
}

// cgroup reads the process's cgroup and the tightest CPU and memory
// limits on its path: its own, or an ancestor's.
func (c *collector) cgroup() {
	b, err := os.ReadFile(c.pidPath("cgroup"))
	if err != nil {
		c.note(fmt.Errorf("reading the cgroup of process %d: %w", c.pid, err))
		return
	}
	lines := parseCgroups(b)
	root := filepath.Join(c.sys, "fs/cgroup")
	var cpuV1, memV1, v2 *cgroupLine
	for i := range lines {
		l := &lines[i]
		if len(l.controllers) == 0 {
			v2 = l
		}
		for _, ctl := range l.controllers {
			switch ctl {
			case "cpu":
				cpuV1 = l
			case "memory":
				memV1 = l
			}
		}
	}
	switch {
	case cpuV1 != nil || memV1 != nil:
		cg := &Cgroup{Version: 1}
		if cpuV1 != nil {
			c.cgroupV1CPU(cg, root, cpuV1)
		}
		if memV1 != nil {
			c.cgroupV1Memory(cg, root, memV1)
		}
		c.m.Cgroup = cg
	case v2 != nil:
		c.m.Cgroup = c.cgroupV2(root, v2)
	default:
		c.note(fmt.Errorf("reading the cgroup of process %d: no cgroup line in %s", c.pid, c.pidPath("cgroup")))
	}
}

// cgroupV1CPU sets cg's path and CPU limit from l, the process's line of
// the v1 cpu controller mounted under root.
func (c *collector) cgroupV1CPU(cg *Cgroup, root string, l *cgroupLine) {
	cg.Path = l.path
	dir := filepath.Join(root, strings.Join(l.controllers, ","), l.path)
	if _, err := os.Stat(dir); err != nil {
		dir = filepath.Join(root, "cpu", l.path)
	}
	quota := atoi64(readString(filepath.Join(dir, "cpu.cfs_quota_us")))
	period := atoi64(readString(filepath.Join(dir, "cpu.cfs_period_us")))
	switch {
	case quota > 0 && period > 0:
		cg.CPUMax = fmt.Sprintf("%d %d", quota, period)
		cg.CPULimit = float64(quota) / float64(period)
	case quota == -1 && period > 0:
		cg.CPUMax = fmt.Sprintf("max %d", period)
	default:
		c.note(fmt.Errorf("reading the CPU limit of cgroup %s: no cpu.cfs_quota_us in %s", l.path, dir))
	}
}

// cgroupV1Memory sets cg's memory limit (and its path, if the CPU's did
// not) from l, the process's line of the v1 memory controller under root.
func (c *collector) cgroupV1Memory(cg *Cgroup, root string, l *cgroupLine) {
	if cg.Path == "" {
		cg.Path = l.path
	}
	dir := filepath.Join(root, "memory", l.path)
	switch v := atoi64(readString(filepath.Join(dir, "memory.limit_in_bytes"))); {
	case v < 0:
		c.note(fmt.Errorf("reading the memory limit of cgroup %s: no memory.limit_in_bytes in %s", l.path, dir))
	case v >= 1<<62: // the kernel's "no limit", rounded to a page
		cg.MemoryMax = "max"
	default:
		cg.MemoryMax = strconv.FormatInt(v, 10)
	}
}

// cgroupV2 is the cgroup of l, the process's cgroup2 line, with the
// tightest CPU and memory limits from its directory up to root.
func (c *collector) cgroupV2(root string, l *cgroupLine) *Cgroup {
	cg := &Cgroup{Version: 2, Path: l.path}
	dir := filepath.Join(root, l.path)
	if _, err := os.Stat(dir); err != nil {
		c.note(fmt.Errorf("reading the limits of cgroup %s: %w (is cgroup2 mounted at %s?)", l.path, err, root))
		return cg
	}
	cg.CPUMax, cg.CPULimit, cg.MemoryMax = "max", 0, "max"
	var memLimit int64 = -1
	// From the leaf up to the mount's root: the tightest limit wins.
	for d := dir; ; d = filepath.Dir(d) {
		if s := readString(filepath.Join(d, "cpu.max")); s != "" {
			f := strings.Fields(s)
			if len(f) == 2 && f[0] != "max" {
				q, p := atoi64(f[0]), atoi64(f[1])
				if q > 0 && p > 0 {
					if l := float64(q) / float64(p); cg.CPULimit == 0 || l < cg.CPULimit {
						cg.CPULimit, cg.CPUMax = l, s
					}
				}
			} else if cg.CPULimit == 0 && d == dir {
				cg.CPUMax = s
			}
		}
		if s := readString(filepath.Join(d, "memory.max")); s != "" && s != "max" {
			if v := atoi64(s); v >= 0 && (memLimit < 0 || v < memLimit) {
				memLimit, cg.MemoryMax = v, s
			}
		}
		if d == root || len(d) <= len(root) {
			break
		}
	}
	return cg
}

func readString(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Governor is the governors of a CPU as one string: "performance", or
// "powersave×2, performance×1" when the CPUs differ.
func (c *CPU) Governor() string {
	if c == nil || len(c.Governors) == 0 {
		return ""
	}
	if len(c.Governors) == 1 {
		for g := range c.Governors {
			return g
		}
	}
	names := make([]string, 0, len(c.Governors))
	for g := range c.Governors {
		names = append(names, g)
	}
	sort.Strings(names)
	for i, g := range names {
		names[i] = fmt.Sprintf("%s×%d", g, c.Governors[g])
	}
	return strings.Join(names, ", ")
}
