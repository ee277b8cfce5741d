package agent

import (
	"strings"

	"github.com/bpfbench/bpfbench/internal/caps"
)

// ExplainPermission adds the capability a refusal needs to the reason a
// collector gave, when it is the uprobe PMU's (caps.UprobeCapabilityHint);
// other reasons are returned as they are.
func ExplainPermission(reason string) string {
	if strings.Contains(reason, "perf_uprobe PMU") && strings.Contains(reason, "permission denied") && !strings.Contains(reason, "CAP_SYS_ADMIN") {
		return reason + " (" + caps.UprobeCapabilityHint + ")"
	}
	return reason
}
