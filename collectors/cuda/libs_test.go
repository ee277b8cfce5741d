package cuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

func TestParseMaps(t *testing.T) {
	const maps = `55d0c0a00000-55d0c0a02000 r--p 00000000 fd:01 1311 /usr/bin/python3.11
7f1a00000000-7f1a00100000 r--p 00000000 fd:01 2001 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
7f1a00100000-7f1a00800000 r-xp 00100000 fd:01 2001 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
7f1b00000000-7f1b00100000 r-xp 00000000 00:2f 3001 /srv/my venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12 (deleted)
7f1c00000000-7f1c00100000 r-xp 00000000 fd:01 4001 /usr/lib/x86_64-linux-gnu/libcudadebugger.so.1
7f1d00000000-7f1d00021000 rw-p 00000000 00:00 0 [heap]
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0
`
	ms, err := parseMaps(strings.NewReader(maps))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 5 {
		t.Fatalf("%d file mappings, want 5: %+v", len(ms), ms)
	}
	var cuda []mapping
	for _, m := range ms {
		if _, ok := isCUDALib(filepath.Base(m.path)); ok {
			cuda = append(cuda, m)
		}
	}
	if len(cuda) != 3 {
		t.Fatalf("%d CUDA mappings, want 3: %+v", len(cuda), cuda)
	}
	rt := cuda[2]
	if rt.path != "/srv/my venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12" ||
		rt.start != "7f1b00000000" || rt.end != "7f1b00100000" || rt.ino != 3001 || rt.dev == cuda[0].dev {
		t.Errorf("runtime mapping %+v", rt)
	}
	for name, want := range map[string]string{
		"libcuda.so": "driver", "libcuda.so.1": "driver", "libcudart.so.12.4.127": "runtime",
		"libcudadebugger.so.1": "", "libcudnn.so.9": "", "libcuda_wrapper.so": "",
	} {
		got, _ := isCUDALib(name)
		if got != want {
			t.Errorf("isCUDALib(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestCookieLayout(t *testing.T) {
	c, _ := CallByName("cudaMemcpyAsync_ptsz")
	if c.String() != "cudaMemcpyAsync" {
		t.Fatalf("alias resolves to %v", c)
	}
	ck := c.cookie()
	if ck&0xff != uint64(c) || (ck>>8)&0xf != 3 || (ck>>12)&0xf != 5 || (ck>>16)&0xf != 4 || ck&cookieRet != 0 {
		t.Errorf("cookie of cudaMemcpyAsync %#x", ck)
	}
	a, _ := CallByName("cuMemAlloc_v2")
	if ck := a.cookie(); ck&cookieRet == 0 || ck&cookieAlloc == 0 || (ck>>8)&0xf != 2 {
		t.Errorf("cookie of cuMemAlloc_v2 %#x", ck)
	}
	l, _ := CallByName("cuLaunchKernel")
	if ck := l.cookie(); (ck>>26)&3 != layoutArgs || (ck>>12)&0xf != 9 || ck&cookieRet != 0 {
		t.Errorf("cookie of cuLaunchKernel %#x", ck)
	}
}

// copyFile copies src to dir/name.
func copyFile(t *testing.T, src, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSeveralCopies maps two copies of libcuda, as a process does with a
// system driver and a Python venv's: both are found and probed, each
// once, and the calls go to the copy the program uses. An override
// replaces what the maps say.
func TestSeveralCopies(t *testing.T) {
	privtest.Require(t)
	root := t.TempDir()
	system := copyFile(t, libPath("driver"), filepath.Join(root, "usr/lib"), "libcuda.so.1")
	venv := copyFile(t, libPath("driver"), filepath.Join(root, "venv/lib/python3/site-packages/nvidia"), "libcuda.so.1")
	d := startDriverEnv(t, []string{"LD_PRELOAD=" + system}, "driver", venv, "--launches", "20", "--syncs", "2", "--kernel-us", "1000")

	libs, err := FindLibraries(d.pid(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) != 2 || libs[0].Path == libs[1].Path || libs[0].Inode == libs[1].Inode {
		t.Fatalf("libraries %+v, want the two copies", libs)
	}
	for _, l := range libs {
		if !strings.HasPrefix(l.Open, "/proc/") {
			t.Errorf("%s opened as %s, want through /proc", l.Path, l.Open)
		}
	}
	over, err := FindLibraries(d.pid(), []string{venv})
	if err != nil || len(over) != 1 || over[0].Path != venv {
		t.Errorf("override: %+v %v, want %s alone", over, err, venv)
	}

	s, stop := runSection(t, d.pid(), SectionConfig{})
	d.release(t)
	r := d.result(t)
	stop()
	sum := s.Aggregate()
	if len(sum.Libraries) != 2 {
		t.Errorf("probed %+v, want two libraries", sum.Libraries)
	}
	for _, name := range []string{"cuLaunchKernel", "cuStreamSynchronize"} {
		if c, _ := findCall(sum, name); c.Count != r.Calls[name] {
			t.Errorf("%s: %d calls, the driver made %d", name, c.Count, r.Calls[name])
		}
	}
}

// startDriverEnv is startDriver with extra environment and another library.
func startDriverEnv(t *testing.T, env []string, api, lib string, args ...string) *driver {
	t.Helper()
	return startDriverWith(t, env, append([]string{"--api", api, "--lib", lib, "--wait-start"}, args...))
}
