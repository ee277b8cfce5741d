package diff

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/bpfbench/bpfbench/result"
)

// DriftPoints is the change of a cluster's share of the prompts, in
// percentage points, over which the diff warns of prompt-distribution
// drift. 20 points: at a hundred prompts a run, the standard error of the
// difference of two fractions is at most 7 points, so a shift over 20 is
// about three of them, not sampling noise.
const DriftPoints = 20.0

// entropyClusters are the load generator's clusters, low to high.
var entropyClusters = []string{"low", "mid", "high"}

// EntropyRun is one run's prompt entropy, as its result's "prompt_entropy"
// has it (loadgen --logprobs K): the first generated token's top-K
// normalised entropy per prompt, clustered at fixed thresholds.
type EntropyRun struct {
	K    int     `json:"k"`
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	// Clusters are the fractions of the N prompts per cluster.
	Clusters   map[string]float64 `json:"clusters"`
	Thresholds struct {
		LowBelow float64 `json:"low_below"`
		HighFrom float64 `json:"high_from"`
	} `json:"thresholds"`
}

// ClusterShift is one cluster's share of the prompts in both runs.
type ClusterShift struct {
	Cluster string  `json:"cluster"`
	A       float64 `json:"a"`
	B       float64 `json:"b"`
	// Points is the change in percentage points; Drift is set when it is
	// over the threshold either way.
	Points float64 `json:"points"`
	Drift  bool    `json:"drift"`
}

// EntropyShift is the prompt-distribution drift between the runs.
type EntropyShift struct {
	// A and B are the runs' prompt entropy, nil where it was not measured.
	A *EntropyRun `json:"a"`
	B *EntropyRun `json:"b"`
	// ThresholdPoints is DriftPoints.
	ThresholdPoints float64        `json:"threshold_points"`
	Clusters        []ClusterShift `json:"clusters,omitempty"`
	// NotMeasured says why there is no comparison.
	NotMeasured string `json:"not_measured,omitempty"`
}

// entropyOf reads a run's prompt_entropy; nil when it has none (a run
// without --logprobs, or one of a bpfbench that did not measure it).
func entropyOf(d *result.Document) (*EntropyRun, error) {
	pe := d.PromptEntropy
	if pe == nil {
		return nil, nil
	}
	e := &EntropyRun{K: pe.K, N: pe.N, Mean: pe.Mean, P50: pe.P50, Clusters: pe.Clusters}
	e.Thresholds.LowBelow, e.Thresholds.HighFrom = pe.Thresholds.LowBelow, pe.Thresholds.HighFrom
	return e, nil
}

// entropy compares the runs' prompt entropy, and warns of a cluster whose
// share moved by more than points.
func (d *Diff) entropy(a, b *Run, points float64) {
	s := &EntropyShift{ThresholdPoints: points}
	d.PromptEntropy = s
	var err error
	if s.A, err = entropyOf(a.Doc); err != nil {
		d.Missing = append(d.Missing, "A: "+err.Error())
	}
	if s.B, err = entropyOf(b.Doc); err != nil {
		d.Missing = append(d.Missing, "B: "+err.Error())
	}
	none := func(e *EntropyRun) bool { return e == nil || e.N == 0 }
	why := func(e *EntropyRun) string {
		if e == nil {
			return "run without --logprobs"
		}
		return fmt.Sprintf("top-%d logprobs asked for, but no response carried them", e.K)
	}
	switch {
	case none(s.A) && none(s.B):
		s.NotMeasured = "not measured in A (" + why(s.A) + ") nor in B (" + why(s.B) + ")"
		if s.A == nil && s.B == nil {
			s.NotMeasured = "not measured (neither run was made with --logprobs)"
		}
		return
	case none(s.A):
		s.NotMeasured = "not measured in A (" + why(s.A) + "): no drift report"
		return
	case none(s.B):
		s.NotMeasured = "not measured in B (" + why(s.B) + "): no drift report"
		return
	}
	if s.A.K != s.B.K {
		d.Warnings = append(d.Warnings, fmt.Sprintf("prompt entropy: A asked for the top %d logprobs, B for the top %d: the entropies see different truncations, so their clusters are not like for like", s.A.K, s.B.K))
	}
	for _, c := range entropyClusters {
		fa, fb := s.A.Clusters[c], s.B.Clusters[c]
		cs := ClusterShift{Cluster: c, A: fa, B: fb, Points: (fb - fa) * 100}
		cs.Drift = math.Abs(cs.Points) > points
		s.Clusters = append(s.Clusters, cs)
		if cs.Drift {
			d.Warnings = append(d.Warnings, fmt.Sprintf("prompt-distribution drift: %s-entropy prompts %.0f%% → %.0f%% (%+.0f points, over the %g-point threshold): the runs did not send the same kind of prompts", c, fa*100, fb*100, cs.Points, points))
		}
	}
}

// writeEntropy writes the prompt-entropy section of the text report.
func (d *Diff) writeEntropy(w io.Writer) {
	s := d.PromptEntropy
	if s == nil {
		return
	}
	if s.NotMeasured != "" {
		fmt.Fprintf(w, "\nprompt entropy: %s\n", s.NotMeasured)
		return
	}
	fmt.Fprintf(w, "\nprompt entropy, first token's top-K logprobs normalised (low < %.2f ≤ mid < %.2f ≤ high), drift over %g points:\n",
		thresholdOr(s.A.Thresholds.LowBelow, 1.0/3), thresholdOr(s.A.Thresholds.HighFrom, 2.0/3), s.ThresholdPoints)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  cluster\tA\tB\tchange\t")
	for _, c := range s.Clusters {
		mark := ""
		if c.Drift {
			mark = "DRIFT"
		}
		fmt.Fprintf(tw, "  %s\t%.1f%%\t%.1f%%\t%+.1f pt\t%s\n", c.Cluster, c.A*100, c.B*100, c.Points, mark)
	}
	fmt.Fprintf(tw, "  mean\t%.3f\t%.3f\t%+.3f\t\n", s.A.Mean, s.B.Mean, s.B.Mean-s.A.Mean)
	fmt.Fprintf(tw, "  prompts\t%d (top-%d)\t%d (top-%d)\t\t\n", s.A.N, s.A.K, s.B.N, s.B.K)
	tw.Flush()
	var drift []string
	for _, c := range s.Clusters {
		if c.Drift {
			drift = append(drift, c.Cluster)
		}
	}
	if len(drift) == 0 {
		fmt.Fprintln(w, "  no drift")
	} else {
		fmt.Fprintf(w, "  drift in %s: see the warnings above\n", strings.Join(drift, ", "))
	}
}

func thresholdOr(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}
