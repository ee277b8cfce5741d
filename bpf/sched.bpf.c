// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * Scheduler collector: run-queue latency and off-CPU time, from one program
 * on sched_switch.
 *
 * Run-queue latency is the time from a thread becoming runnable (woken,
 * created, or preempted while still runnable) to it getting a CPU. It is the
 * kernel's own measure: sched_info.last_queued, stamped on the run queue's
 * clock at enqueue, against that clock at the switch (the tracepoint fires
 * before sched_info_switch clears it). So no wakeup program and no per-thread
 * state is needed for it, host-wide or not.
 *
 * Off-CPU time is the time from a target thread leaving the CPU to it
 * getting one again, split by the state it left in: preempted (still
 * runnable), uninterruptible sleep (D, usually IO) or interruptible sleep
 * (S). Only target threads keep state (task local storage).
 *
 * Host-wide aggregates (index 0) and per-target aggregates (index of the
 * target) are log2 histograms in per-CPU arrays that count every interval.
 * Threads of targets flagged TARGET_STREAM also send records, but only of
 * intervals correlation needs: a switch-in whose run-queue wait and off-CPU
 * stint are both short (under fold_runq_ns, fold_offcpu_ns, fold_sleep_ns)
 * is folded into per-thread sums carried by the thread's next record, or by
 * a record forced once the sums are older than flush_ns.
 */
#define PIPELINE_TARGETS
#include "pipeline.h"

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

/* One record per unfolded switch-in of a streamed thread. */
struct event {
	__u64 ts;        /* switch-in, CLOCK_MONOTONIC ns */
	__u64 offcpu_ns; /* switch-out to switch-in; 0 if unknown */
	__u64 runq_ns;   /* runnable to switch-in; 0 if unknown */
	/* Intervals folded since the thread's previous record. */
	__u64 fold_runq_ns;
	__u64 fold_offcpu_ns[NR_STATES];
	__u32 fold_runq_n;
	__u32 fold_n;
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

/* Per target thread, in task local storage: freed with the task. */
struct task_info {
	__u64 offcpu_ts; /* when it last left a CPU */
	__u64 last_rec;  /* when its last record was sent */
	__u64 fold_runq_ns;
	__u64 fold_offcpu_ns[NR_STATES];
	__u32 fold_runq_n;
	__u32 fold_n;
	__u32 offcpu_state;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_info);
} task_infos SEC(".maps");

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

/* Set by userspace before load: whether to aggregate run-queue latency of
 * every thread on the host (the daemon) or only of targets (a session). */
volatile const bool host_wide = true;

/* Set by userspace before load: the host-wide histogram takes one switch
 * in host_sample_mask + 1, chosen at random (0: every switch); userspace
 * scales it back. With no target, the other switches cost almost nothing. */
volatile const __u32 host_sample_mask = 0;

/* Folding thresholds, set by userspace before load (0 sends everything). */
volatile const __u64 fold_runq_ns = 10000;     /* run-queue waits */
volatile const __u64 fold_offcpu_ns = 50000;   /* preempted and D stints */
volatile const __u64 fold_sleep_ns = 1000000;  /* S sleeps */
volatile const __u64 flush_ns = 250000000;     /* oldest folded sums */

/* runq_of is next's run-queue wait, from the kernel's own stamp. */
static __always_inline __u64 runq_of(struct task_struct *next, __u8 *has)
{
	/* Typed pointers of tp_btf: plain loads (the verifier makes them
	 * fault-safe), no probe-read helper calls. */
	__u64 queued = next->sched_info.last_queued;
	if (!queued)
		return 0;
	/* next's cfs_rq belongs to this CPU's run queue, whatever next's
	 * class: its clock was updated at the top of __schedule. */
	if (!bpf_core_field_exists(next->se.cfs_rq))
		return 0;
	struct cfs_rq *cfs = next->se.cfs_rq;
	if (!cfs)
		return 0;
	struct rq *rq = cfs->rq;
	if (!rq)
		return 0;
	__u64 now = rq->clock;
	if (now < queued)
		return 0;
	*has = 1;
	return now - queued;
}

