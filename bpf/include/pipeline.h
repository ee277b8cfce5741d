/* SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause */
/*
 * The event pipeline every collector shares (collectors/bpfutil/ring.go
 * is the other half).
 *
 * - One ring buffer, `events`, per object. Records are submitted with
 *   BPF_RB_NO_WAKEUP: the reader drains on a timer, so the event rate costs
 *   no wakeups. Only the record that takes the ring past a quarter (and past
 *   a half) of its size forces a wakeup, so a burst is drained before the
 *   ring fills. A record that finds the ring full is counted, never waited for.
 * - `pipe_stats`, per CPU: records lost, intervals folded into in-kernel sums
 *   instead of records, forced wakeups, aggregate-table overflows and
 *   preemptions of a target by bpfbench itself. Userspace reports all of them.
 * - `targets` (tgid -> struct target) and `nr_targets`, when the object
 *   defines PIPELINE_TARGETS: with no target the hot path skips the lookup.
 */
#ifndef BPFBENCH_PIPELINE_H
#define BPFBENCH_PIPELINE_H

#include "bpfbench.h"

/* Sized by the loader; a power of two of at least a page. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

enum pipe_stat {
	PIPE_LOST = 0,         /* records the ring could not take */
	PIPE_FOLDED = 1,       /* intervals folded into sums, not sent */
	PIPE_WAKEUPS = 2,      /* records submitted with a forced wakeup */
	PIPE_OVERFLOW = 3,     /* a collector's aggregate table was full */
	PIPE_SELF_PREEMPT = 4, /* a target thread preempted by bpfbench */
	PIPE_UNMATCHED = 5,    /* a read of data whose write was not seen: no edge */
	NR_PIPE_STATS = 8,
};

struct pipe_stats {
	__u64 n[NR_PIPE_STATS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pipe_stats);
} pipe_stats SEC(".maps");

/* Set by the loader: a quarter of the ring's size. */
volatile const __u64 wakeup_bytes = 1 << 20;

/* Set by the loader: bpfbench's own tgid (for self-preemptions). */
volatile const __u32 self_tgid = 0;

static __always_inline void pipe_count(__u32 stat, __u64 n)
{
	__u32 zero = 0;
	struct pipe_stats *s = bpf_map_lookup_elem(&pipe_stats, &zero);
	if (s && stat < NR_PIPE_STATS)
		s->n[stat] += n;
}

/* pipe_reserve reserves a record of type T, counting a full ring as lost. */
#define pipe_reserve(T)                                                  \
	({                                                               \
		T *__r = bpf_ringbuf_reserve(&events, sizeof(T), 0);     \
		if (!__r)                                                \
			pipe_count(PIPE_LOST, 1);                        \
		__r;                                                     \
	})

/* pipe_submit commits a reserved record of size bytes without waking the
 * reader, unless this record is the one that crosses a quarter or a half of
 * the ring (the available data counts every reserved record, this one too). */
static __always_inline void pipe_submit(void *rec, __u64 size)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	__u64 rec_bytes = ((size + 8) + 7) & ~7ULL; /* with its 8-byte header */
	__u64 before = avail > rec_bytes ? avail - rec_bytes : 0;
	__u64 flags = BPF_RB_NO_WAKEUP;

	if ((before < wakeup_bytes && avail >= wakeup_bytes) ||
	    (before < 2 * wakeup_bytes && avail >= 2 * wakeup_bytes)) {
		flags = BPF_RB_FORCE_WAKEUP;
		pipe_count(PIPE_WAKEUPS, 1);
	}
	bpf_ringbuf_submit(rec, flags);
}

#ifdef PIPELINE_TARGETS
/* tgid -> target, kept by userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct target);
} targets SEC(".maps");

/* Entries in targets, kept by userspace: with none, the hot path skips the
 * lookup. */
volatile __u32 nr_targets = 0;

static __always_inline struct target *target_of(__u32 tgid)
{
	if (!nr_targets)
		return 0;
	return bpf_map_lookup_elem(&targets, &tgid);
}
#endif

#endif
