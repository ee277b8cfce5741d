package sim

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// cudaDriver calls the CUDA driver API through dlopen (no cgo), with the
// real symbol names and signatures, so that uprobes on libcuda see what
// they would see in an inference engine: at every decode step a host to
// device copy, a kernel launch, a stream synchronize and a device to host copy.
type cudaDriver struct {
	lib uintptr

	cuInit              func(flags uint32) int32
	cuDeviceGet         func(device *int32, ordinal int32) int32
	cuCtxCreate         func(pctx *uintptr, flags uint32, dev int32) int32
	cuMemAlloc          func(dptr *uint64, bytesize uintptr) int32
	cuMemFree           func(dptr uint64) int32
	cuMemcpyHtoD        func(dst uint64, src unsafe.Pointer, n uintptr) int32
	cuMemcpyDtoH        func(dst unsafe.Pointer, src uint64, n uintptr) int32
	cuLaunchKernel      func(f uintptr, gridX, gridY, gridZ, blockX, blockY, blockZ, sharedMemBytes uint32, stream uintptr, kernelParams unsafe.Pointer, extra unsafe.Pointer) int32
	cuStreamSynchronize func(stream uintptr) int32
	// Optional: a real driver needs a real function to launch.
	cuModuleLoadData    func(module *uintptr, image unsafe.Pointer) int32
	cuModuleGetFunction func(fn *uintptr, module uintptr, name *byte) int32
	cuCtxDestroy        func(ctx uintptr) int32

	ctx    uintptr
	fn     uintptr
	dptr   uint64
	host   []byte
	iters  uint32
	params [2]unsafe.Pointer
}

// stepKernel is a tiny PTX kernel: each thread runs a loop of n
// multiply-adds on one word of the buffer. JIT-compiled by a real driver.
const stepKernel = `.version 7.0
.target sm_52
.address_size 64

.visible .entry llmsim_step(
	.param .u64 llmsim_step_param_0,
	.param .u32 llmsim_step_param_1
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [llmsim_step_param_0];
	ld.param.u32 	%r2, [llmsim_step_param_1];
	cvta.to.global.u64 	%rd2, %rd1;
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd3, %r1, 4;
	add.s64 	%rd4, %rd2, %rd3;
	ld.global.u32 	%r3, [%rd4];
	mov.u32 	%r4, 0;
LOOP:
	mad.lo.s32 	%r3, %r3, 1664525, 1013904223;
	add.s32 	%r4, %r4, 1;
	setp.lt.u32 	%p1, %r4, %r2;
	@%p1 bra 	LOOP;
	st.global.u32 	[%rd4], %r3;
	ret;
}
`

const cudaBufBytes = 64 << 10

