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
 *
 * For the critical path of a token gap (optional programs, left out of the
 * daemon):
 * - sched_waking (with_wakers) stores, in a target wakee's task storage, who
 *   woke it: the running task (tid, tgid, comm) and the context the wakeup
 *   ran in (task, hardirq, softirq with its vector, NMI), read from this
 *   CPU's preempt count. The wakee's next switch-in record carries it, and
 *   the thread that took the CPU when a target thread was preempted (the
 *   holder of the CPU during its run-queue wait) too: no record per wakeup.
 * - softirq_entry/exit (with_softirq_vec) keep the vector being served on
 *   each CPU, so a softirq wakeup says which (network receive, block
 *   completion, timer...).
 * - irq_handler_entry/exit and softirq_entry/exit (with_irq_time) sum, per
 *   CPU, the time spent in block and network interrupts (device handlers
 *   classified by userspace in irq_classes; the BLOCK, IRQ_POLL, NET_RX and
 *   NET_TX softirqs), and a target thread's record carries what ran of them
 *   on its CPU while it was running since its previous record: without
 *   IRQ_TIME_ACCOUNTING the scheduler charges that time to the thread, and
 *   the walk would call it the thread's compute.
 * - sched_process_fork/exit (with_tree) follow a target's process tree: a
 *   process forked by a target becomes a target under the same slot and
 *   flags (TARGET_CHILD), and leaves the targets map when it exits.
 * - Threads of a target flagged TARGET_CLIENT (the load generator) send the
 *   same records, flagged EVF_CLIENT.
 * - sk_data_ready/sock_recv_length (with_data_edges) follow data between
 *   the target's own processes and threads through unix sockets (a
 *   frontend and its engine): data a target queues stamps the receiving
 *   socket with the writer and the time; a target's read of a stamped socket
 *   sends one REC_DATA record (the reader, the writer, both times) and
 *   clears the stamp, so a burst of reads costs one record. A wakeup edge
 *   is lost when the reader was not asleep (an event loop busy with other
 *   work, a runtime that polls): the data edge is not.
 */
#define PIPELINE_TARGETS
#include "pipeline.h"
#include "target_hint.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define TASK_RUNNING 0x0000
#define TASK_INTERRUPTIBLE 0x0001
#define TASK_UNINTERRUPTIBLE 0x0002
#define TASK_NOLOAD 0x0400
/* Stopped states: a group stop (SIGSTOP, SIGTSTP), a ptrace stop, the
 * system or cgroup v1 freezer (TASK_FROZEN since 6.1). The cgroup v2
 * freezer sleeps interruptibly with task_struct.frozen set. */
#define __TASK_STOPPED 0x0004
#define __TASK_TRACED 0x0008
#define TASK_FROZEN 0x8000

/* The preempt count's fields (include/linux/preempt.h). */
#define SOFTIRQ_OFFSET 0x100
#define HARDIRQ_MASK 0xf0000
#define NMI_MASK 0xf00000

/* Where a wakeup ran. */
enum wake_ctx {
	WAKE_NONE = 0,    /* no wakeup known (preempted, first sight) */
	WAKE_TASK = 1,    /* in task context: the waker is that task */
	WAKE_HARDIRQ = 2, /* in a hard interrupt (hrtimers, device IRQs) */
	WAKE_SOFTIRQ = 3, /* serving a softirq (wake_vec says which) */
	WAKE_NMI = 4,
	WAKE_UNKNOWN = 5, /* woken, context unreadable on this kernel */
};

/* Record kinds. */
enum rec_kind {
	REC_SWITCH = 0, /* a switch-in */
	REC_FORK = 1,   /* a target forked a process, now followed: tgid is the
			 * child, waker_tgid the parent */
	REC_EXIT = 2,   /* a followed process exited (its last thread) */
	REC_DATA = 3,   /* tid read at ts, from a unix socket, what waker_tid
			 * wrote at wake_ts (with_data_edges) */
};

/* Record flags. */
#define EVF_CLIENT 1 /* a thread of the load generator (TARGET_CLIENT) */
#define EVF_CHILD 2  /* a process the kernel followed through fork */

enum offcpu_state {
	STATE_PREEMPTED = 0, /* left the CPU runnable */
	STATE_IOWAIT = 1,    /* uninterruptible sleep (D) */
	STATE_SLEEP = 2,     /* interruptible sleep (S), or idle kernel waits */
	STATE_STOPPED = 3,   /* stopped (T, t) or frozen: not running by order */
	STATE_NONE = 4,      /* no off-CPU interval known (first sight) */
	NR_STATES = 4,
};

/* Interrupt time classes (with_irq_time): what the interrupt served. */
enum irq_class {
	IRQC_BLOCK = 0, /* block device handlers, BLOCK and IRQ_POLL softirqs */
	IRQC_NET = 1,   /* network device handlers, NET_RX and NET_TX softirqs */
	NR_IRQC = 2,
};

/* What a hard interrupt that woke a thread was (wake_vec of WAKE_HARDIRQ,
 * with_irq_time): a device handler of a class, or no handler at all (an
 * hrtimer expiry, an IPI). */
