package sched

import (
	"testing"

	"github.com/cilium/ebpf/btf"
)

// The preempt count is found in each kernel's layout of the per-CPU
// section: its own variable (x86-64 before 6.2 and from 6.15), or a field
// of pcpu_hot nested in an anonymous struct in an anonymous union (6.2 to
// 6.14, as Debian 13's 6.12 has it); none on other architectures.
func TestPreemptOffsets(t *testing.T) {
	u32 := &btf.Int{Name: "unsigned int", Size: 4}
	rq := &btf.Var{Name: "runqueues", Type: &btf.Struct{Name: "rq", Size: 3456}}
	inner := &btf.Struct{Size: 16, Members: []btf.Member{
		{Name: "current_task", Type: &btf.Pointer{Target: &btf.Void{}}, Offset: 0},
		{Name: "preempt_count", Type: u32, Offset: 64},
	}}
	union := &btf.Union{Size: 64, Members: []btf.Member{
		{Name: "", Type: inner, Offset: 0},
		{Name: "pad", Type: &btf.Array{Type: u32, Nelems: 16}, Offset: 0},
	}}
	hot := &btf.Var{Name: "pcpu_hot", Type: &btf.Struct{Name: "pcpu_hot", Size: 64, Members: []btf.Member{{Name: "", Type: union, Offset: 0}}}}
	own := &btf.Var{Name: "__preempt_count", Type: u32}
	for _, tc := range []struct {
		name   string
		vars   []btf.VarSecinfo
		pc, rq int64
		ok     bool
	}{
		{"__preempt_count", []btf.VarSecinfo{{Type: own, Offset: 100}, {Type: rq, Offset: 4096}}, 100, 4096, true},
		{"pcpu_hot", []btf.VarSecinfo{{Type: hot, Offset: 217088}, {Type: rq, Offset: 220800}}, 217088 + 8, 220800, true},
		{"none", []btf.VarSecinfo{{Type: rq, Offset: 220800}}, 0, 0, false},
	} {
		pc, r, err := preemptOffsets(&btf.Datasec{Name: ".data..percpu", Vars: tc.vars})
		if (err == nil) != tc.ok || pc != tc.pc || r != tc.rq {
			t.Errorf("%s: preempt count at %d, run queue at %d, err %v; want %d, %d, ok %v", tc.name, pc, r, err, tc.pc, tc.rq, tc.ok)
		}
	}
}
