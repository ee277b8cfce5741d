package collectors

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The four times of each process's stat, summed in ns; a comm with
// spaces and parentheses does not shift the fields; a pid without a stat
// is left out.
func TestTreeCPUFields(t *testing.T) {
	dir := t.TempDir()
	write := func(pid, stat string) {
		if err := os.MkdirAll(filepath.Join(dir, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, pid, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10", "10 (python3) S 1 10 10 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 8 0 100 0 0\n")
	write("11", "11 (a (b) c) R 10 10 10 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 100 0 0\n")
	ns, n := TreeCPU(dir, []int{10, 11, 12})
	if n != 2 || ns != (250+50+7+3+1+2)*1e7 {
		t.Fatalf("TreeCPU = %d ns over %d processes; want %d over 2", ns, n, int64(313e7))
	}
}

// This process's own reading grows by the CPU it burns: the kernel's
// account at a finer grain (getrusage) over the same stretch, of 300 ms
// of busy work, agrees within four ticks.
func TestTreeCPUOfThisProcess(t *testing.T) {
	pid := os.Getpid()
	used := func() time.Duration {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before, n := TreeCPU("/proc", []int{pid})
	if n != 1 {
		t.Fatal("no reading of this process")
	}
	r0 := used()
	x := 0
	for used()-r0 < 300*time.Millisecond {
		x++
	}
	r1 := used()
	after, _ := TreeCPU("/proc", []int{pid})
	got, want := time.Duration(after-before), r1-r0
	if d := got - want; d < -4*time.Second/UserHZ || d > 4*time.Second/UserHZ {
		t.Fatalf("TreeCPU grew %v over getrusage's %v (%d loops); want within 4 ticks", got, want, x)
	}
}
