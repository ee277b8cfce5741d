package diff

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/correlate/critpath"
)

// Alpha is the significance level: a metric changed when the test's
// p-value is below it. It is strict because one diff tests four metrics.
const Alpha = 0.01

// Diff is the comparison of run B against run A.
type Diff struct {
	A, B RunInfo `json:"-"`
	// Warnings are what makes the comparison less than like for like
	// (different bpfbench versions or manifest schemas).
	Warnings []string `json:"warnings,omitempty"`
	// Missing lists what one run lacked ("A: attribution ...").
	Missing []string      `json:"missing,omitempty"`
	Metrics []MetricDelta `json:"metrics"`
	// Tests are the significance tests, one per metric (Metrics).
	Tests       []Test       `json:"tests"`
	Attribution []CauseDelta `json:"attribution,omitempty"`
	// TopCause is the attribution's top cause in A and in B.
	TopCause [2]string `json:"top_cause,omitzero"`
	// Manifest lists every manifest difference, for humans.
	Manifest []Change `json:"manifest"`
	// PromptEntropy is the prompt-distribution drift (runs made with
	// --logprobs), or why there is none.
	PromptEntropy *EntropyShift `json:"prompt_entropy"`
}

// RunInfo names one of the two runs.
type RunInfo struct {
	Path        string `json:"path"`
	Version     string `json:"bpfbench_version,omitempty"`
	Requests    int    `json:"requests"`
	SamplesFrom string `json:"samples_from,omitempty"`
}

// MetricDelta is one figure of both runs.
type MetricDelta struct {
	// Name is the vLLM field ("p99_ttft_ms", "request_throughput").
	Name string `json:"name"`
	// Metric and Stat split it ("ttft", "p99"); Stat is "" for a throughput.
	Metric string  `json:"metric"`
	Stat   string  `json:"stat,omitempty"`
	Unit   string  `json:"unit"`
	A      float64 `json:"a"`
	B      float64 `json:"b"`
	Delta  float64 `json:"delta"`
	// Percent is the delta relative to A, absent when A is 0.
	Percent *float64 `json:"percent,omitempty"`
	// Worse is set when B is worse than A: a higher latency, a lower
	// throughput.
	Worse bool `json:"worse"`
}

// Test is the Mann-Whitney U test of one metric's per-request figures.
type Test struct {
	Metric string `json:"metric"`
	// Unit is what one figure is: "request", or "gap" for ITL (gaps of one
	// request are not independent, so its p-value is optimistic).
	Unit string `json:"unit"`
	NA   int    `json:"n_a"`
	NB   int    `json:"n_b"`
	MannWhitney
	Significant bool `json:"significant"`
	// Verdict is "slower", "faster" or "no significant change" (of B).
	Verdict string `json:"verdict"`
	// Skipped says why there is no test (a run without figures).
	Skipped string `json:"skipped,omitempty"`
}

// CauseDelta is one cause's share of the excess latency in both runs.
type CauseDelta struct {
	// Scope is "ttft", "itl_all" or "itl_p99".
	Scope string  `json:"scope"`
	Cause string  `json:"cause"`
	A     float64 `json:"a"`
	B     float64 `json:"b"`
	// Points is the change in percentage points.
	Points float64 `json:"points"`
}

// MarshalJSON writes the diff with the runs named "a" and "b".
func (d *Diff) MarshalJSON() ([]byte, error) {
	type plain Diff
	return json.Marshal(struct {
		A RunInfo `json:"a"`
		B RunInfo `json:"b"`
		*plain
		Alpha float64 `json:"alpha"`
		Test  string  `json:"test"`
	}{d.A, d.B, (*plain)(d), Alpha, "Mann-Whitney U, two-sided, normal approximation with tie and continuity corrections"})
}

// WriteJSON writes the diff as one indented JSON object.
func (d *Diff) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}

var (
	stats = []struct{ stat, prefix string }{{"p50", "median"}, {"p99", "p99"}, {"mean", "mean"}}
	units = map[string]string{"request_throughput": "req/s", "output_throughput": "tok/s", "total_token_throughput": "tok/s"}
)

