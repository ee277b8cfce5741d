// Package privtest gates tests that need root and a real kernel.
package privtest

import (
	"os"
	"testing"
)

// EnvRequire, when "1", turns every privileged skip into a failure (CI sets it).
const EnvRequire = "BPFBENCH_REQUIRE_PRIVILEGED"

// Require skips t with a reason when not running as root, or fails it when
// BPFBENCH_REQUIRE_PRIVILEGED=1.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	Skip(t, "needs root to load eBPF programs (run the tests as root)")
}

// Skip skips t with reason, or fails it when BPFBENCH_REQUIRE_PRIVILEGED=1.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("%s, and %s=1 forbids skipping", reason, EnvRequire)
	}
	t.Skip(reason)
}
