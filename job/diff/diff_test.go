package diff

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/internal/manifest"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/metrics"
	"github.com/bpfbench/bpfbench/result"
)

// TestMannWhitneyScipy holds the test to scipy 1.10.1's
// scipy.stats.mannwhitneyu(x, y, method="asymptotic") on the same data
// (statistic is U of x; two-sided, continuity-corrected, tie-corrected).
func TestMannWhitneyScipy(t *testing.T) {
	for _, tc := range []struct {
		x, y []float64
		u, p float64
	}{
		{[]float64{1, 2, 3, 4, 5}, []float64{6, 7, 8, 9, 10}, 0, 0.012185780355344813},
		{[]float64{1, 2, 2, 3, 3, 3, 4}, []float64{2, 3, 3, 4, 4, 5, 5, 6}, 11, 0.04988443697992588},
		{[]float64{19, 22, 16, 29, 24}, []float64{20, 11, 17, 12}, 17, 0.11134688653314041},
		{[]float64{1.5, 2.5, 2.5, 3.1, 7.0, 8.2, 9.9, 1.0}, []float64{1.0, 2.5, 4.4, 4.4, 5.0}, 21.5, 0.8826532430853806},
		{[]float64{1, 1, 1}, []float64{1, 1, 1}, 4.5, 1},
		{[]float64{3}, []float64{1, 2}, 2, 0.5402913746074199},
	} {
		r, err := MannWhitneyU(tc.x, tc.y)
		if err != nil {
			t.Fatal(err)
		}
		if r.UA != tc.u || math.Abs(r.P-tc.p) > 1e-12 {
			t.Errorf("MannWhitneyU(%v, %v) = U %g p %.17g, scipy: U %g p %.17g", tc.x, tc.y, r.UA, r.P, tc.u, tc.p)
		}
		if r.UA+r.UB != float64(len(tc.x)*len(tc.y)) {
			t.Errorf("UA + UB = %g", r.UA+r.UB)
		}
	}
	// y larger: z positive, and P(B > A) = 1.
	r, _ := MannWhitneyU([]float64{1, 2, 3, 4, 5}, []float64{6, 7, 8, 9, 10})
	if r.Z <= 0 || r.PBGreater != 1 {
		t.Errorf("z %g, P(B>A) %g", r.Z, r.PBGreater)
	}
	if _, err := MannWhitneyU(nil, []float64{1}); err == nil {
		t.Errorf("no error for an empty sample")
	}
}

// run is a synthetic run: n requests of 16 chunks, TTFT and gaps uniform
// within ±20% of their means.
type run struct {
	seed         uint64
	n            int
	ttftMs       float64
	itlMs        float64
	manifest     *manifest.Manifest
	attribution  *correlate.Summary
	dropKeys     []string
	failedEveryN int
}

// write writes dir/result.json the way run.Run (job/run) does: the load
// generator's result fields, the attribution and the manifest in a
// result.Document.
func (r run) write(t *testing.T, dir string) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(r.seed, 1))
	jit := func(mean float64) int64 { return int64(mean * (0.8 + 0.4*rng.Float64()) * 1e6) }
	recs := make([]loadgen.Record, r.n)
	start := int64(1e12)
	for i := range recs {
		rec := &recs[i]
		rec.Index, rec.StartNs, rec.Success, rec.OutputTokens, rec.PromptLen = i, start+int64(i)*1e8, true, 16, 32
		rec.ScheduledNs = rec.StartNs
		ts := rec.StartNs + jit(r.ttftMs)
		for j := 0; j < 16; j++ {
			if j > 0 {
				ts += jit(r.itlMs)
			}
			rec.ChunkNs = append(rec.ChunkNs, ts)
		}
		rec.LastNs, rec.EndNs = ts, ts+1000
		if r.failedEveryN > 0 && i%r.failedEveryN == 0 {
			rec.Success, rec.Failure, rec.Error, rec.ChunkNs, rec.LastNs = false, "http", "HTTP 500", nil, 0
		}
	}
	res := &loadgen.Result{StartNs: start, EndNs: start + int64(r.n)*1e8 + 1e9, Records: recs}
	res.Config.Metrics.Percentiles = []float64{50, 90, 99}
	res.Config.Scenario.Rate = 10
	res.Metrics = metrics.Compute(recs, res.DurationS(), metrics.Options{Percentiles: res.Config.Metrics.Percentiles})
	fields := res.JSON()
	for _, k := range r.dropKeys {
		delete(fields, k)
	}
	doc := &result.Document{Attribution: r.attribution, Manifest: r.manifest}
	if err := doc.SetLoad(fields); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "result.json")
	if err := doc.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func load(t *testing.T, p string) *Run {
	t.Helper()
	r, err := Load(p)
	if err != nil {
		t.Fatalf("Load(%s): %v", p, err)
	}
	return r
}

