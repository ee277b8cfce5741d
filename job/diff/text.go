package diff

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

var metricLabel = map[string]string{
	"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL",
	"request_throughput": "requests", "output_throughput": "output tokens",
}

// WriteText writes the diff for a terminal: the runs, the warnings, the
// metrics with their deltas, the tests (what got slower, and whether that
// is significant), the attribution per cause, the prompt-entropy drift, the
// manifest differences and what was missing.
func (d *Diff) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "bpfbench diff\n  A  %s%s\n  B  %s%s\n", d.A.Path, versionNote(d.A), d.B.Path, versionNote(d.B))
	for _, s := range d.Warnings {
		fmt.Fprintf(bw, "warning: %s\n", s)
	}
	d.writeMetrics(bw)
	d.writeTests(bw)
	d.writeAttribution(bw)
	d.writeEntropy(bw)
	d.writeManifest(bw)
	if len(d.Missing) > 0 {
		fmt.Fprintln(bw, "\nmissing (compared what both have):")
		for _, m := range d.Missing {
			fmt.Fprintf(bw, "  %s\n", m)
		}
	}
	return bw.Flush()
}

// writeMetrics writes the table of metrics: A, B, the delta, its percent
// and whether B is worse.
func (d *Diff) writeMetrics(w io.Writer) {
	if len(d.Metrics) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-24s\tA\tB\tdelta\t\t\t\n", "metric")
	for _, m := range d.Metrics {
		label := metricLabel[m.Metric]
		if m.Stat != "" {
			label += " " + m.Stat
		}
		label += " (" + m.Unit + ")"
		pct := ""
		if m.Percent != nil {
			pct = fmt.Sprintf("%+.1f%%", *m.Percent)
		}
		mark := ""
		if m.Worse && m.Percent != nil && math.Abs(*m.Percent) >= 0.05 {
			mark = "worse"
		}
		fmt.Fprintf(tw, "%-24s\t%s\t%s\t%s\t%s\t%s\t\n", label, num(m.A), num(m.B), signed(m.Delta), pct, mark)
	}
	tw.Flush()
}

// writeTests writes the per-request tests: each one's samples, the
// chance that B is greater, its p-value and verdict.
func (d *Diff) writeTests(w io.Writer) {
	fmt.Fprintf(w, "\nper-request figures, Mann-Whitney U (two-sided), significant at p < %g:\n", Alpha)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, t := range d.Tests {
		if t.Skipped != "" {
			fmt.Fprintf(tw, "  %s\t%s\t\t\t\n", metricLabel[t.Metric], t.Skipped)
			continue
		}
		verdict := "no significant change"
		if t.Significant {
			verdict = "B " + strings.ToUpper(t.Verdict)
		}
		fmt.Fprintf(tw, "  %s\tn %d / %d %ss\tP(B > A) %.2f\tp %s\t%s\n", metricLabel[t.Metric], t.NA, t.NB, t.Unit, t.PBGreater, pValue(t.P), verdict)
	}
	tw.Flush()
	if t := testOf(d.Tests, "itl"); t.Skipped == "" && t.NA > 0 {
		fmt.Fprintln(w, "  (ITL's gaps of one request are not independent, so its p-value is optimistic; TPOT is the per-request test of the same speed)")
	}
}

// writeAttribution writes each cause's share of the excess latency in A
// and B, and the top cause when it changed.
func (d *Diff) writeAttribution(w io.Writer) {
	if len(d.Attribution) == 0 {
		return
	}
	fmt.Fprintln(w, "\nattribution, share of the excess latency per cause:")
	if d.TopCause[0] != d.TopCause[1] {
		fmt.Fprintf(w, "  top cause %s → %s\n", d.TopCause[0], d.TopCause[1])
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  scope\tcause\tA\tB\tchange\t")
	for _, c := range d.Attribution {
		fmt.Fprintf(tw, "  %s\t%s\t%.1f%%\t%.1f%%\t%+.1f pt\t\n", c.Scope, c.Cause, c.A*100, c.B*100, c.Points)
	}
	tw.Flush()
}

// writeManifest writes how the two runs' manifests differ.
func (d *Diff) writeManifest(w io.Writer) {
	fmt.Fprintln(w, "\nmanifest:")
	switch {
	case len(d.Manifest) > 0:
		for _, c := range d.Manifest {
			fmt.Fprintf(w, "  %s\n", c.Text)
		}
	case d.A.Version == "" || d.B.Version == "":
		fmt.Fprintln(w, "  not compared: a run has no manifest")
	default:
		fmt.Fprintln(w, "  no differences")
	}
}

func versionNote(r RunInfo) string {
	s := fmt.Sprintf("  (%d requests", r.Requests)
	if r.Version != "" {
		s += ", bpfbench " + r.Version
	}
	return s + ")"
}

func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func signed(v float64) string {
	s := num(v)
	if v >= 0 {
		s = "+" + s
	}
	return s
}

func pValue(p float64) string {
	if p < 1e-6 {
		return "< 1e-6"
	}
	return fmt.Sprintf("%.2g", p)
}

func testOf(tests []Test, metric string) Test {
	for _, t := range tests {
		if t.Metric == metric {
			return t
		}
	}
	return Test{}
}
