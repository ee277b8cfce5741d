package uprobecost

import (
	"testing"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

func TestClassifyArch(t *testing.T) {
	le := func(insn uint32) []byte {
		return []byte{byte(insn), byte(insn >> 8), byte(insn >> 16), byte(insn >> 24)}
	}
	for _, c := range []struct {
		arch string
		b    []byte
		want Kind
	}{
		{"amd64", []byte{0x55, 0x48, 0x89, 0xe5}, Emulated},   // push %rbp
		{"amd64", []byte{0x41, 0x57, 0x41, 0x56}, Emulated},   // push %r15
		{"amd64", []byte{0xe9, 0, 0, 0}, Emulated},            // jmp rel32
		{"amd64", []byte{0xf3, 0x0f, 0x1e, 0xfa}, SingleStep}, // endbr64
		{"amd64", []byte{0x48, 0x89, 0xf8}, SingleStep},       // mov %rdi,%rax
		{"amd64", nil, SingleStep},
		{"arm64", le(0x14000002), Emulated},   // b .+8
		{"arm64", le(0x97ffffff), Emulated},   // bl .-4
		{"arm64", le(0x54000040), Emulated},   // b.eq .+8
		{"arm64", le(0xb4000040), Emulated},   // cbz x0, .+8
		{"arm64", le(0x37000040), Emulated},   // tbnz w0, #0, .+8
		{"arm64", le(0xd65f03c0), Emulated},   // ret
		{"arm64", le(0xd63f0020), Emulated},   // blr x1
		{"arm64", le(0x90000000), Emulated},   // adrp x0, .
		{"arm64", le(0xa9bf7bfd), SingleStep}, // stp x29, x30, [sp, #-16]!
		{"arm64", le(0xd503233f), SingleStep}, // paciasp
		{"arm64", le(0xd503245f), SingleStep}, // bti c
		{"arm64", le(0x91000400), SingleStep}, // add x0, x0, #1
		{"arm64", []byte{0x14}, SingleStep},
		{"riscv64", le(0x14000002), SingleStep},
	} {
		if got := ClassifyArch(c.arch, c.b); got != c.want {
			t.Errorf("%s % x: %v, want %v", c.arch, c.b, got, c.want)
		}
	}
}

// The calibration attaches real uprobes to this test binary: both costs
// come out positive, and a single-stepped hit is not cheaper than an
// emulated one by more than noise.
func TestMeasure(t *testing.T) {
	privtest.Require(t)
	c, err := Measure()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("uprobe hit: %.0f ns emulated, %.0f ns single-stepped", c.EmulatedNs, c.SingleStepNs)
	if c.EmulatedNs <= 0 || c.SingleStepNs <= 0 {
		t.Fatalf("a probe hit cost nothing: %+v", c)
	}
}

// Both ways of attaching a uprobe calibrate: a uprobe_multi link (where
// the kernel has them; what Measure uses there) and a perf-event uprobe
// (the fallback). A hit costs about the same through either.
func TestMeasureBothLinks(t *testing.T) {
	privtest.Require(t)
	if !HaveMulti() {
		privtest.Skip(t, "this kernel has no uprobe_multi links (Linux 6.6+)")
	}
	for _, multi := range []bool{true, false} {
		c, err := measureWith(multi)
		if err != nil {
			t.Fatalf("%s: %v", linkKind(multi), err)
		}
		t.Logf("%s: %.0f ns emulated, %.0f ns single-stepped", linkKind(multi), c.EmulatedNs, c.SingleStepNs)
		if c.EmulatedNs <= 0 || c.SingleStepNs <= 0 {
			t.Errorf("%s: a probe hit cost nothing: %+v", linkKind(multi), c)
		}
	}
}

// As root both kinds of uprobe link attach to this binary (uprobe_multi
// where the kernel has it).
func TestCheckLinks(t *testing.T) {
	privtest.Require(t)
	c, err := CheckLinks()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("uprobe_multi: %v; perf-event uprobe: %v", c.Multi, c.Perf)
	if c.Perf != nil {
		t.Errorf("a perf-event uprobe as root: %v", c.Perf)
	}
	if HaveMulti() != (c.Multi == nil) {
		t.Errorf("HaveMulti %v, but a uprobe_multi link: %v", HaveMulti(), c.Multi)
	}
}
