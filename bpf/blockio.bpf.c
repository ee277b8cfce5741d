// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * Block IO collector: per-request queue and service time.
 *
 * A request is followed by its struct request pointer from block_rq_insert
 * (it entered an IO scheduler or software queue) or, for requests that go
 * straight to the driver, block_rq_issue, to block_rq_complete. The
 * issuing process (tgid/tid) is recorded at insert, or at issue when there
 * was no insert: the completion runs in interrupt or another task's context.
 * block_rq_merge forgets requests merged into another one.
 *
 * Queue time is insert -> issue, service time is issue -> complete and
 * latency is their sum (the time the request spent in the block layer
 * and the device).
 *
 * Aggregates: log2 histograms in a per-CPU hash keyed by (device, target
 * slot, op); slot 0 is host-wide. Requests of targets flagged TARGET_STREAM
 * are also sent one by one through the event pipeline (pipeline.h), which
 * counts what it could not take; requests the aggregate table had no room
 * for are counted as overflow.
 */
#define PIPELINE_TARGETS
#include "pipeline.h"
#include "target_hint.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

enum io_op {
	IO_READ = 0,
	IO_WRITE = 1,
	IO_FLUSH = 2,
	IO_DISCARD = 3,
	IO_OTHER = 4,
};

#define EV_SYNC 1   /* REQ_SYNC was set */
#define EV_QUEUED 2 /* the request was inserted: queue_ns is valid */

#define REQ_OP_MASK 0xff
#define REQ_SYNC_BIT (1u << 11) /* __REQ_SYNC */

/* One completed request of a streamed target. */
struct event {
	__u64 ts;         /* completion, CLOCK_MONOTONIC ns */
	__u64 queue_ns;   /* insert -> issue (0 unless EV_QUEUED) */
	__u64 service_ns; /* issue -> complete */
	__u64 sector;     /* first sector (512 bytes) */
	__u32 bytes;
	__u32 dev;        /* kernel dev_t: major << 20 | minor */
	__u32 tgid;
	__u32 tid;
	__u8 op;    /* enum io_op */
	__u8 flags; /* EV_* */
	__u8 error; /* blk_status_t, 0 = success */
	__u8 pad;
	__u32 pad2;
};

/* Force BTF emission for bpf2go -type. */
const struct event *unused_event __attribute__((unused));

/* Key of the aggregates: one device, one target slot (0 = host), one op. */
struct dev_key {
	__u32 dev;
	__u16 target;
	__u16 op;
};

struct io_stats {
	__u64 latency[HIST_SLOTS]; /* queue + service, ns */
	__u64 queue[HIST_SLOTS];   /* insert -> issue, inserted requests only */
	__u64 service[HIST_SLOTS]; /* issue -> complete, ns */
	__u64 count;
	__u64 bytes;
	__u64 latency_ns;
	__u64 queue_ns;
	__u64 service_ns;
	__u64 queued; /* requests with a queue time */
};

/* A request in flight. */
struct rq_info {
	__u64 insert_ts;
	__u64 issue_ts;
	__u32 tgid;
	__u32 tid;
};

/* LRU so that requests the programs never see complete cannot fill it;
 * per-CPU LRU lists make updates cheaper. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct rq_info);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct dev_key);
	__type(value, struct io_stats);
} stats SEC(".maps");

/* A zero value to create stats entries from. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct io_stats);
} zero_stats SEC(".maps");

/* Set by userspace before load: aggregate every request of the host
 * (the daemon) or only those of targets (a session). */
volatile const bool host_wide = true;

static __always_inline bool wanted(__u32 tgid)
{
	return host_wide || target_hinted(tgid);
}

static __always_inline void record(struct request *rq, __u64 insert_ts,
				   __u64 issue_ts)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	if (!wanted(tgid))
		return;
	struct rq_info ri = {
		.insert_ts = insert_ts,
		.issue_ts = issue_ts,
		.tgid = tgid,
		.tid = (__u32)pid_tgid,
	};
	__u64 key = (__u64)rq;
	bpf_map_update_elem(&inflight, &key, &ri, BPF_ANY);
}

