package collectors

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// A fake /proc: each process's cgroup file and its parent in stat.
func fakeProc(t *testing.T, procs map[int]struct {
	ppid   int
	cgroup string
}) string {
	t.Helper()
	dir := t.TempDir()
	for pid, p := range procs {
		d := filepath.Join(dir, strconv.Itoa(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := strconv.Itoa(pid) + " (some name) S " + strconv.Itoa(p.ppid) + " 1 1 0 -1\n"
		if err := os.WriteFile(filepath.Join(d, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup"), []byte(p.cgroup), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const fakeMountinfo = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 31 0:40 /kubepods /sys/fs/cgroup/nested rw,relatime - cgroup2 cgroup2 rw
`

func TestResolveCgroup(t *testing.T) {
	type p = struct {
		ppid   int
		cgroup string
	}
	svc := "0::/system.slice/vllm.service\n"
	proc := fakeProc(t, map[int]p{
		1:   {0, "0::/init.scope\n"},
		100: {1, svc},                                            // the service's main process
		101: {100, svc},                                          // its child
		102: {101, "0::/system.slice/vllm.service/engine\n"},     // a grandchild in a sub-cgroup
		150: {1, "0::/system.slice/vllm.service.bak\n"},          // a sibling whose name shares the prefix
		200: {7, "1:pids:/other\n0::/system.slice/vllm.service"}, // joined from outside (docker exec)
		300: {1, "0::/system.slice/other.service\n"},
	})
	mi := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(mi, []byte(fakeMountinfo), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{"/system.slice/vllm.service", "/system.slice/vllm.service/", "/sys/fs/cgroup/unified/system.slice/vllm.service"} {
		ct, err := resolveCgroup(proc, mi, arg)
		if err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
		if ct.Path != "/system.slice/vllm.service" || ct.Pid != 100 || !slices.Equal(ct.Roots, []int{200}) || ct.Procs != 4 {
			t.Errorf("%s: %+v, want path /system.slice/vllm.service, pid 100, roots [200], 4 processes", arg, ct)
		}
	}
	// A mount with a root of its own (a cgroup namespace's view).
	if got, err := cgroupPath(mi, "/sys/fs/cgroup/nested/pod1"); err != nil || got != "/kubepods/pod1" {
		t.Errorf("nested mount: %q %v, want /kubepods/pod1", got, err)
	}
	_, err := resolveCgroup(proc, mi, "/system.slice/none.service")
	var ce *CgroupError
	if !errors.As(err, &ce) {
		t.Errorf("an empty cgroup: %v, want a CgroupError", err)
	}
	if _, err := resolveCgroup(proc, mi, "system.slice/vllm.service"); !errors.As(err, &ce) {
		t.Errorf("a relative path: %v, want a CgroupError", err)
	}
}
