package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

func TestFindErrors(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "llama-server")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "m.gguf")
	if err := os.WriteFile(model, []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.gguf")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "nope")
	for _, tc := range []struct {
		name          string
		server, model string
		want          []string // substrings of the error; nil: no error
	}{
		{"both present", exe, model, nil},
		{"no server", missing, model, []string{"no llama-server at " + missing}},
		{"server not executable", plain, model, []string{plain + " is not an executable file"}},
		{"server is a directory", dir, model, []string{"is not an executable file"}},
		{"no model", exe, missing, []string{"no model at " + missing}},
		{"empty model", exe, empty, []string{"is not a non-empty file"}},
		{"neither", missing, missing + ".gguf", []string{"no llama-server", "no model"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvServer, tc.server)
			t.Setenv(EnvModel, tc.model)
			p, err := Find()
			if p.Server != tc.server || p.Model != tc.model {
				t.Errorf("paths %+v, want the environment's", p)
			}
			if tc.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			for _, w := range append(tc.want, "tools/bench/engine/build.sh", EnvServer) {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
}

func TestFindDefaults(t *testing.T) {
	t.Setenv(EnvServer, "")
	t.Setenv(EnvModel, "")
	p, _ := Find()
	if p.Server != DefaultBin || p.Model != DefaultModel {
		t.Errorf("paths %+v, want the cache's %s and %s", p, DefaultBin, DefaultModel)
	}
}

// A server that exits at once: Start fails and shows its output.
func TestStartReportsEarlyExit(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "llama-server")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\necho 'error: cannot load model' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "m.gguf")
	if err := os.WriteFile(model, []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), Options{Paths: Paths{exe, model}, StartTimeout: 10 * time.Second})
	if err == nil {
		t.Fatal("Start succeeded")
	}
	for _, w := range []string{"exited before it was ready", "cannot load model"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}

// CPUs pins every thread of the server (taskset runs before its first
// thread) and Metrics reads its /metrics once.
func TestStartPinnedWithMetrics(t *testing.T) {
	paths, err := Find()
	if err != nil {
		privtest.SkipOptional(t, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := Start(ctx, Options{Paths: paths, Threads: 2, Slots: 1, CtxSize: 256, Metrics: true, CPUs: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", srv.Pid)); filepath.Base(exe) != filepath.Base(paths.Server) {
		t.Errorf("pid %d runs %s, want the server itself", srv.Pid, exe)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", srv.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tasks {
		tid, _ := strconv.Atoi(e.Name())
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err != nil {
			t.Fatal(err)
		}
		if set.Count() != 1 || !set.IsSet(0) {
			t.Errorf("thread %d may run on %d CPUs, want CPU 0 only", tid, set.Count())
		}
	}
	if len(tasks) < 2 {
		t.Errorf("%d threads, want the server's workers", len(tasks))
	}
	m, err := srv.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m["llamacpp:tokens_predicted_total"]; !ok {
		t.Errorf("no llamacpp:tokens_predicted_total in %v", m)
	}
	t.Logf("%d threads on CPU 0; metrics %v", len(tasks), m)
}
