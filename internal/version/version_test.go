package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20260101120000-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		name             string
		ver, rev         string
		bi               *debug.BuildInfo
		wantVer, wantRev string
	}{
		{"linker flags win", "v1.2.0", "abc1234", vcs, "v1.2.0", "abc1234"},
		{"from the build", "", "", vcs, "v0.0.0-20260101120000-0123456789ab+dirty", "0123456789ab-dirty"},
		{"devel, no vcs", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev", "unknown"},
		{"nothing", "", "", &debug.BuildInfo{}, "dev", "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, r := fromBuildInfo(tc.ver, tc.rev, tc.bi)
			if v != tc.wantVer || r != tc.wantRev {
				t.Errorf("got %q %q, want %q %q", v, r, tc.wantVer, tc.wantRev)
			}
		})
	}
	if Version == "" || Revision == "" {
		t.Errorf("init left version %q revision %q", Version, Revision)
	}
	if s := Get().String(); !strings.Contains(s, GoVersion) || !strings.HasPrefix(s, "bpfbench ") {
		t.Errorf("String: %q", s)
	}
}
