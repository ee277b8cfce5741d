package report

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/result"
)

// shortCause names the causes in the terminal table's header.
var shortCause = map[string]string{
	"cpu_runqueue": "cpu_runq", "io_block": "io_block", "gpu_sync": "gpu_sync",
	"net_backpressure": "net_bp", "server_compute": "compute", "server_sleep": "sleep", "server_stopped": "stopped",
	"client": "client", "unexplained": "unexpl",
}

// WriteTerminal writes the run's summary for a terminal: the load figures,
// the attribution per band as percentages, the phases, how complete the
// collection was, and the diagnosis (d.Diagnosis, or Diagnose(d.Document) when
// empty).
func WriteTerminal(w io.Writer, rd *result.Document) error {
	bw := bufio.NewWriter(w)
	if rd == nil {
		rd = &result.Document{}
	}
	d := doc{rd}
	writeTerminalLoad(bw, d)
	if a := d.Attribution; a != nil {
		writeTerminalAttribution(bw, a)
	}
	if len(d.Phases) > 0 {
		writeTerminalPhases(bw, d)
	}
	writeTerminalList(bw, "Gateway", d.gatewayLines())
	writeTerminalList(bw, "Critical path", d.criticalPathLines())
	if lines := d.serverMetricsLines(); len(lines) > 0 {
		fmt.Fprintln(bw)
		for _, l := range lines {
			fmt.Fprintln(bw, l)
		}
	}
	for _, l := range d.agentLines() {
		fmt.Fprintln(bw, l)
	}
	fmt.Fprintln(bw)
	writeTerminalCollection(bw, d)

	diag := d.Diagnosis
	if len(diag) == 0 {
		diag = Diagnose(d.Document)
	}
	writeTerminalList(bw, "Diagnosis", diag)
	return bw.Flush()
}

// writeTerminalLoad writes the title and the load's figures.
func writeTerminalLoad(bw *bufio.Writer, d doc) {
	title := "bpfbench run"
	if t := d.detail().Target; t != "" {
		title += ": " + t
	}
	if m := d.ModelID; m != "" {
		title += " · model " + m
	}
	if dt := d.runDate(); dt != "" {
		title += " · " + dt
	}
	fmt.Fprintln(bw, title)
	fmt.Fprintln(bw, strings.Repeat("=", min(len([]rune(title)), 78)))

	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	completed, failed := d.Float("completed"), d.Float("failed")
	fmt.Fprintf(tw, "Requests\t%s completed, %s failed in %s s\t(%s req/s)\n",
		fmtNum(completed), fmtNum(failed), fmtNum(d.Float("duration")), fmtNum(d.Float("request_throughput")))
	fmt.Fprintf(tw, "Tokens\t%s output tok/s, %s total tok/s\t\n", fmtNum(d.Float("output_throughput")), fmtNum(d.Float("total_token_throughput")))
	if completed > 0 {
		base := ""
		if d.Attribution != nil && d.Attribution.BaselineTTFTMs > 0 {
			base = "(baseline " + fmtMs(d.Attribution.BaselineTTFTMs) + ")"
		}
		fmt.Fprintf(tw, "TTFT\tp50 %s   p99 %s\t%s\n", fmtMs(d.Float("median_ttft_ms")), fmtMs(d.Float("p99_ttft_ms")), base)
		base = ""
		if d.Attribution != nil && d.Attribution.BaselineITLMs > 0 {
			base = "(baseline " + fmtMs(d.Attribution.BaselineITLMs) + ")"
		}
		fmt.Fprintf(tw, "ITL\tp50 %s   p99 %s\t%s\n", fmtMs(d.Float("median_itl_ms")), fmtMs(d.Float("p99_itl_ms")), base)
	}
	tw.Flush()
}

// writeTerminalAttribution writes the attribution's table: a row per band,
// a column per cause present.
func writeTerminalAttribution(bw *bufio.Writer, a *correlate.Summary) {
	keys := bandKeys(a)
	var all []correlate.Breakdown
	all = append(all, a.TTFT)
	for _, k := range keys {
		all = append(all, bandShares(a, k))
	}
	causes := presentCauses(causeOrder(all...), all...)
	fmt.Fprintln(bw)
	if a.Model == correlate.ModelCriticalPath {
		fmt.Fprintf(bw, "Attribution on the critical path (each band's excess over the normal gap, %s, split over what delayed its gaps)\n", fmtMs(a.BaselineITLMs))
	} else {
		fmt.Fprintln(bw, "Attribution (share of the excess over the baseline)")
	}
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "band\t")
	for _, c := range causes {
		n := shortCause[c]
		if n == "" {
			n = c
		}
		fmt.Fprint(tw, n+"\t")
	}
	fmt.Fprint(tw, "gaps\texcess\t\n")
	row := func(label string, b correlate.Breakdown, n string, excess string) {
		fmt.Fprint(tw, label+"\t")
		tot := sharesSum(b)
		for _, c := range causes {
			if tot <= 0 {
				fmt.Fprint(tw, "–\t")
				continue
			}
			fmt.Fprint(tw, fmtPct(finite(b[c])/tot)+"\t")
		}
		fmt.Fprint(tw, n+"\t"+excess+"\t\n")
	}
	row("TTFT", a.TTFT, "", "")
	for i, k := range keys {
		band, ok := a.ITLBands[k]
		n, ex := "", ""
		if ok {
			n, ex = fmtNum(float64(band.Intervals)), fmtMs(band.ExcessMs)
		}
		label := k
		if k != "all" {
			label = bandLabel(keys, i)
			label = strings.TrimSuffix(label, " gaps")
		}
		row(label, bandShares(a, k), n, ex)
	}
	tw.Flush()
}

