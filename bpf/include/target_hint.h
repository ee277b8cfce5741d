/* SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause */
/*
 * A filter in front of the targets map (pipeline.h, PIPELINE_TARGETS), for
 * the programs that run on every context switch, wakeup and block request
 * of the host: most of those tasks belong to no target, and a hash lookup
 * per task is most of what such a run costs.
 *
 * target_hint[tgid % TARGET_HINT_SLOTS] is non-zero when a target (or a
 * followed child) may have that tgid. Userspace sets a slot before it adds
 * a target to the targets map (collectors/bpfutil: Base.SetTarget), the
 * fork program before it adds a child; nobody clears one, so a slot is
 * never zero while its target is in the map. The array lookup is inlined
 * by the verifier: one load, no helper call. A slot shared by a non-target
 * tgid (pid_max above TARGET_HINT_SLOTS) costs that task the hash lookup,
 * nothing else.
 *
 * Included after pipeline.h by the objects that use it (not in pipeline.h,
 * so that the objects that do not are built from the same text as before).
 */
#ifndef BPFBENCH_TARGET_HINT_H
#define BPFBENCH_TARGET_HINT_H

#define TARGET_HINT_SLOTS 32768

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TARGET_HINT_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} target_hint SEC(".maps");

/* maybe_target says whether tgid may be in targets; false: it is not. */
static __always_inline bool maybe_target(__u32 tgid)
{
	__u32 k = tgid & (TARGET_HINT_SLOTS - 1);
	__u32 *h = bpf_map_lookup_elem(&target_hint, &k);
	return h && *h;
}

/* set_target_hint marks tgid's slot (before tgid enters targets). */
static __always_inline void set_target_hint(__u32 tgid)
{
	__u32 k = tgid & (TARGET_HINT_SLOTS - 1);
	__u32 *h = bpf_map_lookup_elem(&target_hint, &k);
	if (h)
		*h = 1;
}

/* target_hinted is target_of behind the filter. */
static __always_inline struct target *target_hinted(__u32 tgid)
{
	if (!nr_targets || !maybe_target(tgid))
		return 0;
	return bpf_map_lookup_elem(&targets, &tgid);
}

#endif
