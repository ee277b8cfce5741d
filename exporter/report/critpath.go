package report

import (
	"fmt"
	"sort"
	"strings"

	"github.com/bpfbench/bpfbench/result"
)

// criticalPathLines are the terminal's and the page's "critical path"
// block, in the critical path's causes: the p99 gap per cause, the slowest
// gap's steps by who is to blame, the noisy neighbours, the unexplained
// time and the client's read delay.
func (d doc) criticalPathLines() []string { return CriticalPathLines(d.CriticalPath) }

// Lines are the critical path's block of the terminal and the page (see
// criticalPathLines); `attach` prints the live view's with them.
func CriticalPathLines(cp *result.CriticalPath) []string {
	if cp == nil || cp.Gaps == 0 {
		return nil
	}
	var out []string
	if b := cp.ITLP99; b != nil && b.Gaps > 0 {
		parts := causeParts(b.TotalsMs, float64(b.Gaps), 4)
		l := fmt.Sprintf("the p99 gap is %s (%d gaps at least that long): per gap %s", fmtMs(b.FromMs), b.Gaps, strings.Join(parts, ", "))
		if b.ExcessMs > 0 {
			if b.ExcessOver != "" {
				l += fmt.Sprintf("; of what it added over %s, %s %s", b.ExcessOver, fmtPct(b.ExcessShares[b.Top]), b.Top)
			} else {
				l += fmt.Sprintf("; of its excess over the baseline (%s), %s %s", cp.Baseline, fmtPct(b.ExcessShares[b.Top]), b.Top)
			}
		}
		out = append(out, l)
	}
	if c := cp.ServerCPU; c != nil {
		out = append(out, ServerCPULine(c, cp.ITLP99))
	}
	if len(cp.Slowest) > 0 {
		out = append(out, "the slowest gap is "+GapLine(cp.Slowest[0]))
	}
	if len(cp.NoisyNeighbours) > 0 {
		var parts []string
		for _, nb := range cp.NoisyNeighbours[:min(len(cp.NoisyNeighbours), 4)] {
			parts = append(parts, fmt.Sprintf("%s %s (%s of gap time, %d gaps)", nb.Label(), fmtMs(nb.Ms), fmtPct(nb.Share), nb.Gaps))
		}
		out = append(out, "noisy neighbours (held the CPU of a critical-path thread): "+strings.Join(parts, ", "))
	}
	if len(cp.SelfContention) > 0 {
		var ms, share float64
		var names []string
		for _, nb := range cp.SelfContention {
			ms += nb.Ms
			share += nb.Share
			names = append(names, nb.Process)
		}
		out = append(out, fmt.Sprintf("the server's own threads held each other's CPUs %s (%s of gap time; %s): more runnable threads than CPUs", fmtMs(ms), fmtPct(share), strings.Join(names, ", ")))
	}
	l := fmt.Sprintf("unexplained: %s of all gap time", fmtPct(cp.UnexplainedFraction))
	if c := cp.ClientReadDelay; c != nil {
		l += fmt.Sprintf("; the client read chunks %s after they arrived at p50, %s at p99, %s at most", fmtMs(c.P50Ms), fmtMs(c.P99Ms), fmtMs(c.MaxMs))
	}
	if s := cp.Stats; s.NoSend+s.NoArrival > 0 {
		l += fmt.Sprintf("; %d gaps without a send seen, %d without an arrival", s.NoSend, s.NoArrival)
	}
	return append(out, l)
}

// Line is the gap in one line: its duration, where it was, and its
// largest parts by who is to blame.
func GapLine(g result.CriticalGap) string {
	return fmt.Sprintf("%s (request %d, token %d, %s s in): %s", fmtMs(g.DurationMs), g.Request, g.Index,
		fmtNum(round2(g.StartS)), strings.Join(stepParts(g.Steps, 4), ", "))
}

// causeParts are the largest causes of totals divided by n, "12 ms cpu_runqueue".
func causeParts(totals map[string]float64, n float64, k int) []string {
	type cv struct {
		c string
		v float64
	}
	var xs []cv
	for c, v := range totals {
		if v > 0 {
			xs = append(xs, cv{c, v / n})
		}
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i].v > xs[j].v || xs[i].v == xs[j].v && xs[i].c < xs[j].c })
	var out []string
	for _, x := range xs[:min(len(xs), k)] {
		out = append(out, fmtMs(x.v)+" "+x.c)
	}
	return out
}

// stepParts sums a gap's steps by what a person blames (the thread in a
// state, the holder, the network, the client) and names the largest:
// "31 ms llmsim[17] in cuStreamSynchronize", "12 ms runnable behind
// stress-ng[4242]".
func stepParts(steps []result.CriticalStep, k int) []string {
	sums := map[string]float64{}
	var order []string
	for _, s := range steps {
		var key string
		switch {
		case s.Cause == "client":
			key = "the chunk in the client's socket"
		case s.Cause == "net_backpressure" && s.Thread == "network":
			key = "the chunk sent, not yet arrived"
		case s.Cause == "cpu_runqueue":
			key = s.Thread + " runnable behind " + s.Detail
		case s.Cause == "gpu_sync":
			key = s.Thread + " in " + s.Detail
		case s.Detail != "":
			key = s.Thread + " " + s.State + ", " + s.Detail + " (" + s.Cause + ")"
		default:
			key = strings.TrimSpace(s.Thread + " " + s.State + " (" + s.Cause + ")")
		}
		if _, ok := sums[key]; !ok {
			order = append(order, key)
		}
		sums[key] += s.DurationMs
	}
	sort.SliceStable(order, func(i, j int) bool { return sums[order[i]] > sums[order[j]] })
	var out []string
	for _, key := range order[:min(len(order), k)] {
		out = append(out, fmtMs(sums[key])+" "+key)
	}
	return out
}

// ServerCPULine is the server's CPU a token, against the baseline run's
// when there was one. Where it grew beyond the 10% two quiet runs of one
// server differ by (its lower bound over 1.1) and server_compute holds a
// tenth or more of the p99 band's excess (b), the line says that time is
// the same tokens costing more CPU, not the server waiting.
func ServerCPULine(c *result.ServerCPU, b *result.CriticalBand) string {
	l := fmt.Sprintf("the server's CPU a token: %s (±%s; the kernel's account of its %d processes over the load, %d tokens)",
		fmtMs(c.MsPerToken), fmtMs(c.ErrorMs), c.Processes, c.Tokens)
	switch {
	case c.NotCompared != "":
		l += "; not compared with the baseline's: " + c.NotCompared
	case c.Ratio > 0:
		l += fmt.Sprintf("; %.2fx the baseline's %s (%.2f-%.2fx)", c.Ratio, fmtMs(c.BaselineMsPerToken), c.RatioLow, c.RatioHigh)
		if sc := bandShare(b, "server_compute"); c.RatioLow > 1.1 && sc >= 0.1 {
			l += fmt.Sprintf(": the p99 band's server_compute (%s of its excess) is the same tokens costing more CPU "+
				"(more work a token, or a CPU that ran it slower: a shared core's caches, a sibling hyperthread, its clock), not the server waiting", fmtPct(sc))
		}
	}
	return l
}

// bandShare is cause's share of b's excess (0 without one).
func bandShare(b *result.CriticalBand, cause string) float64 {
	if b == nil || b.ExcessMs <= 0 {
		return 0
	}
	return b.ExcessShares[cause]
}