enum hardirq_kind {
	HARDIRQ_UNKNOWN = 0, /* without with_irq_time */
	HARDIRQ_BLOCK = 1,   /* IRQC_BLOCK + 1 */
	HARDIRQ_NET = 2,     /* IRQC_NET + 1 */
	HARDIRQ_DEVICE = 3,  /* another device's handler */
	HARDIRQ_TIMER = 4,   /* outside any device handler: a timer, an IPI */
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
	__u8 kind;  /* enum rec_kind */
	__u8 flags; /* EVF_* */
	char comm[16];
	/* The wakeup that ended a sleep (S or D), 0s if none is known. */
	__u64 wake_ts;     /* sched_waking, CLOCK_MONOTONIC ns */
	__u32 waker_tid;   /* the task running the wakeup (in an interrupt: */
	__u32 waker_tgid;  /*  the task it interrupted) */
	char waker_comm[16];
	/* The thread that took the CPU when this one was preempted. */
	__u32 holder_tid;
	__u32 holder_tgid;
	char holder_comm[16];
	__u8 wake_ctx; /* enum wake_ctx */
	__u8 wake_vec; /* WAKE_SOFTIRQ: the softirq vector + 1, 0 if unknown;
			* WAKE_HARDIRQ (with_irq_time): enum hardirq_kind */
	__u8 slot;  /* the target slot the thread's process is followed under */
	__u8 pad[5];
	/* Interrupt time on its CPU while it ran since its previous record
	 * (with_irq_time), by enum irq_class. */
	__u64 irq_ns[NR_IRQC];
	/* Time it was on a CPU since its previous record that the scheduler
	 * did not charge it (with_irq_time): switch-out less switch-in on the
	 * clock, less its sum_exec_runtime's growth. With
	 * PARAVIRT_TIME_ACCOUNTING, the hypervisor's steal; with
	 * IRQ_TIME_ACCOUNTING, interrupts too. */
	__u64 unaccounted_ns;
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
	__u32 wake_ctx; /* enum wake_ctx of the pending wakeup */
	__u64 wake_ts;
	__u32 waker_tid;
	__u32 waker_tgid;
	char waker_comm[16];
	__u32 holder_tid;
	__u32 holder_tgid;
	char holder_comm[16];
	__u32 wake_vec;
	__u32 irq_on; /* irq_in holds the CPU's sums at its switch-in */
	__u64 irq_in[NR_IRQC];
	__u64 irq_ns[NR_IRQC]; /* since its last record */
	__u64 on_ts;            /* its switch-in (with_irq_time), 0: off */
	__u64 exec_in;          /* its sum_exec_runtime then */
	__u64 unaccounted_ns;   /* since its last record */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_info);
} task_infos SEC(".maps");

/* Run-queue latency per target index (0 = host-wide; without host_wide,
 * userspace reads slot 0 as the sum of the others). */
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

/* Written by userspace at any time (the daemon follows the host's switch
 * rate with it): the host-wide histogram takes one switch in
 * host_sample_mask + 1 (a power of two) on average (0: every switch), and
 * counts it host_sample_mask + 1 times, so the histogram stays unbiased
 * while the mask changes. The switches between two samples are a random
 * count (odd, from 1 to 2 * mask + 1, mean mask + 1) counted down per CPU:
 * a random draw per switch costs ~40 ns here (bpf_get_prandom_u32), the
 * countdown a few, and a random gap does not lock onto a periodic pattern
 * (a ping-pong's every other switch). With no target, the switches between
 * samples cost almost nothing. */
volatile __u32 host_sample_mask = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} host_left SEC(".maps");

/* host_sampled says whether this switch goes into the host-wide histogram. */
static __always_inline bool host_sampled(__u32 mask)
{
	__u32 zero = 0;
	__u32 *left = bpf_map_lookup_elem(&host_left, &zero);
	if (!left)
		return false;
	if (*left > 1) {
		(*left)--;
		return false;
	}
	*left = (bpf_get_prandom_u32() & (2 * mask)) + 1;
	return true;
}

/* Folding thresholds, set by userspace before load (0 sends everything). */
volatile const __u64 fold_runq_ns = 10000;     /* run-queue waits */
volatile const __u64 fold_offcpu_ns = 50000;   /* preempted and D stints */
volatile const __u64 fold_sleep_ns = 1000000;  /* S sleeps */
volatile const __u64 flush_ns = 250000000;     /* oldest folded sums */
volatile const __u64 edge_gap_ns = 1000000;    /* unfolded wakeup edges */

/* Set by userspace before load: which optional parts run (their programs
 * are also left out when off). */
volatile const bool with_wakers = false;      /* sched_waking, holders */
volatile const bool with_softirq_vec = false; /* softirq_entry/exit */
volatile const bool with_tree = false;        /* sched_process_fork/exit */
volatile const bool with_data_edges = false;  /* sk_data_ready, sock_recv_length */
volatile const bool with_irq_time = false;    /* irq_handler_entry/exit, softirq time */

