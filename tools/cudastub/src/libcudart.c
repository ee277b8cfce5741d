/*
 * libcudart.c: a stand-in for the CUDA runtime API (libcudart.so.12). It owns
 * its own simulated device and never calls into libcuda.so.1, so uprobes on
 * the two libraries count disjoint calls. See cudastub.h for the ABI.
 */
#include "core.h"
#include "cudastub.h"

#include <stdint.h>

#define CUDART_VERSION_STUB 12040

static __thread cudaError_t last_error;
static __thread int current_device;

/* Every runtime call records a failure as the thread's last error. */
static cudaError_t ret(cudaError_t e)
{
	if (e != cudaSuccess)
		last_error = e;
	return e;
}

static cudaError_t copy(enum cudaMemcpyKind kind, const void *dst,
                        const void *src, size_t count, cudaStream_t stream,
                        int async)
{
	struct stub_stream *s = stub_stream_get(stream);
	uint64_t end;

	if ((unsigned)kind > cudaMemcpyDefault)
		return ret(cudaErrorInvalidValue);
	if (s == NULL)
		return ret(cudaErrorInvalidResourceHandle);
	if (kind == cudaMemcpyDefault) {
		int d = stub_is_device_ptr((uint64_t)(uintptr_t)dst);
		int sd = stub_is_device_ptr((uint64_t)(uintptr_t)src);

		kind = d && sd ? cudaMemcpyDeviceToDevice
		       : d     ? cudaMemcpyHostToDevice
		       : sd    ? cudaMemcpyDeviceToHost
		               : cudaMemcpyHostToHost;
	}
	if (kind == cudaMemcpyHostToHost)
		return cudaSuccess;
	end = stub_enqueue(s, stub_copy_ns(count));
	/* cudaMemcpy blocks the host except device to device. */
	if (!async && kind != cudaMemcpyDeviceToDevice)
		stub_wait_until(end);
	return cudaSuccess;
}

static cudaError_t launch(const void *func, dim3 grid, dim3 block,
                          cudaStream_t stream)
{
	struct stub_stream *s = stub_stream_get(stream);

	if (s == NULL)
		return ret(cudaErrorInvalidResourceHandle);
	if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 ||
	    block.y == 0 || block.z == 0)
		return ret(cudaErrorInvalidValue);
	stub_enqueue(s, stub_function_ns(func));
	return cudaSuccess;
}

static cudaError_t alloc(void **devPtr, size_t size)
{
	uint64_t addr;

	if (devPtr == NULL)
		return ret(cudaErrorInvalidValue);
	if (size == 0) {
		*devPtr = NULL;
		return cudaSuccess;
	}
	if (stub_alloc(size, &addr) != 0)
		return ret(cudaErrorMemoryAllocation);
	*devPtr = (void *)(uintptr_t)addr;
	return cudaSuccess;
}

/* Frees a device or pool allocation. */
static cudaError_t release(void *devPtr)
{
	int r;

	if (devPtr == NULL)
		return cudaSuccess;
	r = stub_pool_release((uint64_t)(uintptr_t)devPtr);
	if (r == 1)
		r = stub_free((uint64_t)(uintptr_t)devPtr);
	if (r != 0)
		return ret(cudaErrorInvalidValue);
	return cudaSuccess;
}

/* ---- versions and devices ---- */

CUDASTUB_API cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
	if (runtimeVersion == NULL)
		return ret(cudaErrorInvalidValue);
	*runtimeVersion = CUDART_VERSION_STUB;
	return cudaSuccess;
}

CUDASTUB_API cudaError_t cudaDriverGetVersion(int *driverVersion)
{
	if (driverVersion == NULL)
		return ret(cudaErrorInvalidValue);
	*driverVersion = CUDART_VERSION_STUB;
	return cudaSuccess;
}

CUDASTUB_API cudaError_t cudaGetDeviceCount(int *count)
{
	if (count == NULL)
		return ret(cudaErrorInvalidValue);
	*count = stub_config()->devices;
	return cudaSuccess;
}

CUDASTUB_API cudaError_t cudaSetDevice(int device)
{
	if (device < 0 || device >= stub_config()->devices)
		return ret(cudaErrorInvalidDevice);
	current_device = device;
	return cudaSuccess;
}

CUDASTUB_API cudaError_t cudaGetDevice(int *device)
{
	if (device == NULL)
		return ret(cudaErrorInvalidValue);
	*device = current_device;
	return cudaSuccess;
}

/* ---- launches ---- */

CUDASTUB_API cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim,
                                          dim3 blockDim, void **args,
                                          size_t sharedMem,
                                          cudaStream_t stream)
{
	(void)args;
	(void)sharedMem;
	return launch(func, gridDim, blockDim, stream);
}

CUDASTUB_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config,
                                             const void *func, void **args)
{
	(void)args;
	if (config == NULL)
		return ret(cudaErrorInvalidValue);
	return launch(func, config->gridDim, config->blockDim, config->stream);
}

