package cuda

import "fmt"

// API is the CUDA interface a call belongs to.
type API uint8

// The two CUDA interfaces.
const (
	Driver  API = iota // libcuda.so.1
	Runtime            // libcudart.so.*
)

func (a API) String() string {
	if a == Runtime {
		return "runtime"
	}
	return "driver"
}

// Kind is what a call does.
type Kind uint8

// Call kinds.
const (
	Launch Kind = iota // queues work on a stream; returns at once
	Copy               // copies memory; blocking unless asynchronous
	Sync               // waits for the GPU
	Alloc              // allocates device memory
	Free               // frees device memory (cudaFree synchronizes the device)
	Graph              // instantiates or destroys an executable CUDA graph
	Pool               // trims a memory pool or sets its attributes

	numKinds = iota
)

func (k Kind) String() string {
	if int(k) >= numKinds {
		return fmt.Sprintf("kind%d", k)
	}
	return [...]string{"launch", "copy", "sync", "alloc", "free", "graph", "pool"}[k]
}

// graphRole is what a call counts for in the graph figures (graphs.go).
type graphRole uint8

const (
	roleNone        graphRole = iota
	roleInstantiate           // cuGraphInstantiate*, cudaGraphInstantiate*
	roleExecDestroy           // cuGraphExecDestroy, cudaGraphExecDestroy
	roleGraphLaunch           // cuGraphLaunch, cudaGraphLaunch
	rolePoolAlloc             // stream-ordered allocations: from a pool or the current one
	rolePoolTrim              // cuMemPoolTrimTo, cudaMemPoolTrimTo
	rolePoolAttr              // cuMemPoolSetAttribute, cudaMemPoolSetAttribute
)

// Direction is the direction of a copy.
type Direction uint8

// Copy directions, as numbered by bpf/cuda.bpf.c.
const (
	NoDirection    Direction = 0
	HostToDevice   Direction = 1
	DeviceToHost   Direction = 2
	DeviceToDevice Direction = 3
	HostToHost     Direction = 4
	// Unified is a copy through unified addressing (cuMemcpy,
	// cudaMemcpyDefault) whose direction the call does not say.
	Unified Direction = 5
)

const (
	maxDirs       = 8 // MAX_DIRS of bpf/cuda.bpf.c
	numDirections = 6
)

func (d Direction) String() string {
	switch d {
	case HostToDevice:
		return "host_to_device"
	case DeviceToHost:
		return "device_to_host"
	case DeviceToDevice:
		return "device_to_device"
	case HostToHost:
		return "host_to_host"
	case Unified:
		return "unified"
	}
	return "none"
}

// launch layouts, as numbered by bpf/cuda.bpf.c.
const (
	layoutNone   = 0
	layoutArgs   = 1 // cuLaunchKernel: dims in integer slots 2..7
	layoutConfig = 2 // CUlaunchConfig* / cudaLaunchConfig_t* in slot 1
	layoutDim3   = 3 // cudaLaunchKernel: dim3 by value in slots 2..5
)

// Call identifies a CUDA API call; it is the call id of bpf/cuda.bpf.c.
type Call uint8

// CallInfo describes a call and where the probe finds its arguments
// (x86-64 integer argument slots, 1-based; slot 7 and up are on the stack).
type CallInfo struct {
	Name string
	API  API
	Kind Kind
	// Blocking calls get a return probe: duration and return code.
	Blocking bool
	// Counted calls get a return probe too (duration and return code) but
	// do not wait for the GPU and are never streamed, only counted in the
	// kernel: graph instantiations and destroys, pool trims and attributes.
	Counted bool
	// Aliases are other exported names of the same call (per-thread
	// default stream variants).
	Aliases []string

	bytesSlot, handleSlot, kindSlot uint8
	dir                             Direction
	layout                          uint8
	graph                           graphRole
}

// returns reports whether the call has a return probe.
func (i CallInfo) returns() bool { return i.Blocking || i.Counted }