func metricOf(d *Diff, name string) *MetricDelta {
	for i := range d.Metrics {
		if d.Metrics[i].Name == name {
			return &d.Metrics[i]
		}
	}
	return nil
}

func baseManifest() *manifest.Manifest {
	return &manifest.Manifest{
		Schema: manifest.Schema, Pid: 100, SampledHashScheme: manifest.SampledHashScheme,
		Binary:   &manifest.File{Path: "/usr/bin/llama-server", Size: 1000, SHA256: strings.Repeat("ab", 32), Via: "exe"},
		Cmdline:  []string{"/usr/bin/llama-server", "-m", "/m/a.gguf", "-t", "8"},
		Env:      map[string]string{"OMP_NUM_THREADS": "8", "CUDA_VISIBLE_DEVICES": "0", "HF_TOKEN": manifest.SecretValue},
		Models:   []manifest.File{{Path: "/m/a.gguf", Size: 4 << 30, SampledSHA256: "1a2b" + strings.Repeat("0", 60), Via: "maps"}},
		CUDALibs: []manifest.Lib{{Name: "libcudart", Path: "/usr/lib/libcudart.so.12.1.105", Version: "12.1.105", Size: 700000, SampledSHA256: strings.Repeat("cd", 32)}},
		GPU:      &manifest.GPU{DriverVersion: "535.104.05", CUDADriverVersion: 12020, Devices: []manifest.GPUDevice{{Index: 0, UUID: "GPU-aaaa", Name: "NVIDIA H100"}}},
		Kernel:   &manifest.Kernel{Release: "6.1.0", Version: "#1 SMP Debian"},
		CPU:      &manifest.CPU{Model: "AMD EPYC 9654", Count: 192, Governors: map[string]int{"performance": 192}},
		Cgroup:   &manifest.Cgroup{Version: 2, Path: "/system.slice/llama.service", CPUMax: "max 100000", MemoryMax: "max"},
		Bpfbench: manifest.Bpfbench{Version: "v0.3.0", Revision: "0123456789ab", Args: []string{"bpfbench", "run", "--pid", "100"}},
		Dataset:  &manifest.Dataset{Name: "random", Seed: 0, Params: map[string]string{"input_len": "32"}},
	}
}

// TestSlowerRun: B's TTFT is 30% slower, its gaps the same: the diff
// names TTFT slower with p < 0.01 and finds no change in ITL or TPOT.
func TestSlowerRun(t *testing.T) {
	dir := t.TempDir()
	a := load(t, run{seed: 1, n: 200, ttftMs: 40, itlMs: 20, manifest: baseManifest()}.write(t, filepath.Join(dir, "a")))
	b := load(t, run{seed: 2, n: 200, ttftMs: 52, itlMs: 20, manifest: baseManifest()}.write(t, filepath.Join(dir, "b")))
	if a.SamplesFrom != "bpfbench.records" || len(a.Samples["ttft"]) != 200 || len(a.Samples["itl"]) != 200*15 || len(a.Samples["tpot"]) != 200 {
		t.Fatalf("samples from %s: %d ttft %d itl %d tpot", a.SamplesFrom, len(a.Samples["ttft"]), len(a.Samples["itl"]), len(a.Samples["tpot"]))
	}
	d := Compare(a, b)
	ttft := testOf(d.Tests, "ttft")
	if !ttft.Significant || ttft.Verdict != "slower" || ttft.P >= 0.01 || ttft.PBGreater < 0.8 {
		t.Errorf("ttft test = %+v, want slower with p < 0.01", ttft)
	}
	for _, m := range []string{"itl", "tpot"} {
		if tt := testOf(d.Tests, m); tt.Significant {
			t.Errorf("%s test = %+v, want no significant change", m, tt)
		}
	}
	p50 := metricOf(d, "median_ttft_ms")
	if p50 == nil || !p50.Worse || p50.Percent == nil || *p50.Percent < 20 || *p50.Percent > 40 {
		t.Errorf("median_ttft_ms = %+v", p50)
	}
	if p := metricOf(d, "p99_e2el_ms"); p == nil || p.A == 0 {
		t.Errorf("p99_e2el_ms = %+v", p)
	}
	if m := metricOf(d, "request_throughput"); m == nil || m.Unit != "req/s" {
		t.Errorf("request_throughput = %+v", m)
	}
	if len(d.Manifest) != 0 || len(d.Warnings) != 0 || len(d.Missing) != 2 { // both: no attribution
		t.Errorf("manifest %v warnings %v missing %v", d.Manifest, d.Warnings, d.Missing)
	}
	var buf bytes.Buffer
	if err := d.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"TTFT p50 (ms)", "B SLOWER", "no significant change", "manifest:\n  no differences"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	t.Logf("\n%s", out)
}