CUDASTUB_API cudaError_t cudaGraphCreate(cudaGraph_t *pGraph,
                                         unsigned int flags)
{
	if (pGraph == NULL || flags != 0)
		return ret(cudaErrorInvalidValue);
	*pGraph = stub_object_new(STUB_KIND_GRAPH);
	return *pGraph ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

static cudaError_t instantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph)
{
	if (pGraphExec == NULL)
		return ret(cudaErrorInvalidValue);
	if (!stub_object_is(graph, STUB_KIND_GRAPH))
		return ret(cudaErrorInvalidResourceHandle);
	*pGraphExec = stub_object_new(STUB_KIND_GRAPH_EXEC);
	return *pGraphExec ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

/* The CUDA 12 signature (CUDA 11's took an error node and a log buffer). */
CUDASTUB_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec,
                                              cudaGraph_t graph,
                                              unsigned long long flags)
{
	(void)flags;
	return instantiate(pGraphExec, graph);
}

CUDASTUB_API cudaError_t cudaGraphInstantiateWithFlags(
    cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)
{
	(void)flags;
	return instantiate(pGraphExec, graph);
}

CUDASTUB_API cudaError_t cudaGraphInstantiateWithParams(
    cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
    cudaGraphInstantiateParams *instantiateParams)
{
	cudaError_t r;

	if (instantiateParams == NULL)
		return ret(cudaErrorInvalidValue);
	r = instantiate(pGraphExec, graph);
	instantiateParams->errNode_out = NULL;
	instantiateParams->result_out = r == cudaSuccess ? 0 : 1;
	return r;
}

/* A graph runs like one kernel of the configured time. */
CUDASTUB_API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec,
                                         cudaStream_t stream)
{
	struct stub_stream *s;

	if (!stub_object_is(graphExec, STUB_KIND_GRAPH_EXEC))
		return ret(cudaErrorInvalidValue);
	s = stub_stream_get(stream);
	if (s == NULL)
		return ret(cudaErrorInvalidResourceHandle);
	stub_enqueue(s, stub_kernel_ns());
	return cudaSuccess;
}

CUDASTUB_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
	if (!stub_object_is(graphExec, STUB_KIND_GRAPH_EXEC))
		return ret(cudaErrorInvalidValue);
	stub_object_free(graphExec);
	return cudaSuccess;
}

CUDASTUB_API cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
	if (!stub_object_is(graph, STUB_KIND_GRAPH))
		return ret(cudaErrorInvalidValue);
	stub_object_free(graph);
	return cudaSuccess;
}

/* ---- copies ---- */

CUDASTUB_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                                    enum cudaMemcpyKind kind)
{
	return copy(kind, dst, src, count, NULL, 0);
}

CUDASTUB_API cudaError_t cudaMemcpyAsync(void *dst, const void *src,
                                         size_t count,
                                         enum cudaMemcpyKind kind,
                                         cudaStream_t stream)
{
	return copy(kind, dst, src, count, stream, 1);
}

/* ---- memory ---- */

CUDASTUB_API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	return alloc(devPtr, size);
}

CUDASTUB_API cudaError_t cudaFree(void *devPtr)
{
	return release(devPtr);
}

CUDASTUB_API cudaError_t cudaMallocAsync(void **devPtr, size_t size,
                                         cudaStream_t hStream)
{
	if (stub_stream_get(hStream) == NULL)
		return ret(cudaErrorInvalidResourceHandle);
	return alloc(devPtr, size);
}

CUDASTUB_API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	if (stub_stream_get(hStream) == NULL)
		return ret(cudaErrorInvalidResourceHandle);
	return release(devPtr);
}

/* ---- memory pools ---- */

CUDASTUB_API cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool,
                                           const cudaMemPoolProps *poolProps)
{
	if (memPool == NULL || poolProps == NULL ||
	    poolProps->location.type != 1 || poolProps->location.id < 0 ||
	    poolProps->location.id >= stub_config()->devices)
		return ret(cudaErrorInvalidValue);
	*memPool = (cudaMemPool_t)stub_pool_new(poolProps->maxSize);
	return *memPool ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

CUDASTUB_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool)
{
	return stub_pool_free(memPool) == 0 ? cudaSuccess
	                                    : ret(cudaErrorInvalidValue);
}

CUDASTUB_API cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size,
                                                 cudaMemPool_t memPool,
                                                 cudaStream_t stream)
{
	uint64_t addr;

	if (ptr == NULL || size == 0 || !stub_is_pool(memPool))
		return ret(cudaErrorInvalidValue);
	if (stub_stream_get(stream) == NULL)
		return ret(cudaErrorInvalidResourceHandle);
	if (stub_pool_alloc(memPool, size, &addr) != 0)
		return ret(cudaErrorMemoryAllocation);
	*ptr = (void *)(uintptr_t)addr;
	return cudaSuccess;
}

CUDASTUB_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool,
                                           size_t minBytesToKeep)
{
	if (!stub_is_pool(memPool))
		return ret(cudaErrorInvalidValue);
	stub_pool_trim(memPool, minBytesToKeep);
	return cudaSuccess;
}

