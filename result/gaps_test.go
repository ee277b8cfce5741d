package result_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/result"
)

// gunzip is the file at path, decompressed.
func gunzip(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testdata/gaps-v2.jsonl.gz was written by the pipeline before the gaps
// file was typed here (7 gaps: one with the hypervisor's steal, one
// with no arrival, one kept whole for its negative part): it reads, and
// its gaps written again are the same bytes.
func TestGapsFixtureRoundTrip(t *testing.T) {
	const fixture = "testdata/gaps-v2.jsonl.gz"
	h, gaps, err := result.ReadGaps(fixture)
	if err != nil {
		t.Fatal(err)
	}
	if h.Format != result.GapsFormat || len(h.Phases) != 2 || h.Phases[1].Name != "cpu" || len(gaps) != 7 {
		t.Fatalf("header %+v, %d gaps", h, len(gaps))
	}
	if g := gaps[4]; g.Request != 1 || g.Index != 1 || g.StealNs != 100_000 || g.Ns[critpath.CPURunqueue] != 1_000_000 {
		t.Errorf("gap 4: %+v", g)
	}
	if !gaps[5].NoArrival || gaps[4].NoArrival {
		t.Errorf("no_arrival: %v %v", gaps[4].NoArrival, gaps[5].NoArrival)
	}
	if g := gaps[6]; g.Ns[critpath.Unexplained] != -5 || g.Ns[critpath.IOBlock] != 3_000_000 || g.EndNs-g.StartNs != 9_000_000 {
		t.Errorf("gap 6: %+v", g)
	}

	var out bytes.Buffer
	bw := bufio.NewWriter(&out)
	gw, err := result.NewGapsWriter(bw, h.RunStartNs, h.Phases)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gaps {
		if err := gw.Write(g); err != nil {
			t.Fatal(err)
		}
	}
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}
	bw.Flush()
	again := filepath.Join(t.TempDir(), result.GapsFile)
	if err := os.WriteFile(again, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if want, got := gunzip(t, fixture), gunzip(t, again); !bytes.Equal(got, want) {
		t.Errorf("written again:\n%s\nwant:\n%s", got, want)
	}
}

// A file of the layout before the steal column, with fewer causes in
// another order, reads: its steal 0, each column to its cause.
func TestGapsFormat1(t *testing.T) {
	h, gaps, err := result.ReadGaps("testdata/gaps-v1.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	if h.Format != result.GapsFormat1 || len(gaps) != 2 {
		t.Fatalf("header %+v, %d gaps", h, len(gaps))
	}
	g := gaps[1]
	if g.StealNs != 0 || !g.NoArrival || g.Ns[critpath.IOBlock] != 500 || g.Ns[critpath.ServerCompute] != 2000 || g.EndNs != 9500 {
		t.Errorf("gap 1: %+v", g)
	}
}

// writeGapsFile writes lines, gzip'd, as a gaps file.
func writeGapsFile(t *testing.T, lines ...string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(strings.Join(lines, "\n") + "\n"))
	zw.Close()
	p := filepath.Join(t.TempDir(), result.GapsFile)
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A file the reader cannot take says why, naming the file; a bad line
// keeps the gaps before it.
func TestGapsRefused(t *testing.T) {
	causes, _ := json.Marshal(critpath.CauseNames())
	head := `{"format":"` + result.GapsFormat + `","causes":` + string(causes) + `}`
	good := "[0,1,10,20,0,0,0,0,0,10,0,0,0,0,0]"
	for _, c := range []struct {
		lines []string
		want  string
		kept  int
	}{
		{[]string{`{"format":"bpfbench-gaps/9","causes":[]}`}, `is in format "bpfbench-gaps/9"`, 0},
		{[]string{`{"format":"` + result.GapsFormat + `","causes":["cpu_runqueue","nonesuch"]}`}, `does not know: "nonesuch"`, 0},
		{[]string{head, good, "[0,2,20,30,0]"}, "line 3: 5 fields, want 15", 1},
		{[]string{head, good, good, `{"x":1}`}, "line 4:", 2},
	} {
		p := writeGapsFile(t, c.lines...)
		_, gaps, err := result.ReadGaps(p)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) || len(gaps) != c.kept {
			t.Errorf("%v: %v, %d gaps kept, want %q and %d", c.lines, err, len(gaps), c.want, c.kept)
		}
	}
	if _, _, err := result.ReadGaps(filepath.Join(t.TempDir(), result.GapsFile)); !os.IsNotExist(err) {
		t.Errorf("a missing file: %v", err)
	}
}

// Every line of the fixtures validates against docs/gaps.schema.json;
// a line of no layout does not.
func TestGapsSchema(t *testing.T) {
	f, err := os.Open("../docs/gaps.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(result.GapsSchemaID, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(result.GapsSchemaID)
	if err != nil {
		t.Fatal(err)
	}
	for _, fixture := range []string{"testdata/gaps-v2.jsonl.gz", "testdata/gaps-v1.jsonl.gz"} {
		for i, line := range strings.Split(strings.TrimSpace(string(gunzip(t, fixture))), "\n") {
			v, err := jsonschema.UnmarshalJSON(strings.NewReader(line))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Validate(v); err != nil {
				t.Errorf("%s line %d does not validate: %v", fixture, i+1, err)
			}
		}
	}
	for _, bad := range []string{`[0,1,2,3,2]`, `[0,1,2]`, `{"format":"other","causes":[],"run_start_ns":0}`, `{"format":"` + result.GapsFormat + `","causes":[],"run_start_ns":0,"extra":1}`} {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(bad))
		if err != nil {
			t.Fatal(err)
		}
		if s.Validate(v) == nil {
			t.Errorf("validated: %s", bad)
		}
	}
}
