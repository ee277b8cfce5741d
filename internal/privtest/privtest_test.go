package privtest

import (
	"runtime"
	"strings"
	"testing"
)

// fakeTB records how a test ended: skipped, failed, or neither.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, format
	runtime.Goexit()
}
func (f *fakeTB) Skip(args ...any) {
	f.skipped = true
	runtime.Goexit()
}

func run(fn func(t testing.TB)) *fakeTB {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() { defer close(done); fn(f) }()
	<-done
	return f
}

func TestSkipKinds(t *testing.T) {
	for _, c := range []struct {
		priv, all        string
		kind             Kind
		wantFail, wantSk bool
	}{
		{"", "", Privileged, false, true},
		{"", "", Optional, false, true},
		{"1", "", Privileged, true, false},
		{"1", "", Optional, false, true},
		{"", "1", Privileged, true, false},
		{"", "1", Optional, true, false},
		{"0", "0", Privileged, false, true},
	} {
		t.Setenv(EnvRequire, c.priv)
		t.Setenv(EnvRequireAll, c.all)
		f := run(func(tb testing.TB) { SkipAs(tb, c.kind, "no widget") })
		if f.failed != c.wantFail || f.skipped != c.wantSk {
			t.Errorf("%s=%q %s=%q, %s skip: failed %v skipped %v", EnvRequire, c.priv, EnvRequireAll, c.all, c.kind, f.failed, f.skipped)
		}
		if f.failed && !strings.Contains(f.msg, "forbids skipping") {
			t.Errorf("failure message %q", f.msg)
		}
	}
}

func TestRequireTool(t *testing.T) {
	t.Setenv(EnvRequire, "1")
	t.Setenv(EnvRequireAll, "")
	var path string
	f := run(func(tb testing.TB) { path = RequireTool(tb, "sh", "") })
	if f.failed || f.skipped || path == "" {
		t.Errorf("sh: path %q failed %v skipped %v", path, f.failed, f.skipped)
	}
	f = run(func(tb testing.TB) { RequireTool(tb, "no-such-tool-bpfbench", "apt-get install nothing") })
	if !f.skipped {
		t.Errorf("a missing optional tool under %s only: failed %v skipped %v", EnvRequire, f.failed, f.skipped)
	}
	t.Setenv(EnvRequireAll, "1")
	f = run(func(tb testing.TB) { RequireTool(tb, "no-such-tool-bpfbench", "") })
	if !f.failed {
		t.Errorf("a missing optional tool under %s: not a failure", EnvRequireAll)
	}
}
