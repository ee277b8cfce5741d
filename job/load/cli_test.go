package load

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/bpfbench/bpfbench/llmsim/sim"
	"github.com/bpfbench/bpfbench/llmsim/simtest"
)

// simConfig is llmsim's default configuration (its EOS and batch
// slowdown included, unlike simtest.Config) with sleeping steps: 2 ms
// each, after a 1 ms prefill.
func simConfig() sim.Config {
	cfg := sim.DefaultConfig()
	cfg.Work = sim.WorkSleep
	cfg.DecodeStep = 2 * time.Millisecond
	cfg.PrefillBase = time.Millisecond
	return cfg
}

// runSweep parses args as sweep's flags and runs it.
func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("sweep", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	j := NewSweepJob()
	j.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	_, _, err := j.Run(ctx, stdout, stderr)
	return err
}

func TestHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if err := RunLoad(context.Background(), []string{"-h"}, &out, &errb); !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("load -h: %v", err)
	}
	if !strings.Contains(errb.String(), "--target") || !strings.Contains(errb.String(), "--no-progress") {
		t.Errorf("load usage: %s", errb.String())
	}
	if err := runSweep(context.Background(), []string{"-h"}, &out, &errb); !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("sweep -h: %v", err)
	}
	if err := RunLoad(context.Background(), []string{"--num-requests", "3"}, &out, &errb); err == nil || !strings.Contains(err.Error(), "--target") {
		t.Errorf("load without target: %v", err)
	}
	if err := runSweep(context.Background(), []string{"--target", "http://x"}, &out, &errb); err == nil || !strings.Contains(err.Error(), "--slo") {
		t.Errorf("sweep without slo: %v", err)
	}
	if err := RunLoad(context.Background(), []string{"-target", "http://x"}, &out, &errb); err == nil {
		t.Errorf("a single-dash long flag was taken")
	}
}

// Every load option has the same default wherever it is defined, the
// model is asked of the server, and the rate is sent all at once.
func TestFlagsDefaults(t *testing.T) {
	fs := Flags()
	for name, want := range map[string]string{"model": "", "rate": "inf", "no-progress": "false", "output-len": "64", "otlp-endpoint": ""} {
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("no --%s", name)
			continue
		}
		if f.DefValue != want {
			t.Errorf("--%s default %q, want %q", name, f.DefValue, want)
		}
	}
	if fs.Lookup("out") != nil || fs.Lookup("result") != nil {
		t.Errorf("the output file is a command's own flag, not a load option")
	}
}

// The model, when not given, is the first the server lists.
func TestResolveModel(t *testing.T) {
	url := simtest.StartConfig(t, simConfig())
	cfg := NewOptions().Config
	cfg.Target.URL = url
	if err := ResolveModel(context.Background(), &cfg); err != nil || cfg.Target.Model == "" {
		t.Fatalf("model %q: %v", cfg.Target.Model, err)
	}
	cfg.Target.Model, cfg.Target.URL = "", "http://127.0.0.1:1"
	if err := ResolveModel(context.Background(), &cfg); err == nil || !strings.Contains(err.Error(), "give --model") {
		t.Errorf("nobody listening: %v", err)
	}
}

// --out, the old spelling of --result, still works, with a warning.
func TestDeprecatedOut(t *testing.T) {
	url := simtest.StartConfig(t, simConfig())
	out := filepath.Join(t.TempDir(), "result.json")
	var stdout, stderr bytes.Buffer
	if err := RunLoad(context.Background(), []string{"--target", url, "--num-requests", "2", "--output-len", "2", "--input-len", "4", "--out", out}, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("--out wrote no file: %v", err)
	}
	if !strings.Contains(stderr.String(), "--out has been deprecated, use --result") {
		t.Errorf("no deprecation warning: %q", stderr.String())
	}
}