// TestSameRuns: a run against itself, and against a run of the same
// distribution with another seed: nothing significant.
func TestSameRuns(t *testing.T) {
	dir := t.TempDir()
	pa := run{seed: 1, n: 200, ttftMs: 40, itlMs: 20, manifest: baseManifest()}.write(t, filepath.Join(dir, "a"))
	a := load(t, pa)
	d := Compare(a, load(t, pa))
	for _, tt := range d.Tests {
		if tt.Significant || tt.P != 1 {
			t.Errorf("identical runs: %+v", tt)
		}
	}
	for _, m := range d.Metrics {
		if m.Delta != 0 {
			t.Errorf("identical runs: %+v", m)
		}
	}
	b := load(t, run{seed: 3, n: 200, ttftMs: 40, itlMs: 20, manifest: baseManifest()}.write(t, filepath.Join(dir, "b")))
	for _, tt := range Compare(a, b).Tests {
		if tt.Significant {
			t.Errorf("same distribution: %+v", tt)
		}
	}
}

// TestManifestChanges: every kind of manifest difference is listed, and
// the different bpfbench versions are a warning.
func TestManifestChanges(t *testing.T) {
	ma, mb := baseManifest(), baseManifest()
	mb.Kernel.Release = "6.8.0"
	delete(mb.Env, "OMP_NUM_THREADS")
	delete(mb.Env, "HF_TOKEN")
	mb.Env["CUDA_VISIBLE_DEVICES"] = "1"
	mb.Models[0].SampledSHA256 = "3c4d" + strings.Repeat("0", 60)
	mb.Bpfbench.Version = "v0.4.0"
	mb.CUDALibs[0].Version, mb.CUDALibs[0].Path = "12.4.127", "/usr/lib/libcudart.so.12.4.127"
	mb.GPU.DriverVersion = "550.54.14"
	mb.GPU.Devices[0].UUID = "GPU-bbbb"
	mb.CPU.Governors = map[string]int{"powersave": 192}
	mb.Cgroup.CPUMax, mb.Cgroup.CPULimit = "800000 100000", 8
	mb.Dataset.Seed = 7
	mb.Binary.SHA256 = strings.Repeat("ef", 32)
	mb.Cmdline[4] = "16"

	dir := t.TempDir()
	a := load(t, run{seed: 1, n: 50, ttftMs: 40, itlMs: 20, manifest: ma}.write(t, filepath.Join(dir, "a")))
	b := load(t, run{seed: 2, n: 50, ttftMs: 40, itlMs: 20, manifest: mb}.write(t, filepath.Join(dir, "b")))
	d := Compare(a, b)
	var texts []string
	for _, c := range d.Manifest {
		texts = append(texts, c.Text)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{
		"kernel 6.1.0 → 6.8.0",
		`OMP_NUM_THREADS "8" → unset`,
		"HF_TOKEN set → unset",
		`CUDA_VISIBLE_DEVICES "0" → "1"`,
		"model file changed: /m/a.gguf sampled_sha256 1a2b00000000… → 3c4d00000000…",
		"bpfbench v0.3.0 → v0.4.0",
		"libcudart 12.1.105 → 12.4.127",
		"GPU driver 535.104.05 → 550.54.14",
		"GPU 0 UUID GPU-aaaa → GPU-bbbb",
		"CPU governor performance → powersave",
		"cgroup CPU limit max 100000 → 800000 100000 (8 CPUs)",
		"seed 0 → 7",
		"server binary changed: /usr/bin/llama-server sha256 abababababab… → efefefefefef…",
		"command line: -t 8 → -t 16",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("manifest differences lack %q:\n%s", want, all)
		}
	}
	if len(texts) != 14 {
		t.Errorf("%d differences, want 14:\n%s", len(texts), all)
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "different bpfbench versions (v0.3.0 and v0.4.0)") {
		t.Errorf("warnings %v", d.Warnings)
	}
	// Command lines of different lengths are shown whole.
	mb = baseManifest()
	mb.Cmdline = append(mb.Cmdline, "--flash-attn")
	if c := CompareManifests(ma, mb); len(c) != 1 || c[0].Text != "command line /usr/bin/llama-server -m /m/a.gguf -t 8 → /usr/bin/llama-server -m /m/a.gguf -t 8 --flash-attn" {
		t.Errorf("longer command line: %+v", c)
	}
	// An environment with no listed key set is not an unreadable one.
	mb = baseManifest()
	mb.Env = map[string]string{}
	if c := CompareManifests(ma, mb); len(c) != 3 || !strings.Contains(c[2].Text, "OMP_NUM_THREADS \"8\" → unset") {
		t.Errorf("empty environment: %+v", c)
	}
	// A model swapped for another path.
	mb = baseManifest()
	mb.Models[0].Path = "/m/b.gguf"
	if c := CompareManifests(ma, mb); len(c) != 1 || !strings.HasPrefix(c[0].Text, "model file /m/a.gguf → /m/b.gguf (same content") {
		t.Errorf("swapped model: %+v", c)
	}
	// Another schema: warned.
	mb.Schema = 2
	b = load(t, run{seed: 2, n: 50, ttftMs: 40, itlMs: 20, manifest: mb}.write(t, filepath.Join(dir, "b2")))
	if d := Compare(a, b); len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "different schemas") {
		t.Errorf("warnings %v", d.Warnings)
	}
}

