package report

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/bpfbench/bpfbench/correlate"
)

// card is one headline figure.
type card struct {
	Label, Value, Sub, Class, Color string
}

type latencyRow struct {
	Name  string
	Cells []string
}

type attrRow struct {
	Label, Gaps, Range, Excess string
	Shares                     []string
}

type requestRow struct {
	Request                     int
	TTFT, ITLExcess, Total, Top string
	TopColor                    string
	Bar                         template.HTML
}

type phaseRow struct {
	Name, Span, Requests, P50, P99, TTFT99, Top, TopColor, TopShare string
	Bar                                                             template.HTML
}

// kvRow is a named figure, flagged when it deserves attention.
type kvRow struct {
	Name, Value string
	Warn        bool
}

type checkRow struct {
	Status, Class, Name, Detail, Fix string
}

// htmlView is everything the page template shows, formatted.
type htmlView struct {
	Title, Subtitle string
	Settings        []fact
	Cards           []card
	Throughput      []fact
	LatencyCols     []string
	LatencyRows     []latencyRow
	NoLatency       bool
	TTFTChart       template.HTML
	ITLChart        template.HTML

	HasAttribution bool
	Causes         []causeInfo
	AttrChart      template.HTML
	AttrRows       []attrRow
	Baseline       string
	Requests       []requestRow
	RequestsMore   int

	Timeline template.HTML
	Phases   []phaseRow

	CriticalPath []string
	Neighbours   []kvRow
	Gateway      []string

	ServerMetrics      []kvRow
	ServerQueue        []kvRow
	ServerMetricsChart template.HTML

	Sections    []sectionView
	Collection  []kvRow
	NoCollect   bool
	Unavailable []fact
	Readiness   []checkRow

	Diagnosis []string
}

// WriteHTML renders d as one self-contained HTML page: inline CSS and
// inline SVG charts generated here, no script and no external resource
// (a Content-Security-Policy forbids fetching any). Every chart carries an
// id: chart-ttft, chart-itl, chart-attribution, chart-timeline.
func WriteHTML(w io.Writer, d *Document) error {
	if d == nil {
		d = &Document{}
	}
	return pageTemplate.Execute(w, buildView(d))
}

