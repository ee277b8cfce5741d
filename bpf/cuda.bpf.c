// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * CUDA collector: driver (libcuda) and runtime (libcudart) API calls of
 * target processes, from uprobes on the target's own libraries.
 *
 * One entry program and one return program serve every symbol (each also
 * built for uprobe_multi links, which carry every symbol of a library in
 * one link, with a cookie per address); the attach
 * cookie, set by userspace per symbol, says which call it is and where its
 * arguments are, as integer argument slots (x86-64 System V: slots 1..6
 * are rdi, rsi, rdx, rcx, r8, r9, slot k >= 7 is on the stack at
 * [rsp + 8*(k-6)] at entry, above the return address; arm64 AAPCS64: slots
 * 1..8 are x0..x7, slot k >= 9 at [sp + 8*(k-9)]; a struct of up to 16
 * bytes by value, such as dim3, takes two slots in both).
 *
 * Calls whose duration or return code matters (synchronizes, blocking
 * copies, allocations, frees) also get a return probe: the entry stores the
 * start in `inflight` keyed by (tid, call) and the return accounts the call.
 * Hot calls (launches, asynchronous copies) are entry-only and accounted at
 * entry. Graph launches are launches: entry-only, counted per CPU, streamed
 * only with TARGET_STREAM_ALL, and under the launch-probe budget.
 * Calls that are counted only (CK_QUIET: graph instantiations and exec
 * destroys, pool trims and attribute sets) get a return probe for their
 * return code and duration but are never streamed.
 *
 * Per (target slot, call): counts, errors, bytes and out-of-memory failures
 * in a per-CPU array, and a log2 duration histogram (calls with a return
 * probe; not hot, so a shared array with atomic adds). Copy bytes per
 * (target slot, direction). Launch grid/block dimensions of streamed
 * targets in a hash (launches it had no room for count as overflow).
 * Discrete events of streamed targets go through the event pipeline
 * (pipeline.h), which counts what it could not take.
 */
#define PIPELINE_TARGETS
#include "pipeline.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Calls per target slot: ids are assigned by userspace (collectors/cuda). */
#define MAX_CALLS 64
/* Copy directions per target slot. */
#define MAX_DIRS 8

/* Flag of a target entry, next to TARGET_STREAM: also stream the
 * entry-only calls (launches, asynchronous copies). */
#define TARGET_STREAM_ALL 2

/* Cookie layout. */
#define CK_CALL(c) ((__u32)(c)&0xff)
#define CK_BYTES(c) ((__u32)((c) >> 8) & 0xf)   /* slot of a byte count, 0: none */
#define CK_HANDLE(c) ((__u32)((c) >> 12) & 0xf) /* slot of a stream/event/pointer */
#define CK_KIND(c) ((__u32)((c) >> 16) & 0xf)   /* slot of a cudaMemcpyKind */
#define CK_DIR(c) ((__u32)((c) >> 20) & 0xf)    /* fixed copy direction */
#define CK_RET (1ULL << 24)                     /* a return probe ends the call */
#define CK_ALLOC (1ULL << 25)                   /* an allocation */
#define CK_LAUNCH(c) ((__u32)((c) >> 26) & 0x3) /* enum launch_layout */
#define CK_QUIET (1ULL << 28)                   /* counted, never streamed */
#define CK_LAUNCHER (1ULL << 29)                /* a launch: counted per thread */
#define CK_SYNC (1ULL << 30)                    /* a synchronize: marks the thread's steps */

enum launch_layout {
	LAUNCH_NONE = 0,
	LAUNCH_ARGS = 1,   /* cuLaunchKernel: six dims in slots 2..7 */
	LAUNCH_CONFIG = 2, /* CUlaunchConfig / cudaLaunchConfig_t * in slot 1 */
	LAUNCH_DIM3 = 3,   /* cudaLaunchKernel: dim3 by value in slots 2..5 */
};

/* Copy directions. */
#define DIR_NONE 0
#define DIR_HTOD 1
#define DIR_DTOH 2
#define DIR_DTOD 3
#define DIR_HTOH 4
#define DIR_DEFAULT 5 /* unified addressing: direction unknown */

#define CUDA_ERROR_OUT_OF_MEMORY 2 /* also cudaErrorMemoryAllocation */

/* One call of a streamed target. */
struct event {
	__u64 start;  /* entry, CLOCK_MONOTONIC ns */
	__u64 end;    /* return; == start for entry-only calls */
	__u64 bytes;  /* copies and allocations */
	__u64 handle; /* stream, event or device pointer named by the call */
	__u32 tgid;
	__u32 tid;
	__u32 grid[3];  /* launches */
	__u32 block[3]; /* launches */
	__s32 ret;      /* return code; 0 for entry-only calls */
	__u8 call;      /* call id */
	__u8 dir;       /* copy direction */
	__u8 has_ret;   /* ret and end are from a return probe */
	__u8 pad;
};

