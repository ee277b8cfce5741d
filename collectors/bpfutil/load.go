package bpfutil

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
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

// TracepointArgs is the number of arguments the kernel's raw tracepoint
// name passes to a tp_btf program (its btf_trace_<name> typedef, a pointer
// to a function whose first parameter is the tracepoint's data, not
// passed). Arguments are added to tracepoints across kernels
// (sched_switch's prev_state in 5.18, sched_process_exit's group_dead in
// 6.16), and the verifier rejects a program that reads one the kernel
// does not pass.
func TracepointArgs(name string) (int, error) {
	spec, err := KernelBTF()
	if err != nil {
		return 0, fmt.Errorf("reading kernel BTF: %w", err)
	}
	var td *btf.Typedef
	if err := spec.TypeByName("btf_trace_"+name, &td); err != nil {
		return 0, fmt.Errorf("looking up tracepoint %s in kernel BTF: %w", name, err)
	}
	ptr, ok := btf.UnderlyingType(td.Type).(*btf.Pointer)
	if !ok {
		return 0, fmt.Errorf("tracepoint %s: btf_trace_%s is not a function pointer", name, name)
	}
	fp, ok := btf.UnderlyingType(ptr.Target).(*btf.FuncProto)
	if !ok || len(fp.Params) == 0 {
		return 0, fmt.Errorf("tracepoint %s: btf_trace_%s is not a function pointer", name, name)
	}
	return len(fp.Params) - 1, nil
}

// Variant is a program loaded in place of a tp_btf program on kernels
// that lack its tracepoint, or whose tracepoint passes fewer arguments
// than it reads.
type Variant struct {
	// Of is the program it stands in for.
	Of string
	// Args, when set, is the number of arguments Of reads: on a kernel
	// whose tracepoint passes fewer, this program (on the same
	// tracepoint) is loaded instead. When 0, this program (an fentry or
	// fexit on the function the tracepoint is in) is loaded where the
	// kernel lacks Of's tracepoint.
	Args int
}

var (
	preflightOnce sync.Once
	preflightErr  error
)

// Preflight refuses, before any load, a kernel without what every
// collector needs (ring buffers, 5.8; task storage in tracing programs,
// 5.11), saying so rather than failing at a map's creation with a
// misleading error (on 5.10, "operation not permitted (MEMLOCK may be too
// low)"), and lifts RLIMIT_MEMLOCK where the kernel still charges BPF
// memory to it (before 5.11).
func Preflight() error {
	preflightOnce.Do(func() {
		if err := rlimit.RemoveMemlock(); err != nil {
			preflightErr = fmt.Errorf("raising RLIMIT_MEMLOCK, which this kernel charges eBPF maps to: %w (run as root, or with CAP_SYS_RESOURCE)", err)
			return
		}
		for _, need := range []struct {
			t    ebpf.MapType
			what string
		}{{ebpf.RingBuf, "BPF ring buffers (Linux 5.8)"}, {ebpf.TaskStorage, "BPF task storage (Linux 5.11)"}} {
			err := features.HaveMapType(need.t)
			if errors.Is(err, ebpf.ErrNotSupported) {
				preflightErr = fmt.Errorf("this kernel (%s) has no %s, which bpfbench needs: use Linux 5.11 or later with BTF (the README lists the kernels tested); `bpfbench check` says what else is missing", KernelRelease(), need.what)
				return
			}
			if err != nil && !errors.Is(err, unix.EPERM) {
				// EPERM: the load below says which privileges.
				preflightErr = fmt.Errorf("probing %s: %w", need.what, err)
				return
			}
		}
	})
	return preflightErr
}

// KernelRelease is the running kernel's release (uname -r).
func KernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
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
	// Variants are programs loaded instead of another by the kernel's
	// tracepoint arguments (program name -> what it stands in for); the
	// one left out keeps a nil field.
	Variants map[string]Variant
}