/* Set by userspace before load: this CPU's __preempt_count is at its
 * run queue's address plus preempt_delta (both per-CPU variables; the
 * difference of their offsets in the per-CPU section, from the kernel's
 * BTF; x86-64). 0: not known, and wakeups are WAKE_UNKNOWN unless the
 * kernel keeps the count in thread_info (preempt_count_now). */
volatile const __s64 preempt_delta = 0;

/* Processes the kernel added to targets (with_tree), so that target_of
 * keeps looking while only they remain. */
volatile __u32 nr_children = 0;

/* The softirq vector each CPU serves + 1 (with_softirq_vec). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} cur_softirq SEC(".maps");

/* Each CPU's interrupt time (with_irq_time). */
struct irq_acc {
	__u64 ns[NR_IRQC];  /* cumulative, by class */
	__u64 hard_total;   /* every device handler's time, classified or not */
	__u64 hard_start;   /* the running handler's entry, 0 if none */
	__u64 soft_start;   /* the running softirq's entry, 0 if none */
	__u64 soft_hard0;   /* hard_total at that entry */
	__u32 hard_cls;     /* the running handler's class + 1, 0: other */
	__u32 soft_cls;     /* the running softirq's class + 1, 0: other */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct irq_acc);
} irq_accs SEC(".maps");

/* Device interrupt number -> enum irq_class + 1, written by userspace
 * (from sysfs: the PCI class of the device that owns the vector), or
 * IRQ_CLS_TIMER for a timer's vector (sched.IRQTimer + 1). */
#define IRQ_CLS_TIMER 0xff
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} irq_classes SEC(".maps");

static __always_inline struct irq_acc *irq_acc_here(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&irq_accs, &zero);
}

/* irq_add adds d ns to class cls - 1 (0: not counted). */
static __always_inline void irq_add(struct irq_acc *a, __u32 cls, __u64 d)
{
	if (cls == IRQC_BLOCK + 1)
		a->ns[IRQC_BLOCK] += d;
	else if (cls == IRQC_NET + 1)
		a->ns[IRQC_NET] += d;
}

/* irq_out adds the interrupt time that ran on this CPU since ti's
 * switch-in to its sums (prev leaving the CPU). */
static __always_inline void irq_out(struct task_info *ti)
{
	if (!ti->irq_on)
		return;
	ti->irq_on = 0;
	struct irq_acc *a = irq_acc_here();
	if (!a)
		return;
	for (int k = 0; k < NR_IRQC; k++)
		if (a->ns[k] >= ti->irq_in[k])
			ti->irq_ns[k] += a->ns[k] - ti->irq_in[k];
}

/* irq_in stamps the CPU's sums at ti's switch-in. */
static __always_inline void irq_in(struct task_info *ti)
{
	struct irq_acc *a = irq_acc_here();
	if (!a)
		return;
	for (int k = 0; k < NR_IRQC; k++)
		ti->irq_in[k] = a->ns[k];
	ti->irq_on = 1;
}

static __always_inline struct target *target_or_child(__u32 tgid)
{
	if ((!nr_targets && !nr_children) || !maybe_target(tgid))
		return 0;
	return bpf_map_lookup_elem(&targets, &tgid);
}

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

/* keep_wakeup says whether the wakeup that ended an interval must reach
 * userspace even when the interval is short: an edge of the critical path
 * to another process (a task of another tgid woke it), or a network
 * receive (a request or a peer's message arriving), at most one per
 * edge_gap_ns per thread (a cross-process ping-pong would otherwise send
 * every switch). Wakeups within the process, by timers and by other
 * interrupts are folded like the rest. */
static __always_inline bool keep_wakeup(struct task_info *ti, __u32 tgid, __u64 now)
{
	if (now - ti->last_rec < edge_gap_ns)
		return false;
	if (ti->wake_ctx == WAKE_TASK)
		return ti->waker_tgid != tgid;
	/* NET_RX_SOFTIRQ is 3 (enum in include/linux/interrupt.h), + 1. */
	return (ti->wake_ctx == WAKE_SOFTIRQ && ti->wake_vec == 3 + 1) ||
	       (ti->wake_ctx == WAKE_HARDIRQ && ti->wake_vec == HARDIRQ_NET);
}

/* stopped says whether prev left its CPU stopped rather than asleep: a
 * stop signal, a tracer, or a freezer (a paused container). */
static __always_inline bool stopped(struct task_struct *prev, unsigned int prev_state)
{
	if (prev_state & (__TASK_STOPPED | __TASK_TRACED | TASK_FROZEN))
		return true;
	if (bpf_core_field_exists(prev->frozen))
		return BPF_CORE_READ_BITFIELD(prev, frozen);
	return false;
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
	case STATE_STOPPED:
		return false;
	}
	return true;
}

static __always_inline __u8 rec_flags(struct target *tgt)
{
	__u8 f = 0;
	if (tgt->flags & TARGET_CLIENT)
		f |= EVF_CLIENT;
	if (tgt->flags & TARGET_CHILD)
		f |= EVF_CHILD;
	return f;
}

