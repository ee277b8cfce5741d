// Package version holds the build's version, revision and Go toolchain:
// set by the linker (the Makefile's -ldflags -X), or else read from the
// build information Go records in the binary (the module's version and the
// VCS revision of a `go build` in a git checkout).
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version and Revision may be set with -ldflags -X; when they are not,
// init fills them from the build information ("dev" and "unknown" when
// there is none, as in a test binary).
var (
	Version  string
	Revision string
)

// GoVersion is the Go toolchain that built the binary.
var GoVersion = runtime.Version()

func init() {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = &debug.BuildInfo{}
	}
	Version, Revision = fromBuildInfo(Version, Revision, bi)
}

// fromBuildInfo completes version and revision from bi.
func fromBuildInfo(version, revision string, bi *debug.BuildInfo) (string, string) {
	var rev string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if version == "" {
		version = bi.Main.Version
		if version == "" || version == "(devel)" {
			version = "dev"
		}
	}
	if revision == "" {
		revision = "unknown"
		if rev != "" {
			revision = rev[:min(len(rev), 12)]
			if modified {
				revision += "-dirty"
			}
		}
	}
	return version, revision
}

// Info is the build information, as `bpfbench version --output json` prints it.
type Info struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// Get returns the build information.
func Get() Info {
	return Info{Version: Version, Revision: Revision, GoVersion: GoVersion, Platform: runtime.GOOS + "/" + runtime.GOARCH}
}

// String is the build in one line: "bpfbench v1.2.0 (revision 0123456789ab, go1.26.0 linux/amd64)".
func (i Info) String() string {
	return fmt.Sprintf("bpfbench %s (revision %s, %s %s)", i.Version, i.Revision, i.GoVersion, i.Platform)
}