// calls is indexed by Call. Keep ids stable: they key the kernel's maps.
var calls = []CallInfo{
	{Name: "cuLaunchKernel", API: Driver, Kind: Launch, layout: layoutArgs, handleSlot: 9, Aliases: []string{"cuLaunchKernel_ptsz"}},
	{Name: "cuLaunchKernelEx", API: Driver, Kind: Launch, layout: layoutConfig, Aliases: []string{"cuLaunchKernelEx_ptsz"}},
	{Name: "cuGraphLaunch", API: Driver, Kind: Launch, handleSlot: 2, Aliases: []string{"cuGraphLaunch_ptsz"}, graph: roleGraphLaunch},
	{Name: "cuMemcpy", API: Driver, Kind: Copy, Blocking: true, bytesSlot: 3, dir: Unified, Aliases: []string{"cuMemcpy_ptds"}},
	{Name: "cuMemcpyAsync", API: Driver, Kind: Copy, bytesSlot: 3, handleSlot: 4, dir: Unified, Aliases: []string{"cuMemcpyAsync_ptsz"}},
	{Name: "cuMemcpyHtoD_v2", API: Driver, Kind: Copy, Blocking: true, bytesSlot: 3, dir: HostToDevice, Aliases: []string{"cuMemcpyHtoD_v2_ptds"}},
	{Name: "cuMemcpyDtoH_v2", API: Driver, Kind: Copy, Blocking: true, bytesSlot: 3, dir: DeviceToHost, Aliases: []string{"cuMemcpyDtoH_v2_ptds"}},
	{Name: "cuMemcpyDtoD_v2", API: Driver, Kind: Copy, bytesSlot: 3, dir: DeviceToDevice, Aliases: []string{"cuMemcpyDtoD_v2_ptds"}},
	{Name: "cuMemcpyHtoDAsync_v2", API: Driver, Kind: Copy, bytesSlot: 3, handleSlot: 4, dir: HostToDevice, Aliases: []string{"cuMemcpyHtoDAsync_v2_ptsz"}},
	{Name: "cuMemcpyDtoHAsync_v2", API: Driver, Kind: Copy, bytesSlot: 3, handleSlot: 4, dir: DeviceToHost, Aliases: []string{"cuMemcpyDtoHAsync_v2_ptsz"}},
	{Name: "cuMemcpyDtoDAsync_v2", API: Driver, Kind: Copy, bytesSlot: 3, handleSlot: 4, dir: DeviceToDevice, Aliases: []string{"cuMemcpyDtoDAsync_v2_ptsz"}},
	{Name: "cuStreamSynchronize", API: Driver, Kind: Sync, Blocking: true, handleSlot: 1, Aliases: []string{"cuStreamSynchronize_ptsz"}},
	{Name: "cuCtxSynchronize", API: Driver, Kind: Sync, Blocking: true},
	{Name: "cuEventSynchronize", API: Driver, Kind: Sync, Blocking: true, handleSlot: 1},
	{Name: "cuMemAlloc_v2", API: Driver, Kind: Alloc, Blocking: true, bytesSlot: 2},
	{Name: "cuMemFree_v2", API: Driver, Kind: Free, Blocking: true, handleSlot: 1},
	{Name: "cuMemAllocAsync", API: Driver, Kind: Alloc, Blocking: true, bytesSlot: 2, handleSlot: 3, Aliases: []string{"cuMemAllocAsync_ptsz"}, graph: rolePoolAlloc},
	{Name: "cudaLaunchKernel", API: Runtime, Kind: Launch, layout: layoutDim3, handleSlot: 8, Aliases: []string{"cudaLaunchKernel_ptsz"}},
	{Name: "cudaLaunchKernelExC", API: Runtime, Kind: Launch, layout: layoutConfig, Aliases: []string{"cudaLaunchKernelExC_ptsz"}},
	{Name: "cudaGraphLaunch", API: Runtime, Kind: Launch, handleSlot: 2, Aliases: []string{"cudaGraphLaunch_ptsz"}, graph: roleGraphLaunch},
	{Name: "cudaMemcpy", API: Runtime, Kind: Copy, Blocking: true, bytesSlot: 3, kindSlot: 4, Aliases: []string{"cudaMemcpy_ptds"}},
	{Name: "cudaMemcpyAsync", API: Runtime, Kind: Copy, bytesSlot: 3, kindSlot: 4, handleSlot: 5, Aliases: []string{"cudaMemcpyAsync_ptsz"}},
	{Name: "cudaStreamSynchronize", API: Runtime, Kind: Sync, Blocking: true, handleSlot: 1, Aliases: []string{"cudaStreamSynchronize_ptsz"}},
	{Name: "cudaDeviceSynchronize", API: Runtime, Kind: Sync, Blocking: true},
	{Name: "cudaEventSynchronize", API: Runtime, Kind: Sync, Blocking: true, handleSlot: 1},
	{Name: "cudaMalloc", API: Runtime, Kind: Alloc, Blocking: true, bytesSlot: 2},
	{Name: "cudaFree", API: Runtime, Kind: Free, Blocking: true, handleSlot: 1},
	{Name: "cudaMallocAsync", API: Runtime, Kind: Alloc, Blocking: true, bytesSlot: 2, handleSlot: 3, Aliases: []string{"cudaMallocAsync_ptsz"}, graph: rolePoolAlloc},
	// CUDA Graphs and memory pools. cuGraphInstantiate is the CUDA 11
	// export (cuda.h 12 maps the name to cuGraphInstantiateWithFlags);
	// _v2 is its CUDA 11.x twin. Pool allocations are blocking like
	// cuMemAllocAsync (streamed, so that an out-of-memory one is an
	// event); the others are only counted.
	{Name: "cuGraphInstantiate", API: Driver, Kind: Graph, Counted: true, handleSlot: 2, Aliases: []string{"cuGraphInstantiate_v2"}, graph: roleInstantiate},
	{Name: "cuGraphInstantiateWithFlags", API: Driver, Kind: Graph, Counted: true, handleSlot: 2, graph: roleInstantiate},
	{Name: "cuGraphInstantiateWithParams", API: Driver, Kind: Graph, Counted: true, handleSlot: 2, Aliases: []string{"cuGraphInstantiateWithParams_ptsz"}, graph: roleInstantiate},
	{Name: "cuGraphExecDestroy", API: Driver, Kind: Graph, Counted: true, handleSlot: 1, graph: roleExecDestroy},
	{Name: "cuMemAllocFromPoolAsync", API: Driver, Kind: Alloc, Blocking: true, bytesSlot: 2, handleSlot: 4, Aliases: []string{"cuMemAllocFromPoolAsync_ptsz"}, graph: rolePoolAlloc},
	{Name: "cuMemPoolTrimTo", API: Driver, Kind: Pool, Counted: true, bytesSlot: 2, handleSlot: 1, graph: rolePoolTrim},
	{Name: "cuMemPoolSetAttribute", API: Driver, Kind: Pool, Counted: true, handleSlot: 1, graph: rolePoolAttr},
	{Name: "cudaGraphInstantiate", API: Runtime, Kind: Graph, Counted: true, handleSlot: 2, graph: roleInstantiate},
	{Name: "cudaGraphInstantiateWithFlags", API: Runtime, Kind: Graph, Counted: true, handleSlot: 2, graph: roleInstantiate},
	{Name: "cudaGraphInstantiateWithParams", API: Runtime, Kind: Graph, Counted: true, handleSlot: 2, Aliases: []string{"cudaGraphInstantiateWithParams_ptsz"}, graph: roleInstantiate},
	{Name: "cudaGraphExecDestroy", API: Runtime, Kind: Graph, Counted: true, handleSlot: 1, graph: roleExecDestroy},
	{Name: "cudaMallocFromPoolAsync", API: Runtime, Kind: Alloc, Blocking: true, bytesSlot: 2, handleSlot: 4, Aliases: []string{"cudaMallocFromPoolAsync_ptsz"}, graph: rolePoolAlloc},
	{Name: "cudaMemPoolTrimTo", API: Runtime, Kind: Pool, Counted: true, bytesSlot: 2, handleSlot: 1, graph: rolePoolTrim},
	{Name: "cudaMemPoolSetAttribute", API: Runtime, Kind: Pool, Counted: true, handleSlot: 1, graph: rolePoolAttr},
}