/* Force BTF emission for bpf2go -type. */
const struct event *unused_event __attribute__((unused));

struct counts {
	__u64 count;
	__u64 errors; /* non-zero return codes */
	__u64 bytes;  /* copied or allocated (successful calls) */
	__u64 oom;    /* allocations failed with out of memory */
};

struct inflight {
	__u64 start;
	__u64 bytes;
	__u64 handle;
	__u32 dir;
	__u32 pad;
};

struct dims_key {
	__u32 idx;
	__u32 call;
	__u32 grid[3];
	__u32 block[3];
};

/* A thread that launched, for the launch budget's estimate
 * (collectors/cuda/estimate.go): its launches counted by the probes, its
 * synchronizes (whose probes stay on), and the launch count at the first
 * synchronize after userspace armed a sample window (arm[idx] != gen) and at
 * the latest one, so that a window's launches per step count whole steps.
 * Only the thread writes its entry; userspace only reads it. */
struct launcher {
	__u64 launches;
	__u64 syncs;
	__u64 first_launches; /* at the first synchronize of generation gen */
	__u64 first_syncs;
	__u64 last_launches; /* at the latest synchronize */
	__u64 last_syncs;
	__u32 tgid;
	__u32 idx;
	__u32 gen;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct launcher);
} launchers SEC(".maps");

/* idx -> the generation of the latest sample window (userspace writes it). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u32);
	__type(value, __u32);
} arm SEC(".maps");

/* (tid << 32 | call) -> call in progress. LRU: a thread killed inside a
 * call never returns. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct inflight);
} inflight SEC(".maps");

/* idx * MAX_CALLS + call -> counts. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_TARGETS * MAX_CALLS);
	__type(key, __u32);
	__type(value, struct counts);
} call_counts SEC(".maps");

/* idx * MAX_CALLS + call -> duration histogram (calls with a return probe). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_TARGETS * MAX_CALLS);
	__type(key, __u32);
	__type(value, struct hist);
} durations SEC(".maps");

/* idx * MAX_DIRS + direction -> bytes copied. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_TARGETS * MAX_DIRS);
	__type(key, __u32);
	__type(value, __u64);
} copy_bytes SEC(".maps");

/* Launches of streamed targets by call, grid and block. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct dims_key);
	__type(value, __u64);
} launch_dims SEC(".maps");

struct args {
	__u64 bytes;
	__u64 handle;
	__u32 grid[3];
	__u32 block[3];
	__u32 dir;
	__u32 pad;
};

/* The layout shared by CUlaunchConfig and cudaLaunchConfig_t. */
struct launch_config {
	__u32 grid[3];
	__u32 block[3];
	__u32 shmem;
	__u32 pad;
	__u64 stream;
};


/* The integer argument registers at entry, by slot (1..ARG_REGS), and the
 * stack pointer (SP_SLOT): read once at constant offsets (the verifier
 * rejects a ctx access at a computed offset). */
struct regs {
	__u64 r[16];
};

static __always_inline void load_regs(struct pt_regs *ctx, struct regs *g)
{
	g->r[0] = 0;
	g->r[1] = PT_REGS_PARM1(ctx);
	g->r[2] = PT_REGS_PARM2(ctx);
	g->r[3] = PT_REGS_PARM3(ctx);
	g->r[4] = PT_REGS_PARM4(ctx);
	g->r[5] = PT_REGS_PARM5(ctx);
	g->r[6] = ARG_REG6(ctx);
#if ARG_REGS > 6
	g->r[7] = ARG_REG7(ctx);
	g->r[8] = ARG_REG8(ctx);
#endif
	g->r[SP_SLOT] = PT_REGS_SP(ctx);
}

/* slot reads integer argument slot k (1-based; 0: none) at function entry:
 * slots past the registers are the stack's 8-byte slots, from
 * STACK_ARGS_OFF above the stack pointer (see bpfbench.h). */
static __always_inline __u64 slot(struct regs *g, __u32 k)
{
	__u64 v = 0;
	if (k == 0)
		return 0;
	if (k <= ARG_REGS)
		return g->r[k & 15];
	if (k > 15)
		return 0;
	bpf_probe_read_user(&v, sizeof(v),
			    (void *)(g->r[SP_SLOT] + STACK_ARGS_OFF + 8 * (k - ARG_REGS - 1)));
	return v;
}

/* read_args decodes the arguments the cookie names; without full, only
 * what the counters need (byte count and direction, from registers). */