func TestRunLoadWritesVLLMJSON(t *testing.T) {
	url := simtest.StartConfig(t, simConfig())
	out := filepath.Join(t.TempDir(), "result.json")
	var stdout, stderr bytes.Buffer
	err := RunLoad(context.Background(), []string{"--target", url, "--endpoint", "chat", "--num-requests", "8", "--rate", "200",
		"--input-len", "10", "--output-len", "4", "--percentiles", "50,99.9", "--goodput", "ttft:1000,tpot:1000", "--result", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	for _, s := range []string{"Serving Benchmark Result", "Successful requests:", "Mean TTFT (ms):", "P99.9 ITL (ms):", "Request goodput (req/s):"} {
		if !strings.Contains(stdout.String(), s) {
			t.Errorf("summary lacks %q:\n%s", s, stdout.String())
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["completed"].(float64) != 8 || m["failed"].(float64) != 0 || m["backend"] != "openai-chat" || m["request_goodput"].(float64) <= 0 {
		t.Errorf("result: completed %v failed %v backend %v goodput %v", m["completed"], m["failed"], m["backend"], m["request_goodput"])
	}
	for _, k := range []string{"p50_ttft_ms", "p99.9_itl_ms", "mean_e2el_ms", "ttfts", "itls", "output_lens", "total_output_tokens", "bpfbench"} {
		if _, ok := m[k]; !ok {
			t.Errorf("result lacks %s", k)
		}
	}
	recs := m["bpfbench"].(map[string]any)["records"].([]any)
	r0 := recs[0].(map[string]any)
	if r0["local_port"].(float64) == 0 || len(r0["chunk_ns"].([]any)) != 4 || r0["request_id"] == "" {
		t.Errorf("record: %v", r0)
	}
}

func TestRunSweep(t *testing.T) {
	cfg := simConfig()
	cfg.MaxNumSeqs = 2
	url := simtest.StartConfig(t, cfg)
	out := filepath.Join(t.TempDir(), "sweep.json")
	var stdout, stderr bytes.Buffer
	err := runSweep(context.Background(), []string{"--target", url, "--slo", "p90_ttft_ms<=40", "--requests-per-step", "30",
		"--output-len", "4", "--input-len", "4", "--step", "20", "--result", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "answer:") || !strings.Contains(stdout.String(), "step  1 probe") {
		t.Errorf("output:\n%s", stdout.String())
	}
	var res struct {
		Answer float64 `json:"answer"`
		Steps  []any   `json:"steps"`
	}
	b, _ := os.ReadFile(out)
	if err := json.Unmarshal(b, &res); err != nil || len(res.Steps) < 2 {
		t.Errorf("sweep JSON: %v %s", err, b)
	}
}

// --out is the run directory: the steps go to DIR/sweep.json unless
// --result names another file; a file name there is refused.
func TestSweepOut(t *testing.T) {
	url := simtest.StartConfig(t, simConfig())
	dir := filepath.Join(t.TempDir(), "sweep1")
	args := []string{"--target", url, "--slo", "p90_ttft_ms<=1000", "--requests-per-step", "10",
		"--output-len", "2", "--input-len", "4", "--precision", "0.5", "--max-rate", "20"}
	var stdout, stderr bytes.Buffer
	if err := runSweep(context.Background(), append(args, "--out", dir), &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sweep.json")); err != nil || !json.Valid(b) {
		t.Errorf("--out %s: no sweep.json in it: %v", dir, err)
	}
	if !strings.Contains(stdout.String(), "steps written to "+filepath.Join(dir, "sweep.json")) {
		t.Errorf("output does not say where the steps are:\n%s", stdout.String())
	}
	err := runSweep(context.Background(), append(args, "--out", filepath.Join(t.TempDir(), "sweep.json")), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--result FILE") {
		t.Errorf("--out FILE.json: %v", err)
	}
	j := NewSweepJob()
	if j.ResultFile() != filepath.Join("bpfbench-sweep", "sweep.json") {
		t.Errorf("default steps file %q", j.ResultFile())
	}
	j.Result = "x.json"
	if j.ResultFile() != "x.json" {
		t.Errorf("--result x.json: steps file %q", j.ResultFile())
	}
}
