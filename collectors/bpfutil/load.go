package bpfutil

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

var (
	btfMu    sync.Mutex
	btfCache = btf.NewCache()
)

// BTFCache is the kernel BTF shared by every load of this process: the
// collectors' objects, the readiness checks' probe programs and
// HasTracepoint. Each load without it decodes the kernel's BTF again
// (about 0.1 CPU-s here, eight times in a `run`'s start).
func BTFCache() *btf.Cache {
	btfMu.Lock()
	defer btfMu.Unlock()
	return btfCache
}

// KernelBTF returns the running kernel's BTF, decoded once until
// ReleaseKernelBTF. The caller must not change it.
func KernelBTF() (*btf.Spec, error) { return BTFCache().Kernel() }

// ReleaseKernelBTF forgets the decoded kernel BTF once the collectors are
// loaded: kept, it is tens of megabytes of live heap that every garbage
// collection of a run would mark again. A later load decodes it anew.
func ReleaseKernelBTF() {
	btfMu.Lock()
	defer btfMu.Unlock()
	btfCache = btf.NewCache()
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

// Object is what Load needs to load a collector's bpf2go object.
type Object struct {
	// Spec reads the object: the generated loadXxx.
	Spec func() (*ebpf.CollectionSpec, error)
	// Objs receives the loaded programs, maps and variables: a pointer to
	// the collector's generated xxxObjects. The field of a tp_btf program
	// whose tracepoint the kernel lacks stays nil.
	Objs interface{ Close() error }
	// RingBytes sizes the events ring (a power of two; 0: DefaultRingBytes).
	RingBytes uint32
	// Consts are the object's load-time constants, by the generated
	// xxxVar... names.
	Consts map[string]any
	// Rename attaches a program to another tracepoint (program name ->
	// tracepoint name): tests simulate a kernel that lacks one.
	Rename map[string]string
	// Skip leaves programs out (by program name): optional parts the
	// collector's configuration turned off. Their fields stay nil and they
	// are not listed by Missing.
	Skip []string
}

// Load is the first half of every collector's Start. It sizes the ring,
// sets the constants, loads the object into o.Objs, opens the reader and
// attaches every tp_btf program. Programs whose tracepoint this kernel
// lacks are left out and listed by Missing (an object with tp_btf programs
// and none of their tracepoints is an error); programs of other types
// (uprobes) are the collector's to attach. On error it has released
// everything (Close).
func (b *Base) Load(o Object) (err error) {
	spec, err := o.Spec()
	if err != nil {
		return fmt.Errorf("reading the %s eBPF object: %w", b.name, err)
	}
	if err := ConfigurePipeline(spec, o.RingBytes); err != nil {
		return fmt.Errorf("configuring %s: %w", b.name, err)
	}
	for name, v := range o.Consts {
		vs, ok := spec.Variables[name]
		if !ok {
			return fmt.Errorf("configuring %s: the object has no constant %s", b.name, name)
		}
		if err := vs.Set(v); err != nil {
			return fmt.Errorf("configuring %s (%s): %w", b.name, name, err)
		}
	}
	for _, name := range o.Skip {
		delete(spec.Programs, name)
	}
	tpProgs, err := b.dropMissing(spec, o.Rename)
	if err != nil {
		return err
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Cache: BTFCache()})
	if err != nil {
		return LoadError("the "+b.name+" programs", err)
	}
	defer coll.Close() // what o.Objs did not take
	names := slices.Sorted(maps.Keys(coll.Programs))
	for _, n := range names {
		b.programs = append(b.programs, coll.Programs[n])
	}
	attach := make(map[string]*ebpf.Program, len(tpProgs))
	for tp, n := range tpProgs {
		attach[tp] = coll.Programs[n]
	}
	b.events, b.stats = coll.Maps["events"], coll.Maps["pipe_stats"]
	b.targets, b.nrTargets = coll.Maps["targets"], coll.Variables["nr_targets"]
	b.targetHint = coll.Maps["target_hint"]
	b.OnClose(o.Objs.Close)
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	if err := assign(o.Objs, coll); err != nil {
		return fmt.Errorf("loading the %s programs: %w", b.name, err)
	}
	if err := b.openReader(); err != nil {
		return err
	}
	b.OnClose(b.closeLinks)
	for _, tp := range b.Attached() {
		l, err := link.AttachTracing(link.TracingOptions{Program: attach[tp]})
		if err != nil {
			return fmt.Errorf("attaching tp_btf/%s: %w", tp, err)
		}
		b.links = append(b.links, l)
	}
	b.log.Debug("loaded", "programs", b.ProgramIDs(), "tracepoints", b.Attached(), "missing", b.missing)
	return nil
}

