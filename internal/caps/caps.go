// Package caps reads the process's effective capabilities.
package caps

import (
	"golang.org/x/sys/unix"
)

// Capability numbers not in older headers.
const (
	CapSysPtrace   = 19
	CapSysAdmin    = 21
	CapSysResource = 24
	CapNetAdmin    = 12
	CapPerfmon     = 38
	CapBPF         = 39
)

// Effective reports whether capability c is in the effective set.
func Effective(c int) (bool, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false, err
	}
	return data[c/32].Effective&(1<<(uint(c)%32)) != 0, nil
}

// CanTrace reports whether the process may load and attach tracing
// programs: CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON.
func CanTrace() bool {
	if ok, _ := Effective(CapSysAdmin); ok {
		return true
	}
	bpf, _ := Effective(CapBPF)
	perf, _ := Effective(CapPerfmon)
	return bpf && perf
}

// Hint is the fix when CanTrace is false.
const Hint = "run as root (sudo bpfbench ...), or grant CAP_BPF and CAP_PERFMON"

// UprobeCapabilityHint is the fix for a uprobe refused by the kernel's
// uprobe PMU: since Linux 6.16 (commit ba677dbe77af, also in the 6.1.y,
// 6.6.y and 6.15.y stable kernels) perf_event_open of that PMU asks for
// CAP_SYS_ADMIN, where CAP_PERFMON was enough from 5.8 to 6.15. bpfbench
// places its uprobes through uprobe_multi links where the kernel has them
// (6.6+), which CAP_BPF and CAP_PERFMON allow; perf-event uprobes are the
// fallback of kernels without them.
const UprobeCapabilityHint = "the kernel's uprobe PMU needs CAP_SYS_ADMIN since Linux 6.16 (CAP_PERFMON is not enough), and this kernel has no uprobe_multi links (Linux 6.6+), which need only CAP_BPF and CAP_PERFMON: add it (Helm: extraCapabilities: [SYS_ADMIN]; systemd: AmbientCapabilities= and CapabilityBoundingSet=), run as root, or use a kernel with uprobe_multi links"
