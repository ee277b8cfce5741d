/* SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause */
/* Shared definitions for bpfbench's eBPF programs. */
#ifndef BPFBENCH_H
#define BPFBENCH_H

/* vmlinux.h and libbpf's headers are not ours to pad-check; our own structs
 * are compiled with -Wpadded -Werror so that Go and C layouts cannot drift. */
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wpadded"
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#pragma clang diagnostic pop

/* Log2 histograms: slot i counts values v (ns) with 2^(i-1) <= v < 2^i,
 * slot 0 counts v == 0. 40 slots reach 2^39 ns, about 550 s. */
#define HIST_SLOTS 40

/* Index 0 of every per-target array is the host-wide aggregate; configured
 * targets use 1..MAX_TARGETS-1. */
#define MAX_TARGETS 64

/* Flags of a target entry (value of the targets map). */
#define TARGET_STREAM 1 /* stream discrete events through the ring buffer */
#define TARGET_CLIENT 2 /* the load generator, not the server: its records
			 * are flagged as the client's */
#define TARGET_CHILD 4  /* added by the kernel: a process a target forked */

struct target {
	__u32 idx;   /* aggregate slot, 1..MAX_TARGETS-1 */
	__u32 flags; /* TARGET_* */
};

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0;
	/* Branch-light integer log2; the verifier sees a bounded result. */
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r;
}

/* hist_slot maps a duration in ns to its log2 slot. */
static __always_inline __u32 hist_slot(__u64 v)
{
	__u32 s;
	if (v == 0)
		return 0;
	s = log2_u64(v) + 1;
	if (s >= HIST_SLOTS)
		s = HIST_SLOTS - 1;
	return s;
}

struct hist {
	__u64 slots[HIST_SLOTS];
	__u64 count;
	__u64 sum_ns;
};

/* hist_add_n adds v (ns) n times to the histogram at idx of an array map
 * of struct hist: a sample that stands for n intervals. */
static __always_inline void hist_add_n(void *map, __u32 idx, __u64 v, __u32 n)
{
	struct hist *h = bpf_map_lookup_elem(map, &idx);
	if (!h)
		return;
	__u32 s = hist_slot(v);
	if (s < HIST_SLOTS)
		h->slots[s] += n;
	h->count += n;
	h->sum_ns += v * n;
}

/* hist_add adds v (ns) to the histogram at idx of an array map of struct hist. */
static __always_inline void hist_add(void *map, __u32 idx, __u64 v)
{
	hist_add_n(map, idx, v, 1);
}

#endif
