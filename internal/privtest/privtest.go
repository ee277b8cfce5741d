// Package privtest is the one place tests skip from. A test that cannot run
// here says why through this package, never with a bare t.Skip, so that CI
// can forbid the skip:
//
//   - BPFBENCH_REQUIRE_PRIVILEGED=1 turns every privileged skip into a
//     failure: not root, no eBPF, a kernel feature or a system tool the
//     privileged tests need (Require, Skip, SkipPrivileged).
//   - BPFBENCH_REQUIRE_ALL=1 turns every skip into a failure: the
//     privileged ones and the optional ones too, a tool such as Chromium
//     or a host condition such as O_DIRECT support (SkipOptional,
//     RequireTool). CI on a fully provisioned host sets both.
//
// A test that needs nothing absent must not skip at all: an error from the
// code under test is a failure, not a reason to skip.
package privtest

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// EnvRequire, when "1", turns every privileged skip into a failure (CI sets it).
const EnvRequire = "BPFBENCH_REQUIRE_PRIVILEGED"

// EnvRequireAll, when "1", turns every skip into a failure, optional ones
// included.
const EnvRequireAll = "BPFBENCH_REQUIRE_ALL"

// Kind says what a skipped test lacks, and so which variable forbids the skip.
type Kind int

const (
	// Privileged: root, eBPF, a kernel feature or a tool the privileged
	// tests need. Forbidden by BPFBENCH_REQUIRE_PRIVILEGED=1 and by
	// BPFBENCH_REQUIRE_ALL=1.
	Privileged Kind = iota
	// Optional: a tool or host condition a test can do without on a
	// developer's machine. Forbidden by BPFBENCH_REQUIRE_ALL=1.
	Optional
)

func (k Kind) String() string {
	if k == Optional {
		return "optional"
	}
	return "privileged"
}

// forbidden names the variable that forbids a skip of kind k, or "".
func forbidden(k Kind) string {
	if os.Getenv(EnvRequireAll) == "1" {
		return EnvRequireAll
	}
	if k == Privileged && os.Getenv(EnvRequire) == "1" {
		return EnvRequire
	}
	return ""
}

// Require skips t with a reason when not running as root, or fails it when
// BPFBENCH_REQUIRE_PRIVILEGED=1 (or BPFBENCH_REQUIRE_ALL=1).
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	Skip(t, "needs root to load eBPF programs (run the tests as root)")
}

// Skip is SkipAs(t, Privileged, reason): it skips t with reason, or fails
// it when BPFBENCH_REQUIRE_PRIVILEGED=1 (or BPFBENCH_REQUIRE_ALL=1).
func Skip(t testing.TB, reason string) {
	t.Helper()
	SkipAs(t, Privileged, reason)
}

// SkipPrivileged is Skip with a format.
func SkipPrivileged(t testing.TB, format string, args ...any) {
	t.Helper()
	SkipAs(t, Privileged, fmt.Sprintf(format, args...))
}

// SkipOptional skips t because an optional tool or host condition is
// missing, or fails it when BPFBENCH_REQUIRE_ALL=1.
func SkipOptional(t testing.TB, format string, args ...any) {
	t.Helper()
	SkipAs(t, Optional, fmt.Sprintf(format, args...))
}

// SkipAs skips t with reason, or fails it when the variable that forbids
// skips of kind k is set. Every skip in the tests goes through it.
func SkipAs(t testing.TB, k Kind, reason string) {
	t.Helper()
	if v := forbidden(k); v != "" {
		t.Fatalf("%s (a %s skip), and %s=1 forbids skipping", reason, k, v)
	}
	t.Skip(reason)
}

// RequireTool returns the path of the program name, or skips t as an
// optional skip (hint says how to install it), failing under
// BPFBENCH_REQUIRE_ALL=1.
func RequireTool(t testing.TB, name, hint string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if hint != "" {
			SkipOptional(t, "%s not installed (%s)", name, hint)
		} else {
			SkipOptional(t, "%s not installed", name)
		}
	}
	return p
}