static __always_inline bool foldable(__u64 runq, __u8 has_runq, __u32 st, __u64 offcpu)
{
	if (has_runq && runq >= fold_runq_ns)
		return false;
	switch (st) {
	case STATE_PREEMPTED:
	case STATE_IOWAIT:
		return offcpu < fold_offcpu_ns;
	case STATE_SLEEP:
		return offcpu < fold_sleep_ns;
	}
	return true;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	struct task_info *ti;
	struct target *tgt;
	__u64 now = 0;
	bool host_sample = host_wide;

	if (host_wide && host_sample_mask) {
		host_sample = !(bpf_get_prandom_u32() & host_sample_mask);
		if (!host_sample && !nr_targets)
			return 0;
	}

	/* The thread leaving the CPU: only targets keep state. */
	if (prev->pid != 0 && (tgt = target_of(prev->tgid))) {
		bool runnable = preempt || (prev_state & 0xff) == TASK_RUNNING;
		ti = bpf_task_storage_get(&task_infos, prev, 0,
					  BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (ti) {
			__u32 st = STATE_SLEEP;
			if (runnable)
				st = STATE_PREEMPTED;
			else if ((prev_state & TASK_UNINTERRUPTIBLE) &&
				 !(prev_state & TASK_NOLOAD))
				st = STATE_IOWAIT;
			now = bpf_ktime_get_ns();
			ti->offcpu_ts = now;
			ti->offcpu_state = st;
		}
		if (runnable && self_tgid && next->tgid == self_tgid)
			pipe_count(PIPE_SELF_PREEMPT, 1);
	}

	/* The thread getting the CPU. */
	if (next->pid == 0)
		return 0;
	__u32 tgid = next->tgid;
	tgt = target_of(tgid);
	if (!tgt && !host_sample)
		return 0;

	__u8 has_runq = 0;
	__u64 runq = runq_of(next, &has_runq);
	if (has_runq && host_sample)
		hist_add(&runq_hist, 0, runq);
	if (!tgt)
		return 0;
	__u32 idx = tgt->idx;
	if (idx == 0 || idx >= MAX_TARGETS)
		return 0;
	if (has_runq) {
		if (!host_wide)
			hist_add(&runq_hist, 0, runq);
		hist_add(&runq_hist, idx, runq);
	}

	ti = bpf_task_storage_get(&task_infos, next, 0,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!ti)
		return 0;
	if (!now)
		now = bpf_ktime_get_ns();
	__u64 offcpu = 0;
	__u32 st = STATE_NONE;
	if (ti->offcpu_ts && now >= ti->offcpu_ts) {
		offcpu = now - ti->offcpu_ts;
		st = ti->offcpu_state;
		if (st < NR_STATES)
			hist_add(&offcpu_hist, idx * NR_STATES + st, offcpu);
		else
			st = STATE_NONE;
	}
	ti->offcpu_ts = 0;

	if (!(tgt->flags & TARGET_STREAM))
		return 0;
	if (!has_runq && st == STATE_NONE)
		return 0;
	if (!ti->last_rec)
		ti->last_rec = now;
	if (foldable(runq, has_runq, st, offcpu) &&
	    (ti->fold_n == 0 || now - ti->last_rec < flush_ns)) {
		if (has_runq) {
			ti->fold_runq_ns += runq;
			ti->fold_runq_n++;
		}
		if (st < NR_STATES)
			ti->fold_offcpu_ns[st] += offcpu;
		ti->fold_n++;
		pipe_count(PIPE_FOLDED, 1);
		return 0;
	}

	struct event *e = pipe_reserve(struct event);
	if (!e) {
		/* Keep the sums for the next record; this interval is lost. */
		return 0;
	}
	e->ts = now;
	e->offcpu_ns = offcpu;
	e->runq_ns = runq;
	e->fold_runq_ns = ti->fold_runq_ns;
	e->fold_offcpu_ns[0] = ti->fold_offcpu_ns[0];
	e->fold_offcpu_ns[1] = ti->fold_offcpu_ns[1];
	e->fold_offcpu_ns[2] = ti->fold_offcpu_ns[2];
	e->fold_runq_n = ti->fold_runq_n;
	e->fold_n = ti->fold_n;
	e->tgid = tgid;
	e->tid = next->pid;
	e->cpu = bpf_get_smp_processor_id();
	e->state = st;
	e->has_runq = has_runq;
	e->pad[0] = 0;
	e->pad[1] = 0;
	__builtin_memcpy(e->comm, next->comm, sizeof(e->comm));
	pipe_submit(e, sizeof(*e));

	ti->last_rec = now;
	ti->fold_runq_ns = 0;
	ti->fold_offcpu_ns[0] = 0;
	ti->fold_offcpu_ns[1] = 0;
	ti->fold_offcpu_ns[2] = 0;
	ti->fold_runq_n = 0;
	ti->fold_n = 0;
	return 0;
}
