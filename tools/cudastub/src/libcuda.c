/*
 * libcuda.c: a stand-in for the CUDA driver API (libcuda.so.1). Exports the
 * real symbol names with the real signatures; see cudastub.h for the ABI and
 * README.md for the simulated behaviour and its environment variables.
 */
#include "core.h"
#include "cudastub.h"

#include <stdio.h>
#include <string.h>

#define CUDA_VERSION_STUB 12040

static int initialized;
static __thread CUcontext current_ctx;
static void *primary_ctx;

#define REQUIRE_INIT()                                                         \
	do {                                                                   \
		if (!__atomic_load_n(&initialized, __ATOMIC_ACQUIRE))          \
			return CUDA_ERROR_NOT_INITIALIZED;                     \
	} while (0)

static CUresult check_device(CUdevice dev)
{
	if (dev < 0 || dev >= stub_config()->devices)
		return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

/* Enqueues a synchronous copy on the default stream and waits for it. */
static CUresult copy_sync(size_t bytes)
{
	stub_wait_until(stub_enqueue(stub_stream_get(NULL), stub_copy_ns(bytes)));
	return CUDA_SUCCESS;
}

static CUresult copy_async(size_t bytes, CUstream hStream)
{
	struct stub_stream *s = stub_stream_get(hStream);

	if (s == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	stub_enqueue(s, stub_copy_ns(bytes));
	return CUDA_SUCCESS;
}

static CUresult launch(const void *f, unsigned gx, unsigned gy, unsigned gz,
                       unsigned bx, unsigned by, unsigned bz, CUstream hStream)
{
	struct stub_stream *s = stub_stream_get(hStream);

	if (s == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0)
		return CUDA_ERROR_INVALID_VALUE;
	stub_enqueue(s, stub_function_ns(f));
	return CUDA_SUCCESS;
}

static CUresult alloc(CUdeviceptr *dptr, size_t bytesize)
{
	uint64_t addr;

	if (dptr == NULL || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (stub_alloc(bytesize, &addr) != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*dptr = addr;
	return CUDA_SUCCESS;
}

/* ---- initialization, devices, contexts ---- */

CUDASTUB_API CUresult cuInit(unsigned int Flags)
{
	if (Flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (stub_config()->devices <= 0)
		return CUDA_ERROR_NO_DEVICE;
	__atomic_store_n(&initialized, 1, __ATOMIC_RELEASE);
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuDriverGetVersion(int *driverVersion)
{
	if (driverVersion == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*driverVersion = CUDA_VERSION_STUB;
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	REQUIRE_INIT();
	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (check_device(ordinal) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuDeviceGetCount(int *count)
{
	REQUIRE_INIT();
	if (count == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*count = stub_config()->devices;
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	REQUIRE_INIT();
	if (name == NULL || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (check_device(dev) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_DEVICE;
	snprintf(name, (size_t)len, "cudastub device %d", dev);
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	REQUIRE_INIT();
	if (bytes == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (check_device(dev) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_DEVICE;
	stub_mem_info(NULL, bytes);
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	void *ctx = NULL;

	REQUIRE_INIT();
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (check_device(dev) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_DEVICE;
	if (__atomic_load_n(&primary_ctx, __ATOMIC_ACQUIRE) == NULL) {
		ctx = stub_object_new(STUB_KIND_CTX);
		if (ctx == NULL)
			return CUDA_ERROR_OUT_OF_MEMORY;
		if (!__atomic_compare_exchange_n(&primary_ctx, &(void *){NULL},
		                                 ctx, 0, __ATOMIC_ACQ_REL,
		                                 __ATOMIC_ACQUIRE))
			stub_object_free(ctx);
	}
	*pctx = __atomic_load_n(&primary_ctx, __ATOMIC_ACQUIRE);
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	REQUIRE_INIT();
	return check_device(dev);
}

CUDASTUB_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags,
                                     CUdevice dev)
{
	CUcontext ctx;

	(void)flags;
	REQUIRE_INIT();
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (check_device(dev) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_DEVICE;
	ctx = stub_object_new(STUB_KIND_CTX);
	if (ctx == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	current_ctx = ctx;
	*pctx = ctx;
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	REQUIRE_INIT();
	if (!stub_object_is(ctx, STUB_KIND_CTX) || (void *)ctx == primary_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (current_ctx == ctx)
		current_ctx = NULL;
	stub_object_free(ctx);
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
	REQUIRE_INIT();
	if (ctx != NULL && !stub_object_is(ctx, STUB_KIND_CTX))
		return CUDA_ERROR_INVALID_CONTEXT;
	current_ctx = ctx;
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	REQUIRE_INIT();
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = current_ctx;
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuCtxSynchronize(void)
{
	REQUIRE_INIT();
	stub_wait_until(stub_device_done_at());
	return CUDA_SUCCESS;
}

/* ---- modules and functions ---- */

CUDASTUB_API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
	REQUIRE_INIT();
	if (module == NULL || fname == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*module = stub_object_new(STUB_KIND_MODULE);
	return *module ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUDASTUB_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	REQUIRE_INIT();
	if (module == NULL || image == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*module = stub_object_new(STUB_KIND_MODULE);
	return *module ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUDASTUB_API CUresult cuModuleUnload(CUmodule hmod)
{
	REQUIRE_INIT();
	if (!stub_object_is(hmod, STUB_KIND_MODULE))
		return CUDA_ERROR_INVALID_HANDLE;
	/* Functions of the module stay valid: they are freed with the process. */
	stub_object_free(hmod);
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod,
                                          const char *name)
{
	REQUIRE_INIT();
	if (hfunc == NULL || name == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (hmod != NULL && !stub_object_is(hmod, STUB_KIND_MODULE))
		return CUDA_ERROR_INVALID_HANDLE;
	*hfunc = (CUfunction)stub_function_new(name);
	return *hfunc ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* ---- launches ---- */

CUDASTUB_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX,
                                     unsigned int gridDimY,
                                     unsigned int gridDimZ,
                                     unsigned int blockDimX,
                                     unsigned int blockDimY,
                                     unsigned int blockDimZ,
                                     unsigned int sharedMemBytes,
                                     CUstream hStream, void **kernelParams,
                                     void **extra)
{
	(void)sharedMemBytes;
	(void)kernelParams;
	(void)extra;
	REQUIRE_INIT();
	return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
	              blockDimZ, hStream);
}

CUDASTUB_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config,
                                       CUfunction f, void **kernelParams,
                                       void **extra)
{
	(void)kernelParams;
	(void)extra;
	REQUIRE_INIT();
	if (config == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ,
	              config->blockDimX, config->blockDimY, config->blockDimZ,
	              config->hStream);
}

CUDASTUB_API CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
	REQUIRE_INIT();
	if (phGraph == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	*phGraph = stub_object_new(STUB_KIND_GRAPH);
	return *phGraph ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult instantiate(CUgraphExec *phGraphExec, CUgraph hGraph)
{
	REQUIRE_INIT();
	if (phGraphExec == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!stub_object_is(hGraph, STUB_KIND_GRAPH))
		return CUDA_ERROR_INVALID_HANDLE;
	*phGraphExec = stub_object_new(STUB_KIND_GRAPH_EXEC);
	return *phGraphExec ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* The CUDA 11 exports: an error node and a log buffer instead of flags. */
CUDASTUB_API CUresult cuGraphInstantiate(CUgraphExec *phGraphExec,
                                         CUgraph hGraph,
                                         CUgraphNode *phErrorNode,
                                         char *logBuffer, size_t bufferSize)
{
	if (phErrorNode != NULL)
		*phErrorNode = NULL;
	if (logBuffer != NULL && bufferSize > 0)
		logBuffer[0] = '\0';
	return instantiate(phGraphExec, hGraph);
}

CUDASTUB_API CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec,
                                            CUgraph hGraph,
                                            CUgraphNode *phErrorNode,
                                            char *logBuffer, size_t bufferSize)
{
	if (phErrorNode != NULL)
		*phErrorNode = NULL;
	if (logBuffer != NULL && bufferSize > 0)
		logBuffer[0] = '\0';
	return instantiate(phGraphExec, hGraph);
}

CUDASTUB_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec,
                                                  CUgraph hGraph,
                                                  unsigned long long flags)
{
	(void)flags;
	return instantiate(phGraphExec, hGraph);
}

CUDASTUB_API CUresult cuGraphInstantiateWithParams(
    CUgraphExec *phGraphExec, CUgraph hGraph,
    CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	CUresult r;

	if (instantiateParams == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	r = instantiate(phGraphExec, hGraph);
	instantiateParams->hErrNode_out = NULL;
	instantiateParams->result_out = r == CUDA_SUCCESS ? 0 : 1;
	return r;
}

/* A graph runs like one kernel of the configured time. */
CUDASTUB_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	struct stub_stream *s;

	REQUIRE_INIT();
	if (!stub_object_is(hGraphExec, STUB_KIND_GRAPH_EXEC))
		return CUDA_ERROR_INVALID_VALUE;
	s = stub_stream_get(hStream);
	if (s == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	stub_enqueue(s, stub_kernel_ns());
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	REQUIRE_INIT();
	if (!stub_object_is(hGraphExec, STUB_KIND_GRAPH_EXEC))
		return CUDA_ERROR_INVALID_VALUE;
	stub_object_free(hGraphExec);
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuGraphDestroy(CUgraph hGraph)
{
	REQUIRE_INIT();
	if (!stub_object_is(hGraph, STUB_KIND_GRAPH))
		return CUDA_ERROR_INVALID_VALUE;
	stub_object_free(hGraph);
	return CUDA_SUCCESS;
}

/* ---- copies ---- */

/* With unified addressing the direction comes from the pointers: a copy
 * between two device pointers does not block the host, the others do. */
CUDASTUB_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src,
                               size_t ByteCount)
{
	REQUIRE_INIT();
	if (stub_is_device_ptr(dst) && stub_is_device_ptr(src))
		return copy_async(ByteCount, NULL);
	return copy_sync(ByteCount);
}

CUDASTUB_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src,
                                    size_t ByteCount, CUstream hStream)
{
	(void)dst;
	(void)src;
	REQUIRE_INIT();
	return copy_async(ByteCount, hStream);
}

CUDASTUB_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice,
                                      const void *srcHost, size_t ByteCount)
{
	(void)dstDevice;
	(void)srcHost;
	REQUIRE_INIT();
	return copy_sync(ByteCount);
}

CUDASTUB_API CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice,
                                      size_t ByteCount)
{
	(void)dstHost;
	(void)srcDevice;
	REQUIRE_INIT();
	return copy_sync(ByteCount);
}

/* Device to device copies do not block the host (as in CUDA). */
CUDASTUB_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice,
                                      CUdeviceptr srcDevice, size_t ByteCount)
{
	(void)dstDevice;
	(void)srcDevice;
	REQUIRE_INIT();
	return copy_async(ByteCount, NULL);
}

CUDASTUB_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice,
                                           const void *srcHost,
                                           size_t ByteCount, CUstream hStream)
{
	(void)dstDevice;
	(void)srcHost;
	REQUIRE_INIT();
	return copy_async(ByteCount, hStream);
}

CUDASTUB_API CUresult cuMemcpyDtoHAsync_v2(void *dstHost,
                                           CUdeviceptr srcDevice,
                                           size_t ByteCount, CUstream hStream)
{
	(void)dstHost;
	(void)srcDevice;
	REQUIRE_INIT();
	return copy_async(ByteCount, hStream);
}

CUDASTUB_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice,
                                           CUdeviceptr srcDevice,
                                           size_t ByteCount, CUstream hStream)
{
	(void)dstDevice;
	(void)srcDevice;
	REQUIRE_INIT();
	return copy_async(ByteCount, hStream);
}

/* ---- memory ---- */

CUDASTUB_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	REQUIRE_INIT();
	return alloc(dptr, bytesize);
}

/* Frees a device or pool allocation. */
static CUresult release(CUdeviceptr dptr)
{
	int r;

	if (dptr == 0)
		return CUDA_SUCCESS;
	r = stub_pool_release(dptr);
	if (r == 1)
		r = stub_free(dptr);
	return r == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUDASTUB_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	REQUIRE_INIT();
	return release(dptr);
}

CUDASTUB_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize,
                                      CUstream hStream)
{
	REQUIRE_INIT();
	if (stub_stream_get(hStream) == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	return alloc(dptr, bytesize);
}

CUDASTUB_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	REQUIRE_INIT();
	if (stub_stream_get(hStream) == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	return release(dptr);
}

/* ---- memory pools ---- */

CUDASTUB_API CUresult cuMemPoolCreate(CUmemoryPool *pool,
                                      const CUmemPoolProps *poolProps)
{
	REQUIRE_INIT();
	if (pool == NULL || poolProps == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (poolProps->location.type != 1 ||
	    check_device(poolProps->location.id) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_VALUE;
	*pool = (CUmemoryPool)stub_pool_new(poolProps->maxSize);
	return *pool ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUDASTUB_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	REQUIRE_INIT();
	return stub_pool_free(pool) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUDASTUB_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr,
                                              size_t bytesize,
                                              CUmemoryPool pool,
                                              CUstream hStream)
{
	uint64_t addr;

	REQUIRE_INIT();
	if (dptr == NULL || bytesize == 0 || !stub_is_pool(pool))
		return CUDA_ERROR_INVALID_VALUE;
	if (stub_stream_get(hStream) == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (stub_pool_alloc(pool, bytesize, &addr) != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*dptr = addr;
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	REQUIRE_INIT();
	if (!stub_is_pool(pool))
		return CUDA_ERROR_INVALID_VALUE;
	stub_pool_trim(pool, minBytesToKeep);
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool,
                                            CUmemPool_attribute attr,
                                            void *value)
{
	REQUIRE_INIT();
	return stub_pool_set_attr(pool, (int)attr, value) == 0
	           ? CUDA_SUCCESS
	           : CUDA_ERROR_INVALID_VALUE;
}

CUDASTUB_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool,
                                            CUmemPool_attribute attr,
                                            void *value)
{
	REQUIRE_INIT();
	return stub_pool_get_attr(pool, (int)attr, value) == 0
	           ? CUDA_SUCCESS
	           : CUDA_ERROR_INVALID_VALUE;
}

CUDASTUB_API CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	REQUIRE_INIT();
	if (free == NULL || total == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	stub_mem_info(free, total);
	return CUDA_SUCCESS;
}

/* ---- streams ---- */

CUDASTUB_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	(void)Flags;
	REQUIRE_INIT();
	if (phStream == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*phStream = (CUstream)stub_stream_new();
	return *phStream ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUDASTUB_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
	REQUIRE_INIT();
	if (hStream == NULL ||
	    stub_stream_free(stub_stream_get(hStream)) != 0)
		return CUDA_ERROR_INVALID_HANDLE;
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuStreamQuery(CUstream hStream)
{
	struct stub_stream *s;

	REQUIRE_INIT();
	s = stub_stream_get(hStream);
	if (s == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	return stub_stream_done_at(s) > stub_now() ? CUDA_ERROR_NOT_READY
	                                           : CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuStreamSynchronize(CUstream hStream)
{
	struct stub_stream *s;

	REQUIRE_INIT();
	s = stub_stream_get(hStream);
	if (s == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	stub_wait_until(stub_stream_done_at(s));
	return CUDA_SUCCESS;
}

/* ---- events ---- */

CUDASTUB_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	(void)Flags;
	REQUIRE_INIT();
	if (phEvent == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*phEvent = stub_object_new(STUB_KIND_EVENT);
	return *phEvent ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUDASTUB_API CUresult cuEventDestroy_v2(CUevent hEvent)
{
	REQUIRE_INIT();
	if (!stub_object_is(hEvent, STUB_KIND_EVENT))
		return CUDA_ERROR_INVALID_HANDLE;
	stub_object_free(hEvent);
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	struct stub_stream *s;

	REQUIRE_INIT();
	s = stub_stream_get(hStream);
	if (!stub_object_is(hEvent, STUB_KIND_EVENT) || s == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	stub_event_record(hEvent, s);
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuEventQuery(CUevent hEvent)
{
	REQUIRE_INIT();
	if (!stub_object_is(hEvent, STUB_KIND_EVENT))
		return CUDA_ERROR_INVALID_HANDLE;
	return stub_event_at(hEvent) > stub_now() ? CUDA_ERROR_NOT_READY
	                                          : CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuEventSynchronize(CUevent hEvent)
{
	REQUIRE_INIT();
	if (!stub_object_is(hEvent, STUB_KIND_EVENT))
		return CUDA_ERROR_INVALID_HANDLE;
	stub_wait_until(stub_event_at(hEvent));
	return CUDA_SUCCESS;
}

CUDASTUB_API CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart,
                                         CUevent hEnd)
{
	REQUIRE_INIT();
	if (pMilliseconds == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!stub_object_is(hStart, STUB_KIND_EVENT) ||
	    !stub_object_is(hEnd, STUB_KIND_EVENT))
		return CUDA_ERROR_INVALID_HANDLE;
	if (!stub_event_recorded(hStart) || !stub_event_recorded(hEnd))
		return CUDA_ERROR_INVALID_HANDLE;
	if (stub_event_at(hEnd) > stub_now())
		return CUDA_ERROR_NOT_READY;
	*pMilliseconds = (float)((double)((int64_t)stub_event_at(hEnd) -
	                                  (int64_t)stub_event_at(hStart)) /
	                         1e6);
	return CUDA_SUCCESS;
}

/* ---- errors ---- */

CUDASTUB_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	const char *s = stub_error_string((int)error);

	if (pStr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = s;
	return s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUDASTUB_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
	const char *s = stub_error_name((int)error);

	if (pStr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = s;
	return s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
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
