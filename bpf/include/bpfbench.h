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

/* Integer argument slots at a function's entry, per target architecture
 * (bpf2go -target defines __TARGET_ARCH_*): ARG_REGS slots in registers,
 * the rest in 8-byte stack slots from STACK_ARGS_OFF above the stack
 * pointer; SP_SLOT is where cuda.bpf.c's register copy keeps the stack
 * pointer. The vmlinux.h here is x86-64's: arm64's register file as uprobe
 * programs see it (struct user_pt_regs, arch/arm64/include/uapi/asm/
 * ptrace.h, a stable ABI) is declared below, without CO-RE. */
#if defined(__TARGET_ARCH_arm64)
struct user_pt_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
};
#define ARG_REGS 8
#define STACK_ARGS_OFF 0 /* the return address is in x30, not on the stack */
#define ARG_REG6(ctx) (((const struct user_pt_regs *)(ctx))->regs[5])
#define ARG_REG7(ctx) (((const struct user_pt_regs *)(ctx))->regs[6])
#define ARG_REG8(ctx) (((const struct user_pt_regs *)(ctx))->regs[7])
#elif defined(__TARGET_ARCH_x86)
#define ARG_REGS 6
#define STACK_ARGS_OFF 8 /* above the return address */
/* libbpf before 1.2 has no PT_REGS_PARM6. */
#define ARG_REG6(ctx) ((ctx)->r9)
#else
#error "bpfbench's eBPF programs are built for x86 and arm64 (bpf2go -target amd64,arm64)"
#endif
#define SP_SLOT 9

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