// TestAttribution: the share of each cause in both runs and its change.
func TestAttribution(t *testing.T) {
	sa := &correlate.Summary{Model: correlate.ModelCriticalPath, TopCause: "server_compute",
		TTFT: correlate.Breakdown{"cpu_runqueue": 0.1, "server_compute": 0.9},
		ITL: map[string]correlate.Breakdown{
			"all": {"cpu_runqueue": 0.2, "io_block": 0.1, "server_compute": 0.7},
			"p99": {"cpu_runqueue": 0.3, "server_compute": 0.7},
		}}
	sb := &correlate.Summary{Model: correlate.ModelCriticalPath, TopCause: "cpu_runqueue",
		TTFT: correlate.Breakdown{"cpu_runqueue": 0.6, "server_compute": 0.4},
		ITL: map[string]correlate.Breakdown{
			"all": {"cpu_runqueue": 0.7, "io_block": 0.1, "server_compute": 0.2},
		}}
	dir := t.TempDir()
	a := load(t, run{seed: 1, n: 20, ttftMs: 40, itlMs: 20, attribution: sa}.write(t, filepath.Join(dir, "a")))
	b := load(t, run{seed: 2, n: 20, ttftMs: 40, itlMs: 20, attribution: sb}.write(t, filepath.Join(dir, "b")))
	d := Compare(a, b)
	if d.TopCause != [2]string{"server_compute", "cpu_runqueue"} {
		t.Errorf("top cause %v", d.TopCause)
	}
	found := false
	for _, c := range d.Attribution {
		if c.Scope == "itl_all" && c.Cause == "cpu_runqueue" {
			found = true
			if math.Abs(c.Points-50) > 1e-9 {
				t.Errorf("itl_all cpu_runqueue %+v", c)
			}
		}
		if c.Scope == "itl_p99" {
			t.Errorf("itl_p99 compared though B has none: %+v", c)
		}
	}
	if !found || len(d.Attribution) != 2+3 {
		t.Errorf("attribution %+v", d.Attribution)
	}
	if !strings.Contains(strings.Join(d.Missing, "\n"), "B: attribution itl_p99") {
		t.Errorf("missing %v", d.Missing)
	}
	var buf bytes.Buffer
	_ = d.WriteText(&buf)
	if !strings.Contains(buf.String(), "top cause server_compute → cpu_runqueue") || !strings.Contains(buf.String(), "+50.0 pt") {
		t.Errorf("text:\n%s", buf.String())
	}
	// A run of a bpfbench whose attribution was overlapping activity (no
	// model): not compared with the critical path's, and said so.
	old := *sb
	old.Model = ""
	c := load(t, run{seed: 3, n: 20, ttftMs: 40, itlMs: 20, attribution: &old}.write(t, filepath.Join(dir, "c")))
	if d := Compare(a, c); len(d.Attribution) != 0 || !strings.Contains(strings.Join(d.Missing, "\n"), "overlapping activity") {
		t.Errorf("a legacy run compared: %+v, missing %v", d.Attribution, d.Missing)
	}
}

