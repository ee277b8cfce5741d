package affinity

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

// The count is the affinity's, read again when it changes and Max has
// passed; a process that is gone has none.
func TestCounter(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var c Counter
	pid := uint32(os.Getpid())
	if got := c.CPUs(pid); got != set.Count() {
		t.Fatalf("CPUs(self) = %d, want %d", got, set.Count())
	}
	if got := c.CPUs(1 << 30); got != 0 {
		t.Fatalf("CPUs of no process = %d, want 0", got)
	}
}

// A process restricted to one CPU counts one once Max has passed.
func TestCounterReadsAgain(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }() //nolint:errcheck // killed
	c := Counter{Max: time.Hour}
	pid := uint32(cmd.Process.Pid)
	before := c.CPUs(pid)
	if before < 2 {
		privtest.SkipOptional(t, "one CPU here (%d): no restriction to see", before)
	}
	var one unix.CPUSet
	one.Set(0)
	if err := unix.SchedSetaffinity(int(pid), &one); err != nil {
		t.Fatal(err)
	}
	if got := c.CPUs(pid); got != before {
		t.Fatalf("within Max: %d CPUs, want the cached %d", got, before)
	}
	c.Max = time.Nanosecond
	if got := c.CPUs(pid); got != 1 {
		t.Fatalf("after Max: %d CPUs, want 1", got)
	}
}