// writeTerminalPhases writes the phases' table and what each injected.
func writeTerminalPhases(bw *bufio.Writer, d doc) {
	fmt.Fprintln(bw)
	fmt.Fprintln(bw, "Phases (on the critical path: the cause that added most to the phase's slowest 10% of gaps over the first phase's)")
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "phase\tseconds\trequests\tITL p50\tITL p99\tTTFT p99\ttop cause\tshare\tadded per tail gap\n")
	var cps []result.CriticalPhase
	if d.CriticalPath != nil {
		cps = d.CriticalPath.Phases
	}
	for i, p := range d.Phases {
		top, share, added := "–", "–", "–"
		if p.TopCause != "" {
			top, share = p.TopCause, fmtPct(finite(p.TopShare))
		}
		if i > 0 && i < len(cps) && cps[i].Name == p.Name {
			added = "+" + fmtMs(cps[i].TailAddedMs)
		}
		if p.Weak {
			top, share = "injection too weak", "–"
		}
		fmt.Fprintf(tw, "%s\t%s–%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, fmtNum(p.StartS), fmtNum(p.EndS), p.Requests,
			fmtMs(p.P50ITLMs), fmtMs(p.P99ITLMs), fmtMs(p.P99TTFTMs), top, share, added)
	}
	tw.Flush()
	for _, p := range d.Phases {
		if p.Injection == "" {
			continue
		}
		l := "  - " + p.Name + ": " + p.Injection
		if p.Verdict != "" {
			l += "; " + p.Verdict
		}
		fmt.Fprintln(bw, l)
	}
}

// writeTerminalList writes a titled list of lines, nothing when there are
// none.
func writeTerminalList(bw *bufio.Writer, title string, lines []string) {
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(bw)
	fmt.Fprintln(bw, title)
	for _, l := range lines {
		fmt.Fprintln(bw, "  - "+l)
	}
}

// writeTerminalCollection writes how complete the collection was: its
// target and span, what it lost, what was unavailable, its overhead and
// correlation.
func writeTerminalCollection(bw *bufio.Writer, d doc) {
	c := d.Collection
	if c == nil {
		fmt.Fprintln(bw, "Collection: none (load only)")
		return
	}
	who := fmt.Sprintf("pid %d", c.Pid)
	if c.Comm != "" {
		who += " (" + c.Comm + ")"
	}
	span := ""
	if c.StoppedOffsetS > c.StartedOffsetS {
		// collection starts a moment before the load: a start
		// offset of a few negative milliseconds reads as 0
		span = fmt.Sprintf(", %s–%s s", fmtNum(round2(c.StartedOffsetS)), fmtNum(round2(c.StoppedOffsetS)))
	}
	stop := c.StoppedReason
	if stop == "" {
		stop = "–"
	}
	fmt.Fprintf(bw, "Collection: %s%s; stopped: %s; %s lost events, %s of %s spans dropped\n", who, span, stop,
		fmtNum(float64(c.LostEvents)), fmtNum(float64(c.SpansDropped)), fmtNum(float64(c.Spans+c.SpansDropped)))
	for _, n := range sortedKeys(c.Unavailable) {
		fmt.Fprintf(bw, "  unavailable: %s: %s\n", n, c.Unavailable[n])
	}
	if o := d.Overhead; o != nil {
		fmt.Fprintln(bw, o.Line())
		for _, w := range o.Warnings {
			fmt.Fprintf(bw, "  warning: %s\n", w)
		}
	}
	if l := c.Correlation.Line(); l != "" {
		fmt.Fprintln(bw, l)
	}
}

// presentCauses keeps the causes that have a share in one of the
// breakdowns, and unexplained.
func presentCauses(causes []string, bs ...correlate.Breakdown) []string {
	var out []string
	for _, c := range causes {
		keep := c == "unexplained"
		for _, b := range bs {
			if finite(b[c]) > 0 {
				keep = true
			}
		}
		if keep {
			out = append(out, c)
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// agentLines say, per agent of the run, its clock offset ± bound and
// whether its collection was complete or when it stopped.
func (d doc) agentLines() []string {
	var out []string
	for _, a := range d.Agents {
		state := "complete"
		if !a.Complete {
			state = fmt.Sprintf("collection stopped at %s (%.1f s into the run)", a.StoppedAt.Format("15:04:05.000"), a.StoppedOffsetS)
			if a.Error != "" {
				state += ": " + a.Error
			}
		}
		l := fmt.Sprintf("Agent %s: pid %d (%s), clock offset %s ± %s, %d spans, %s", a.Agent, a.Pid, a.Comm,
			fmtNs(a.Clock.OffsetNs), fmtNs(a.Clock.BoundNs), a.Received, state)
		if a.BelowClockBound > 0 {
			l += fmt.Sprintf("; %d spans shorter than the clock bound not attributed", a.BelowClockBound)
		}
		if a.UncollectedRequests > 0 {
			l += fmt.Sprintf("; %d requests after collection stopped", a.UncollectedRequests)
		}
		out = append(out, l)
	}
	return out
}

// fmtNs is a duration in ns at a readable scale.
func fmtNs(ns int64) string {
	return time.Duration(ns).String()
}