static __always_inline int on_switch(bool preempt, struct task_struct *prev,
				     struct task_struct *next, unsigned int prev_state);

/* sched_switch passes prev_state since 5.18; before it, a program that
 * reads a fourth argument is rejected by the verifier. Userspace loads one
 * of the two, by the argument count of the kernel's tracepoint (its BTF). */
SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	return on_switch(preempt, prev, next, prev_state);
}

/* task_struct's state field is __state since 5.14, state before. */
struct task_struct___pre514 {
	long state;
} __attribute__((preserve_access_index));

/* Kernels before 5.18: the state read from the task, as the tracepoint
 * itself read it there (__trace_sched_switch_state). */
SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch_nostate, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	unsigned int st;
	if (bpf_core_field_exists(prev->__state))
		st = BPF_CORE_READ(prev, __state);
	else
		st = (unsigned int)BPF_CORE_READ((struct task_struct___pre514 *)prev, state);
	return on_switch(preempt, prev, next, st);
}

static __always_inline int on_switch(bool preempt, struct task_struct *prev,
				     struct task_struct *next, unsigned int prev_state)
{
	struct task_info *ti;
	struct target *tgt;
	__u64 now = 0;
	bool host_sample = host_wide;
	__u32 mask = host_wide ? host_sample_mask : 0;

	if (mask) {
		host_sample = host_sampled(mask);
		if (!host_sample && !nr_targets && !nr_children)
			return 0;
	}

