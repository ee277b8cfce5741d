package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/perturb"
)

// The IO injection of validate and demo runs as `bpfbench perturb io` in a
// child process (its blocked threads would hold the load generator's Go
// Ps): the child reads, stops on the context and reports.
func TestIORunProcess(t *testing.T) {
	dir, err := os.MkdirTemp("/var/tmp", "bpfbench-io-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := filepath.Join(dir, "f")
	if err := perturb.WriteScratch(p, 8<<20); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rep, err := perturb.IO{Path: p, BlockSize: 1 << 20, Depth: 2}.RunProcess(ctx)
	if err != nil {
		t.Fatalf("IO.RunProcess: %v", err)
	}
	t.Logf("%+v", rep)
	if rep.Ops == 0 || rep.Bytes != rep.Ops<<20 || rep.MeanLatency <= 0 || rep.WallS <= 0 {
		t.Errorf("report %+v", rep)
	}
	short, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	if _, err := (perturb.IO{Path: filepath.Join(dir, "missing"), BlockSize: 1 << 20}).RunProcess(short); err == nil {
		t.Error("a missing file: no error from the child")
	}
}
