package agent

import "strings"

// UprobeCapabilityHint is the fix for a uprobe refused by the kernel's
// uprobe PMU: since Linux 6.16 (commit ba677dbe77af, also in the 6.1.y,
// 6.6.y and 6.15.y stable kernels) perf_event_open of that PMU asks for
// CAP_SYS_ADMIN, where CAP_PERFMON was enough from 5.8 to 6.15.
const UprobeCapabilityHint = "the kernel's uprobe PMU needs CAP_SYS_ADMIN since Linux 6.16 (CAP_PERFMON is not enough): add it (Helm: extraCapabilities: [SYS_ADMIN]; systemd: AmbientCapabilities= and CapabilityBoundingSet=), or run as root"

// ExplainPermission adds the capability a refusal needs to the reason a
// collector gave, when it is the uprobe PMU's; other reasons are returned
// as they are.
func ExplainPermission(reason string) string {
	if strings.Contains(reason, "perf_uprobe PMU") && strings.Contains(reason, "permission denied") && !strings.Contains(reason, "CAP_SYS_ADMIN") {
		return reason + " (" + UprobeCapabilityHint + ")"
	}
	return reason
}