// Load is the first half of every collector's Start. It sizes the ring,
// sets the constants, loads the object into o.Objs, opens the reader and
// attaches every tp_btf program. Programs whose tracepoint this kernel
// lacks are left out and listed by Missing (an object with tp_btf programs
// and none of their tracepoints is an error); programs of other types
// (uprobes) are the collector's to attach. On error it has released
// everything (Close).
func (b *Base) Load(o Object) (err error) {
	if err := Preflight(); err != nil {
		return err
	}
	spec, err := o.Spec()
	if err != nil {
		return fmt.Errorf("reading the %s eBPF object: %w", b.name, err)
	}
	if err := b.configure(spec, o); err != nil {
		return err
	}
	fallbacks, err := b.chooseVariants(spec, o.Variants)
	if err != nil {
		return err
	}
	tpProgs, err := b.dropMissing(spec)
	if err != nil {
		return err
	}
	coll, fallbacks, err := b.newCollection(spec, fallbacks)
	if err != nil {
		return LoadError("the "+b.name+" programs", err)
	}
	defer coll.Close() // what o.Objs did not take
	// Picked before assign takes the programs out of coll.
	attach, standIns := b.take(coll, tpProgs, fallbacks)
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
	if err := b.attachTracing(attach, standIns, fallbacks); err != nil {
		return err
	}
	b.log.Debug("loaded", "programs", b.ProgramIDs(), "tracepoints", b.Attached(), "missing", b.missing)
	return nil
}

// configure sizes spec's ring, sets o's constants, leaves out the
// programs o skips (and their variants) and renames o's tracepoints.
func (b *Base) configure(spec *ebpf.CollectionSpec, o Object) error {
	if err := ConfigureRing(spec, o.RingBytes); err != nil {
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
		for v, of := range o.Variants {
			if of.Of == name {
				delete(spec.Programs, v)
			}
		}
	}
	for name, to := range o.Rename {
		if p, ok := spec.Programs[name]; ok {
			p.AttachTo = to
		}
	}
	return nil
}

// newCollection loads spec into the kernel. A kernel that refuses the
// fentry/fexit stand-ins (lockdown, no trampolines) gets the object
// without them, their tracepoints missing as if they had none; it
// returns the stand-ins loaded.
func (b *Base) newCollection(spec *ebpf.CollectionSpec, fallbacks map[string]string) (*ebpf.Collection, map[string]string, error) {
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Cache: BTFCache()})
	if err == nil || len(fallbacks) == 0 {
		return coll, fallbacks, err
	}
	b.log.Warn("fentry/fexit stand-ins refused; carrying on without them", "programs", slices.Sorted(maps.Keys(fallbacks)), "err", err)
	for name, tp := range fallbacks {
		delete(spec.Programs, name)
		if _, ok := b.standIns[tp]; ok {
			b.missing = append(b.missing, tp) // once, however many stand-ins
			delete(b.standIns, tp)
		}
	}
	sort.Strings(b.missing)
	coll, err = ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Cache: BTFCache()})
	return coll, nil, err
}

// take records coll's programs and the pipeline's maps in b, and returns
// the programs to attach: by tracepoint (tpProgs: tracepoint -> program
// name), and the stand-ins by name.
func (b *Base) take(coll *ebpf.Collection, tpProgs, fallbacks map[string]string) (attach, standIns map[string]*ebpf.Program) {
	names := slices.Sorted(maps.Keys(coll.Programs))
	for _, n := range names {
		b.programs = append(b.programs, coll.Programs[n])
	}
	attach = make(map[string]*ebpf.Program, len(tpProgs))
	for tp, n := range tpProgs {
		attach[tp] = coll.Programs[n]
	}
	standIns = make(map[string]*ebpf.Program, len(fallbacks))
	for n := range fallbacks {
		standIns[n] = coll.Programs[n]
	}
	b.events, b.stats = coll.Maps["events"], coll.Maps["pipe_stats"]
	b.targets, b.nrTargets = coll.Maps["targets"], coll.Variables["nr_targets"]
	b.targetHint = coll.Maps["target_hint"]
	return attach, standIns
}

