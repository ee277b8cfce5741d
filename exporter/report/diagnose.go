package report

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/result"
)

// Diagnose reads the run's numbers and says in a few plain sentences what
// made it slow and how far the figures can be trusted: failed requests,
// what the slowest inter-token gaps and the TTFTs are made of, each
// phase's top cause, and gaps in the collection (lost events, sections
// that could not run, collection that stopped early).
func Diagnose(rd *result.Document) []string {
	if rd == nil {
		return nil
	}
	d := doc{rd}
	var out []string
	out = append(out, d.diagnoseRequests()...)
	out = append(out, d.diagnoseLatency()...)
	out = append(out, d.diagnosePhases()...)
	out = append(out, d.diagnoseServer()...)
	out = append(out, d.diagnoseCollection()...)
	return out
}

func (d doc) diagnoseRequests() []string {
	completed, failed := int(d.Float("completed")), int(d.Float("failed"))
	total := completed + failed
	if total == 0 {
		if d.BPFBench == nil && d.Completed+d.Failed == 0 && d.Duration == 0 {
			return []string{"The result holds no load figures."}
		}
		return []string{"The run completed no request."}
	}
	if failed == 0 {
		return nil
	}
	why := d.failureSummary()
	if completed == 0 {
		s := fmt.Sprintf("All %d requests failed, so no latency was measured", failed)
		if why != "" {
			s += ": " + why
		}
		return []string{s + "."}
	}
	s := fmt.Sprintf("%d of %d requests failed (%s)", failed, total, fmtPct(float64(failed)/float64(total)))
	if why != "" {
		s += ": " + why
	}
	return []string{s + "; their latencies are not in the figures."}
}

// failureSummary names the failure kinds and the first error.
func (d doc) failureSummary() string {
	kinds := d.detail().FailureReasons
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if kinds[names[i]] != kinds[names[j]] {
			return kinds[names[i]] > kinds[names[j]]
		}
		return names[i] < names[j]
	})
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%d %s", kinds[k], k))
	}
	s := strings.Join(parts, ", ")
	fails := d.detail().Failures
	if len(fails) > 0 && fails[0].Error != "" {
		e := fails[0].Error
		if r := []rune(e); len(r) > 160 {
			e = string(r[:160]) + "…"
		}
		if s != "" {
			s += "; "
		}
		s += "first error: " + e
	}
	return s
}

// ordinal turns "p99" into "99th", "p99.9" into "99.9th".
func ordinal(band string) string {
	n := strings.TrimPrefix(band, "p")
	suffix := "th"
	if !strings.Contains(n, ".") {
		if v, err := strconv.Atoi(n); err == nil && (v%100 < 11 || v%100 > 13) {
			switch v % 10 {
			case 1:
				suffix = "st"
			case 2:
				suffix = "nd"
			case 3:
				suffix = "rd"
			}
		}
	}
	return n + suffix
}

// blameText says what a breakdown's excess is made of:
// "70% of its excess is the server's threads waiting for a CPU, 20% the
// disk, 10% unexplained". Shares under 1% are left out.
func blameText(b correlate.Breakdown) string {
	total := sharesSum(b)
	if total <= 0 {
		return ""
	}
	names := causeOrder(b)
	type part struct {
		name string
		v    float64
	}
	var ps []part
	for _, n := range names {
		if v := finite(b[n]) / total; v >= 0.005 {
			ps = append(ps, part{n, v})
		}
	}
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].v > ps[j].v })
	var words []string
	for i, p := range ps {
		if i == 4 {
			break
		}
		w := fmtPct(p.v) + " " + causeOf(p.name, i).Phrase
		if i == 0 {
			w = fmtPct(p.v) + " of its excess is " + causeOf(p.name, i).Phrase
		}
		words = append(words, w)
	}
	return strings.Join(words, ", ")
}

// topBand returns the highest percentile band of the attribution.
func topBand(s *correlate.Summary) string {
	keys := bandKeys(s)
	for i := len(keys) - 1; i >= 0; i-- {
		if keys[i] != "all" {
			return keys[i]
		}
	}
	return ""
}