static __always_inline void read_args(struct pt_regs *ctx, __u64 ck, struct args *a, bool full)
{
	struct regs g;
	__u32 k;

	load_regs(ctx, &g);
	a->bytes = slot(&g, CK_BYTES(ck));
	a->dir = CK_DIR(ck);
	k = CK_KIND(ck);
	if (k) {
		__u32 kind = (__u32)slot(&g, k);
		if (kind == 0)
			a->dir = DIR_HTOH;
		else if (kind <= 3)
			a->dir = kind; /* HtoD 1, DtoH 2, DtoD 3 */
		else
			a->dir = DIR_DEFAULT;
	}
	if (!full)
		return;
	a->handle = slot(&g, CK_HANDLE(ck));
	switch (CK_LAUNCH(ck)) {
	case LAUNCH_ARGS:
		a->grid[0] = (__u32)g.r[2];
		a->grid[1] = (__u32)g.r[3];
		a->grid[2] = (__u32)g.r[4];
		a->block[0] = (__u32)g.r[5];
		a->block[1] = (__u32)g.r[6];
		a->block[2] = (__u32)slot(&g, 7);
		break;
	case LAUNCH_CONFIG: {
		struct launch_config c = {};
		bpf_probe_read_user(&c, sizeof(c), (void *)g.r[1]);
		a->grid[0] = c.grid[0];
		a->grid[1] = c.grid[1];
		a->grid[2] = c.grid[2];
		a->block[0] = c.block[0];
		a->block[1] = c.block[1];
		a->block[2] = c.block[2];
		a->handle = c.stream;
		break;
	}
	case LAUNCH_DIM3: {
		__u64 gr = g.r[2], b = g.r[4];
		a->grid[0] = (__u32)gr;
		a->grid[1] = (__u32)(gr >> 32);
		a->grid[2] = (__u32)g.r[3];
		a->block[0] = (__u32)b;
		a->block[1] = (__u32)(b >> 32);
		a->block[2] = (__u32)g.r[5];
		break;
	}
	}
}

static __always_inline void account(__u32 idx, __u32 call, __u64 bytes, __u32 dir,
				    bool failed, bool oom)
{
	__u32 key = idx * MAX_CALLS + call;
	struct counts *c = bpf_map_lookup_elem(&call_counts, &key);
	if (c) {
		c->count++;
		if (failed)
			c->errors++;
		else
			c->bytes += bytes;
		if (oom)
			c->oom++;
	}
	if (dir != DIR_NONE && dir < MAX_DIRS && !failed && bytes) {
		key = idx * MAX_DIRS + dir;
		__u64 *b = bpf_map_lookup_elem(&copy_bytes, &key);
		if (b)
			*b += bytes;
	}
}

static __always_inline void count_dims(__u32 idx, __u32 call, struct args *a)
{
	struct dims_key k = {
		.idx = idx,
		.call = call,
		.grid = {a->grid[0], a->grid[1], a->grid[2]},
		.block = {a->block[0], a->block[1], a->block[2]},
	};
	__u64 *n = bpf_map_lookup_elem(&launch_dims, &k);
	if (!n) {
		__u64 zero = 0;
		bpf_map_update_elem(&launch_dims, &k, &zero, BPF_NOEXIST);
		n = bpf_map_lookup_elem(&launch_dims, &k);
		if (!n) {
			pipe_count(PIPE_OVERFLOW, 1);
			return;
		}
	}
	__sync_fetch_and_add(n, 1);
}

static __always_inline void emit(__u64 id, __u32 call, __u64 start, __u64 end,
				 struct args *a, __s32 ret, __u8 has_ret)
{
	struct event *e = pipe_reserve(struct event);
	if (!e)
		return;
	e->start = start;
	e->end = end;
	e->bytes = a->bytes;
	e->handle = a->handle;
	e->tgid = id >> 32;
	e->tid = (__u32)id;
	e->grid[0] = a->grid[0];
	e->grid[1] = a->grid[1];
	e->grid[2] = a->grid[2];
	e->block[0] = a->block[0];
	e->block[1] = a->block[1];
	e->block[2] = a->block[2];
	e->ret = ret;
	e->call = call;
	e->dir = a->dir;
	e->has_ret = has_ret;
	e->pad = 0;
	pipe_submit(e, sizeof(*e));
}

/* count_launch counts a launch of thread tid (per-thread entry). */
static __always_inline void count_launch(__u64 id, __u32 idx)
{
	__u32 tid = (__u32)id;
	struct launcher *l = bpf_map_lookup_elem(&launchers, &tid);
	if (l) {
		l->launches++;
		return;
	}
	/* gen 0: its first synchronize marks the current window. */
	struct launcher n = {.launches = 1, .tgid = id >> 32, .idx = idx};
	bpf_map_update_elem(&launchers, &tid, &n, BPF_NOEXIST);
}