// openCUDA loads lib and creates a context on device 0 for the calling OS
// thread (the caller must hold runtime.LockOSThread for the driver's lifetime).
func openCUDA(path string, kernelIters uint32) (*cudaDriver, error) {
	lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("loading CUDA driver library %s: %w", path, err)
	}
	d := &cudaDriver{lib: lib, iters: kernelIters}
	required := []struct {
		name string
		fn   any
	}{
		{"cuInit", &d.cuInit},
		{"cuDeviceGet", &d.cuDeviceGet},
		{"cuCtxCreate_v2", &d.cuCtxCreate},
		{"cuMemAlloc_v2", &d.cuMemAlloc},
		{"cuMemFree_v2", &d.cuMemFree},
		{"cuMemcpyHtoD_v2", &d.cuMemcpyHtoD},
		{"cuMemcpyDtoH_v2", &d.cuMemcpyDtoH},
		{"cuLaunchKernel", &d.cuLaunchKernel},
		{"cuStreamSynchronize", &d.cuStreamSynchronize},
	}
	for _, s := range required {
		sym, err := purego.Dlsym(lib, s.name)
		if err != nil {
			return nil, fmt.Errorf("finding %s in %s: %w", s.name, path, err)
		}
		purego.RegisterFunc(s.fn, sym)
	}
	for _, s := range []struct {
		name string
		fn   any
	}{
		{"cuModuleLoadData", &d.cuModuleLoadData},
		{"cuModuleGetFunction", &d.cuModuleGetFunction},
		{"cuCtxDestroy_v2", &d.cuCtxDestroy},
	} {
		if sym, err := purego.Dlsym(lib, s.name); err == nil {
			purego.RegisterFunc(s.fn, sym)
		}
	}
	if r := d.cuInit(0); r != 0 {
		return nil, fmt.Errorf("cuInit: CUresult %d", r)
	}
	var dev int32
	if r := d.cuDeviceGet(&dev, 0); r != 0 {
		return nil, fmt.Errorf("cuDeviceGet(0): CUresult %d", r)
	}
	if r := d.cuCtxCreate(&d.ctx, 0, dev); r != 0 {
		return nil, fmt.Errorf("cuCtxCreate_v2: CUresult %d", r)
	}
	if r := d.cuMemAlloc(&d.dptr, cudaBufBytes); r != 0 {
		return nil, fmt.Errorf("cuMemAlloc_v2(%d): CUresult %d", cudaBufBytes, r)
	}
	d.host = make([]byte, cudaBufBytes)
	if d.cuModuleLoadData != nil && d.cuModuleGetFunction != nil {
		img := append([]byte(stepKernel), 0)
		var mod uintptr
		if r := d.cuModuleLoadData(&mod, unsafe.Pointer(&img[0])); r == 0 {
			name := append([]byte("llmsim_step"), 0)
			if r := d.cuModuleGetFunction(&d.fn, mod, &name[0]); r != 0 {
				d.fn = 0
			}
			runtime.KeepAlive(name)
		}
		runtime.KeepAlive(img)
	}
	d.params = [2]unsafe.Pointer{unsafe.Pointer(&d.dptr), unsafe.Pointer(&d.iters)}
	// The first step copies the buffer in so the kernel reads defined memory.
	if r := d.cuMemcpyHtoD(d.dptr, unsafe.Pointer(&d.host[0]), cudaBufBytes); r != 0 {
		return nil, fmt.Errorf("cuMemcpyHtoD_v2: CUresult %d", r)
	}
	return d, nil
}

// step runs one decode step's GPU work: copy the step's inputs in (bytes
// grows with the batch), launch, synchronize, copy the sampled tokens out.
func (d *cudaDriver) step(batch int) error {
	n := uintptr(min(4096+batch*256, cudaBufBytes))
	if r := d.cuMemcpyHtoD(d.dptr, unsafe.Pointer(&d.host[0]), n); r != 0 {
		return fmt.Errorf("cuMemcpyHtoD_v2: CUresult %d", r)
	}
	threads := uint32(min(max(batch, 1)*32, 1024))
	if r := d.cuLaunchKernel(d.fn, 1, 1, 1, threads, 1, 1, 0, 0, unsafe.Pointer(&d.params[0]), nil); r != 0 {
		return fmt.Errorf("cuLaunchKernel: CUresult %d", r)
	}
	if r := d.cuStreamSynchronize(0); r != 0 {
		return fmt.Errorf("cuStreamSynchronize: CUresult %d", r)
	}
	if r := d.cuMemcpyDtoH(unsafe.Pointer(&d.host[0]), d.dptr, uintptr(max(batch, 1)*4)); r != 0 {
		return fmt.Errorf("cuMemcpyDtoH_v2: CUresult %d", r)
	}
	runtime.KeepAlive(d)
	return nil
}

// allocKV allocates n bytes of device memory for a sequence's KV cache
// with cuMemAlloc_v2 and returns its CUresult: CUDA_ERROR_OUT_OF_MEMORY (2)
// once the device's memory is used up.
func (d *cudaDriver) allocKV(n int64) (dptr uint64, r int32) {
	r = d.cuMemAlloc(&dptr, uintptr(n))
	return dptr, r
}

// freeKV frees what allocKV allocated.
func (d *cudaDriver) freeKV(dptr uint64) { d.cuMemFree(dptr) }

// close frees the device buffer and the context.
func (d *cudaDriver) close() {
	if d.dptr != 0 {
		d.cuMemFree(d.dptr)
		d.dptr = 0
	}
	if d.ctx != 0 && d.cuCtxDestroy != nil {
		d.cuCtxDestroy(d.ctx)
		d.ctx = 0
	}
}