	/* The thread leaving the CPU: only targets keep state. */
	__u32 prev_tgid = prev->tgid;
	struct target *prev_tgt = 0;
	if (prev->pid != 0 && (prev_tgt = target_or_child(prev_tgid))) {
		/* TASK_FROZEN is above the low byte: test it first. */
		bool stop = !preempt && stopped(prev, prev_state);
		bool runnable = !stop && (preempt || (prev_state & 0xff) == TASK_RUNNING);
		ti = bpf_task_storage_get(&task_infos, prev, 0,
					  BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (ti) {
			__u32 st = STATE_SLEEP;
			if (runnable)
				st = STATE_PREEMPTED;
			else if (stop)
				st = STATE_STOPPED;
			else if ((prev_state & TASK_UNINTERRUPTIBLE) &&
				 !(prev_state & TASK_NOLOAD))
				st = STATE_IOWAIT;
			now = bpf_ktime_get_ns();
			ti->offcpu_ts = now;
			ti->offcpu_state = st;
			if (with_irq_time) {
				irq_out(ti);
				/* update_curr charged prev before this tracepoint. */
				__u64 exec = prev->se.sum_exec_runtime;
				if (ti->on_ts && now > ti->on_ts && exec >= ti->exec_in &&
				    now - ti->on_ts > exec - ti->exec_in)
					ti->unaccounted_ns += (now - ti->on_ts) - (exec - ti->exec_in);
				ti->on_ts = 0;
			}
			ti->wake_ctx = WAKE_NONE;
			ti->holder_tid = 0;
			if (with_wakers && runnable && next->pid != 0) {
				/* The CPU's holder while prev waits for it. */
				ti->holder_tid = next->pid;
				ti->holder_tgid = next->tgid;
				__builtin_memcpy(ti->holder_comm, next->comm,
						 sizeof(ti->holder_comm));
			}
		}
		if (runnable && self_tgid && next->tgid == self_tgid)
			pipe_count(PIPE_SELF_PREEMPT, 1);
	}

	/* The thread getting the CPU: a thread of the same process as prev
	 * has its target already. */
	if (next->pid == 0)
		return 0;
	__u32 tgid = next->tgid;
	tgt = prev->pid != 0 && tgid == prev_tgid ? prev_tgt : target_or_child(tgid);
	if (!tgt && !host_sample)
		return 0;

	__u8 has_runq = 0;
	__u64 runq = runq_of(next, &has_runq);
	if (has_runq && host_sample)
		hist_add_n(&runq_hist, 0, runq, mask + 1);
	if (!tgt)
		return 0;
	__u32 idx = tgt->idx;
	if (idx == 0 || idx >= MAX_TARGETS)
		return 0;
	/* Without host_wide, slot 0 (every target) is the sum of the target
	 * slots, added up by userspace when read: two cache lines less here. */
	if (has_runq)
		hist_add(&runq_hist, idx, runq);

	ti = bpf_task_storage_get(&task_infos, next, 0,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!ti)
		return 0;
	if (!now)
		now = bpf_ktime_get_ns();
	if (with_irq_time) {
		irq_in(ti);
		ti->on_ts = now;
		ti->exec_in = next->se.sum_exec_runtime;
	}
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
	    !(with_wakers && keep_wakeup(ti, tgid, now)) &&
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
	e->fold_offcpu_ns[3] = ti->fold_offcpu_ns[3];
	e->fold_runq_n = ti->fold_runq_n;
	e->fold_n = ti->fold_n;
	e->tgid = tgid;
	e->tid = next->pid;
	e->cpu = bpf_get_smp_processor_id();
	e->state = st;
	e->has_runq = has_runq;
	e->kind = REC_SWITCH;
	e->flags = rec_flags(tgt);
	e->slot = tgt->idx;
	__builtin_memcpy(e->comm, next->comm, sizeof(e->comm));
	if (ti->wake_ctx != WAKE_NONE && st != STATE_PREEMPTED) {
		e->wake_ts = ti->wake_ts;
		e->waker_tid = ti->waker_tid;
		e->waker_tgid = ti->waker_tgid;
		__builtin_memcpy(e->waker_comm, ti->waker_comm, sizeof(e->waker_comm));
		e->wake_ctx = ti->wake_ctx;
		e->wake_vec = ti->wake_vec;
	} else {
		e->wake_ts = 0;
		e->waker_tid = 0;
		e->waker_tgid = 0;
		__builtin_memset(e->waker_comm, 0, sizeof(e->waker_comm));
		e->wake_ctx = WAKE_NONE;
		e->wake_vec = 0;
	}
	if (ti->holder_tid && st == STATE_PREEMPTED) {
		e->holder_tid = ti->holder_tid;
		e->holder_tgid = ti->holder_tgid;
		__builtin_memcpy(e->holder_comm, ti->holder_comm, sizeof(e->holder_comm));
	} else if (with_wakers && st != STATE_PREEMPTED && has_runq && runq > 0 &&
		   prev->pid != 0) {
		/* Woken and then runnable: the task that ran on this CPU last
		 * before it got the CPU back held it at the end of its wait
		 * (a thread woken by its sibling waits behind the busy loop
		 * that has the CPU, not behind the sibling that woke it). */
		e->holder_tid = prev->pid;
		e->holder_tgid = prev->tgid;
		__builtin_memcpy(e->holder_comm, prev->comm, sizeof(e->holder_comm));
	} else {
		e->holder_tid = 0;
		e->holder_tgid = 0;
		__builtin_memset(e->holder_comm, 0, sizeof(e->holder_comm));
	}
	__builtin_memset(e->pad, 0, sizeof(e->pad));
	e->irq_ns[IRQC_BLOCK] = ti->irq_ns[IRQC_BLOCK];
	e->irq_ns[IRQC_NET] = ti->irq_ns[IRQC_NET];
	e->unaccounted_ns = ti->unaccounted_ns;
	pipe_submit(e, sizeof(*e));
	ti->irq_ns[IRQC_BLOCK] = 0;
	ti->irq_ns[IRQC_NET] = 0;
	ti->unaccounted_ns = 0;

	ti->last_rec = now;
	ti->fold_runq_ns = 0;
	ti->fold_offcpu_ns[0] = 0;
	ti->fold_offcpu_ns[1] = 0;
	ti->fold_offcpu_ns[2] = 0;
	ti->fold_offcpu_ns[3] = 0;
	ti->fold_runq_n = 0;
	ti->fold_n = 0;
	return 0;
}

/* The preempt count where an architecture keeps it in the running task's
 * thread_info (arm64, riscv, ...: a u64 whose low word is the count, in a
 * union with its two halves on arm64). x86-64's thread_info has no such
 * field: its count is a per-CPU variable (preempt_delta). */
struct thread_info___pc {
	__u64 preempt_count;
} __attribute__((preserve_access_index));

struct task_struct___pc {
	struct thread_info___pc thread_info;
} __attribute__((preserve_access_index));

/* preempt_count_now reads the running CPU's preempt count: from the running
 * task's thread_info where the kernel keeps it there, else at the running
 * task's run queue plus preempt_delta. Non-zero: not known. */
static __always_inline int preempt_count_now(struct task_struct *cur, __u32 *pc)
{
	struct task_struct___pc *t = (void *)cur;
	if (bpf_core_field_exists(t->thread_info.preempt_count)) {
		__u64 v = 0;
		if (bpf_core_read(&v, sizeof(v), &t->thread_info.preempt_count))
			return -1;
		*pc = (__u32)v;
		return 0;
	}
	if (!preempt_delta || !bpf_core_field_exists(cur->se.cfs_rq))
		return -1;
	struct cfs_rq *cfs = cur->se.cfs_rq;
	if (!cfs)
		return -1;
	struct rq *rq = cfs->rq;
	if (!rq)
		return -1;
	return bpf_probe_read_kernel(pc, sizeof(*pc), (void *)((__s64)rq + preempt_delta));
}

/* wake_ctx_now reads where this wakeup runs from this CPU's preempt count
 * (cur is the running task). */
static __always_inline __u32 wake_ctx_now(struct task_struct *cur, __u32 *vec)
{
	__u32 pc = 0;
	if (preempt_count_now(cur, &pc))
		return WAKE_UNKNOWN;
	if (pc & NMI_MASK)
		return WAKE_NMI;
	if (pc & HARDIRQ_MASK) {
		if (with_irq_time) {
			/* Inside a device handler (irq_handler_entry/exit), or
			 * not: an hrtimer expiry or an IPI. */
			struct irq_acc *a = irq_acc_here();
			if (a)
				*vec = !a->hard_start ? HARDIRQ_TIMER
					: a->hard_cls ? a->hard_cls : HARDIRQ_DEVICE;
		}
		return WAKE_HARDIRQ;
	}
	if (pc & SOFTIRQ_OFFSET) {
		if (with_softirq_vec) {
			__u32 zero = 0;
			__u32 *v = bpf_map_lookup_elem(&cur_softirq, &zero);
			if (v)
				*vec = *v;
		}
		return WAKE_SOFTIRQ;
	}
	return WAKE_TASK;
}

/* The waker of a target thread, stored for its next switch-in. Every
 * wakeup of the host runs this; it returns at the first lookup unless the
 * wakee belongs to a target. */
SEC("tp_btf/sched_waking")
int BPF_PROG(sched_waking, struct task_struct *p)
{
	if (!with_wakers || !target_or_child(p->tgid))
		return 0;
	struct task_info *ti = bpf_task_storage_get(&task_infos, p, 0,
						    BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!ti)
		return 0;
	struct task_struct *cur = bpf_get_current_task_btf();
	__u32 vec = 0;
	ti->wake_ctx = wake_ctx_now(cur, &vec);
	ti->wake_vec = vec;
	ti->wake_ts = bpf_ktime_get_ns();
	ti->waker_tid = cur->pid;
	ti->waker_tgid = cur->tgid;
	__builtin_memcpy(ti->waker_comm, cur->comm, sizeof(ti->waker_comm));
	return 0;
}

/* softirq_class is a softirq vector's enum irq_class + 1, 0: other. */
static __always_inline __u32 softirq_class(unsigned int vec)
{
	/* include/linux/interrupt.h: NET_TX 2, NET_RX 3, BLOCK 4, IRQ_POLL 5. */
	switch (vec) {
	case 2:
	case 3:
		return IRQC_NET + 1;
	case 4:
	case 5:
		return IRQC_BLOCK + 1;
	}
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(softirq_entry, unsigned int vec_nr)
{
	__u32 zero = 0;
	if (with_softirq_vec) {
		__u32 *v = bpf_map_lookup_elem(&cur_softirq, &zero);
		if (v)
			*v = vec_nr + 1;
	}
	if (with_irq_time) {
		struct irq_acc *a = irq_acc_here();
		if (a) {
			a->soft_cls = softirq_class(vec_nr);
			a->soft_start = a->soft_cls ? bpf_ktime_get_ns() : 0;
			a->soft_hard0 = a->hard_total;
		}
	}
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(softirq_exit, unsigned int vec_nr)
{
	__u32 zero = 0;
	if (with_softirq_vec) {
		__u32 *v = bpf_map_lookup_elem(&cur_softirq, &zero);
		if (v)
			*v = 0;
	}
	if (with_irq_time) {
		struct irq_acc *a = irq_acc_here();
		if (a && a->soft_start) {
			__u64 now = bpf_ktime_get_ns();
			/* Less the device handlers that interrupted it. */
			__u64 in = a->hard_total - a->soft_hard0;
			if (now > a->soft_start + in)
				irq_add(a, a->soft_cls, now - a->soft_start - in);
		}
		if (a)
			a->soft_start = 0;
	}
	return 0;
}

SEC("tp_btf/irq_handler_entry")
int BPF_PROG(irq_handler_entry, int irq, struct irqaction *action)
{
	struct irq_acc *a = irq_acc_here();
	if (!a)
		return 0;
	__u32 key = irq;
	__u32 *cls = bpf_map_lookup_elem(&irq_classes, &key);
	if (cls && *cls == IRQ_CLS_TIMER) {
		/* A timer's handler (arm64's arch_timer) is no device's: as
		 * x86-64's local APIC timer, which runs outside any handler. */
		a->hard_start = 0;
		return 0;
	}
	a->hard_cls = cls ? *cls : 0;
	a->hard_start = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(irq_handler_exit, int irq, struct irqaction *action, int ret)
{
	struct irq_acc *a = irq_acc_here();
	if (!a || !a->hard_start)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (now > a->hard_start) {
		__u64 d = now - a->hard_start;
		a->hard_total += d;
		irq_add(a, a->hard_cls, d);
	}
	a->hard_start = 0;
	return 0;
}

/* emit_proc sends a REC_FORK or REC_EXIT record of a streamed target. */
static __always_inline void emit_proc(struct target *t, __u8 kind, __u32 tgid,
				      __u32 tid, struct task_struct *other,
				      const char *comm)
{
	if (!(t->flags & TARGET_STREAM))
		return;
	struct event *e = pipe_reserve(struct event);
	if (!e)
		return;
	__builtin_memset(e, 0, sizeof(*e));
	e->ts = bpf_ktime_get_ns();
	e->tgid = tgid;
	e->tid = tid;
	e->cpu = bpf_get_smp_processor_id();
	e->state = STATE_NONE;
	e->kind = kind;
	e->flags = rec_flags(t);
	e->slot = t->idx;
	bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), comm);
	if (other) {
		e->waker_tid = other->pid;
		e->waker_tgid = other->tgid;
		__builtin_memcpy(e->waker_comm, other->comm, sizeof(e->waker_comm));
	}
	pipe_submit(e, sizeof(*e));
}

/* A process forked by a target joins it: same slot and flags. Threads are
 * followed by tgid already. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(sched_process_fork, struct task_struct *parent,
	     struct task_struct *child)
{
	if (!with_tree || child->pid != child->tgid)
		return 0;
	struct target *pt = target_or_child(parent->tgid);
	if (!pt)
		return 0;
	struct target t = { .idx = pt->idx, .flags = pt->flags | TARGET_CHILD };
	__u32 tgid = child->tgid;
	set_target_hint(tgid);
	if (bpf_map_update_elem(&targets, &tgid, &t, BPF_NOEXIST))
		return 0;
	__sync_fetch_and_add(&nr_children, 1);
	emit_proc(&t, REC_FORK, tgid, child->pid, parent, child->comm);
	return 0;
}

/* The last thread of a followed process exits: a child the kernel added
 * leaves targets; userspace hears of every streamed one.
 *
 * Whether the group is dead is read from the task, not from the
 * tracepoint's group_dead argument, which kernels before 6.16 do not pass
 * (their verifier rejects a program that reads it): do_exit decrements
 * signal->live, and computes group_dead from it, before the tracepoint on
 * every kernel since 2.6. Two threads exiting at once can both read 0: the
 * delete below is done once, and userspace takes an exit once. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit, struct task_struct *p)
{
	if (!with_tree || BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	__u32 tgid = p->tgid;
	struct target *pt = target_or_child(tgid);
	if (!pt)
		return 0;
	struct target t = *pt;
	if (t.flags & TARGET_CHILD) {
		if (bpf_map_delete_elem(&targets, &tgid) == 0)
			__sync_fetch_and_add(&nr_children, (__u32)-1);
	}
	emit_proc(&t, REC_EXIT, tgid, p->pid, 0, p->comm);
	return 0;
}

#define AF_UNIX 1
#define MSG_PEEK 2

/* The last write of a target into a unix socket, in the receiving socket's
 * local storage (freed with the socket), and
 * a read that found no write to name (rd_*): a reader polling on another
 * CPU can take the data between its queueing and sk_data_ready, and the
 * write's stamp, arriving just after, then names that read. */
struct unix_write {
	__u64 ts; /* 0: consumed */
	__u32 tid;
	__u32 tgid;
	char comm[16];
	__u64 rd_ts; /* 0: none pending */
	__u32 rd_tid;
	__u32 rd_tgid;
	char rd_comm[16];
};

/* How young a pending read must be to take a stamp whose data is still
 * queued (a partial read of it, or another writer's data queued behind it).
 * With the queue empty at the stamp, the read took this write's data,
 * however long the writer was held (preempted) between queueing and
 * sk_data_ready. An older pending read with data still queued took older
 * data whose stamp was never seen: taking this stamp would shift every
 * later read onto the next write's stamp, so it is dropped (counted). */
#define RACE_NS 1000000


struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct unix_write);
} unix_writes SEC(".maps");

