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
	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/result"
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
	// Basis says what the top cause and its share are of; Injection and
	// Verdict what a phased scenario injected and whether the critical
	// path named the cause it should add.
	Basis, Injection, Verdict string
	Weak                      bool
	Bar                       template.HTML
}

// activityView is the union of overlapping activity (Document.Activity):
// which collectors saw activity during the slow gaps, not what delayed
// them. It is shown with the collectors, never as a cause.
type activityView struct {
	Names []string
	Rows  []attrRow
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

	Timeline     template.HTML
	Phases       []phaseRow
	HasInjection bool

	CriticalPath []string
	Neighbours   []kvRow
	Gateway      []string

	ServerMetrics      []kvRow
	ServerQueue        []kvRow
	ServerMetricsChart template.HTML

	Sections    []sectionView
	Activity    *activityView
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
func WriteHTML(w io.Writer, d *result.Document) error {
	if d == nil {
		d = &result.Document{}
	}
	if d.Legacy() {
		// an older run's timeline and phases hold the activity model's
		// causes: they are not blame, and are left out of a copy
		c := *d
		c.Timeline = append([]result.TimelinePoint(nil), d.Timeline...)
		c.Phases = append([]result.Phase(nil), d.Phases...)
		c.ForgetActivityCauses()
		d = &c
	}
	return pageTemplate.Execute(w, buildView(doc{d}))
}

func buildView(d doc) *htmlView {
	v := &htmlView{}
	v.addHeader(d)
	v.addCards(d)
	v.addThroughput(d)
	v.addLatency(d)
	v.addDistributions(d)
	v.addAttribution(d)
	for _, p := range d.Phases {
		v.Phases = append(v.Phases, phaseRowOf(p, v.Causes))
		v.HasInjection = v.HasInjection || p.Injection != "" || p.Verdict != "" || p.Weak
	}

	v.CriticalPath = d.criticalPathLines()
	v.Gateway = d.gatewayLines()
	v.addNeighbours(d)

	if d.ServerMetrics != nil {
		v.ServerMetrics = d.serverMetricsRows()
		v.ServerQueue = d.serverQueueRows()
		v.ServerMetricsChart = serverMetricsChart("chart-server-metrics", d.ServerMetrics)
	}

	v.Sections = d.sectionViews()
	v.Activity = activityOf(d.Activity)
	if c := d.Collection; c != nil {
		v.addCollection(c)
	} else {
		v.NoCollect = true
	}

	v.Diagnosis = d.Diagnosis
	if len(v.Diagnosis) == 0 {
		v.Diagnosis = Diagnose(d.Document)
	}
	return v
}

// addHeader sets the title, the subtitle and the load's settings.
func (v *htmlView) addHeader(d doc) {
	v.Title = "bpfbench run report"
	target := d.detail().Target
	if target != "" {
		v.Title = "bpfbench · " + target
	}
	var sub []string
	if m := d.ModelID; m != "" {
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
		if val := d.setting(s.key); val != "" {
			v.Settings = append(v.Settings, fact{s.label, val})
		}
	}
	if ep := d.detail().Endpoint; ep != "" {
		v.Settings = append(v.Settings, fact{"Path", ep})
	}
}

// addCards sets the headline figures.
func (v *htmlView) addCards(d doc) {
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
	if c, ok := d.headlineCause(); ok {
		v.Cards = append(v.Cards, c)
	}
}

// addThroughput sets vLLM's summary section.
func (v *htmlView) addThroughput(d doc) {
	add := func(label, key string) {
		if d.hasLoad(key) {
			v.Throughput = append(v.Throughput, fact{label, fmtNum(round2(d.Float(key)))})
		}
	}
	add("Successful requests", "completed")
	add("Failed requests", "failed")
	if d.MaxConcurrency != nil {
		v.Throughput = append(v.Throughput, fact{"Maximum request concurrency", d.setting("max_concurrency")})
	}
	if r := d.setting("request_rate"); r != "" && r != "inf" {
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
}

// addLatency sets vLLM's latency table: a row per statistic present.
func (v *htmlView) addLatency(d doc) {
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
}

// addDistributions sets the TTFT and ITL histograms.
func (v *htmlView) addDistributions(d doc) {
	ttftMarks := []marker{{"p50", d.Float("median_ttft_ms"), "m-p50"}, {"p99", d.Float("p99_ttft_ms"), "m-p99"}}
	itlMarks := []marker{{"p50", d.Float("median_itl_ms"), "m-p50"}, {"p99", d.Float("p99_itl_ms"), "m-p99"}}
	if a := d.Attribution; a != nil {
		ttftMarks = append(ttftMarks, marker{"baseline", a.BaselineTTFTMs, "m-base"})
		itlMarks = append(itlMarks, marker{"baseline", a.BaselineITLMs, "m-base"})
	}
	v.TTFTChart = histogram("chart-ttft", "distribution of the time to first token", d.ttftsMs(), ttftMarks)
	v.ITLChart = histogram("chart-itl", "distribution of the inter-token gaps", d.itlsMs(), itlMarks)
}

// addAttribution sets the attribution, the critical path's and nothing
// else: the page's causes, the table, the chart and the timeline.
func (v *htmlView) addAttribution(d doc) {
	var all []correlate.Breakdown
	for _, p := range d.Phases {
		all = append(all, p.ITLP99, p.TTFT, p.ITLAll)
	}
	for _, t := range d.Timeline {
		all = append(all, correlate.Breakdown(t.CausesMs))
	}
	var rows []stackRow
	switch cp := d.CriticalPath; {
	case d.Attribution != nil:
		rows = v.addAttributionBands(d.Attribution, all)
	case cp != nil && (cp.TTFTP99 != nil || cp.ITLP99 != nil):
		rows = v.addCriticalBands(cp, all)
	default:
		v.Causes = causeList(pageCauseOrder(all...))
	}
	v.AttrChart = attributionChart("chart-attribution", rows, v.Causes)
	v.Timeline = timelineChart("chart-timeline", d.Timeline, d.Phases, v.Causes)
}

// addAttributionBands sets the attribution's rows and requests, the
// page's causes those of all and of a; it returns the chart's rows.
func (v *htmlView) addAttributionBands(a *correlate.Summary, all []correlate.Breakdown) []stackRow {
	var rows []stackRow
	v.HasAttribution = true
	v.Baseline = fmtMs(a.BaselineITLMs)
	keys := bandKeys(a)
	all = append(all, a.TTFT)
	for _, k := range keys {
		all = append(all, bandShares(a, k))
	}
	for _, r := range a.Requests {
		all = append(all, r.TTFTShares, r.ITLShares)
	}
	v.Causes = causeList(pageCauseOrder(all...))
	ttftEx := ttftExcessMs(a)
	rows = append(rows, stackRow{"Time to first token", "baseline " + fmtMs(a.BaselineTTFTMs), a.TTFT, ttftEx})
	v.AttrRows = append(v.AttrRows, attrRowOf("Time to first token", a.TTFT, nil, v.Causes))
	if ttftEx > 0 {
		v.AttrRows[0].Excess = fmtMs(ttftEx)
	}
	for i, k := range keys {
		label := bandLabel(keys, i)
		band, ok := a.ITLBands[k]
		sub := ""
		ex := 0.0
		if ok {
			sub = fmtNum(float64(band.Intervals)) + " gaps · excess " + fmtMs(band.ExcessMs)
			ex = band.ExcessMs
		}
		rows = append(rows, stackRow{label, sub, bandShares(a, k), ex})
		var bp *correlate.Band
		if ok {
			bp = &band
		}
		v.AttrRows = append(v.AttrRows, attrRowOf(label, bandShares(a, k), bp, v.Causes))
	}
	v.Requests, v.RequestsMore = requestRows(a.Requests, v.Causes)
	return rows
}

// addCriticalBands sets the rows of the critical path's own bands (a run
// without attribution, an older one), the page's causes those of all and
// of the bands; it returns the chart's rows.
func (v *htmlView) addCriticalBands(cp *result.CriticalPath, all []correlate.Breakdown) []stackRow {
	var rows []stackRow
	v.HasAttribution = true
	v.Baseline = fmtMs(sumMs(cp.NormalITLMs))
	type critBand struct {
		label string
		b     *result.CriticalBand
	}
	var bands []critBand
	if cp.TTFTP99 != nil {
		bands = append(bands, critBand{"Slowest 1% of TTFTs", cp.TTFTP99})
	}
	if cp.ITLP99 != nil {
		bands = append(bands, critBand{"p99+ gaps", cp.ITLP99})
	}
	for _, b := range bands {
		all = append(all, correlate.Breakdown(b.b.ExcessShares))
	}
	v.Causes = causeList(pageCauseOrder(all...))
	for _, b := range bands {
		sh := correlate.Breakdown(b.b.ExcessShares)
		sub := fmtNum(float64(b.b.Gaps)) + " gaps · excess " + fmtMs(b.b.ExcessMs)
		rows = append(rows, stackRow{b.label, sub, sh, b.b.ExcessMs})
		band := correlate.Band{FromMs: b.b.FromMs, Intervals: b.b.Gaps, ExcessMs: b.b.ExcessMs}
		v.AttrRows = append(v.AttrRows, attrRowOf(b.label, sh, &band, v.Causes))
	}
	return rows
}

// addNeighbours sets the critical path's noisy neighbours and the
// server's own contention.
func (v *htmlView) addNeighbours(d doc) {
	cp := d.CriticalPath
	if cp == nil {
		return
	}
	for _, nb := range cp.NoisyNeighbours {
		v.Neighbours = append(v.Neighbours, kvRow{Name: nb.Label(), Value: fmt.Sprintf("%s on critical paths, %s of gap time, %d gaps", fmtMs(nb.Ms), fmtPct(nb.Share), nb.Gaps)})
	}
	for _, nb := range cp.SelfContention {
		v.Neighbours = append(v.Neighbours, kvRow{Name: nb.Label(), Value: fmt.Sprintf("%s on critical paths, %s of gap time, %d gaps (the server's own threads waiting for each other's CPU)", fmtMs(nb.Ms), fmtPct(nb.Share), nb.Gaps)})
	}
}

// addCollection sets what the collection says of itself: its target and
// span, why it stopped, what it lost, what was unavailable and the
// readiness checks.
func (v *htmlView) addCollection(c *result.Collection) {
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
		v.Readiness = append(v.Readiness, checkRowOf(ch))
	}
}

// checkRowOf is a readiness check's row, classed by its status.
func checkRowOf(ch result.Check) checkRow {
	class := "st-info"
	switch strings.ToLower(ch.Status) {
	case "ok", "pass", "passed":
		class = "st-ok"
	case "warn", "warning", "skip", "skipped":
		class = "st-warn"
	case "fail", "failed", "error":
		class = "st-bad"
	}
	return checkRow{ch.Status, class, ch.Name, ch.Detail, ch.Fix}
}

func attrRowOf(label string, b correlate.Breakdown, band *correlate.Band, causes []causeInfo) attrRow {
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
		top := c.Label
		if r.TopCause == "" {
			top = "–"
		}
		out = append(out, requestRow{
			Request: r.Request, TTFT: fmtMs(r.TTFTMs), ITLExcess: fmtMs(r.ITLExcessMs), Total: fmtMs(r.TotalExcessMs),
			Top: top, TopColor: c.Color, Bar: miniBarMs(requestExcessMs(r), causes),
		})
	}
	return out, more
}

