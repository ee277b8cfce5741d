// Package caps reads the process's effective capabilities.
package caps

import (
	"golang.org/x/sys/unix"
)

// Capability numbers not in older headers.
const (
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