/* mark_sync records a synchronize of a thread that launched. */
static __always_inline void mark_sync(__u64 id, __u32 idx)
{
	__u32 tid = (__u32)id;
	struct launcher *l = bpf_map_lookup_elem(&launchers, &tid);
	if (!l)
		return;
	l->syncs++;
	l->last_launches = l->launches;
	l->last_syncs = l->syncs;
	__u32 *g = bpf_map_lookup_elem(&arm, &idx);
	if (g && *g != l->gen) {
		l->gen = *g;
		l->first_launches = l->launches;
		l->first_syncs = l->syncs;
	}
}

static __always_inline int enter(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct target *t = target_of(tgid);
	if (!t)
		return 0;
	__u32 idx = t->idx, flags = t->flags;
	if (idx == 0 || idx >= MAX_TARGETS)
		return 0;
	__u64 ck = bpf_get_attach_cookie(ctx);
	__u32 call = CK_CALL(ck);
	if (call >= MAX_CALLS)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct args a = {};
	/* Entry-only calls of a target that streams nothing need no more
	 * than the counters: keep the hot path short. */
	read_args(ctx, ck, &a, ((ck & CK_RET) && !(ck & CK_QUIET)) || (flags & TARGET_STREAM));
	if (ck & CK_SYNC)
		mark_sync(id, idx);
	if (ck & CK_LAUNCHER)
		count_launch(id, idx);

	if (ck & CK_RET) {
		__u64 key = (id << 32) | call;
		struct inflight v = {
			.start = now,
			.bytes = a.bytes,
			.handle = a.handle,
			.dir = a.dir,
		};
		bpf_map_update_elem(&inflight, &key, &v, BPF_ANY);
		return 0;
	}

	account(idx, call, a.bytes, a.dir, false, false);
	if (CK_LAUNCH(ck) != LAUNCH_NONE && (flags & TARGET_STREAM))
		count_dims(idx, call, &a);
	if (flags & TARGET_STREAM_ALL)
		emit(id, call, now, now, &a, 0, 0);
	return 0;
}

SEC("uprobe")
int cuda_enter(struct pt_regs *ctx)
{
	return enter(ctx);
}

/* The same entry program for a uprobe_multi link: the launch-rate probes
 * attach and detach together, with one RCU grace period, not one per
 * symbol (see collectors/cuda/budget.go), and so do the other entry
 * probes of a library, in a second link. */
SEC("uprobe.multi")
int cuda_enter_multi(struct pt_regs *ctx)
{
	return enter(ctx);
}

static __always_inline int leave(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct target *t = target_of(tgid);
	if (!t)
		return 0;
	__u32 idx = t->idx, flags = t->flags;
	if (idx == 0 || idx >= MAX_TARGETS)
		return 0;
	__u64 ck = bpf_get_attach_cookie(ctx);
	__u32 call = CK_CALL(ck);
	if (call >= MAX_CALLS)
		return 0;
	__u64 key = (id << 32) | call;
	struct inflight *v = bpf_map_lookup_elem(&inflight, &key);
	if (!v)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 start = v->start;
	struct args a = {};
	a.bytes = v->bytes;
	a.handle = v->handle;
	a.dir = v->dir;
	bpf_map_delete_elem(&inflight, &key);

	__s32 ret = (__s32)PT_REGS_RC(ctx);
	bool failed = ret != 0;
	bool oom = (ck & CK_ALLOC) && ret == CUDA_ERROR_OUT_OF_MEMORY;
	__u64 dur = now >= start ? now - start : 0;
	account(idx, call, a.bytes, a.dir, failed, oom);

	__u32 hk = idx * MAX_CALLS + call;
	struct hist *h = bpf_map_lookup_elem(&durations, &hk);
	if (h) {
		__u32 s = hist_slot(dur);
		if (s < HIST_SLOTS)
			__sync_fetch_and_add(&h->slots[s], 1);
		__sync_fetch_and_add(&h->count, 1);
		__sync_fetch_and_add(&h->sum_ns, dur);
	}
	if ((flags & TARGET_STREAM) && !(ck & CK_QUIET))
		emit(id, call, start, now, &a, ret, 1);
	return 0;
}

SEC("uretprobe")
int cuda_exit(struct pt_regs *ctx)
{
	return leave(ctx);
}

/* The same return program for a uretprobe_multi link: every return probe
 * of a library is one link (Linux 6.6+), attached and detached at once,
 * and it needs CAP_BPF and CAP_PERFMON where a perf-event uprobe needs
 * CAP_SYS_ADMIN since Linux 6.16 (collectors/cuda/cuda.go). */
SEC("uretprobe.multi")
int cuda_exit_multi(struct pt_regs *ctx)
{
	return leave(ctx);
}