/* The unix socket's write stamp, created by whichever of the writer and
 * the reader comes first: when both create it at once, the loser's create
 * fails (the storage is published by a cmpxchg) and it looks it up. */
static __always_inline struct unix_write *unix_write_of(struct sock *sk)
{
	struct unix_write *w = bpf_sk_storage_get(&unix_writes, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!w)
		w = bpf_sk_storage_get(&unix_writes, sk, 0, 0);
	return w;
}

static __always_inline void emit_data(struct target *t, __u64 rd_ts, __u32 rd_tid,
				      __u32 rd_tgid, const char *rd_comm, __u64 wr_ts,
				      __u32 wr_tid, __u32 wr_tgid, const char *wr_comm)
{
	struct event *e = pipe_reserve(struct event);
	if (!e)
		return;
	__builtin_memset(e, 0, sizeof(*e));
	e->ts = rd_ts;
	e->tgid = rd_tgid;
	e->tid = rd_tid;
	e->cpu = bpf_get_smp_processor_id();
	e->state = STATE_NONE;
	e->kind = REC_DATA;
	e->flags = rec_flags(t);
	e->slot = t->idx;
	__builtin_memcpy(e->comm, rd_comm, sizeof(e->comm));
	e->wake_ts = wr_ts;
	e->waker_tid = wr_tid;
	e->waker_tgid = wr_tgid;
	__builtin_memcpy(e->waker_comm, wr_comm, sizeof(e->waker_comm));
	e->wake_ctx = WAKE_TASK;
	pipe_submit(e, sizeof(*e));
}

