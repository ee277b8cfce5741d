package agent

import (
	"strings"
	"testing"
)

func TestExplainPermission(t *testing.T) {
	// As the CUDA collector reported it on Linux 6.18 with CAP_PERFMON.
	refused := "attaching uprobe cuMemcpy in /tmp/bbcap/libcuda.so.1: creating perf_uprobe PMU: token /proc/26399/root/tmp/bbcap/libcuda.so.1:0x2d30: opening perf event: permission denied"
	if got := ExplainPermission(refused); !strings.HasPrefix(got, refused) || !strings.Contains(got, "CAP_SYS_ADMIN") || !strings.Contains(got, "extraCapabilities") {
		t.Errorf("uprobe PMU refusal: %q", got)
	}
	if got := ExplainPermission(ExplainPermission(refused)); strings.Count(got, "CAP_SYS_ADMIN") != 1 {
		t.Errorf("explained twice: %q", got)
	}
	for _, other := range []string{
		"not applicable to this process: NVML is not available",
		"creating perf_uprobe PMU: token x: opening perf event: no such file or directory",
		"loading the cuda programs: operation not permitted",
	} {
		if got := ExplainPermission(other); got != other {
			t.Errorf("%q became %q", other, got)
		}
	}
}
