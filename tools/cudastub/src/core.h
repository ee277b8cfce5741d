/*
 * core.h: the simulated device shared by libcuda.so.1 and libcudart.so.12.
 * Each library links its own copy (hidden symbols), so a process that maps
 * both sees two independent devices; calls never cross from one library into
 * the other, which keeps per-library call counts exact.
 */
#ifndef CUDASTUB_CORE_H
#define CUDASTUB_CORE_H

#include <stddef.h>
#include <stdint.h>

#define STUB_HIDDEN __attribute__((visibility("hidden")))

enum stub_mode { STUB_MODE_SLEEP = 0, STUB_MODE_SPIN = 1 };

struct stub_config {
	uint64_t kernel_ns;   /* CUDASTUB_KERNEL_US, default 1000 */
	enum stub_mode mode;  /* CUDASTUB_MODE=sleep|spin */
	double copy_gbps;     /* CUDASTUB_COPY_GBPS, default 25 */
	uint64_t mem_bytes;   /* CUDASTUB_MEM_BYTES, default 80 GiB */
	uint64_t fail_bytes;  /* CUDASTUB_FAIL_BYTES, default 0xDEADBEEF */
	unsigned queue_depth; /* CUDASTUB_QUEUE_DEPTH, default 1024, 0 = none */
	int devices;          /* CUDASTUB_DEVICES, default 1 */
	uint64_t pool_bytes;  /* CUDASTUB_POOL_BYTES: a pool's size when its
	                         props say 0, default mem_bytes */
	int pool_fragmentation; /* CUDASTUB_POOL_FRAGMENTATION=0|1 */
};

struct stub_stream;

STUB_HIDDEN const struct stub_config *stub_config(void);
STUB_HIDDEN uint64_t stub_now(void);
STUB_HIDDEN void stub_wait_until(uint64_t t);

STUB_HIDDEN uint64_t stub_kernel_ns(void);
STUB_HIDDEN void stub_set_kernel_ns(uint64_t ns);
STUB_HIDDEN uint64_t stub_copy_ns(size_t bytes);

/* Streams: NULL, the legacy (0x1) and per-thread (0x2) handles all name the
 * default stream. Returns NULL for a handle that is not a live stream. */
STUB_HIDDEN struct stub_stream *stub_stream_get(const void *handle);
STUB_HIDDEN struct stub_stream *stub_stream_new(void);
STUB_HIDDEN int stub_stream_free(struct stub_stream *s);
/* Enqueues work of dur_ns on s; returns its completion time. Blocks the caller
 * while the stream already holds queue_depth unfinished operations. */
STUB_HIDDEN uint64_t stub_enqueue(struct stub_stream *s, uint64_t dur_ns);
STUB_HIDDEN uint64_t stub_stream_done_at(struct stub_stream *s);
STUB_HIDDEN uint64_t stub_device_done_at(void);

/* Functions: a name "sleep_<N>us" makes a kernel of N microseconds. */
struct stub_function;
STUB_HIDDEN struct stub_function *stub_function_new(const char *name);
STUB_HIDDEN uint64_t stub_function_ns(const void *f);
STUB_HIDDEN int stub_is_function(const void *f);

/* Opaque objects with a type tag, for contexts, modules, events, graphs. */
enum stub_kind {
	STUB_KIND_CTX = 0x43545831,
	STUB_KIND_MODULE = 0x4d4f4431,
	STUB_KIND_EVENT = 0x45564e31,
	STUB_KIND_GRAPH = 0x47525031,
	STUB_KIND_GRAPH_EXEC = 0x47455831,
	STUB_KIND_FUNCTION = 0x46554e31,
	STUB_KIND_STREAM = 0x53544d31,
	STUB_KIND_POOL = 0x504f4c31
};
STUB_HIDDEN void *stub_object_new(enum stub_kind kind);
STUB_HIDDEN int stub_object_is(const void *obj, enum stub_kind kind);
STUB_HIDDEN void stub_object_free(void *obj);

/* Events record the completion time of the work enqueued before them. */
STUB_HIDDEN void stub_event_record(void *ev, struct stub_stream *s);
STUB_HIDDEN int stub_event_recorded(const void *ev);
STUB_HIDDEN uint64_t stub_event_at(const void *ev);

/* Device memory: fake, never backed, never dereferenced. 0 on success, -1 when
 * out of memory (limit or the magic size). */
STUB_HIDDEN int stub_alloc(size_t bytes, uint64_t *addr);
/* 0 on success, -1 when addr is not the start of a live allocation. */
STUB_HIDDEN int stub_free(uint64_t addr);
STUB_HIDDEN int stub_is_device_ptr(uint64_t addr);
STUB_HIDDEN void stub_mem_info(size_t *free_bytes, size_t *total_bytes);

/*
 * Memory pools (cuMemPoolCreate, cudaMemPoolCreate). A pool holds at most
 * max_bytes live (0: CUDASTUB_POOL_BYTES). Without fragmentation an
 * allocation fails only when the live total would exceed that; with
 * CUDASTUB_POOL_FRAGMENTATION=1 blocks are placed first fit in the pool's
 * max_bytes of addresses and an allocation fails when no free gap holds it,
 * even when the free total would. Reserved memory (what the pool holds from
 * the device) grows with use and shrinks on a free to the release threshold
 * (default 0) or on a trim to minBytesToKeep, never below the live total.
 */
struct stub_pool;
/* NULL when STUB_MAX_POOLS pools are live. */
STUB_HIDDEN struct stub_pool *stub_pool_new(uint64_t max_bytes);
/* -1 for a handle that is not a live pool. Live blocks are dropped. */
STUB_HIDDEN int stub_pool_free(void *pool);
STUB_HIDDEN int stub_is_pool(const void *pool);
/* 0 on success, -1 when the pool has no room (out of memory). */
STUB_HIDDEN int stub_pool_alloc(void *pool, size_t bytes, uint64_t *addr);
/* 0 freed, 1 not an address of any pool, -1 in a pool but not a block. */
STUB_HIDDEN int stub_pool_release(uint64_t addr);
STUB_HIDDEN void stub_pool_trim(void *pool, uint64_t keep);
/* 0, or -1 for an attribute that cannot be set or read (or a bad value). */
STUB_HIDDEN int stub_pool_set_attr(void *pool, int attr, const void *value);
STUB_HIDDEN int stub_pool_get_attr(void *pool, int attr, void *value);

STUB_HIDDEN const char *stub_error_name(int code);
STUB_HIDDEN const char *stub_error_string(int code);

#endif /* CUDASTUB_CORE_H */
