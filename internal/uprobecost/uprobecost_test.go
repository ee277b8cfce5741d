package uprobecost

import (
	"testing"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

func TestClassifyBytes(t *testing.T) {
	for _, c := range []struct {
		b    []byte
		want Kind
	}{
		{[]byte{0x55, 0x48, 0x89, 0xe5}, Emulated},   // push %rbp
		{[]byte{0x41, 0x57, 0x41, 0x56}, Emulated},   // push %r15
		{[]byte{0xe9, 0, 0, 0}, Emulated},            // jmp rel32
		{[]byte{0xf3, 0x0f, 0x1e, 0xfa}, SingleStep}, // endbr64
		{[]byte{0x48, 0x89, 0xf8}, SingleStep},       // mov %rdi,%rax
		{nil, SingleStep},
	} {
		if got := ClassifyBytes(c.b); got != c.want {
			t.Errorf("% x: %v, want %v", c.b, got, c.want)
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