// maxCalls is MAX_CALLS of bpf/cuda.bpf.c.
const maxCalls = 64

func init() {
	if len(calls) > maxCalls {
		panic(fmt.Sprintf("cuda: %d calls, the kernel side has room for %d", len(calls), maxCalls))
	}
}

// NumCalls is the number of calls the collector knows.
var NumCalls = Call(len(calls))

// Calls lists every call the collector probes, by id.
func Calls() []CallInfo { return append([]CallInfo(nil), calls...) }

// Symbols are the exported names the collector probes, per API.
var Symbols = func() map[API][]string {
	out := map[API][]string{}
	for _, c := range calls {
		out[c.API] = append(out[c.API], c.Name)
		out[c.API] = append(out[c.API], c.Aliases...)
	}
	return out
}()

// Info describes c.
func (c Call) Info() CallInfo {
	if int(c) < len(calls) {
		return calls[c]
	}
	return CallInfo{Name: fmt.Sprintf("call%d", c)}
}

func (c Call) String() string { return c.Info().Name }

// CallByName finds a call by any of its exported names.
func CallByName(name string) (Call, bool) {
	for i, c := range calls {
		if c.Name == name {
			return Call(i), true
		}
		for _, a := range c.Aliases {
			if a == name {
				return Call(i), true
			}
		}
	}
	return 0, false
}

// Cookie bits, as decoded by bpf/cuda.bpf.c.
const (
	cookieRet   = 1 << 24
	cookieAlloc = 1 << 25
	cookieQuiet = 1 << 28
	// cookieLauncher: a launch, counted per thread (launchers map).
	cookieLauncher = 1 << 29
	// cookieSync: a synchronize, marking the thread's steps.
	cookieSync = 1 << 30
)

// cookie is the attach cookie that tells the programs which call fired
// and where its arguments are.
func (c Call) cookie() uint64 {
	i := calls[c]
	ck := uint64(c) |
		uint64(i.bytesSlot&0xf)<<8 |
		uint64(i.handleSlot&0xf)<<12 |
		uint64(i.kindSlot&0xf)<<16 |
		uint64(i.dir&0xf)<<20 |
		uint64(i.layout&0x3)<<26
	if i.returns() {
		ck |= cookieRet
	}
	if i.Counted {
		ck |= cookieQuiet
	}
	if i.Kind == Alloc {
		ck |= cookieAlloc
	}
	switch i.Kind {
	case Launch:
		ck |= cookieLauncher
	case Sync:
		ck |= cookieSync
	}
	return ck
}