// Compare compares run b against run a.
func Compare(a, b *Run) *Diff {
	d := &Diff{A: info(a), B: info(b), Manifest: []Change{}}
	for _, m := range a.Missing {
		d.Missing = append(d.Missing, "A: "+m)
	}
	for _, m := range b.Missing {
		d.Missing = append(d.Missing, "B: "+m)
	}
	switch va, vb := a.Version(), b.Version(); {
	case va != "" && vb != "" && va != vb:
		d.Warnings = append(d.Warnings, fmt.Sprintf("the runs are from different bpfbench versions (%s and %s): compared on what both record", va, vb))
	case (va == "") != (vb == ""):
		d.Warnings = append(d.Warnings, "one run has no manifest, so its bpfbench version is unknown: compared on what both record")
	}
	if a.Manifest != nil && b.Manifest != nil && a.Manifest.Schema != b.Manifest.Schema {
		d.Warnings = append(d.Warnings, fmt.Sprintf("the manifests have different schemas (%d and %d): fields one lacks are listed as not recorded", a.Manifest.Schema, b.Manifest.Schema))
	}
	for _, m := range Metrics {
		sa, sb := sortedCopy(a.Samples[m]), sortedCopy(b.Samples[m])
		for _, st := range stats {
			name := st.prefix + "_" + m + "_ms"
			va, oka := figure(a, name, sa, st.stat)
			vb, okb := figure(b, name, sb, st.stat)
			if oka && okb {
				d.Metrics = append(d.Metrics, delta(name, m, st.stat, "ms", va, vb, vb > va))
			} else {
				d.missingBoth(name, oka, okb)
			}
		}
	}
	for _, name := range []string{"request_throughput", "output_throughput"} {
		va, oka := loadFloat(a.Doc, name)
		vb, okb := loadFloat(b.Doc, name)
		if oka && okb {
			d.Metrics = append(d.Metrics, delta(name, name, "", units[name], va, vb, vb < va))
		} else {
			d.missingBoth(name, oka, okb)
		}
	}
	for _, m := range Metrics {
		d.Tests = append(d.Tests, test(m, a.Samples[m], b.Samples[m]))
	}
	d.attribution(a, b)
	d.entropy(a, b, DriftPoints)
	d.Manifest = append(d.Manifest, CompareManifests(a.Manifest, b.Manifest)...)
	return d
}

func info(r *Run) RunInfo {
	return RunInfo{Path: r.Path, Version: r.Version(), Requests: len(r.Samples["ttft"]), SamplesFrom: r.SamplesFrom}
}

func (d *Diff) missingBoth(name string, oka, okb bool) {
	switch {
	case !oka && !okb:
		d.Missing = append(d.Missing, "A and B: "+name)
	case !oka:
		d.Missing = append(d.Missing, "A: "+name)
	default:
		d.Missing = append(d.Missing, "B: "+name)
	}
}

// figure is a run's value of a vLLM field, or else the same statistic of
// its per-request figures.
func figure(r *Run, name string, sorted []float64, stat string) (float64, bool) {
	if v, ok := loadFloat(r.Doc, name); ok {
		return v, true
	}
	if len(sorted) == 0 {
		return 0, false
	}
	switch stat {
	case "p50":
		return quantile(sorted, 0.5), true
	case "p99":
		return quantile(sorted, 0.99), true
	}
	return mean(sorted), true
}

func delta(name, metric, stat, unit string, a, b float64, worse bool) MetricDelta {
	md := MetricDelta{Name: name, Metric: metric, Stat: stat, Unit: unit, A: a, B: b, Delta: b - a, Worse: worse}
	if a != 0 {
		p := (b - a) / math.Abs(a) * 100
		md.Percent = &p
	}
	return md
}

func test(metric string, a, b []float64) Test {
	t := Test{Metric: metric, Unit: "request", NA: len(a), NB: len(b), Verdict: "no significant change"}
	if metric == "itl" {
		t.Unit = "gap"
	}
	mw, err := MannWhitneyU(a, b)
	if err != nil {
		t.Skipped = fmt.Sprintf("not tested: A has %d figures, B %d", len(a), len(b))
		t.Verdict = "not tested"
		return t
	}
	t.MannWhitney = mw
	if mw.P < Alpha {
		t.Significant = true
		t.Verdict = "faster"
		if mw.Z > 0 {
			t.Verdict = "slower"
		}
	}
	return t
}

// causeOrder is the critical path's causes (the attribution's) in their
// usual order; others follow sorted.
var causeOrder = critpath.CauseNames()

func (d *Diff) attribution(a, b *Run) {
	sa, sb := a.Doc.Attribution, b.Doc.Attribution
	if sa == nil || sb == nil {
		return
	}
	d.TopCause = [2]string{sa.TopCause, sb.TopCause}
	scopes := []struct {
		name   string
		ba, bb correlate.Breakdown
	}{{"ttft", sa.TTFT, sb.TTFT}, {"itl_all", sa.ITL["all"], sb.ITL["all"]}, {"itl_p99", sa.ITL["p99"], sb.ITL["p99"]}}
	for _, s := range scopes {
		if s.ba == nil || s.bb == nil {
			if (s.ba == nil) != (s.bb == nil) {
				which := "A"
				if s.bb == nil {
					which = "B"
				}
				d.Missing = append(d.Missing, fmt.Sprintf("%s: attribution %s", which, s.name))
			}
			continue
		}
		for _, c := range causes(s.ba, s.bb) {
			d.Attribution = append(d.Attribution, CauseDelta{Scope: s.name, Cause: c, A: s.ba[c], B: s.bb[c], Points: (s.bb[c] - s.ba[c]) * 100})
		}
	}
}

func causes(bs ...correlate.Breakdown) []string {
	var extra []string
	seen := map[string]bool{}
	for _, c := range causeOrder {
		seen[c] = true
	}
	present := map[string]bool{}
	for _, b := range bs {
		for c := range b {
			present[c] = true
			if !seen[c] {
				seen[c] = true
				extra = append(extra, c)
			}
		}
	}
	sort.Strings(extra)
	var out []string
	for _, c := range causeOrder {
		if present[c] {
			out = append(out, c)
		}
	}
	return slices.Concat(out, extra)
}
