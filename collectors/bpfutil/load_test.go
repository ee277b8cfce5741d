package bpfutil

import (
	"testing"

	"github.com/cilium/ebpf"
)

// Shaped as bpf2go writes them: unexported structs embedded.
type fakePrograms struct {
	Present *ebpf.Program `ebpf:"present"`
	LeftOut *ebpf.Program `ebpf:"left_out"`
}

type fakeMaps struct {
	Events *ebpf.Map `ebpf:"events"`
}

type fakeVariables struct {
	NrTargets *ebpf.Variable `ebpf:"nr_targets"`
}

type fakeObjects struct {
	fakePrograms
	fakeMaps
	fakeVariables
}

func TestAssign(t *testing.T) {
	prog, m, v := new(ebpf.Program), new(ebpf.Map), new(ebpf.Variable)
	coll := &ebpf.Collection{
		Programs:  map[string]*ebpf.Program{"present": prog},
		Maps:      map[string]*ebpf.Map{"events": m, ".rodata": new(ebpf.Map)},
		Variables: map[string]*ebpf.Variable{"nr_targets": v},
	}
	var objs fakeObjects
	if err := assign(&objs, coll); err != nil {
		t.Fatal(err)
	}
	if objs.Present != prog || objs.LeftOut != nil || objs.Events != m || objs.NrTargets != v {
		t.Errorf("assigned %+v", objs)
	}
	// objs owns what it took; the rest stays for the collection to close.
	if len(coll.Programs) != 0 || len(coll.Variables) != 0 || len(coll.Maps) != 1 || coll.Maps[".rodata"] == nil {
		t.Errorf("left in the collection: %v %v %v", coll.Programs, coll.Maps, coll.Variables)
	}

	// A map the struct names and the object lacks is an error.
	coll = &ebpf.Collection{Programs: map[string]*ebpf.Program{}, Maps: map[string]*ebpf.Map{}, Variables: map[string]*ebpf.Variable{"nr_targets": v}}
	if err := assign(&fakeObjects{}, coll); err == nil {
		t.Error("a missing map was not an error")
	}
	if err := assign(fakeObjects{}, coll); err == nil {
		t.Error("a struct value (not a pointer) was accepted")
	}
}
