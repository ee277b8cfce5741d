// Package version holds build information set by the linker.
package version

import "runtime"

// Set with -ldflags -X by the Makefile.
var (
	Version  = "dev"
	Revision = "unknown"
)

// GoVersion is the Go toolchain that built the binary.
var GoVersion = runtime.Version()
