/*
 * cudastub.h: the subset of the CUDA driver (cuda.h) and runtime
 * (cuda_runtime_api.h) interfaces that the stub implements, with the real
 * type layouts and signatures so that the x86-64 calling convention of every
 * exported function is the one a uprobe on the real library sees.
 *
 * ABI notes for probe authors (System V x86-64):
 *   cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):
 *     rdi=f rsi=gx rdx=gy rcx=gz r8=bx r9=by; stack (at entry, above the
 *     return address): [rsp+8]=bz [rsp+16]=shmem [rsp+24]=stream
 *     [rsp+32]=params [rsp+40]=extra.
 *   cuLaunchKernelEx(const CUlaunchConfig *cfg, f, params, extra):
 *     rdi=cfg; grid at cfg+0/4/8, block at cfg+12/16/20, shmem at cfg+24,
 *     hStream at cfg+32, attrs at cfg+40, numAttrs at cfg+48.
 *   cudaLaunchKernel(func, dim3 grid, dim3 block, args, shmem, stream):
 *     dim3 (12 bytes) is passed by value in two registers: rdi=func,
 *     rsi=grid.x|grid.y<<32, rdx=grid.z, rcx=block.x|block.y<<32,
 *     r8=block.z, r9=args; [rsp+8]=shmem [rsp+16]=stream.
 *   cudaLaunchKernelExC(const cudaLaunchConfig_t *cfg, func, args):
 *     grid at cfg+0/4/8, block at cfg+12/16/20, dynamicSmemBytes at cfg+24,
 *     stream at cfg+32.
 *   cuGraphInstantiate*(phGraphExec, hGraph, ...), cudaGraphInstantiate*:
 *     rdi=the CUgraphExec out pointer, rsi=the graph.
 *   cuMemAllocFromPoolAsync(dptr, bytesize, pool, stream),
 *   cudaMallocFromPoolAsync(ptr, size, memPool, stream):
 *     rsi=bytes, rdx=pool, rcx=stream.
 *   cuMemPoolTrimTo(pool, minBytesToKeep), cudaMemPoolTrimTo: rsi=bytes.
 */
#ifndef CUDASTUB_H
#define CUDASTUB_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every exported API function: a real, separate function entry. */
#define CUDASTUB_API __attribute__((noinline, used, visibility("default")))

/* ---- driver API types (cuda.h) ---- */

typedef enum cudaError_enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_DEINITIALIZED = 4,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_FILE_NOT_FOUND = 301,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_NOT_SUPPORTED = 801,
	CUDA_ERROR_UNKNOWN = 999
} CUresult;

typedef unsigned long long CUdeviceptr; /* CUdeviceptr_v2 */
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUmemPoolHandle_st *CUmemoryPool;

#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

typedef struct CUlaunchAttribute_st {
	int id;
	char pad[4];
	char value[64];
} CUlaunchAttribute;

typedef struct CUlaunchConfig_st {
	unsigned int gridDimX;
	unsigned int gridDimY;
	unsigned int gridDimZ;
	unsigned int blockDimX;
	unsigned int blockDimY;
	unsigned int blockDimZ;
	unsigned int sharedMemBytes;
	CUstream hStream;
	CUlaunchAttribute *attrs;
	unsigned int numAttrs;
} CUlaunchConfig;

/* CUDA_GRAPH_INSTANTIATE_PARAMS (CUDA 12.0+). */
typedef struct CUDA_GRAPH_INSTANTIATE_PARAMS_st {
	unsigned long long flags;
	CUstream hUploadStream;
	CUgraphNode hErrNode_out;
	int result_out; /* CUgraphInstantiateResult */
} CUDA_GRAPH_INSTANTIATE_PARAMS;

typedef enum CUmemPool_attribute_enum {
	CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,
	CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC = 2,
	CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3,
	CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,    /* cuuint64_t */
	CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5, /* cuuint64_t, read only */
	CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,    /* cuuint64_t, set to 0 */
	CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,     /* cuuint64_t, read only */
	CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8         /* cuuint64_t, set to 0 */
} CUmemPool_attribute;

typedef struct CUmemLocation_st {
	int type; /* CUmemLocationType: 1 = device */
	int id;
} CUmemLocation;

/* CUmemPoolProps (CUDA 12.2+ layout, 88 bytes): maxSize 0 is the device's
 * memory (the stub: CUDASTUB_POOL_BYTES). */
typedef struct CUmemPoolProps_st {
	int allocType;   /* CUmemAllocationType: 1 = pinned */
	int handleTypes; /* CUmemAllocationHandleType */
	CUmemLocation location;
	void *win32SecurityAttributes;
	size_t maxSize;
	unsigned short usage;
	unsigned char reserved[54];
} CUmemPoolProps;

/* ---- runtime API types (cuda_runtime_api.h) ---- */

typedef enum cudaError {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInitializationError = 3,
	cudaErrorInvalidDevice = 101,
	cudaErrorInvalidResourceHandle = 400,
	cudaErrorNotReady = 600,
	cudaErrorUnknown = 999
} cudaError_t;

enum cudaMemcpyKind {
	cudaMemcpyHostToHost = 0,
	cudaMemcpyHostToDevice = 1,
	cudaMemcpyDeviceToHost = 2,
	cudaMemcpyDeviceToDevice = 3,
	cudaMemcpyDefault = 4
};