func (d doc) diagnoseLatency() []string {
	var out []string
	a := d.Attribution
	completed := d.Float("completed")
	if completed <= 0 {
		return nil
	}
	band := "p99"
	if a != nil {
		if b := topBand(a); b != "" {
			band = b
		}
	}
	gap := d.Float(band + "_itl_ms")
	if gap == 0 && a != nil {
		gap = a.ITLBands[band].FromMs
	}
	if cp := d.CriticalPath; cp != nil && cp.ITLP99 != nil && cp.ITLP99.Gaps > 0 {
		return d.diagnoseCritical(cp)
	}
	if a == nil {
		if gap > 0 {
			out = append(out, fmt.Sprintf("The %s-percentile inter-token gap is %s (median %s); there is no attribution because the kernel side did not run.",
				ordinal(band), fmtMs(gap), fmtMs(d.Float("median_itl_ms"))))
		}
		return out
	}
	if gap > 0 {
		s := fmt.Sprintf("The %s-percentile inter-token gap is %s (baseline %s)", ordinal(band), fmtMs(gap), fmtMs(a.BaselineITLMs))
		if bt := blameText(bandShares(a, band)); bt != "" {
			s += "; " + bt + "."
		} else {
			s += "; no excess over the baseline was found in those gaps."
		}
		out = append(out, s)
	}
	if bt := blameText(a.TTFT); bt != "" {
		out = append(out, fmt.Sprintf("Time to first token: median %s, p99 %s (baseline %s); %s.",
			fmtMs(d.Float("median_ttft_ms")), fmtMs(d.Float("p99_ttft_ms")), fmtMs(a.BaselineTTFTMs), bt))
	}
	if a.TopCause != "" && a.TopCause != "unexplained" {
		if c := causeOf(a.TopCause, 0); c.Name != "" {
			out = append(out, fmt.Sprintf("Over the whole run, the largest share of excess latency is %s (%s).", c.Phrase, c.Name))
		}
	} else if a.TopCause == "unexplained" && sharesSum(a.ITL["all"]) > 0 {
		out = append(out, "Most of the excess latency has no kernel event on its critical path (lost events, threads with no history): look at the collection's warnings.")
	}
	return out
}

// diagnoseCritical speaks of the latency in the critical path's causes,
// whose parts sum to each gap.
func (d doc) diagnoseCritical(cp *result.CriticalPath) []string {
	var out []string
	b := cp.ITLP99
	s := fmt.Sprintf("The 99th-percentile inter-token gap is %s (normal %s, baseline: %s)", fmtMs(b.FromMs), fmtMs(sumMs(cp.NormalITLMs)), cp.Baseline)
	if bt := blameText(correlate.Breakdown(b.ExcessShares)); bt != "" && b.ExcessMs > 0 {
		s += "; on the critical path " + bt + "."
	} else {
		s += "; the slowest gaps took no longer than normal ones."
	}
	out = append(out, s)
	if t := cp.TTFTP99; t != nil && t.Gaps > 0 && t.ExcessMs > 0 {
		if bt := blameText(correlate.Breakdown(t.ExcessShares)); bt != "" {
			out = append(out, fmt.Sprintf("Time to first token: median %s, p99 %s (normal %s); on the critical path %s.",
				fmtMs(d.Float("median_ttft_ms")), fmtMs(d.Float("p99_ttft_ms")), fmtMs(sumMs(cp.NormalTTFTMs)), bt))
		}
	}
	if cp.UnexplainedFraction > 0.05 {
		out = append(out, fmt.Sprintf("%s of all gap time has no kernel event on its critical path (lost events, threads with no history): the shares above understate the causes.", fmtPct(cp.UnexplainedFraction)))
	}
	return out
}

// criticalPhaseLines say what each phase's slowest gaps added, in the
// critical path's causes, against the first phase.
func criticalPhaseLines(ps []result.CriticalPhase) []string {
	var out []string
	for i, p := range ps {
		if i == 8 {
			out = append(out, fmt.Sprintf("… and %d more phases (see the critical path's phases).", len(ps)-8))
			break
		}
		name := p.Name
		if name == "" {
			name = "#" + strconv.Itoa(i+1)
		}
		s := fmt.Sprintf("Phase %q: %d gaps", name, p.Gaps)
		b := p.ITLP99
		if b != nil && b.Gaps > 0 {
			s = fmt.Sprintf("Phase %q: p99 inter-token gap %s over %d gaps", name, fmtMs(b.FromMs), p.Gaps)
		}
		switch {
		case i > 0 && p.TailTop != "":
			s += fmt.Sprintf("; against %q its slowest gaps added most %s (%s of what they added).", ps[0].Name, p.TailTop, fmtPct(finite(p.TailAddedShares[p.TailTop])))
		case b != nil && b.Top != "" && b.ExcessMs > 0:
			s += fmt.Sprintf("; top cause %s (%s of the slowest gaps' excess).", b.Top, fmtPct(finite(b.ExcessShares[b.Top])))
		default:
			s += "."
		}
		out = append(out, s)
	}
	return out
}