SEC("tp_btf/block_rq_insert")
int BPF_PROG(block_rq_insert, struct request *rq)
{
	record(rq, bpf_ktime_get_ns(), 0);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(block_rq_issue, struct request *rq)
{
	__u64 key = (__u64)rq;
	__u64 now = bpf_ktime_get_ns();
	struct rq_info *ri = bpf_map_lookup_elem(&inflight, &key);
	if (ri && ri->insert_ts && !ri->issue_ts) {
		ri->issue_ts = now;
		return 0;
	}
	/* Not inserted (direct issue), or a stale entry of a recycled request. */
	record(rq, 0, now);
	return 0;
}

SEC("tp_btf/block_rq_merge")
int BPF_PROG(block_rq_merge, struct request *rq)
{
	__u64 key = (__u64)rq;
	bpf_map_delete_elem(&inflight, &key);
	return 0;
}

static __always_inline __u32 op_of(__u32 flags)
{
	switch (flags & REQ_OP_MASK) {
	case 0: /* REQ_OP_READ */
		return IO_READ;
	case 1: /* REQ_OP_WRITE */
	case 9: /* REQ_OP_WRITE_ZEROES */
		return IO_WRITE;
	case 2: /* REQ_OP_FLUSH */
		return IO_FLUSH;
	case 3: /* REQ_OP_DISCARD */
	case 5: /* REQ_OP_SECURE_ERASE */
		return IO_DISCARD;
	}
	return IO_OTHER;
}

static __always_inline void stats_add(struct dev_key *k, __u64 bytes,
				      __u64 lat, __u64 queue, bool queued,
				      __u64 service)
{
	struct io_stats *s = bpf_map_lookup_elem(&stats, k);
	if (!s) {
		__u32 zero = 0;
		struct io_stats *z = bpf_map_lookup_elem(&zero_stats, &zero);
		if (!z)
			return;
		bpf_map_update_elem(&stats, k, z, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&stats, k);
		if (!s) {
			pipe_count(PIPE_OVERFLOW, 1);
			return;
		}
	}
	__u32 i = hist_slot(lat);
	if (i < HIST_SLOTS)
		s->latency[i]++;
	i = hist_slot(service);
	if (i < HIST_SLOTS)
		s->service[i]++;
	if (queued) {
		i = hist_slot(queue);
		if (i < HIST_SLOTS)
			s->queue[i]++;
		s->queue_ns += queue;
		s->queued++;
	}
	s->count++;
	s->bytes += bytes;
	s->latency_ns += lat;
	s->service_ns += service;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(block_rq_complete, struct request *rq, blk_status_t error,
	     unsigned int nr_bytes)
{
	__u64 key = (__u64)rq;
	__u64 now = bpf_ktime_get_ns();
	struct rq_info *ri = bpf_map_lookup_elem(&inflight, &key);
	if (!ri)
		return 0;
	if (!ri->issue_ts || now < ri->issue_ts) {
		bpf_map_delete_elem(&inflight, &key);
		return 0;
	}
	__u64 service = now - ri->issue_ts;
	__u64 queue = 0;
	bool queued = false;
	if (ri->insert_ts && ri->issue_ts >= ri->insert_ts) {
		queue = ri->issue_ts - ri->insert_ts;
		queued = true;
	}
	__u32 flags = rq->cmd_flags;
	__u32 op = op_of(flags);
	__u32 dev = 0;
	struct gendisk *disk = rq->q->disk;
	if (disk)
		dev = ((__u32)disk->major << 20) | (__u32)disk->first_minor;
	__u64 bytes = nr_bytes;
	__u32 tgid = ri->tgid;

	struct dev_key k = { .dev = dev, .target = 0, .op = op };
	if (host_wide)
		stats_add(&k, bytes, queue + service, queue, queued, service);

	struct target *tgt = target_hinted(tgid);
	if (!tgt || tgt->idx == 0 || tgt->idx >= MAX_TARGETS) {
		bpf_map_delete_elem(&inflight, &key);
		return 0;
	}
	k.target = tgt->idx;
	stats_add(&k, bytes, queue + service, queue, queued, service);

	if (tgt->flags & TARGET_STREAM) {
		struct event *e = pipe_reserve(struct event);
		if (e) {
			e->ts = now;
			e->queue_ns = queue;
			e->service_ns = service;
			e->sector = rq->__sector;
			e->bytes = nr_bytes;
			e->dev = dev;
			e->tgid = tgid;
			e->tid = ri->tid;
			e->op = op;
			e->flags = (queued ? EV_QUEUED : 0) |
				   ((flags & REQ_SYNC_BIT) ? EV_SYNC : 0);
			e->error = error;
			e->pad = 0;
			e->pad2 = 0;
			pipe_submit(e, sizeof(*e));
		}
	}
	bpf_map_delete_elem(&inflight, &key);
	return 0;
}
