// Package readiness checks what this kernel and host offer bpfbench
// (`bpfbench check`): BTF, the BPF syscall and map types, tracefs, each
// collector's tracepoints, which kind of uprobe link works with the current
// privileges, the uprobe cost, how the tcp collector can read a target's
// sockets, CUDA and NVML libraries; every check says what to do when it
// fails, and a refusal (EPERM) names the capability rather than a kernel.
package readiness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/collectors/cuda"
	"github.com/bpfbench/bpfbench/collectors/tcp"
	"github.com/bpfbench/bpfbench/internal/caps"
	"github.com/bpfbench/bpfbench/internal/uprobecost"
)

// Status of a readiness check.
type Status string

// The statuses, from best to worst.
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "fail"
)

// Check is one line of `bpfbench check`.
type Check struct {
	Status Status `json:"status"`
	Name   string `json:"name"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// TracepointSet names the tracepoints a collector attaches to: tp_btf names
// ("sched_switch") or classic "group/name" tracepoints. Optional ones only
// warn when missing (the collector attaches the rest).
type TracepointSet struct {
	Collector string
	Required  []string
	Optional  []string
	// Probe loads and attaches the collector's own programs as the
	// commands do (hostWide: as the daemon), and releases them: check
	// runs it so that it cannot say ok where a command's load fails.
	Probe func(hostWide bool) (bpfutil.LoadReport, error)
	// OneLoad: the collector loads the same programs for the daemon as
	// for a session (its probes attach per target later): one load line.
	OneLoad bool
}

// MinKernel is the oldest kernel with everything the collectors use
// (ring buffers 5.8, task storage in tracing programs 5.11).
var MinKernel = [2]int{5, 11}

// Readiness runs every check. The daemon can run when none fails.
func Readiness(sets []TracepointSet) []Check {
	var out []Check
	add := func(c Check) { out = append(out, c) }

	add(checkKernel())
	add(checkBTF())
	privileged := caps.CanTrace()
	if privileged {
		add(Check{OK, "privileges", "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) are effective", ""})
	} else {
		add(Check{Fail, "privileges", "neither CAP_SYS_ADMIN nor CAP_BPF with CAP_PERFMON is effective", caps.Hint})
	}
	add(checkBPFSyscall())
	add(checkMap("ring buffer", ebpf.RingBuf, "kernel 5.8 or later"))
	add(checkMap("task storage", ebpf.TaskStorage, "kernel 5.11 or later with CONFIG_BPF_LSM or CONFIG_BPF_SYSCALL"))
	add(checkTracefs())
	for _, s := range sets {
		for _, tp := range s.Required {
			add(checkTracepoint(s.Collector, tp, true))
		}
		for _, tp := range s.Optional {
			add(checkTracepoint(s.Collector, tp, false))
		}
	}
	if privileged {
		standIns := map[string]string{} // tracepoint -> its stand-ins
		for _, s := range sets {
			if s.Probe == nil {
				continue
			}
			c, rep := checkLoad(s, false)
			if s.OneLoad {
				c.Name = "load " + s.Collector
			}
			add(c)
			if !s.OneLoad {
				c, _ = checkLoad(s, true)
				add(c)
			}
			for tp, fns := range rep.StandIns {
				standIns[tp] = strings.Join(fns, ", ") + " instead"
			}
		}
		// A missing tracepoint a stand-in replaces is not missing.
		for i, c := range out {
			tp, ok := strings.CutPrefix(c.Name, "tracepoint ")
			if fns, has := standIns[tp]; ok && has && c.Status == Warn {
				out[i] = Check{OK, c.Name, "not in this kernel; traced at " + fns, ""}
			}
		}
	}
	add(checkPMU("uprobe", true, "a kernel with CONFIG_UPROBE_EVENTS=y (CUDA probes need it)"))
	if privileged {
		add(checkUprobeLinks())
		add(checkUprobeCost())
	}
	add(checkSchedInfo())
	add(checkTCPSockets(tcp.CheckAccess()))
	add(checkPMU("kprobe", false, "not used by bpfbench; nothing to do"))
	add(checkFentry())
	add(checkLibrary("nvml", "libnvidia-ml.so.1", "install the NVIDIA driver to get GPU metrics; bpfbench runs without them"))
	add(checkLibrary("libcuda", "libcuda.so.1", "CUDA probes attach to the libcuda a process maps; none is installed system-wide"))
	return out
}

// Ready reports whether no check failed.
func Ready(cs []Check) bool {
	for _, c := range cs {
		if c.Status == Fail {
			return false
		}
	}
	return true
}

func kernelRelease() (string, [2]int) {
	rel := bpfutil.KernelRelease()
	var v [2]int
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) >= 2 {
		v[0], _ = strconv.Atoi(parts[0])
		minor := parts[1]
		if i := strings.IndexFunc(minor, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
			minor = minor[:i]
		}
		v[1], _ = strconv.Atoi(minor)
	}
	return rel, v
}

func checkKernel() Check {
	rel, v := kernelRelease()
	if v[0] > MinKernel[0] || (v[0] == MinKernel[0] && v[1] >= MinKernel[1]) {
		return Check{OK, "kernel", fmt.Sprintf("%s (>= %d.%d needed)", rel, MinKernel[0], MinKernel[1]), ""}
	}
	return Check{Fail, "kernel", fmt.Sprintf("%s is older than %d.%d", rel, MinKernel[0], MinKernel[1]), "upgrade the kernel"}
}

func checkBTF() Check {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return Check{Fail, "btf", "/sys/kernel/btf/vmlinux is missing", "use a kernel built with CONFIG_DEBUG_INFO_BTF=y"}
	}
	if _, err := btf.LoadKernelSpec(); err != nil {
		return Check{Fail, "btf", "reading kernel BTF: " + err.Error(), "use a kernel built with CONFIG_DEBUG_INFO_BTF=y"}
	}
	return Check{OK, "btf", "/sys/kernel/btf/vmlinux", ""}
}

func checkBPFSyscall() Check {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		fix := caps.Hint
		if errors.Is(err, unix.ENOSYS) {
			fix = "use a kernel built with CONFIG_BPF_SYSCALL=y"
		}
		return Check{Fail, "bpf syscall", "creating a map: " + refusalDetail(err), fix}
	}
	m.Close()
	return Check{OK, "bpf syscall", "maps can be created", ""}
}

func checkMap(name string, t ebpf.MapType, fix string) Check {
	if err := features.HaveMapType(t); err != nil {
		if f, ok := refusalFix(err); ok {
			return Check{Fail, name, "cannot be probed: " + refusalDetail(err), f}
		}
		return Check{Fail, name, err.Error(), fix}
	}
	return Check{OK, name, "supported", ""}
}

func checkTracefs() Check {
	if err := bpfutil.EnsureFilesystems(); err != nil {
		return Check{Warn, "tracefs", err.Error(), "mount -t tracefs nodev " + bpfutil.TracefsPath}
	}
	return Check{OK, "tracefs", "mounted at " + bpfutil.TracefsPath, ""}
}

var nopProgram = asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}

// checkTracepoint loads and attaches a no-op program to the tracepoint:
// the only proof that the collector's own attach will work.
func checkTracepoint(collector, tp string, required bool) Check {
	name := "tracepoint " + tp
	bad := Fail
	fix := "use a kernel that has this tracepoint; the " + collector + " collector needs it"
	if !required {
		bad = Warn
		fix = "the " + collector + " collector works without it, with less detail"
	}
	var l link.Link
	if group, ev, ok := strings.Cut(tp, "/"); ok {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.TracePoint, License: "GPL", Instructions: nopProgram})
		if err != nil {
			return Check{bad, name, "loading a probe program: " + shortErr(err), caps.Hint}
		}
		defer p.Close()
		l, err = link.Tracepoint(group, ev, p, nil)
		if err != nil {
			return Check{bad, name, err.Error(), fix}
		}
	} else {
		p, err := newTracing(&ebpf.ProgramSpec{
			Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: tp,
			License: "GPL", Instructions: nopProgram,
		})
		if err != nil {
			if f, ok := refusalFix(err); ok {
				return Check{bad, name, "tp_btf load: " + refusalDetail(err), f}
			}
			return Check{bad, name, "tp_btf load: " + err.Error(), fix}
		}
		defer p.Close()
		l, err = link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			if f, ok := refusalFix(err); ok {
				return Check{bad, name, "tp_btf attach: " + refusalDetail(err), f}
			}
			return Check{bad, name, "tp_btf attach: " + err.Error(), fix}
		}
		name = "tp_btf " + tp
	}
	l.Close()
	return Check{OK, name, collector + ": loads and attaches", ""}
}

// checkLoad loads the collector's programs as a session (run, attach) or
// as the daemon does, with the verifier's verdict on this kernel, and says
// which tracepoints are missing and which stand-ins were used.
func checkLoad(s TracepointSet, hostWide bool) (Check, bpfutil.LoadReport) {
	mode, who := "session", "run and attach"
	if hostWide {
		mode, who = "host", "the daemon"
	}
	name := "load " + s.Collector + " (" + mode + ")"
	rep, err := s.Probe(hostWide)
	if err != nil {
		bad, fix := Warn, who+" carry on without the "+s.Collector+" collector"
		if len(s.Required) > 0 {
			bad, fix = Fail, who+" cannot start: the "+s.Collector+" collector is required"
		}
		if f, ok := refusalFix(err); ok {
			fix = f
		}
		return Check{bad, name, "kernel " + bpfutil.KernelRelease() + ": " + shortErr(err), fix}, rep
	}
	detail := fmt.Sprintf("%d programs load and attach", rep.Programs)
	if len(rep.Variants) > 0 {
		detail += "; in place of what this kernel lacks: " + strings.Join(rep.Variants, "; ")
	}
	if len(rep.Missing) == 0 {
		return Check{OK, name, detail, ""}, rep
	}
	detail += "; kernel " + bpfutil.KernelRelease() + " lacks the tracepoints " + strings.Join(rep.Missing, ", ")
	return Check{Warn, name, detail, missingFix(s.Collector, rep.Missing)}, rep
}

// missingFix says what a collector loses without the tracepoints.
func missingFix(collector string, missing []string) string {
	var lost []string
	for _, tp := range missing {
		if w, ok := tracepointGives[tp]; ok {
			lost = append(lost, tp+": "+w)
		}
	}
	fix := "the " + collector + " collector works without them, with less detail"
	if len(lost) > 0 {
		fix += " (" + strings.Join(lost, "; ") + ")"
	}
	return fix + "; a newer kernel has them"
}

// tracepointGives is what a tracepoint the kernel may lack gives.
var tracepointGives = map[string]string{
	"sk_data_ready":      "arrivals at the load generator's sockets, the live view's requests, and data edges between the server's processes over unix sockets",
	"sock_send_length":   "the server's sends: the live view's streams and run's matching of chunks to sends",
	"sock_recv_length":   "data edges between the server's processes over unix sockets",
	"tcp_cong_state_set": "loss episodes",
	"irq_handler_entry":  "device interrupt time inside the server's running time",
	"kfree_skb(rx_sk)":   "TCP receive-queue drops by connection (kfree_skb passes the receiving socket since Linux 6.11)",
}

func checkPMU(name string, required bool, fix string) Check {
	p := "/sys/bus/event_source/devices/" + name + "/type"
	if _, err := os.Stat(p); err != nil {
		if required {
			return Check{Warn, name + "s", "not supported by this kernel (" + p + " missing)", fix}
		}
		return Check{Warn, name + "s", "not supported by this kernel", fix}
	}
	return Check{OK, name + "s", "supported", ""}
}

// checkUprobeLinks places a uprobe on a function of bpfbench itself through
// each kind of link, with the current privileges, and says which works:
// the CUDA probes are uprobe_multi links where the kernel has them (6.6+;
// CAP_BPF and CAP_PERFMON suffice), else perf-event uprobes, which need
// CAP_SYS_ADMIN since Linux 6.16 (commit ba677dbe77af).
func checkUprobeLinks() Check {
	lc, err := uprobecost.CheckLinks()
	if err != nil {
		return Check{Warn, "uprobe links", "placing a uprobe on bpfbench itself: " + shortErr(err), "CUDA probes may not attach"}
	}
	rel, v := kernelRelease()
	multi := "uprobe_multi: " + linkStatus(lc.Multi, v)
	perf := "perf uprobes: " + linkStatus(lc.Perf, v)
	switch {
	case lc.Multi == nil:
		return Check{OK, "uprobe links", multi + "; " + perf + "; CUDA probes use uprobe_multi", ""}
	case lc.Perf == nil:
		return Check{OK, "uprobe links", multi + "; " + perf + "; CUDA probes use perf uprobes (one link per probe: slower to detach)", ""}
	case refused(lc.Perf):
		return Check{Warn, "uprobe links", multi + "; " + perf + " (kernel " + rel + ")", caps.UprobeCapabilityHint}
	}
	return Check{Warn, "uprobe links", multi + "; " + perf, "CUDA probes cannot attach: use a kernel with CONFIG_UPROBE_EVENTS=y"}
}

func refused(err error) bool { return errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) }

// refusalFix is the fix of a probe the kernel refused (EPERM, EACCES):
// the capabilities, when they are not effective, rather than a newer
// kernel; ok is false for other errors.
func refusalFix(err error) (fix string, ok bool) {
	if !refused(err) {
		return "", false
	}
	if !caps.CanTrace() {
		return caps.Hint, true
	}
	return "refused although CAP_BPF and CAP_PERFMON are effective: a seccomp filter without bpf, or kernel lockdown (integrity or confidentiality)", true
}

// checkTCPSockets says how the tcp collector can read a target's sockets
// with the current privileges: in bpfbench's own network namespace through
// socket diag (no capability), in another through the target's
// descriptors (pidfd_getfd: CAP_SYS_PTRACE), else through setns
// (CAP_SYS_ADMIN). Another user's process needs CAP_SYS_PTRACE either way
// (its /proc/PID/fd).
func checkTCPSockets(a tcp.Access) Check {
	const name = "tcp sockets"
	if a.Own != nil {
		return Check{Warn, name, "socket diag in bpfbench's network namespace: " + shortErr(a.Own),
			"the tcp section lists no connection: allow AF_NETLINK sockets (systemd: RestrictAddressFamilies=)"}
	}
	own := "own network namespace: socket diag ok"
	switch {
	case a.Descriptors == nil && a.Ptrace:
		return Check{OK, name, own + "; other namespaces: through the server's descriptors (pidfd_getfd, CAP_SYS_PTRACE)", ""}
	case a.Setns && a.Ptrace:
		return Check{OK, name, own + "; other namespaces: through setns (CAP_SYS_ADMIN); pidfd_getfd: " + shortErr(a.Descriptors), ""}
	case a.Descriptors != nil && !a.Setns:
		return Check{Warn, name, own + "; other namespaces: pidfd_getfd: " + shortErr(a.Descriptors) + ", and no CAP_SYS_ADMIN for setns",
			"servers in another network namespace (containers, pods) show no connection: " + tcp.SocketAccessHint}
	}
	return Check{Warn, name, own + "; other users' servers: CAP_SYS_PTRACE is not effective (their /proc/PID/fd and descriptors)",
		"grant CAP_SYS_PTRACE or run as root; the tcp section of another user's server shows no connection without it"}
}

// linkStatus says "ok" or why a kind of uprobe link cannot be placed.
func linkStatus(err error, kernel [2]int) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ebpf.ErrNotSupported):
		return "not in this kernel (Linux 6.6+)"
	case refused(err):
		if ok, _ := caps.Effective(caps.CapSysAdmin); !ok {
			if kernel[0] > 6 || (kernel[0] == 6 && kernel[1] >= 16) {
				return "need CAP_SYS_ADMIN (Linux >= 6.16)"
			}
			return "need CAP_SYS_ADMIN (a stable kernel with commit ba677dbe77af)"
		}
		return "refused: " + shortErr(err)
	}
	return "failed: " + shortErr(err)
}

// checkUprobeCost measures a real uprobe hit on this host: it sets how many
// CUDA launches a second the launch probes may see before they are sampled.
func checkUprobeCost() Check {
	c, err := uprobecost.Measure()
	if err != nil {
		return Check{Warn, "uprobe cost", "measuring a uprobe hit: " + shortErr(err), "CUDA launch probes assume 20 µs a hit"}
	}
	rate := cuda.DefaultBudget.Ratio * 1e9 / max(c.SingleStepNs, c.EmulatedNs, 1)
	return Check{OK, "uprobe cost", fmt.Sprintf("%.2f µs a hit on an emulated first instruction, %.2f µs single-stepped; launch probes are sampled above about %.0f launches/s (%.1f%% of a CPU)",
		c.EmulatedNs/1e3, c.SingleStepNs/1e3, rate, 100*cuda.DefaultBudget.Ratio), ""}
}

// checkSchedInfo: run-queue waits come from the kernel's own sched_info
// stamps (CONFIG_SCHED_INFO, which /proc/PID/schedstat shows).
func checkSchedInfo() Check {
	if _, err := os.Stat("/proc/self/schedstat"); err != nil {
		return Check{Fail, "sched_info", "/proc/self/schedstat is missing: the kernel lacks CONFIG_SCHED_INFO", "use a kernel with CONFIG_SCHED_INFO=y (selected by SCHEDSTATS or TASK_DELAY_ACCT); run-queue latency reads its stamps"}
	}
	return Check{OK, "sched_info", "run-queue stamps available (CONFIG_SCHED_INFO)", ""}
}

// newTracing loads a tracing program (its target looked up in the
// kernel's BTF) with the process's shared kernel BTF: ebpf.NewProgram
// would decode the kernel's BTF for each check.
func newTracing(spec *ebpf.ProgramSpec) (*ebpf.Program, error) {
	coll, err := ebpf.NewCollectionWithOptions(&ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{"probe": spec}},
		ebpf.CollectionOptions{Cache: bpfutil.BTFCache()})
	if err != nil {
		return nil, err
	}
	defer coll.Close()
	return coll.DetachProgram("probe"), nil
}

func checkFentry() Check {
	p, err := newTracing(&ebpf.ProgramSpec{
		Type: ebpf.Tracing, AttachType: ebpf.AttachTraceFEntry, AttachTo: "do_nanosleep",
		License: "GPL", Instructions: nopProgram,
	})
	if err != nil {
		why := shortErr(err)
		if errors.Is(err, unix.EPERM) {
			why = "the kernel refuses to load fentry programs (EPERM)"
		}
		return Check{Warn, "fentry", "not available: " + why, "used only in place of tracepoints a kernel lacks (the load lines above say which); nothing to do where none is missing"}
	}
	p.Close()
	return Check{OK, "fentry", "supported", ""}
}

// refusalDetail is shortErr of a refusal without cilium/ebpf's guess at a
// low memlock limit (kernels >= 5.11 charge BPF memory to the cgroup; the
// refusal is the missing capability).
func refusalDetail(err error) string {
	return strings.Replace(shortErr(err), " (MEMLOCK may be too low, consider rlimit.RemoveMemlock)", "", 1)
}

func shortErr(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// libraryDirs are searched after ldconfig's cache: Debian's multiarch
// directory of this binary's architecture, then the others.
var libraryDirs = []string{"/usr/lib/" + multiarch[runtime.GOARCH], "/usr/lib64", "/usr/lib", "/lib/" + multiarch[runtime.GOARCH], "/usr/local/cuda/lib64", "/usr/local/nvidia/lib64"}

// multiarch is Debian's multiarch triplet, and ldconfigABI the tag of
// `ldconfig -p`'s entries, of each architecture bpfbench is built for.
var (
	multiarch   = map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}
	ldconfigABI = map[string]string{"amd64": "x86-64", "arm64": "AArch64"}
)

// FindLibrary returns the path of a shared library of this binary's
// architecture, or "".
func FindLibrary(soname string) string {
	if out, err := exec.Command("ldconfig", "-p").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) >= 4 && f[0] == soname && strings.Contains(line, ldconfigABI[runtime.GOARCH]) {
				return f[len(f)-1]
			}
		}
	}
	for _, d := range libraryDirs {
		p := filepath.Join(d, soname)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

func checkLibrary(name, soname, fix string) Check {
	if p := FindLibrary(soname); p != "" {
		return Check{OK, name, p, ""}
	}
	return Check{Warn, name, soname + " not found", fix}
}