// attachTracing links every attached tracepoint's program, then the stand-ins
// (fallbacks: name -> the missing tracepoint), by name; the links are
// b's to close.
func (b *Base) attachTracing(attach, standIns map[string]*ebpf.Program, fallbacks map[string]string) error {
	for _, tp := range b.Attached() {
		l, err := link.AttachTracing(link.TracingOptions{Program: attach[tp]})
		if err != nil {
			return fmt.Errorf("attaching tp_btf/%s: %w", tp, err)
		}
		b.links = append(b.links, l)
	}
	for _, name := range slices.Sorted(maps.Keys(fallbacks)) {
		l, err := link.AttachTracing(link.TracingOptions{Program: standIns[name]})
		if err != nil {
			return fmt.Errorf("attaching %s (for the missing tracepoint %s): %w", name, fallbacks[name], err)
		}
		b.links = append(b.links, l)
	}
	return nil
}

// chooseVariants leaves out, of each program and its variant, the one
// this kernel does not fit, and records the variant used. It returns the
// fentry/fexit stand-ins kept (program name -> the missing tracepoint).
func (b *Base) chooseVariants(spec *ebpf.CollectionSpec, variants map[string]Variant) (map[string]string, error) {
	fallbacks := map[string]string{}
	// The programs stood in for, as the object has them: several
	// stand-ins may replace one, each deleting it.
	of := map[string]*ebpf.ProgramSpec{}
	for _, v := range variants {
		if p, ok := spec.Programs[v.Of]; ok {
			of[v.Of] = p
		}
	}
	for _, name := range slices.Sorted(maps.Keys(variants)) {
		v := variants[name]
		p, ok := of[v.Of]
		vp := spec.Programs[name]
		if !ok || vp == nil {
			delete(spec.Programs, name)
			continue
		}
		has, err := HasTracepoint(p.AttachTo)
		if err != nil {
			return nil, err
		}
		if v.Args == 0 {
			// A stand-in where the tracepoint is missing, if the
			// kernel has the function it traces.
			if has || !hasFunc(vp.AttachTo) {
				delete(spec.Programs, name)
				continue
			}
			delete(spec.Programs, v.Of)
			fallbacks[name] = p.AttachTo
			kind := "fentry"
			if vp.AttachType == ebpf.AttachTraceFExit {
				kind = "fexit"
			}
			if b.standIns == nil {
				b.standIns = map[string][]string{}
			}
			b.standIns[p.AttachTo] = append(b.standIns[p.AttachTo], kind+"/"+vp.AttachTo)
			b.log.Info("tracepoint missing; traced at its function instead", "tracepoint", p.AttachTo, kind, vp.AttachTo)
			continue
		}
		if !has {
			delete(spec.Programs, name) // dropMissing says it is missing
			continue
		}
		n, err := TracepointArgs(p.AttachTo)
		if err != nil {
			return nil, fmt.Errorf("configuring %s: %w", b.name, err)
		}
		if n >= v.Args {
			delete(spec.Programs, name)
			continue
		}
		delete(spec.Programs, v.Of)
		b.variants = append(b.variants, fmt.Sprintf("%s: %s (the kernel's tracepoint passes %d arguments, not %d)", p.AttachTo, name, n, v.Args))
		b.log.Info("tracepoint variant", "tracepoint", p.AttachTo, "program", name, "args", n)
	}
	return fallbacks, nil
}

// hasFunc reports whether the kernel's BTF has function fn (what fentry
// and fexit attach to).
func hasFunc(fn string) bool {
	spec, err := KernelBTF()
	if err != nil {
		return false
	}
	var f *btf.Func
	return spec.TypeByName(fn, &f) == nil
}

// Variants lists the programs loaded in place of others, each with why:
// the variants chosen by a tracepoint's arguments, then one line per
// missing tracepoint traced at its functions instead.
func (b *Base) Variants() []string {
	out := slices.Clone(b.variants)
	for _, tp := range slices.Sorted(maps.Keys(b.standIns)) {
		out = append(out, tp+": "+strings.Join(b.standIns[tp], ", ")+" (the kernel has no such tracepoint)")
	}
	return out
}

// dropMissing takes out of spec every tp_btf program whose tracepoint the
// kernel lacks (after rename) and returns the name of each remaining
// tracepoint's program.
func (b *Base) dropMissing(spec *ebpf.CollectionSpec) (map[string]string, error) {
	progs := map[string]string{} // tracepoint -> program name
	var tps []string
	for name, p := range spec.Programs {
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