// requestExcessMs is a request's excess per cause, ms: its TTFT's and its
// gaps' shares of their excess.
func requestExcessMs(r correlate.RequestBlame) correlate.Breakdown {
	both := correlate.Breakdown{}
	itlEx := math.Max(finite(r.ITLExcessMs), 0)
	ttftEx := math.Max(finite(r.TotalExcessMs)-itlEx, 0)
	add := func(b correlate.Breakdown, ex float64) {
		t := sharesSum(b)
		if t <= 0 || ex <= 0 {
			return
		}
		for k, v := range b {
			if v = finite(v); v > 0 {
				both[k] += v / t * ex
			}
		}
	}
	add(r.ITLShares, itlEx)
	add(r.TTFTShares, ttftEx)
	return both
}

// ttftExcessMs is the TTFTs' excess over the baseline, ms, from the
// requests (0 when there are none).
func ttftExcessMs(a *correlate.Summary) float64 {
	t := 0.0
	for _, r := range a.Requests {
		t += math.Max(finite(r.TotalExcessMs)-math.Max(finite(r.ITLExcessMs), 0), 0)
	}
	return t
}

// headlineCause is the "Top cause" card: the attribution's top cause
// (the largest share of all excess, on the critical path), else the
// critical path's p99 gaps' top cause; none without either.
func (d doc) headlineCause() (card, bool) {
	if a := d.Attribution; a != nil && a.TopCause != "" {
		c := causeOf(a.TopCause, 0)
		sub := "largest share of all excess over the normal gap (" + fmtMs(a.BaselineITLMs) + "), on the critical path"
		total, ms := 0.0, 0.0
		for _, r := range a.Requests {
			b := requestExcessMs(r)
			total += sharesSum(b)
			ms += b[a.TopCause]
		}
		if total > 0 {
			sub = fmtPct(ms/total) + " of all excess over the normal gap (" + fmtMs(a.BaselineITLMs) + "), on the critical path"
		}
		return card{Label: "Top cause", Value: c.Label, Sub: sub, Color: c.Color, Class: "cause"}, true
	}
	if cp := d.CriticalPath; cp != nil && cp.ITLP99 != nil && cp.ITLP99.Top != "" && cp.ITLP99.ExcessMs > 0 {
		b := cp.ITLP99
		c := causeOf(b.Top, 0)
		sub := fmtPct(finite(b.ExcessShares[b.Top])) + " of the p99 gap's excess, on the critical path"
		return card{Label: "Top cause", Value: c.Label, Sub: sub, Color: c.Color, Class: "cause"}, true
	}
	return card{}, false
}