CUDASTUB_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool,
                                                 enum cudaMemPoolAttr attr,
                                                 void *value)
{
	return stub_pool_set_attr(memPool, (int)attr, value) == 0
	           ? cudaSuccess
	           : ret(cudaErrorInvalidValue);
}

CUDASTUB_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool,
                                                 enum cudaMemPoolAttr attr,
                                                 void *value)
{
	return stub_pool_get_attr(memPool, (int)attr, value) == 0
	           ? cudaSuccess
	           : ret(cudaErrorInvalidValue);
}

CUDASTUB_API cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
	if (free == NULL || total == NULL)
		return ret(cudaErrorInvalidValue);
	stub_mem_info(free, total);
	return cudaSuccess;
}

/* ---- streams and synchronization ---- */

CUDASTUB_API cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
	if (pStream == NULL)
		return ret(cudaErrorInvalidValue);
	*pStream = (cudaStream_t)stub_stream_new();
	return *pStream ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

CUDASTUB_API cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	if (stream == NULL || stub_stream_free(stub_stream_get(stream)) != 0)
		return ret(cudaErrorInvalidResourceHandle);
	return cudaSuccess;
}

CUDASTUB_API cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	struct stub_stream *s = stub_stream_get(stream);

	if (s == NULL)
		return ret(cudaErrorInvalidResourceHandle);
	/* Not ready is not an error: it does not become the last error. */
	return stub_stream_done_at(s) > stub_now() ? cudaErrorNotReady
	                                           : cudaSuccess;
}

CUDASTUB_API cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	struct stub_stream *s = stub_stream_get(stream);

	if (s == NULL)
		return ret(cudaErrorInvalidResourceHandle);
	stub_wait_until(stub_stream_done_at(s));
	return cudaSuccess;
}

CUDASTUB_API cudaError_t cudaDeviceSynchronize(void)
{
	stub_wait_until(stub_device_done_at());
	return cudaSuccess;
}

/* ---- events ---- */

CUDASTUB_API cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	if (event == NULL)
		return ret(cudaErrorInvalidValue);
	*event = stub_object_new(STUB_KIND_EVENT);
	return *event ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

CUDASTUB_API cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	if (!stub_object_is(event, STUB_KIND_EVENT))
		return ret(cudaErrorInvalidResourceHandle);
	stub_object_free(event);
	return cudaSuccess;
}

CUDASTUB_API cudaError_t cudaEventRecord(cudaEvent_t event,
                                         cudaStream_t stream)
{
	struct stub_stream *s = stub_stream_get(stream);

	if (!stub_object_is(event, STUB_KIND_EVENT) || s == NULL)
		return ret(cudaErrorInvalidResourceHandle);
	stub_event_record(event, s);
	return cudaSuccess;
}

CUDASTUB_API cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	if (!stub_object_is(event, STUB_KIND_EVENT))
		return ret(cudaErrorInvalidResourceHandle);
	stub_wait_until(stub_event_at(event));
	return cudaSuccess;
}

CUDASTUB_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start,
                                              cudaEvent_t end)
{
	if (ms == NULL)
		return ret(cudaErrorInvalidValue);
	if (!stub_object_is(start, STUB_KIND_EVENT) ||
	    !stub_object_is(end, STUB_KIND_EVENT) ||
	    !stub_event_recorded(start) || !stub_event_recorded(end))
		return ret(cudaErrorInvalidResourceHandle);
	if (stub_event_at(end) > stub_now())
		return cudaErrorNotReady;
	*ms = (float)((double)((int64_t)stub_event_at(end) -
	                       (int64_t)stub_event_at(start)) /
	              1e6);
	return cudaSuccess;
}

/* ---- errors ---- */

CUDASTUB_API cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;

	last_error = cudaSuccess;
	return e;
}

CUDASTUB_API cudaError_t cudaPeekAtLastError(void)
{
	return last_error;
}

/* Runtime error names differ from the driver's; the codes used here match. */
CUDASTUB_API const char *cudaGetErrorName(cudaError_t error)
{
	switch (error) {
	case cudaSuccess:
		return "cudaSuccess";
	case cudaErrorInvalidValue:
		return "cudaErrorInvalidValue";
	case cudaErrorMemoryAllocation:
		return "cudaErrorMemoryAllocation";
	case cudaErrorInitializationError:
		return "cudaErrorInitializationError";
	case cudaErrorInvalidDevice:
		return "cudaErrorInvalidDevice";
	case cudaErrorInvalidResourceHandle:
		return "cudaErrorInvalidResourceHandle";
	case cudaErrorNotReady:
		return "cudaErrorNotReady";
	default:
		return "cudaErrorUnknown";
	}
}

CUDASTUB_API const char *cudaGetErrorString(cudaError_t error)
{
	const char *s = stub_error_string((int)error);

	return s ? s : "unrecognized error code";
}

/* ---- stub extensions ---- */

CUDASTUB_API void cudastub_set_kernel_us(double us)
{
	stub_set_kernel_ns(us > 0 ? (uint64_t)(us * 1000.0) : 0);
}

CUDASTUB_API double cudastub_kernel_us(void)
{
	return (double)stub_kernel_ns() / 1000.0;
}