func buildView(d *Document) *htmlView {
	v := &htmlView{Title: "bpfbench run report"}
	target := d.ownString("target")
	if target != "" {
		v.Title = "bpfbench · " + target
	}
	var sub []string
	if m := d.loadString("model_id"); m != "" {
		sub = append(sub, "model "+m)
	}
	if dt := d.runDate(); dt != "" {
		sub = append(sub, dt)
	}
	if c := d.Collection; c != nil && c.Pid > 0 {
		p := "pid " + fmtNum(float64(c.Pid))
		if c.Comm != "" {
			p += " (" + c.Comm + ")"
		}
		sub = append(sub, p)
	}
	v.Subtitle = strings.Join(sub, " · ")
	for _, s := range []struct{ label, key string }{
		{"Backend", "backend"}, {"Endpoint", "endpoint_type"}, {"Label", "label"}, {"Prompts", "num_prompts"},
		{"Request rate (RPS)", "request_rate"}, {"Burstiness", "burstiness"}, {"Max concurrency", "max_concurrency"},
	} {
		if val := d.loadString(s.key); val != "" {
			v.Settings = append(v.Settings, fact{s.label, val})
		}
	}
	if ep := d.ownString("endpoint"); ep != "" {
		v.Settings = append(v.Settings, fact{"Path", ep})
	}

	completed, failed := d.Float("completed"), d.Float("failed")
	reqClass := "ok"
	if failed > 0 {
		reqClass = "warn"
	}
	if completed == 0 && failed > 0 {
		reqClass = "bad"
	}
	ms := func(key string) string {
		if completed <= 0 {
			return "–"
		}
		return fmtMs(d.Float(key))
	}
	v.Cards = append(v.Cards,
		card{Label: "Requests", Value: fmtNum(completed) + " ok", Sub: fmtNum(failed) + " failed", Class: reqClass},
		card{Label: "Output throughput", Value: oneDecimal(d.Float("output_throughput")) + " tok/s", Sub: fixed2(d.Float("request_throughput")) + " req/s"},
		card{Label: "TTFT p50 / p99", Value: ms("median_ttft_ms"), Sub: "p99 " + ms("p99_ttft_ms")},
		card{Label: "ITL p50 / p99", Value: ms("median_itl_ms"), Sub: "p99 " + ms("p99_itl_ms")},
	)
	if a := d.Attribution; a != nil && a.TopCause != "" {
		c := causeOf(a.TopCause, 0)
		v.Cards = append(v.Cards, card{Label: "Top cause", Value: c.Label, Sub: "baseline gap " + fmtMs(a.BaselineITLMs), Color: c.Color, Class: "cause"})
	}

	// vLLM's summary sections
	add := func(label, key string) {
		if d.hasLoad(key) {
			v.Throughput = append(v.Throughput, fact{label, fmtNum(round2(d.Float(key)))})
		}
	}
	add("Successful requests", "completed")
	add("Failed requests", "failed")
	if d.hasLoad("max_concurrency") {
		v.Throughput = append(v.Throughput, fact{"Maximum request concurrency", d.loadString("max_concurrency")})
	}
	if r := d.loadString("request_rate"); r != "" && r != "inf" {
		v.Throughput = append(v.Throughput, fact{"Request rate configured (RPS)", r})
	}
	add("Benchmark duration (s)", "duration")
	add("Total input tokens", "total_input_tokens")
	add("Total generated tokens", "total_output_tokens")
	add("Request throughput (req/s)", "request_throughput")
	add("Request goodput (req/s)", "request_goodput")
	add("Output token throughput (tok/s)", "output_throughput")
	add("Peak output token throughput (tok/s)", "max_output_tokens_per_s")
	add("Peak concurrent requests", "max_concurrent_requests")
	add("Total token throughput (tok/s)", "total_token_throughput")

	metrics := []struct{ name, key string }{{"TTFT", "ttft"}, {"TPOT", "tpot"}, {"ITL", "itl"}, {"E2EL", "e2el"}}
	for _, m := range metrics {
		v.LatencyCols = append(v.LatencyCols, m.name)
	}
	stat := func(name, prefix string) {
		row := latencyRow{Name: name}
		any := false
		for _, m := range metrics {
			k := prefix + "_" + m.key + "_ms"
			if d.hasLoad(k) {
				any = true
				row.Cells = append(row.Cells, fixed2(d.Float(k)))
			} else {
				row.Cells = append(row.Cells, "–")
			}
		}
		if any {
			v.LatencyRows = append(v.LatencyRows, row)
		}
	}
	stat("Mean", "mean")
	stat("Median", "median")
	stat("Std", "std")
	for _, p := range d.percentilesIn() {
		stat("P"+p, "p"+p)
	}
	v.NoLatency = len(v.LatencyRows) == 0

	// distributions
	ttftMarks := []marker{{"p50", d.Float("median_ttft_ms"), "m-p50"}, {"p99", d.Float("p99_ttft_ms"), "m-p99"}}
	itlMarks := []marker{{"p50", d.Float("median_itl_ms"), "m-p50"}, {"p99", d.Float("p99_itl_ms"), "m-p99"}}
	if a := d.Attribution; a != nil {
		ttftMarks = append(ttftMarks, marker{"baseline", a.BaselineTTFTMs, "m-base"})
		itlMarks = append(itlMarks, marker{"baseline", a.BaselineITLMs, "m-base"})
	}
	v.TTFTChart = histogram("chart-ttft", "distribution of the time to first token", d.ttftsMs(), ttftMarks)
	v.ITLChart = histogram("chart-itl", "distribution of the inter-token gaps", d.itlsMs(), itlMarks)

	// attribution
	var all []correlate.Breakdown
	for _, p := range d.Phases {
		all = append(all, p.ITLP99, p.TTFT, p.ITLAll)
	}
	for _, t := range d.Timeline {
		all = append(all, correlate.Breakdown(t.CausesMs))
	}
	a := d.Attribution
	var rows []stackRow
	if a != nil {
		v.HasAttribution = true
		v.Baseline = fmtMs(a.BaselineITLMs)
		keys := bandKeys(a)
		all = append(all, a.TTFT)
		for _, k := range keys {
			all = append(all, bandShares(a, k))
		}
		v.Causes = causeList(causeOrder(all...))
		rows = append(rows, stackRow{"Time to first token", "baseline " + fmtMs(a.BaselineTTFTMs), a.TTFT})
		v.AttrRows = append(v.AttrRows, d.attrRow("Time to first token", a.TTFT, nil, v.Causes))
		for i, k := range keys {
			label := bandLabel(keys, i)
			band, ok := a.ITLBands[k]
			sub := ""
			if ok {
				sub = fmtNum(float64(band.Intervals)) + " gaps · " + bandRange(band) + " · excess " + fmtMs(band.ExcessMs)
			}
			rows = append(rows, stackRow{label, sub, bandShares(a, k)})
			var bp *correlate.Band
			if ok {
				bp = &band
			}
			v.AttrRows = append(v.AttrRows, d.attrRow(label, bandShares(a, k), bp, v.Causes))
		}
		v.Requests, v.RequestsMore = requestRows(a.Requests, v.Causes)
	} else {
		v.Causes = causeList(causeOrder(all...))
	}
	v.AttrChart = attributionChart("chart-attribution", rows, v.Causes)
	v.Timeline = timelineChart("chart-timeline", d.Timeline, d.Phases, v.Causes)

	for _, p := range d.Phases {
		top := p.TopCause
		if top == "" {
			top = topOf(p.ITLP99)
		}
		r := phaseRow{
			Name: p.Name, Span: fmtNum(round1(p.StartS)) + "–" + fmtNum(round1(p.EndS)) + " s", Requests: fmtNum(float64(p.Requests)),
			P50: fmtMs(p.P50ITLMs), P99: fmtMs(p.P99ITLMs), TTFT99: fmtMs(p.P99TTFTMs), Top: "–",
			Bar: miniBar(p.ITLP99, v.Causes),
		}
		if top != "" {
			c := causeOf(top, 0)
			r.Top, r.TopColor = c.Label, c.Color
			if t := sharesSum(p.ITLP99); t > 0 {
				r.TopShare = fmtPct(finite(p.ITLP99[top]) / t)
			}
		}
		v.Phases = append(v.Phases, r)
	}

	v.CriticalPath = d.criticalPathLines()
	v.Gateway = d.gatewayLines()
	if cp := d.CriticalPath; cp != nil {
		for _, nb := range cp.NoisyNeighbours {
			v.Neighbours = append(v.Neighbours, kvRow{Name: nb.Label(), Value: fmt.Sprintf("%s on critical paths, %s of gap time, %d gaps", fmtMs(nb.Ms), fmtPct(nb.Share), nb.Gaps)})
		}
	}

	if d.ServerMetrics != nil {
		v.ServerMetrics = d.serverMetricsRows()
		v.ServerQueue = d.serverQueueRows()
		v.ServerMetricsChart = serverMetricsChart("chart-server-metrics", d.ServerMetrics)
	}

	v.Sections = d.sectionViews()
	if c := d.Collection; c != nil {
		who := fmtNum(float64(c.Pid))
		if c.Comm != "" {
			who += " (" + c.Comm + ")"
		}
		v.Collection = append(v.Collection, kvRow{Name: "Target pid", Value: who})
		if !c.Started.IsZero() {
			v.Collection = append(v.Collection, kvRow{Name: "Started", Value: c.Started.Format("2006-01-02 15:04:05.000 MST")})
		}
		if !c.Stopped.IsZero() {
			v.Collection = append(v.Collection, kvRow{Name: "Stopped", Value: c.Stopped.Format("2006-01-02 15:04:05.000 MST")})
		}
		if c.StoppedOffsetS > 0 || c.StartedOffsetS > 0 {
			v.Collection = append(v.Collection, kvRow{Name: "Collected (s since load start)", Value: fmtNum(round2(c.StartedOffsetS)) + " – " + fmtNum(round2(c.StoppedOffsetS))})
		}
		reason := c.StoppedReason
		if reason == "" {
			reason = "–"
		}
		dropped := fmtNum(float64(c.SpansDropped))
		if t := c.Spans + c.SpansDropped; c.SpansDropped > 0 && t > 0 {
			dropped += " (" + fmtPct(float64(c.SpansDropped)/float64(t)) + ")"
		}
		v.Collection = append(v.Collection,
			kvRow{Name: "Why collection stopped", Value: reason, Warn: c.StoppedReason != "" && !normalStop(c.StoppedReason)},
			kvRow{Name: "Lost events", Value: fmtNum(float64(c.LostEvents)), Warn: c.LostEvents > 0},
			kvRow{Name: "Spans recorded", Value: fmtNum(float64(c.Spans))},
			kvRow{Name: "Spans dropped", Value: dropped, Warn: c.SpansDropped > 0},
		)
		for _, n := range sortedKeys(c.Unavailable) {
			v.Unavailable = append(v.Unavailable, fact{n, c.Unavailable[n]})
		}
		for _, ch := range c.Readiness {
			st := strings.ToLower(ch.Status)
			class := "st-info"
			switch st {
			case "ok", "pass", "passed":
				class = "st-ok"
			case "warn", "warning", "skip", "skipped":
				class = "st-warn"
			case "fail", "failed", "error":
				class = "st-bad"
			}
			v.Readiness = append(v.Readiness, checkRow{ch.Status, class, ch.Name, ch.Detail, ch.Fix})
		}
	} else {
		v.NoCollect = true
	}

	v.Diagnosis = d.Diagnosis
	if len(v.Diagnosis) == 0 {
		v.Diagnosis = Diagnose(d)
	}
	return v
}

