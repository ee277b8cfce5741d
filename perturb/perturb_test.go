package perturb

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

func TestCPUAchievesItsDuty(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	rep, err := CPU{Threads: 1, Duty: 0.5}.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep)
	// A busy thread can only burn less than its duty when it is starved.
	if rep.Share > 0.6 || rep.Share < 0.2 {
		t.Errorf("share %.2f of a 50%% duty cycle", rep.Share)
	}
}

func TestCPUBadInput(t *testing.T) {
	for c, want := range map[*CPU]string{
		{Threads: MaxThreads + 1}:      "at most",
		{Threads: 1, Duty: 1.5}:        "duty cycle",
		{Threads: 1, CPUs: []int{999}}: "does not exist",
		{Threads: 1, Nice: 40}:         "nice",
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", *c, err, want)
		}
	}
}

// directDir returns a fresh directory, outside the source tree, on a file
// system that takes O_DIRECT opens: the test's temporary directory, else one
// under /var/tmp (often disk when /tmp is a tmpfs without O_DIRECT). Only
// when neither does is the test skipped, as an optional host condition.
func directDir(t *testing.T) string {
	t.Helper()
	supports := func(dir string) error {
		f, err := os.CreateTemp(dir, "odirect-probe-")
		if err != nil {
			return err
		}
		name := f.Name()
		f.Close()
		defer os.Remove(name)
		g, err := os.OpenFile(name, os.O_RDONLY|unix.O_DIRECT, 0)
		if err != nil {
			return err
		}
		return g.Close()
	}
	dir := t.TempDir()
	err := supports(dir)
	if err == nil {
		return dir
	}
	if !errors.Is(err, unix.EINVAL) {
		t.Fatalf("probing O_DIRECT in %s: %v", dir, err)
	}
	vt, verr := os.MkdirTemp("/var/tmp", "perturb-test-")
	if verr != nil {
		privtest.SkipOptional(t, "O_DIRECT unsupported in %s (%v) and no /var/tmp: %v", dir, err, verr)
	}
	t.Cleanup(func() { os.RemoveAll(vt) })
	if verr := supports(vt); verr != nil {
		if errors.Is(verr, unix.EINVAL) {
			privtest.SkipOptional(t, "no file system here takes O_DIRECT: %s: %v; %s: %v", dir, err, vt, verr)
		}
		t.Fatalf("probing O_DIRECT in %s: %v", vt, verr)
	}
	return vt
}

func TestIOReadsAndReports(t *testing.T) {
	dir := directDir(t)
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, make([]byte, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	rep, err := IO{Path: p, Depth: 2}.Run(ctx)
	if err != nil {
		t.Fatalf("IO.Run on a file system that takes O_DIRECT: %v", err)
	}
	t.Logf("%+v", rep)
	if rep.Ops == 0 || rep.IOPS <= 0 || rep.MeanLatency <= 0 || rep.Bytes != rep.Ops*4096 {
		t.Errorf("report %+v", rep)
	}
	ro := filepath.Join(dir, "ro")
	if err := os.WriteFile(ro, make([]byte, 8192), 0o444); err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if _, err := (IO{Path: ro, Write: true}).Run(short); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("writes to a read-only file: %v", err)
	}
	if _, err := (IO{Path: filepath.Join(dir, "missing")}).Run(short); err == nil {
		t.Error("a missing file accepted")
	}
	if err := (&IO{Path: p, BlockSize: 1000}).Validate(); err == nil {
		t.Error("a block size not a multiple of 4096 accepted")
	}
}

// taskCPU maps each thread of this process to the CPU time it has used
// (utime + stime, clock ticks).
func taskCPU(t *testing.T) map[string]int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/stat")
		if err != nil {
			continue // ended meanwhile
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		ut, _ := strconv.Atoi(f[11])
		st, _ := strconv.Atoi(f[12])
		out[e.Name()] = ut + st
	}
	return out
}

// The busy threads end with the perturbation: each is locked to its
// goroutine and never unlocked, so the runtime ends the thread with it.
// The runtime may start an idle thread of its own meanwhile, so what is
// checked is that no thread that burnt CPU during the run (a busy thread:
// 4 of them at a 20% duty for 300 ms, 60 ms each) is left.
func TestCPULeavesNoThread(t *testing.T) {
	before := taskCPU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := (CPU{Threads: 4, Duty: 0.2}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	busy := func() []string {
		var left []string
		for tid, cpu := range taskCPU(t) {
			if _, old := before[tid]; !old && cpu >= 2 { // 2 ticks: 20 ms at USER_HZ 100
				left = append(left, tid)
			}
		}
		return left
	}
	deadline := time.Now().Add(2 * time.Second)
	for len(busy()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if left := busy(); len(left) > 0 {
		t.Errorf("threads %v burnt CPU during the perturbation and are still there", left)
	}
}

func TestParseRateAndSize(t *testing.T) {
	for in, want := range map[string]uint64{"8mbit": 8e6, "500kbit": 5e5, "1gbit": 1e9, "1mbps": 8e6, "1000": 1000, "2.5Mbit": 2.5e6} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, want := range map[string]uint32{"32kb": 32 << 10, "32k": 32 << 10, "1mb": 1 << 20, "1500": 1500, "100b": 100} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "fast", "-1mbit", "0"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) accepted", bad)
		}
	}
	n := Net{Iface: "x", Rate: 8e6}
	if err := n.Validate(); err != nil || n.Burst < 32<<10 || n.Limit < 256<<10 {
		t.Errorf("defaults %+v %v", n, err)
	}
}