// TestVLLMListsOnly: without bpfbench.records the figures come from
// ttfts and itls, failed requests left out, the same TTFTs as the records.
func TestVLLMListsOnly(t *testing.T) {
	dir := t.TempDir()
	r := run{seed: 1, n: 60, ttftMs: 40, itlMs: 20, failedEveryN: 10}
	full := load(t, r.write(t, filepath.Join(dir, "a")))
	r.dropKeys = []string{"bpfbench"}
	lists := load(t, r.write(t, filepath.Join(dir, "b")))
	if lists.SamplesFrom != "ttfts/itls" || len(lists.Samples["ttft"]) != 54 {
		t.Fatalf("from %s: %d TTFTs", lists.SamplesFrom, len(lists.Samples["ttft"]))
	}
	for _, m := range Metrics {
		x, y := full.Samples[m], lists.Samples[m]
		if len(x) != len(y) {
			t.Fatalf("%s: %d and %d figures", m, len(x), len(y))
		}
		for i := range x {
			if math.Abs(x[i]-y[i]) > 1e-6 {
				t.Fatalf("%s[%d]: %g from records, %g from the lists", m, i, x[i], y[i])
			}
		}
	}
}

// TestBadInputs: each bad input is a clear error or a list of what is
// missing, never a panic.
func TestBadInputs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	good := run{seed: 1, n: 30, ttftMs: 40, itlMs: 20, manifest: baseManifest()}.write(t, filepath.Join(dir, "good"))
	gb, _ := os.ReadFile(good)
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "nope"), "no such file or directory"},
		{filepath.Join(dir, "empty"), "is not a run directory: it has no result.json"},
		{write("cut.json", string(gb[:len(gb)/2])), "is not valid JSON (line"},
		{write("garbage.json", "{\"completed\": 3,,}"), "is not valid JSON (line 1, column"},
		{write("array.json", "[1, 2]"), "JSON but not an object"},
		{write("blank.json", "  \n"), "is empty"},
		{write("other.json", `{"name": "not a run"}`), "is not a bpfbench result: it has none of"},
		{write("typed.json", `{"completed": 3, "attribution": "everything"}`), "is not a bpfbench result: json: cannot unmarshal"},
		{write("list.json", `{"completed": 3, "ttfts": "lost"}`), "is not a bpfbench result: json: cannot unmarshal string into Go struct field plain.Loadgen.ttfts"},
	} {
		r, err := Load(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%s) = %v, %v; want an error with %q", filepath.Base(tc.path), r, err, tc.want)
		}
	}
	// Missing fields: a summary without per-request figures, attribution
	// or manifest.
	sparse := load(t, write("sparse.json", `{"completed": 10, "median_ttft_ms": 50, "mean_ttft_ms": 55, "request_throughput": 2.5}`))
	full := load(t, good)
	d := Compare(full, sparse)
	missing := strings.Join(d.Missing, "\n")
	for _, want := range []string{
		"B: manifest (written by a bpfbench that recorded none)",
		"B: attribution",
		"B: per-request figures (no bpfbench.records, and no ttfts)",
		"B: p99_ttft_ms",
		"B: output_throughput",
	} {
		if !strings.Contains(missing, want) {
			t.Errorf("missing lacks %q:\n%s", want, missing)
		}
	}
	if m := metricOf(d, "median_ttft_ms"); m == nil || m.B != 50 {
		t.Errorf("median_ttft_ms = %+v", m)
	}
	if tt := testOf(d.Tests, "ttft"); tt.Skipped == "" || tt.Significant {
		t.Errorf("ttft test = %+v, want skipped", tt)
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "no manifest") {
		t.Errorf("warnings %v", d.Warnings)
	}
	var buf bytes.Buffer
	if err := d.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "not compared: a run has no manifest") || !strings.Contains(buf.String(), "not tested: A has 30 figures, B 0") {
		t.Errorf("text:\n%s", buf.String())
	}
	buf.Reset()
	if err := d.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || back["a"] == nil || back["tests"] == nil {
		t.Errorf("JSON: %v\n%s", err, buf.String())
	}
	// A manifest of the wrong shape is an error naming it (result.json's
	// sections are typed).
	if r, err := Load(write("badmanifest.json", `{"completed": 1, "manifest": {"schema": "one"}}`)); err == nil || !strings.Contains(err.Error(), "manifest") {
		t.Errorf("bad manifest: %v, %v", r, err)
	}
	// A result.json path works as well as its directory.
	if r, err := Load(filepath.Dir(good)); err != nil || r.Path != good {
		t.Errorf("Load(dir) = %v, %v", r, err)
	}
}