/* Data queued on a socket, in the writer's context (sk_data_ready: for a
 * unix socket, the receiving one): every such wakeup of the host runs
 * this; it returns after two loads unless a target writes into a unix
 * socket. (sock_send_length fires as sendmsg returns, later still.)
 *
 * The stamp ts is the token of a record: whoever swaps it back to 0 sends
 * it, the reader that finds it (data_recv) or, when the read came first
 * and is pending, this writer. */
static __always_inline int on_data_send(const struct sock *sk);

SEC("tp_btf/sk_data_ready")
int BPF_PROG(data_send, const struct sock *sk)
{
	return on_data_send(sk);
}

/* Kernels without sk_data_ready (6.1 has none; 6.12 has it): the entry of
 * sock_def_readable, which unix sockets call for the receiving socket. */
SEC("fentry/sock_def_readable")
int BPF_PROG(data_send_fentry, struct sock *sk)
{
	return on_data_send(sk);
}

static __always_inline int on_data_send(const struct sock *sk)
{
	if (!with_data_edges || sk->__sk_common.skc_family != AF_UNIX)
		return 0;
	struct task_struct *cur = bpf_get_current_task_btf();
	if (!target_or_child(cur->tgid))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct unix_write *p = unix_write_of((struct sock *)sk);
	if (!p)
		return 0;
	p->tid = cur->pid;
	p->tgid = cur->tgid;
	__builtin_memcpy(p->comm, cur->comm, sizeof(p->comm));
	__sync_lock_test_and_set(&p->ts, now);
	__u64 rd = __sync_lock_test_and_set(&p->rd_ts, 0);
	/* A pending read is this write's when the data it queued is gone
	 * from the receive queue (the reader took it while the writer was on
	 * its way here, held there however long), or when it is recent
	 * (RACE_NS). */
	if (!rd || p->rd_tid == cur->pid)
		return 0;
	if ((__s64)(now - rd) >= RACE_NS && sk->sk_receive_queue.qlen) {
		pipe_count(PIPE_UNMATCHED, 1);
		return 0;
	}
	/* A read took this data before the stamp: it is that read's. */
	if (__sync_val_compare_and_swap(&p->ts, now, 0) != now)
		return 0; /* the reader found the stamp meanwhile and sent it */
	struct target *t = target_or_child(p->rd_tgid);
	if (t && (t->flags & TARGET_STREAM))
		emit_data(t, rd, p->rd_tid, p->rd_tgid, p->rd_comm, rd, cur->pid, cur->tgid, cur->comm);
	return 0;
}