// phaseRowOf is a phase's row: its critical path's top cause and share
// (on the phase's basis), or "injection too weak" where what it injected
// was too little to judge.
func phaseRowOf(p result.Phase, causes []causeInfo) phaseRow {
	r := phaseRow{
		Name: p.Name, Span: fmtNum(round1(p.StartS)) + "–" + fmtNum(round1(p.EndS)) + " s", Requests: fmtNum(float64(p.Requests)),
		P50: fmtMs(p.P50ITLMs), P99: fmtMs(p.P99ITLMs), TTFT99: fmtMs(p.P99TTFTMs), Top: "–",
		Injection: p.Injection, Verdict: p.Verdict, Weak: p.Weak,
		Bar: miniBar(p.ITLP99, causes),
	}
	if p.Weak {
		r.Top = "injection too weak"
		if r.Verdict == "" {
			r.Verdict = "injection too weak to judge"
		}
		return r
	}
	top, share, basis := p.TopCause, finite(p.TopShare), p.TopCauseBasis
	t := sharesSum(p.ITLP99)
	if top == "" && t > 0 {
		top, basis = topOf(p.ITLP99), "slowest 1% of gaps"
	}
	if top == "" {
		return r
	}
	if share <= 0 && t > 0 {
		share = finite(p.ITLP99[top]) / t
	}
	c := causeOf(top, 0)
	r.Top, r.TopColor, r.Basis = c.Label, c.Color, basis
	if share > 0 {
		r.TopShare = fmtPct(min(share, 1))
	}
	return r
}