typedef struct dim3 {
	unsigned int x, y, z;
} dim3;

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
typedef struct CUgraphNode_st *cudaGraphNode_t;
typedef struct CUmemPoolHandle_st *cudaMemPool_t;

/* cudaGraphInstantiateParams (CUDA 12.0+). */
typedef struct cudaGraphInstantiateParams_st {
	unsigned long long flags;
	cudaStream_t uploadStream;
	cudaGraphNode_t errNode_out;
	int result_out; /* cudaGraphInstantiateResult */
} cudaGraphInstantiateParams;

/* cudaMemPoolAttr: the values of CUmemPool_attribute. */
enum cudaMemPoolAttr {
	cudaMemPoolReuseFollowEventDependencies = 1,
	cudaMemPoolReuseAllowOpportunistic = 2,
	cudaMemPoolReuseAllowInternalDependencies = 3,
	cudaMemPoolAttrReleaseThreshold = 4,
	cudaMemPoolAttrReservedMemCurrent = 5,
	cudaMemPoolAttrReservedMemHigh = 6,
	cudaMemPoolAttrUsedMemCurrent = 7,
	cudaMemPoolAttrUsedMemHigh = 8
};

/* struct cudaMemPoolProps: the layout of CUmemPoolProps. */
typedef CUmemPoolProps cudaMemPoolProps;

#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

typedef struct cudaLaunchAttribute_st {
	int id;
	char pad[4];
	char val[64];
} cudaLaunchAttribute;

typedef struct cudaLaunchConfig_st {
	dim3 gridDim;
	dim3 blockDim;
	size_t dynamicSmemBytes;
	cudaStream_t stream;
	cudaLaunchAttribute *attrs;
	unsigned int numAttrs;
} cudaLaunchConfig_t;

/*
 * An allocation of exactly this many bytes always fails with
 * CUDA_ERROR_OUT_OF_MEMORY / cudaErrorMemoryAllocation (override with the
 * environment variable CUDASTUB_FAIL_BYTES).
 */
#define CUDASTUB_FAIL_BYTES_DEFAULT ((size_t)0xDEADBEEFull)

/* ---- driver API (libcuda.so.1) ---- */

CUresult cuInit(unsigned int Flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy_v2(CUcontext ctx);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxGetCurrent(CUcontext *pctx);
CUresult cuCtxSynchronize(void);
CUresult cuModuleLoad(CUmodule *module, const char *fname);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleUnload(CUmodule hmod);
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod,
                             const char *name);
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX,
                        unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes,
                        CUstream hStream, void **kernelParams, void **extra);
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                          void **kernelParams, void **extra);
CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags);
/* cuGraphInstantiate and cuGraphInstantiate_v2 are the CUDA 11 exports
 * (cuda.h 12 maps cuGraphInstantiate to cuGraphInstantiateWithFlags). */
CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                            CUgraphNode *phErrorNode, char *logBuffer,
                            size_t bufferSize);
CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                               CUgraphNode *phErrorNode, char *logBuffer,
                               size_t bufferSize);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                     unsigned long long flags);
CUresult
cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                             CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams);
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphExecDestroy(CUgraphExec hGraphExec);
CUresult cuGraphDestroy(CUgraph hGraph);
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                       CUstream hStream);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost,
                         size_t ByteCount);
CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice,
                         size_t ByteCount);
CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                         size_t ByteCount);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
                              size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice,
                              size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                              size_t ByteCount, CUstream hStream);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps);
CUresult cuMemPoolDestroy(CUmemoryPool pool);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
                                 CUmemoryPool pool, CUstream hStream);
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep);
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                               void *value);
CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                               void *value);
CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);
CUresult cuStreamDestroy_v2(CUstream hStream);
CUresult cuStreamQuery(CUstream hStream);
CUresult cuStreamSynchronize(CUstream hStream);
CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);
CUresult cuEventDestroy_v2(CUevent hEvent);
CUresult cuEventRecord(CUevent hEvent, CUstream hStream);
CUresult cuEventQuery(CUevent hEvent);
CUresult cuEventSynchronize(CUevent hEvent);
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult cuGetErrorString(CUresult error, const char **pStr);
CUresult cuGetErrorName(CUresult error, const char **pStr);

/* ---- runtime API (libcudart.so.12) ---- */

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion);
cudaError_t cudaDriverGetVersion(int *driverVersion);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim,
                             void **args, size_t sharedMem,
                             cudaStream_t stream);
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config,
                                const void *func, void **args);
cudaError_t cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec,
                                 cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec,
                                          cudaGraph_t graph,
                                          unsigned long long flags);
cudaError_t
cudaGraphInstantiateWithParams(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                               cudaGraphInstantiateParams *instantiateParams);
cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                       enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                            enum cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream);
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool,
                              const cudaMemPoolProps *poolProps);
cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool);
cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size,
                                    cudaMemPool_t memPool,
                                    cudaStream_t stream);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool,
                                    enum cudaMemPoolAttr attr, void *value);
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool,
                                    enum cudaMemPoolAttr attr, void *value);
cudaError_t cudaStreamCreate(cudaStream_t *pStream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start,
                                 cudaEvent_t end);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);

/* ---- stub extensions (both libraries) ---- */

/* Sets the duration of a kernel launched from now on, in microseconds. */
void cudastub_set_kernel_us(double us);
/* The current kernel duration in microseconds. */
double cudastub_kernel_us(void);

#ifdef __cplusplus
}
#endif

#endif /* CUDASTUB_H */