func (d *Document) attrRow(label string, b correlate.Breakdown, band *correlate.Band, causes []causeInfo) attrRow {
	r := attrRow{Label: label, Gaps: "–", Range: "–", Excess: "–"}
	if band != nil {
		r.Gaps = fmtNum(float64(band.Intervals))
		r.Range = bandRange(*band)
		r.Excess = fmtMs(band.ExcessMs)
	}
	t := sharesSum(b)
	for _, c := range causes {
		if t <= 0 {
			r.Shares = append(r.Shares, "–")
			continue
		}
		r.Shares = append(r.Shares, fmtPct(finite(b[c.Name])/t))
	}
	return r
}

func bandRange(b correlate.Band) string {
	if b.ToMs > 0 {
		return fmtMs(b.FromMs) + " – " + fmtMs(b.ToMs)
	}
	return "≥ " + fmtMs(b.FromMs)
}

const maxRequestRows = 15

func requestRows(rs []correlate.RequestBlame, causes []causeInfo) ([]requestRow, int) {
	rs = append([]correlate.RequestBlame(nil), rs...)
	sort.SliceStable(rs, func(i, j int) bool { return finite(rs[i].TotalExcessMs) > finite(rs[j].TotalExcessMs) })
	more := 0
	if len(rs) > maxRequestRows {
		more = len(rs) - maxRequestRows
		rs = rs[:maxRequestRows]
	}
	out := make([]requestRow, 0, len(rs))
	for _, r := range rs {
		c := causeOf(r.TopCause, 0)
		both := correlate.Breakdown{}
		for k, v := range r.ITLShares {
			both[k] += finite(v) * finite(r.ITLExcessMs)
		}
		ttftEx := finite(r.TotalExcessMs) - finite(r.ITLExcessMs)
		for k, v := range r.TTFTShares {
			both[k] += finite(v) * ttftEx
		}
		top := c.Label
		if r.TopCause == "" {
			top = "–"
		}
		out = append(out, requestRow{
			Request: r.Request, TTFT: fmtMs(r.TTFTMs), ITLExcess: fmtMs(r.ITLExcessMs), Total: fmtMs(r.TotalExcessMs),
			Top: top, TopColor: c.Color, Bar: miniBar(both, causes),
		})
	}
	return out, more
}

func round1(f float64) float64 { return math.Round(finite(f)*10) / 10 }
func round2(f float64) float64 { return math.Round(finite(f)*100) / 100 }

var pageTemplate = template.Must(template.New("report").Parse(pageHTML))

// fixed2 formats a figure with two decimals, as vLLM's summary does.
func fixed2(f float64) string {
	if !isFinite(f) {
		return "–"
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}

// oneDecimal formats a rate with one decimal and grouped thousands.
func oneDecimal(f float64) string {
	if !isFinite(f) {
		return "–"
	}
	s := strconv.FormatFloat(f, 'f', 1, 64)
	i := strings.IndexByte(s, '.')
	return group(s[:i]) + s[i:]
}
