// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * Scheduler collector: run-queue latency and off-CPU time.
 *
 * Run-queue latency is the time from a thread becoming runnable (woken,
 * created, or preempted while still runnable) to it getting a CPU. Off-CPU
 * time is the time from a thread leaving the CPU to it getting one again,
 * split by the state it left in: preempted (still runnable), uninterruptible
 * sleep (D, usually IO) or interruptible sleep (S).
 *
 * Host-wide aggregates (index 0) and per-target aggregates (index of the
 * target) are log2 histograms in per-CPU arrays, read by userspace on a
 * ticker. Threads of targets flagged TARGET_STREAM also send one event per
 * switch-in through the ring buffer; reservations that fail are counted per
 * CPU in `lost`.
 */
#include "bpfbench.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define TASK_RUNNING 0x0000
#define TASK_INTERRUPTIBLE 0x0001
#define TASK_UNINTERRUPTIBLE 0x0002
#define TASK_NOLOAD 0x0400

enum offcpu_state {
	STATE_PREEMPTED = 0, /* left the CPU runnable */
	STATE_IOWAIT = 1,    /* uninterruptible sleep (D) */
	STATE_SLEEP = 2,     /* interruptible sleep (S), or idle kernel waits */
	STATE_NONE = 3,      /* no off-CPU interval known (first sight) */
	NR_STATES = 3,
};

/* One event per switch-in of a streamed thread. */
struct event {
	__u64 ts;        /* switch-in, CLOCK_MONOTONIC ns */
	__u64 offcpu_ns; /* switch-out to switch-in; 0 if unknown */
	__u64 runq_ns;   /* runnable to switch-in; 0 if unknown */
	__u32 tgid;
	__u32 tid;
	__u32 cpu;
	__u8 state; /* enum offcpu_state of the off-CPU interval */
	__u8 has_runq;
	__u8 pad[2];
	char comm[16];
};

/* Force BTF emission for bpf2go -type. */
const struct event *unused_event __attribute__((unused));

struct hist {
	__u64 slots[HIST_SLOTS];
	__u64 count;
	__u64 sum_ns;
};

/* Per-thread state, in task local storage: no hash lookups on the hot
 * path and freed by the kernel when the task exits. */
struct task_info {
	__u64 runnable_ts; /* when the thread last became runnable */
	__u64 offcpu_ts;   /* when it last left a CPU (targets only) */
	__u32 offcpu_state;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_info);
} task_infos SEC(".maps");

/* tgid -> target, set from userspace at run time. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct target);
} targets SEC(".maps");

/* Run-queue latency per target index (0 = host-wide). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct hist);
} runq_hist SEC(".maps");

/* Off-CPU time per (target index * NR_STATES + state). Only targets. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_TARGETS * NR_STATES);
	__type(key, __u32);
	__type(value, struct hist);
} offcpu_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

/* Events the ring buffer could not take, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

/* Set by userspace before load: whether to aggregate run-queue latency of
 * every thread on the host (the daemon) or only of targets (a session). */
volatile const bool host_wide = true;

/* Entries in targets, kept by userspace: with none (a daemon with no
 * configured target running), the hot path skips the two hash lookups. */
volatile __u32 nr_targets = 0;

static __always_inline struct target *target_of(__u32 tgid)
{
	if (!nr_targets)
		return 0;
	return bpf_map_lookup_elem(&targets, &tgid);
}

static __always_inline void hist_add(void *map, __u32 idx, __u64 v)
{
	struct hist *h = bpf_map_lookup_elem(map, &idx);
	if (!h)
		return;
	__u32 s = hist_slot(v);
	if (s < HIST_SLOTS)
		h->slots[s]++;
	h->count++;
	h->sum_ns += v;
}

static __always_inline struct task_info *info_of(struct task_struct *p)
{
	return bpf_task_storage_get(&task_infos, p, 0,
				    BPF_LOCAL_STORAGE_GET_F_CREATE);
}

static __always_inline void mark_runnable(struct task_struct *p)
{
	if (!host_wide) {
		__u32 tgid = BPF_CORE_READ(p, tgid);
		if (!target_of(tgid))
			return;
	}
	struct task_info *ti = info_of(p);
	if (ti)
		ti->runnable_ts = bpf_ktime_get_ns();
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup, struct task_struct *p)
{
	mark_runnable(p);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(sched_wakeup_new, struct task_struct *p)
{
	mark_runnable(p);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();
	struct task_info *ti;
	struct target *tgt;
	__u32 tgid;

	/* The thread leaving the CPU. */
	if (prev->pid != 0) {
		tgid = prev->tgid;
		tgt = target_of(tgid);
		bool runnable = preempt || (prev_state & 0xff) == TASK_RUNNING;
		if (tgt || (host_wide && runnable)) {
			ti = info_of(prev);
			if (ti) {
				if (runnable)
					ti->runnable_ts = now;
				if (tgt) {
					__u32 st = STATE_SLEEP;
					if (runnable)
						st = STATE_PREEMPTED;
					else if ((prev_state & TASK_UNINTERRUPTIBLE) &&
						 !(prev_state & TASK_NOLOAD))
						st = STATE_IOWAIT;
					ti->offcpu_ts = now;
					ti->offcpu_state = st;
				}
			}
		}
	}

	/* The thread getting the CPU. */
	if (next->pid == 0)
		return 0;
	tgid = next->tgid;
	tgt = target_of(tgid);
	if (!tgt && !host_wide)
		return 0;
	ti = bpf_task_storage_get(&task_infos, next, 0, 0);
	if (!ti)
		return 0;

	__u64 runq = 0, offcpu = 0;
	__u8 has_runq = 0;
	__u32 st = STATE_NONE;
	if (ti->runnable_ts && now >= ti->runnable_ts) {
		runq = now - ti->runnable_ts;
		has_runq = 1;
		hist_add(&runq_hist, 0, runq);
	}
	ti->runnable_ts = 0;
	if (!tgt)
		return 0;

	__u32 idx = tgt->idx;
	if (idx == 0 || idx >= MAX_TARGETS)
		return 0;
	if (has_runq)
		hist_add(&runq_hist, idx, runq);
	if (ti->offcpu_ts && now >= ti->offcpu_ts) {
		offcpu = now - ti->offcpu_ts;
		st = ti->offcpu_state;
		if (st < NR_STATES)
			hist_add(&offcpu_hist, idx * NR_STATES + st, offcpu);
	}
	ti->offcpu_ts = 0;

	if (!(tgt->flags & TARGET_STREAM))
		return 0;
	if (!has_runq && st == STATE_NONE)
		return 0;
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__u32 zero = 0;
		__u64 *n = bpf_map_lookup_elem(&lost, &zero);
		if (n)
			(*n)++;
		return 0;
	}
	e->ts = now;
	e->offcpu_ns = offcpu;
	e->runq_ns = runq;
	e->tgid = tgid;
	e->tid = next->pid;
	e->cpu = bpf_get_smp_processor_id();
	e->state = st;
	e->has_runq = has_runq;
	e->pad[0] = 0;
	e->pad[1] = 0;
	__builtin_memcpy(e->comm, next->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
	return 0;
}
