package result_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/llmsim/sim"
	"github.com/bpfbench/bpfbench/result"
)

const published = "../docs/result.schema.json"

// The published schemas are the ones the types give: `go generate
// ./result` after changing them.
func TestSchemaPublished(t *testing.T) {
	for _, s := range result.Schemas {
		want, err := s.Schema()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join("../docs", s.File)
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./result", p)
		}
	}
}

// schema compiles the published schema.
func schema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(published)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource(result.SchemaID, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(result.SchemaID)
	if err != nil {
		t.Fatalf("compiling %s: %v", published, err)
	}
	return s
}

// validate checks the result.json at path against the schema.
func validate(t *testing.T, s *jsonschema.Schema, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(v); err != nil {
		t.Errorf("%s does not validate against %s:\n%v", path, published, err)
	}
}

// The schema holds what it must refuse: a key of no field, a field of the
// wrong type.
func TestSchemaRefuses(t *testing.T) {
	s := schema(t)
	for _, in := range []string{
		`{"schema_version": 2, "duration": 1, "completed": 1, "failed": 0, "total_input_tokens": 1, "total_output_tokens": 1, "request_throughput": 1, "output_throughput": 1, "total_token_throughput": 1, "max_output_tokens_per_s": 1, "max_concurrent_requests": 1, "request_goodput": null, "mean_ttft_ms": 1, "median_ttft_ms": 1, "std_ttft_ms": 1, "mean_tpot_ms": 1, "median_tpot_ms": 1, "std_tpot_ms": 1, "mean_itl_ms": 1, "median_itl_ms": 1, "std_itl_ms": 1, "mean_e2el_ms": 1, "median_e2el_ms": 1, "std_e2el_ms": 1, "no_such_key": 1}`,
		`{"schema_version": "two"}`,
	} {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(in)))
		if err != nil {
			t.Fatal(err)
		}
		if s.Validate(v) == nil {
			t.Errorf("validated: %s", in)
		}
	}
}

// result.json of a fresh run (`bpfbench run` against the simulated server
// in this process, under the collectors) validates against the schema.
func TestFreshRunValidates(t *testing.T) {
	privtest.Require(t)
	s := schema(t)
	bin := filepath.Join(t.TempDir(), "bpfbench")
	build := exec.Command("go", "build", "-o", bin, "../cmd/bpfbench")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building bpfbench: %v\n%s", err, out)
	}
	cfg := sim.DefaultConfig()
	cfg.Work = sim.WorkSleep
	cfg.DecodeStep = 5 * time.Millisecond
	srv, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer srv.Close()
	defer ts.Close()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, bin, "run", "--target", ts.URL, "--pid", strconv.Itoa(os.Getpid()),
		"--num-requests", "6", "--rate", "6", "--output-len", "16", "--out", dir)
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("bpfbench run: %v\n%s", err, out)
	}
	p := filepath.Join(dir, "result.json")
	validate(t, s, p)
	d, err := result.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if d.SchemaVersion != result.SchemaVersion || d.Completed != 6 || len(d.Other) != 0 {
		t.Errorf("schema_version %d, completed %d, keys of no field %v", d.SchemaVersion, d.Completed, d.Other)
	}
}
