// Package bpfutil holds what every collector does the same way: preparing
// the kernel file systems, explaining load errors, reading per-CPU counters,
// and the event pipeline (ring.go) every collector is built on.
package bpfutil

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// TracefsPath is where tracefs is expected.
const TracefsPath = "/sys/kernel/tracing"

// EnsureFilesystems mounts tracefs and bpffs when they are missing, as
// uprobes and tracepoints need tracefs and pinning needs bpffs.
func EnsureFilesystems() error {
	if err := ensureMount(TracefsPath, "tracefs", "nodev"); err != nil {
		return err
	}
	return ensureMount("/sys/fs/bpf", "bpf", "bpf")
}

func ensureMount(path, fstype, source string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err == nil {
		magic := map[string]int64{"tracefs": unix.TRACEFS_MAGIC, "bpf": unix.BPF_FS_MAGIC}[fstype]
		if st.Type == magic {
			return nil
		}
	}
	if err := unix.Mount(source, path, fstype, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("mounting %s at %s: %w (mount it with: mount -t %s %s %s)", fstype, path, err, fstype, source, path)
	}
	return nil
}

// PrivilegeHint is the fix for a permission error on the bpf syscall.
// Loading and attaching the programs needs CAP_BPF and CAP_PERFMON alone
// (measured on Linux 6.18 with a memlock limit of 0: since 5.11 BPF
// memory is charged to the cgroup, not RLIMIT_MEMLOCK, so
// CAP_SYS_RESOURCE is not needed).
const PrivilegeHint = "run as root, or grant CAP_BPF and CAP_PERFMON (e.g. AmbientCapabilities= in the systemd unit); on kernels before 5.11 also raise the memlock limit (LimitMEMLOCK=infinity)"

// LoadError explains an error from loading a collection: verifier errors
// carry the full log, permission errors name the fix.
func LoadError(what string, err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("loading %s: verifier rejected the program: %+v", what, ve)
	}
	if errors.Is(err, unix.EPERM) || errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("loading %s: %w (%s)", what, err, PrivilegeHint)
	}
	return fmt.Errorf("loading %s: %w", what, err)
}

// SumPerCPU sums a per-CPU uint64 value.
func SumPerCPU(m *ebpf.Map, key uint32) (uint64, error) {
	var vals []uint64
	if err := m.Lookup(key, &vals); err != nil {
		return 0, fmt.Errorf("reading %s[%d]: %w", m.String(), key, err)
	}
	var s uint64
	for _, v := range vals {
		s += v
	}
	return s, nil
}

// CString converts a NUL-padded C char array to a string.
func CString[T ~int8 | ~uint8](b []T) string {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	var sb strings.Builder
	sb.Grow(n)
	for _, c := range b[:n] {
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// Comms interns the task names of a reader's records (a kernel's comm,
// 16 bytes): a name seen before costs a map lookup, not an allocation. A
// reader's own; not safe for concurrent use.
type Comms struct{ m map[[16]int8]string }

// maxComms bounds the names a Comms holds; past it, it starts afresh.
const maxComms = 4096

// Of is b's name.
func (c *Comms) Of(b [16]int8) string {
	if s, ok := c.m[b]; ok {
		return s
	}
	if c.m == nil || len(c.m) >= maxComms {
		c.m = make(map[[16]int8]string)
	}
	s := CString(b[:])
	c.m[b] = s
	return s
}

// Dur formats seconds compactly for the sections' views: 0, 12µs, 3.4ms, 1.25s.
func Dur(sec float64) string {
	switch {
	case sec == 0:
		return "0"
	case sec < 1e-6:
		return fmt.Sprintf("%.0fns", sec*1e9)
	case sec < 1e-3:
		return fmt.Sprintf("%.0fµs", sec*1e6)
	case sec < 1:
		return fmt.Sprintf("%.1fms", sec*1e3)
	default:
		return fmt.Sprintf("%.2fs", sec)
	}
}