// activityLabels name the activity model's causes as what was active,
// not as causes.
var activityLabels = map[string]string{
	"cpu_runqueue": "runnable threads", "io_block": "block IO in flight", "gpu_sync": "blocking CUDA calls",
	"net_backpressure": "TCP backpressure", "unexplained": "none of these",
}

// activityOf is the activity model's table, or nil.
func activityOf(s *correlate.Summary) *activityView {
	if s == nil {
		return nil
	}
	keys := bandKeys(s)
	bs := []correlate.Breakdown{s.TTFT}
	for _, k := range keys {
		bs = append(bs, bandShares(s, k))
	}
	var names []causeInfo
	for _, n := range activityOrder(bs...) {
		l := activityLabels[n]
		if l == "" {
			l = strings.ReplaceAll(n, "_", " ")
		}
		names = append(names, causeInfo{Name: n, Label: l})
	}
	v := &activityView{}
	for _, c := range names {
		v.Names = append(v.Names, c.Label)
	}
	v.Rows = append(v.Rows, attrRowOf("Time to first token", s.TTFT, nil, names))
	for i, k := range keys {
		var bp *correlate.Band
		if band, ok := s.ITLBands[k]; ok {
			bp = &band
		}
		v.Rows = append(v.Rows, attrRowOf(bandLabel(keys, i), bandShares(s, k), bp, names))
	}
	if sharesSum(s.TTFT) <= 0 && len(keys) == 0 {
		return nil
	}
	return v
}

// activityOrder lists the activity model's causes, then any other name
// found in the breakdowns, sorted.
func activityOrder(bs ...correlate.Breakdown) []string {
	out := append([]string(nil), correlate.CauseNames()...)
	seen := map[string]bool{}
	for _, n := range out {
		seen[n] = true
	}
	var extra []string
	for _, b := range bs {
		for k := range b {
			if !seen[k] {
				seen[k] = true
				extra = append(extra, k)
			}
		}
	}
	sort.Strings(extra)
	return append(out, extra...)
}

// pageCauseOrder lists the critical path's causes, in its order, that
// take a share somewhere on the page, then any other name found, sorted
// (every cause of the critical path when none does).
func pageCauseOrder(bs ...correlate.Breakdown) []string {
	known := critpath.CauseNames()
	isKnown := map[string]bool{}
	for _, n := range known {
		isKnown[n] = true
	}
	used := map[string]bool{}
	var extra []string
	for _, b := range bs {
		for k, v := range b {
			if !isKnown[k] && !used[k] {
				extra = append(extra, k)
			}
			if isFinite(v) && v > 0 || !isKnown[k] {
				used[k] = true
			}
		}
	}
	var out []string
	for _, n := range known {
		if used[n] {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		out = known
	}
	sort.Strings(extra)
	return append(out, extra...)
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