/* Every recvmsg of the host runs this: a target's read of a socket a
 * target wrote into sends the data edge, once a write. */
static __always_inline int on_data_recv(struct sock *sk, int ret, int flags);

SEC("tp_btf/sock_recv_length")
int BPF_PROG(data_recv, struct sock *sk, int ret, int flags)
{
	return on_data_recv(sk, ret, flags);
}

/* Kernels without sock_recv_length (6.1 has none; 6.12 has it): the return of
 * the unix sockets' recvmsg, which every read of one reaches through the
 * socket's ops (so never inlined, as sock_recvmsg is into sock_read_iter
 * and __sys_recvfrom). Loaded only there. */
SEC("fexit/unix_stream_recvmsg")
int BPF_PROG(data_recv_stream, struct socket *sock, struct msghdr *msg, size_t size, int flags, int ret)
{
	struct sock *sk = sock->sk;
	if (!sk)
		return 0;
	return on_data_recv(sk, ret, flags);
}

SEC("fexit/unix_dgram_recvmsg")
int BPF_PROG(data_recv_dgram, struct socket *sock, struct msghdr *msg, size_t size, int flags, int ret)
{
	struct sock *sk = sock->sk;
	if (!sk)
		return 0;
	return on_data_recv(sk, ret, flags);
}

static __always_inline int on_data_recv(struct sock *sk, int ret, int flags)
{
	if (!with_data_edges || ret <= 0 || (flags & MSG_PEEK) || sk->__sk_common.skc_family != AF_UNIX)
		return 0;
	struct task_struct *cur = bpf_get_current_task_btf();
	struct target *t = target_or_child(cur->tgid);
	if (!t || !(t->flags & TARGET_STREAM))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct unix_write *w = unix_write_of(sk);
	if (!w)
		return 0;
	__u64 ts = __sync_lock_test_and_set(&w->ts, 0);
	if (!ts) {
		/* No stamp yet: it may be on its way (the writer queued the
		 * data and has not reached sk_data_ready). Leave the read
		 * pending for it, then look once more. */
		w->rd_tid = cur->pid;
		w->rd_tgid = cur->tgid;
		__builtin_memcpy(w->rd_comm, cur->comm, sizeof(w->rd_comm));
		__sync_lock_test_and_set(&w->rd_ts, now);
		ts = __sync_lock_test_and_set(&w->ts, 0);
		if (!ts)
			return 0;
		/* The stamp came in between: this read sends it, unless the
		 * writer took the pending read already (then ts was not ours:
		 * it swapped it back before we did, and we got 0). */
		__sync_val_compare_and_swap(&w->rd_ts, now, 0);
	}
	/* A stamp that came in between (above) is later than this read,
	 * which took its data already queued: the data was written by now. */
	if (ts > now)
		ts = now;
	if (w->tid != cur->pid)
		emit_data(t, now, cur->pid, cur->tgid, cur->comm, ts, w->tid, w->tgid, w->comm);
	return 0;
}