func sumMs(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += finite(v)
	}
	return t
}

func (d doc) diagnosePhases() []string {
	if cp := d.CriticalPath; cp != nil && len(cp.Phases) > 0 {
		out := criticalPhaseLines(cp.Phases)
		// A phase whose injection was too weak names no cause.
		for i, p := range d.Phases {
			if p.Weak && i < len(cp.Phases) && i < len(out) && cp.Phases[i].Name == p.Name {
				out[i] = fmt.Sprintf("Phase %q: %s.", p.Name, p.Verdict)
			}
		}
		return out
	}
	var out []string
	for i, p := range d.Phases {
		if i == 8 {
			out = append(out, fmt.Sprintf("… and %d more phases (see the phases table).", len(d.Phases)-8))
			break
		}
		name := p.Name
		if name == "" {
			name = "#" + strconv.Itoa(i+1)
		}
		s := fmt.Sprintf("Phase %q: p99 inter-token gap %s over %d requests", name, fmtMs(p.P99ITLMs), p.Requests)
		top := p.TopCause
		total := sharesSum(p.ITLP99)
		if top == "" && total > 0 {
			top = topOf(p.ITLP99)
		}
		switch {
		case total <= 0:
			s += "; no excess over the baseline."
		case p.Weak:
			s += "; " + p.Verdict + "."
		case top != "" && i > 0 && top != "unexplained" && p.TopShare > 0:
			s += fmt.Sprintf("; against %q its slowest gaps added most %s (%s of what they added).", d.Phases[0].Name, top, fmtPct(finite(p.TopShare)))
		case top != "":
			s += fmt.Sprintf("; top cause %s (%s of the slowest gaps' excess).", top, fmtPct(finite(p.ITLP99[top])/total))
		default:
			s += "."
		}
		out = append(out, s)
	}
	return out
}

func (d doc) diagnoseCollection() []string {
	c := d.Collection
	if c == nil {
		return nil
	}
	var out []string
	if r := strings.TrimSpace(c.StoppedReason); r != "" && !normalStop(r) {
		out = append(out, fmt.Sprintf("Collection stopped before the load ended (%s): intervals after that have no kernel data and show as unexplained.", r))
	}
	if c.LostEvents > 0 {
		out = append(out, fmt.Sprintf("The kernel lost %s events (ring buffers full); the causes may be understated.", fmtNum(float64(c.LostEvents))))
	}
	if c.SpansDropped > 0 {
		out = append(out, fmt.Sprintf("%s of %s spans were dropped for lack of memory; the causes may be understated.",
			fmtNum(float64(c.SpansDropped)), fmtNum(float64(c.Spans+c.SpansDropped))))
	}
	names := make([]string, 0, len(c.Unavailable))
	for k := range c.Unavailable {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, n := range names {
		s := fmt.Sprintf("The %s section could not run (%s)", n, c.Unavailable[n])
		if cause := sectionCause[n]; cause != "" {
			s += fmt.Sprintf(", so %s is never blamed", cause)
		}
		out = append(out, s+".")
	}
	var bad []string
	for _, ch := range c.Readiness {
		if st := strings.ToLower(ch.Status); st == "fail" || st == "failed" || st == "error" {
			bad = append(bad, ch.Name)
		}
	}
	if len(bad) > 0 {
		out = append(out, fmt.Sprintf("Readiness checks failed: %s.", strings.Join(bad, ", ")))
	}
	return out
}

// normalStop reports whether a stop reason says the load simply ended.
func normalStop(r string) bool {
	r = strings.ToLower(r)
	for _, ok := range []string{"load finished", "load complete", "load ended", "done", "finished"} {
		if strings.HasPrefix(r, ok) {
			return true
		}
	}
	return false
}

// topOf is the cause with the largest share ("unexplained" only when it
// outweighs every named cause).
func topOf(b correlate.Breakdown) string {
	best, bestV := "", 0.0
	for _, n := range causeOrder(b) {
		if n == "unexplained" {
			continue
		}
		if v := finite(b[n]); v > bestV {
			best, bestV = n, v
		}
	}
	if finite(b["unexplained"]) > bestV {
		return "unexplained"
	}
	return best
}
