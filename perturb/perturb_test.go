package perturb

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

func TestIOReadsAndReports(t *testing.T) {
	dir, err := os.MkdirTemp(".", ".perturb-test-") // not tmpfs: O_DIRECT needs a real file system
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, make([]byte, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	rep, err := IO{Path: p, Depth: 2}.Run(ctx)
	if err != nil {
		t.Skipf("O_DIRECT not supported here: %v", err)
	}
	t.Logf("%+v", rep)
	if rep.Ops == 0 || rep.IOPS <= 0 || rep.MeanLatency <= 0 || rep.Bytes != rep.Ops*4096 {
		t.Errorf("report %+v", rep)
	}
	ro := filepath.Join(dir, "ro")
	os.WriteFile(ro, make([]byte, 8192), 0o444)
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