// dropMissing takes out of spec every tp_btf program whose tracepoint the
// kernel lacks (after rename) and returns the name of each remaining
// tracepoint's program.
func (b *Base) dropMissing(spec *ebpf.CollectionSpec, rename map[string]string) (map[string]string, error) {
	progs := map[string]string{} // tracepoint -> program name
	var tps []string
	for name, p := range spec.Programs {
		if to, ok := rename[name]; ok {
			p.AttachTo = to
		}
		if p.Type != ebpf.Tracing || p.AttachType != ebpf.AttachTraceRawTp {
			continue
		}
		tps = append(tps, p.AttachTo)
		ok, err := HasTracepoint(p.AttachTo)
		if err != nil {
			return nil, err
		}
		if !ok {
			b.missing = append(b.missing, p.AttachTo)
			delete(spec.Programs, name)
			continue
		}
		progs[p.AttachTo] = name
		b.attached = append(b.attached, p.AttachTo)
	}
	sort.Strings(b.missing)
	sort.Strings(b.attached)
	for _, tp := range b.missing {
		b.log.Warn("tracepoint missing in this kernel; carrying on without it", "tracepoint", tp)
	}
	if len(tps) > 0 && len(b.attached) == 0 {
		sort.Strings(tps)
		return nil, fmt.Errorf("attaching %s: none of the tracepoints %v exists in this kernel", b.name, tps)
	}
	return progs, nil
}

// assign sets each field of the struct objs points to that is tagged
// `ebpf:"name"` (in embedded structs too, as bpf2go nests them) to coll's
// program, map or variable of that name and takes it out of coll, so that
// objs owns it. A program coll lacks (left out by Load) stays nil; a map
// or variable it lacks is an error.
func assign(objs any, coll *ebpf.Collection) error {
	v := reflect.ValueOf(objs)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("%T is not a pointer to a bpf2go objects struct", objs)
	}
	return assignStruct(v.Elem(), coll)
}

func assignStruct(v reflect.Value, coll *ebpf.Collection) error {
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if sf.Anonymous && f.Kind() == reflect.Struct {
			if err := assignStruct(f, coll); err != nil {
				return err
			}
			continue
		}
		name, ok := sf.Tag.Lookup("ebpf")
		if !ok {
			continue
		}
		var val any
		switch f.Type() {
		case reflect.TypeFor[*ebpf.Program]():
			val, _ = take(coll.Programs, name) // nil: left out by Load
		case reflect.TypeFor[*ebpf.Map]():
			val, ok = take(coll.Maps, name)
		case reflect.TypeFor[*ebpf.Variable]():
			val, ok = take(coll.Variables, name)
		default:
			return fmt.Errorf("field %s: %s is not a program, map or variable", sf.Name, f.Type())
		}
		if !ok {
			return fmt.Errorf("the object has no %s", name)
		}
		f.Set(reflect.ValueOf(val))
	}
	return nil
}

// take removes name from m and returns it.
func take[T any](m map[string]*T, name string) (*T, bool) {
	v, ok := m[name]
	delete(m, name)
	return v, ok
}
