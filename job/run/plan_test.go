package run

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/llmsim/sim"
	"github.com/bpfbench/bpfbench/llmsim/simtest"
	"github.com/bpfbench/bpfbench/loadgen"
)

// run --trace reads the trace once: the pipeline's send offsets are the
// trace's, and the load sends the same plan with the file gone, its
// result's dataset still the trace, hashed as it was read.
func TestPlanReadsTraceOnce(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	body := []byte(`{"timestamp": 1000, "input_len": 5, "output_len": 3}
{"timestamp": 1050, "input_len": 7, "output_len": 2}
{"timestamp": 1020, "prompt": "one two three", "output_len": 4}
`)
	if err := os.WriteFile(trace, body, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := loadgen.DefaultConfig()
	cfg.Target.URL = simtest.Start(t, func(c *sim.Config) { c.DecodeStep = time.Millisecond })
	cfg.Scenario.TracePath, cfg.Scenario.TraceTimeUnit = trace, "ms"
	cfg.Scenario.NumRequests = 0
	cfg.Target.IgnoreEOS = true
	plan, offsets := planLoad(cfg)
	if want := []int64{0, 50e6, 20e6}; !slices.Equal(offsets, want) {
		t.Fatalf("the pipeline's offsets %v, want the trace's %v", offsets, want)
	}
	if err := os.Remove(trace); err != nil {
		t.Fatal(err)
	}
	res, err := loadgen.RunPlan(context.Background(), cfg, plan)
	if err != nil {
		t.Fatalf("the load read the trace again: %v", err)
	}
	if len(res.Records) != 3 {
		t.Errorf("%d records, want the trace's 3", len(res.Records))
	}
	sum := sha256.Sum256(body)
	if d := res.Dataset; d.Name != "trace" || d.Path != trace || d.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("dataset %+v, want the trace %s hashed", d, trace)
	}
	// A trace that cannot be read is the load's to report; the pipeline
	// holds spans from the start.
	if plan, offsets := planLoad(cfg); plan != nil || !slices.Equal(offsets, []int64{0}) {
		t.Errorf("no trace: plan %v, offsets %v", plan, offsets)
	}
}
