package bpfutil

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

var (
	kernelBTFOnce sync.Once
	kernelBTF     *btf.Spec
	kernelBTFErr  error
)

// KernelBTF returns the running kernel's BTF, read once.
func KernelBTF() (*btf.Spec, error) {
	kernelBTFOnce.Do(func() { kernelBTF, kernelBTFErr = btf.LoadKernelSpec() })
	return kernelBTF, kernelBTFErr
}

// HasTracepoint reports whether the kernel's BTF declares the raw
// tracepoint name (its btf_trace_<name> typedef), which tp_btf needs.
func HasTracepoint(name string) (bool, error) {
	spec, err := KernelBTF()
	if err != nil {
		return false, fmt.Errorf("reading kernel BTF: %w", err)
	}
	_, err = spec.AnyTypeByName("btf_trace_" + name)
	if errors.Is(err, btf.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("looking up tracepoint %s in kernel BTF: %w", name, err)
	}
	return true, nil
}

// TracingSet loads the tp_btf programs of a collection spec whose
// tracepoints this kernel has, and attaches them. Programs whose tracepoint
// is missing are left out and listed by Missing, so a collector keeps
// working with the rest.
type TracingSet struct {
	Coll    *ebpf.Collection
	Links   []link.Link
	missing []string
	// attached maps a tracepoint name to its program name.
	attached map[string]string
}

// LoadTracing drops from spec every tp_btf program whose tracepoint is not
// in the kernel (rename, for tests, changes a program's tracepoint first:
// program name -> tracepoint name) and loads the collection. Program specs
// of other types are kept as they are.
func LoadTracing(what string, spec *ebpf.CollectionSpec, rename map[string]string) (*TracingSet, error) {
	ts := &TracingSet{attached: map[string]string{}}
	names := make([]string, 0, len(spec.Programs))
	for name := range spec.Programs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := spec.Programs[name]
		if to, ok := rename[name]; ok {
			p.AttachTo = to
		}
		if p.Type != ebpf.Tracing || p.AttachType != ebpf.AttachTraceRawTp {
			continue
		}
		ok, err := HasTracepoint(p.AttachTo)
		if err != nil {
			return nil, err
		}
		if !ok {
			ts.missing = append(ts.missing, p.AttachTo)
			delete(spec.Programs, name)
			continue
		}
		ts.attached[p.AttachTo] = name
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, LoadError(what, err)
	}
	ts.Coll = coll
	return ts, nil
}

// Attach attaches every loaded tp_btf program. On error the links made so
// far stay in Links for Close.
func (ts *TracingSet) Attach() error {
	tps := make([]string, 0, len(ts.attached))
	for tp := range ts.attached {
		tps = append(tps, tp)
	}
	sort.Strings(tps)
	for _, tp := range tps {
		l, err := link.AttachTracing(link.TracingOptions{Program: ts.Coll.Programs[ts.attached[tp]]})
		if err != nil {
			return fmt.Errorf("attaching tp_btf/%s: %w", tp, err)
		}
		ts.Links = append(ts.Links, l)
	}
	return nil
}

// Missing lists the tracepoints this kernel lacks (their programs were not loaded).
func (ts *TracingSet) Missing() []string { return append([]string(nil), ts.missing...) }

// Attached lists the tracepoints whose programs are loaded.
func (ts *TracingSet) Attached() []string {
	out := make([]string, 0, len(ts.attached))
	for tp := range ts.attached {
		out = append(out, tp)
	}
	sort.Strings(out)
	return out
}

// Close detaches the links, then closes the programs and maps.
func (ts *TracingSet) Close() error {
	var errs []error
	for i := len(ts.Links) - 1; i >= 0; i-- {
		errs = append(errs, ts.Links[i].Close())
	}
	ts.Links = nil
	if ts.Coll != nil {
		ts.Coll.Close()
		ts.Coll = nil
	}
	return errors.Join(errs...)
}

// ProgramIDs are the kernel IDs of the loaded programs.
func (ts *TracingSet) ProgramIDs() []ebpf.ProgramID {
	var ids []ebpf.ProgramID
	if ts == nil || ts.Coll == nil {
		return nil
	}
	names := make([]string, 0, len(ts.Coll.Programs))
	for n := range ts.Coll.Programs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if info, err := ts.Coll.Programs[n].Info(); err == nil {
			if id, ok := info.ID(); ok {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// Programs are the loaded programs, in name order.
func (ts *TracingSet) Programs() []*ebpf.Program {
	if ts == nil || ts.Coll == nil {
		return nil
	}
	names := make([]string, 0, len(ts.Coll.Programs))
	for n := range ts.Coll.Programs {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]*ebpf.Program, 0, len(names))
	for _, n := range names {
		out = append(out, ts.Coll.Programs[n])
	}
	return out
}

// LinkIDs are the kernel IDs of the attached links.
func (ts *TracingSet) LinkIDs() []link.ID {
	var ids []link.ID
	if ts == nil {
		return nil
	}
	for _, l := range ts.Links {
		if info, err := l.Info(); err == nil {
			ids = append(ids, info.ID)
		}
	}
	return ids
}
