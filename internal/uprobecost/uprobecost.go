// Package uprobecost measures what a uprobe hit costs on this host, so
// that collectors can keep probes on hot functions within a budget. The
// cost depends on the host (0.8 µs on one machine, 20 µs on another of the
// same kind) and on the probed instruction: the kernel emulates some first
// instructions in its trap handler (x86-64: push, call, jmp; arm64:
// branches and adr/adrp) and single-steps the others out of line, which
// costs a second trap. Both are measured on functions of this binary.
package uprobecost

/*
// Two calibration functions with known first instructions: one the kernel
// emulates and one it must single-step. Each probe hit lands on the first
// instruction.
#if defined(__x86_64__)
__asm__(
	".text\n"
	".globl bpfbench_calib_push\n"
	".type bpfbench_calib_push,@function\n"
	"bpfbench_calib_push:\n"
	"	push %rbp\n"
	"	mov %rsp,%rbp\n"
	"	pop %rbp\n"
	"	ret\n"
	".size bpfbench_calib_push, .-bpfbench_calib_push\n"
	".globl bpfbench_calib_step\n"
	".type bpfbench_calib_step,@function\n"
	"bpfbench_calib_step:\n"
	"	mov %rdi,%rax\n"
	"	ret\n"
	".size bpfbench_calib_step, .-bpfbench_calib_step\n"
);
#elif defined(__aarch64__)
// arm64: a branch (simulated, arch/arm64/kernel/probes/simulate-insn.c)
// and an add (stepped out of line).
__asm__(
	".text\n"
	".globl bpfbench_calib_push\n"
	".type bpfbench_calib_push,%function\n"
	"bpfbench_calib_push:\n"
	"	b 1f\n"
	"1:	ret\n"
	".size bpfbench_calib_push, .-bpfbench_calib_push\n"
	".globl bpfbench_calib_step\n"
	".type bpfbench_calib_step,%function\n"
	"bpfbench_calib_step:\n"
	"	add x0, x0, #1\n"
	"	ret\n"
	".size bpfbench_calib_step, .-bpfbench_calib_step\n"
);
#else
#error "uprobecost has calibration functions for x86-64 and arm64 only"
#endif
void bpfbench_calib_push(void);
long bpfbench_calib_step(long);

static unsigned long bpfbench_calib_addr(int which)
{
	return which == 0 ? (unsigned long)bpfbench_calib_push : (unsigned long)bpfbench_calib_step;
}

static void bpfbench_calib_loop(int which, long n)
{
	for (long i = 0; i < n; i++) {
		if (which == 0)
			bpfbench_calib_push();
		else
			bpfbench_calib_step(i);
	}
}
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Kind is how the kernel handles a probed instruction.
type Kind int

// The two kinds.
const (
	Emulated   Kind = iota // emulated in the trap handler (x86-64 push, call, jmp; arm64 branches)
	SingleStep             // anything else: executed out of line, a second trap
)

func (k Kind) String() string {
	if k == Emulated {
		return "emulated"
	}
	return "single-step"
}

// Cost is the measured cost of one uprobe hit with an empty program.
type Cost struct {
	EmulatedNs   float64 `json:"emulated_ns"`
	SingleStepNs float64 `json:"single_step_ns"`
}

// Of is the cost of a hit on an instruction of kind k.
func (c Cost) Of(k Kind) float64 {
	if k == Emulated {
		return c.EmulatedNs
	}
	return c.SingleStepNs
}

var (
	once    sync.Once
	cached  Cost
	errOnce error

	multiOnce sync.Once
	multi     bool
)

// HaveMulti reports whether the kernel offers uprobe_multi links (Linux
// 6.6+), probed once per process. Where it does, every uprobe of bpfbench
// is a uprobe_multi link: it needs CAP_BPF and CAP_PERFMON, where a
// perf-event uprobe needs CAP_SYS_ADMIN since Linux 6.16, and a link of N
// probes detaches after one RCU grace period instead of N.
func HaveMulti() bool {
	multiOnce.Do(func() { multi = features.HaveBPFLinkUprobeMulti() == nil })
	return multi
}

// Attach attaches prog to the function at file offset off of ex for pid
// (0: every process): one uprobe_multi link when the kernel has them
// (prog must then be loaded with AttachType ebpf.AttachTraceUprobeMulti),
// else a perf-event uprobe (prog without it). sym names the function in
// errors only.
func Attach(ex *link.Executable, sym string, off uint64, pid int, prog *ebpf.Program, useMulti bool) (link.Link, error) {
	if useMulti {
		return ex.UprobeMulti(nil, prog, &link.UprobeMultiOptions{Addresses: []uint64{off}, PID: uint32(pid)})
	}
	return ex.Uprobe(sym, prog, &link.UprobeOptions{Address: off, PID: pid})
}

// Measure returns the host's uprobe cost, measured once per process
// (about 30 ms on a host where a hit costs 1-5 µs: a few thousand calls of
// each calibration function with and without a probe, best of three).
func Measure() (Cost, error) {
	once.Do(func() { cached, errOnce = measure() })
	return cached, errOnce
}

func measure() (Cost, error) { return measureWith(HaveMulti()) }

// NopProgram loads an empty uprobe program, for a uprobe_multi link with
// multi.
func NopProgram(multi bool) (*ebpf.Program, error) {
	spec := &ebpf.ProgramSpec{
		Type:    ebpf.Kprobe,
		License: "Dual BSD/GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	}
	if multi {
		spec.AttachType = ebpf.AttachTraceUprobeMulti
	}
	return ebpf.NewProgram(spec)
}

// measureWith measures through uprobe_multi links (multi) or perf-event
// uprobes: the CUDA probes are the one or the other, and so are these.
func measureWith(multi bool) (Cost, error) {
	exe, err := os.Executable()
	if err != nil {
		return Cost{}, fmt.Errorf("finding this executable: %w", err)
	}
	ex, err := link.OpenExecutable(exe)
	if err != nil {
		return Cost{}, fmt.Errorf("opening %s: %w", exe, err)
	}
	prog, err := NopProgram(multi)
	if err != nil {
		return Cost{}, fmt.Errorf("loading the calibration program: %w", err)
	}
	defer prog.Close()
	var c Cost
	for _, k := range []struct {
		sym   string
		which C.int
		n     int64
		out   *float64
	}{
		{"bpfbench_calib_push", 0, 4000, &c.EmulatedNs},
		{"bpfbench_calib_step", 1, 1000, &c.SingleStepNs},
	} {
		// The symbol table may be stripped (go test, go run): find the
		// function's file offset from its address in our own mappings.
		off, err := fileOffset(exe, uint64(C.bpfbench_calib_addr(k.which)))
		if err != nil {
			return Cost{}, err
		}
		bare := best(func() time.Duration { return timeLoop(k.which, k.n) })
		up, err := Attach(ex, k.sym, off, os.Getpid(), prog, multi)
		if err != nil {
			return Cost{}, fmt.Errorf("attaching a calibration %s to %s in %s: %w", linkKind(multi), k.sym, exe, err)
		}
		probed := best(func() time.Duration { return timeLoop(k.which, k.n) })
		up.Close()
		*k.out = max(0, float64(probed-bare)/float64(k.n))
	}
	return c, nil
}

// fileOffset maps an address of this process's text to its offset in exe.
func fileOffset(exe string, addr uint64) (uint64, error) {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		var lo, hi, off, inode uint64
		var perms, dev, path string
		if n, _ := fmt.Sscanf(line, "%x-%x %s %x %s %d %s", &lo, &hi, &perms, &off, &dev, &inode, &path); n < 7 {
			continue
		}
		if addr >= lo && addr < hi && path == exe {
			return addr - lo + off, nil
		}
	}
	return 0, fmt.Errorf("address %#x is not in a mapping of %s", addr, exe)
}

func linkKind(multi bool) string {
	if multi {
		return "uprobe_multi link"
	}
	return "perf-event uprobe"
}

func best(f func() time.Duration) time.Duration {
	b := f()
	for range 2 {
		b = min(b, f())
	}
	return b
}

// timeLoop is the thread's CPU time for n calls: what a hit costs the
// probed thread, which is what a budget and an estimate of launches per
// on-CPU second need, without the time the thread waited for a CPU on a
// busy host. The goroutine stays on its thread for both readings.
func timeLoop(which C.int, n int64) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var t0, t1 unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &t0)
	C.bpfbench_calib_loop(which, C.long(n))
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &t1)
	return time.Duration(t1.Nano() - t0.Nano())
}

// Classify reads the first instruction of the function at file offset off
// in the ELF file at path and says whether a probe on it is emulated.
func Classify(path string, off uint64) (Kind, error) {
	f, err := os.Open(path)
	if err != nil {
		return SingleStep, err
	}
	defer f.Close()
	var b [4]byte
	if _, err := f.ReadAt(b[:], int64(off)); err != nil {
		return SingleStep, fmt.Errorf("reading the instruction at %#x of %s: %w", off, path, err)
	}
	return ClassifyBytes(b[:]), nil
}

// ClassifyBytes classifies the instruction starting at b for this
// binary's architecture.
func ClassifyBytes(b []byte) Kind { return ClassifyArch(runtime.GOARCH, b) }

// ClassifyArch classifies the instruction starting at b for arch (GOARCH
// names); an architecture it does not know is single-stepped (the higher
// cost).
func ClassifyArch(arch string, b []byte) Kind {
	switch arch {
	case "amd64":
		return classifyX86(b)
	case "arm64":
		return classifyArm64(b)
	}
	return SingleStep
}

// classifyX86: what arch/x86/kernel/uprobes.c emulates.
func classifyX86(b []byte) Kind {
	if len(b) == 0 {
		return SingleStep
	}
	switch {
	case b[0] >= 0x50 && b[0] <= 0x57: // push r64
		return Emulated
	case b[0] == 0x41 && len(b) > 1 && b[1] >= 0x50 && b[1] <= 0x57: // push r8-r15
		return Emulated
	case b[0] == 0xe8 || b[0] == 0xe9 || b[0] == 0xeb: // call, jmp
		return Emulated
	case b[0] >= 0x70 && b[0] <= 0x7f: // jcc rel8
		return Emulated
	case b[0] == 0x90: // nop
		return Emulated
	}
	return SingleStep
}

// classifyArm64: what arch/arm64/kernel/probes/decode-insn.c simulates on
// every kernel (branches, adr/adrp). Newer kernels simulate more (nop and
// hints, a frame-record stp); those count as single-stepped, the higher
// cost, as on the kernels that step them.
func classifyArm64(b []byte) Kind {
	if len(b) < 4 {
		return SingleStep
	}
	insn := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
	switch {
	case insn&0x7c000000 == 0x14000000: // b, bl
		return Emulated
	case insn&0xff000010 == 0x54000000: // b.cond
		return Emulated
	case insn&0x7e000000 == 0x34000000: // cbz, cbnz
		return Emulated
	case insn&0x7e000000 == 0x36000000: // tbz, tbnz
		return Emulated
	case insn&0xff9ffc1f == 0xd61f0000: // br, blr (bits 21-22: 00 br, 01 blr, 10 ret)
		return Emulated
	case insn&0xfffffc1f == 0xd65f0000: // ret
		return Emulated
	case insn&0x1f000000 == 0x10000000: // adr, adrp
		return Emulated
	}
	return SingleStep
}

// LinkCheck says whether each kind of uprobe link can be placed here, with
// the current privileges: nil, or why not.
type LinkCheck struct {
	Multi error // a uprobe_multi link (ebpf.ErrNotSupported: not in this kernel)
	Perf  error // a perf-event uprobe
}

// CheckLinks attaches an empty program to a function of this binary (no
// hit: nothing calls it meanwhile) through a uprobe_multi link and through
// a perf-event uprobe, and detaches them.
func CheckLinks() (LinkCheck, error) {
	exe, err := os.Executable()
	if err != nil {
		return LinkCheck{}, fmt.Errorf("finding this executable: %w", err)
	}
	ex, err := link.OpenExecutable(exe)
	if err != nil {
		return LinkCheck{}, fmt.Errorf("opening %s: %w", exe, err)
	}
	off, err := fileOffset(exe, uint64(C.bpfbench_calib_addr(0)))
	if err != nil {
		return LinkCheck{}, err
	}
	try := func(multi bool) error {
		prog, err := NopProgram(multi)
		if err != nil {
			return fmt.Errorf("loading a uprobe program: %w", err)
		}
		defer prog.Close()
		l, err := Attach(ex, "bpfbench_calib_push", off, os.Getpid(), prog, multi)
		if err != nil {
			return err
		}
		return l.Close()
	}
	var c LinkCheck
	if err := features.HaveBPFLinkUprobeMulti(); err != nil {
		c.Multi = err
	} else {
		c.Multi = try(true)
	}
	c.Perf = try(false)
	return c, nil
}
