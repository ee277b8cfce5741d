package report

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/result"
)

// svg accumulates one inline SVG element. Text goes through
// html.EscapeString; coordinates are finite numbers formatted here.
type svg struct{ b strings.Builder }

func num(f float64) string { return strconv.FormatFloat(finite(f), 'f', 1, 64) }

func esc(s string) string { return html.EscapeString(s) }

func (s *svg) open(id, class string, w, h float64, label string) {
	s.b.WriteString("<svg")
	if id != "" {
		fmt.Fprintf(&s.b, ` id="%s"`, esc(id))
	}
	fmt.Fprintf(&s.b, ` class="%s" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %s %s" role="img" aria-label="%s">`,
		esc(class), num(w), num(h), esc(label))
}

func (s *svg) close() template.HTML {
	s.b.WriteString("</svg>")
	return template.HTML(s.b.String()) //nolint:gosec // built from escaped text and formatted numbers
}

func (s *svg) rect(x, y, w, h float64, fill, class, title string) {
	if w < 0 {
		x, w = x+w, -w
	}
	if h < 0 {
		y, h = y+h, -h
	}
	fmt.Fprintf(&s.b, `<rect x="%s" y="%s" width="%s" height="%s"`, num(x), num(y), num(w), num(h))
	if fill != "" {
		fmt.Fprintf(&s.b, ` fill="%s"`, esc(fill))
	}
	if class != "" {
		fmt.Fprintf(&s.b, ` class="%s"`, esc(class))
	}
	if title != "" {
		fmt.Fprintf(&s.b, `><title>%s</title></rect>`, esc(title))
		return
	}
	s.b.WriteString("/>")
}

func (s *svg) line(x1, y1, x2, y2 float64, class string) {
	fmt.Fprintf(&s.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" class="%s"/>`, num(x1), num(y1), num(x2), num(y2), esc(class))
}

func (s *svg) text(x, y float64, anchor, class, t string) {
	fmt.Fprintf(&s.b, `<text x="%s" y="%s" text-anchor="%s" class="%s">%s</text>`, num(x), num(y), anchor, esc(class), esc(t))
}

func (s *svg) path(d, class, stroke, fill string) {
	fmt.Fprintf(&s.b, `<path d="%s" class="%s"`, d, esc(class))
	if stroke != "" {
		fmt.Fprintf(&s.b, ` stroke="%s"`, esc(stroke))
	}
	if fill != "" {
		fmt.Fprintf(&s.b, ` fill="%s"`, esc(fill))
	}
	s.b.WriteString("/>")
}

// emptyChart is the placeholder drawn when a chart has no data; it keeps
// the chart's id so that the page's structure does not depend on the data.
func emptyChart(id, label, msg string, w, h float64) template.HTML {
	var s svg
	s.open(id, "chart chart-empty", w, h, label)
	s.rect(0.5, 0.5, w-1, h-1, "", "empty-frame", "")
	s.text(w/2, h/2+5, "middle", "empty-text", msg)
	return s.close()
}

// niceStep returns a round step giving about n ticks over span.
func niceStep(span float64, n int) float64 {
	if span <= 0 || !isFinite(span) {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

// linTicks returns round ticks covering [0 or lo, hi] and the rounded top.
func linTicks(lo, hi float64, n int) ([]float64, float64, float64) {
	if !(hi > lo) {
		hi = lo + 1
	}
	step := niceStep(hi-lo, n)
	start := math.Floor(lo/step) * step
	top := math.Ceil(hi/step) * step
	var out []float64
	for v := start; v <= top+step/2 && len(out) < 50; v += step {
		out = append(out, v)
	}
	return out, start, top
}

// logTicks returns 1-2-5 ticks within [lo, hi] (lo > 0).
func logTicks(lo, hi float64) []float64 {
	var out []float64
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)) && len(out) < 40; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v >= lo*0.999 && v <= hi*1.001 {
				out = append(out, v)
			}
		}
	}
	if len(out) > 8 {
		var decades []float64
		for _, v := range out {
			if l := math.Log10(v); math.Abs(l-math.Round(l)) < 1e-9 {
				decades = append(decades, v)
			}
		}
		if len(decades) >= 2 {
			return decades
		}
	}
	return out
}

// tickLabel formats an axis value compactly.
func tickLabel(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	case a >= 1 || a == 0:
		return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
	default:
		return strconv.FormatFloat(v, 'g', 2, 64)
	}
}

// marker is a labelled vertical line on a distribution.
type marker struct {
	Label string
	Value float64
	Class string
}

// histogram draws the distribution of values (ms) with log-spaced bins
// when they span more than a decade and a half, and vertical markers.
func histogram(id, label string, values []float64, markers []marker) template.HTML {
	const W, H = 560.0, 250.0
	const ml, mr, mt, mb = 50.0, 14.0, 34.0, 40.0
	var vs []float64
	for _, v := range values {
		if isFinite(v) && v >= 0 {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return emptyChart(id, label, "No successful requests: nothing to plot", W, H)
	}
	sort.Float64s(vs)
	const bins = 40
	h := newHistScale(vs[0], vs[len(vs)-1])
	counts := h.count(vs, bins)
	pw, ph := W-ml-mr, H-mt-mb
	x := func(v float64) float64 {
		if h.useLog && v <= 0 {
			return ml
		}
		return ml + (h.tr(v)-h.a)/(h.b-h.a)*pw
	}
	countLabel, yTicks, y := histCounts(counts, mt, ph)

	var s svg
	s.open(id, "chart chart-hist", W, H, label)
	for _, t := range yTicks {
		s.line(ml, y(t), W-mr, y(t), "grid")
		s.text(ml-6, y(t)+4, "end", "tick", tickLabel(t))
	}
	bw := pw / bins
	for i, c := range counts {
		if c == 0 {
			continue
		}
		from, to := h.a+(h.b-h.a)*float64(i)/bins, h.a+(h.b-h.a)*float64(i+1)/bins
		if h.useLog {
			from, to = math.Pow(10, from), math.Pow(10, to)
		}
		s.rect(ml+float64(i)*bw+0.5, y(float64(c)), bw-1, y(0)-y(float64(c)), "", "bar",
			fmt.Sprintf("%s – %s: %d", fmtMs(from), fmtMs(to), c))
	}
	for _, t := range h.ticks() {
		if xx := x(t); xx >= ml-0.5 && xx <= W-mr+0.5 {
			s.line(xx, mt+ph, xx, mt+ph+4, "axis")
			s.text(xx, mt+ph+17, "middle", "tick", tickLabel(t))
		}
	}
	s.line(ml, mt+ph, W-mr, mt+ph, "axis")
	scale := "ms"
	if h.useLog {
		scale = "ms (log scale)"
	}
	s.text(ml+pw/2, H-6, "middle", "axis-label", scale)
	fmt.Fprintf(&s.b, `<text x="14" y="%s" text-anchor="middle" class="axis-label" transform="rotate(-90 14 %s)">%s</text>`,
		num(mt+ph/2), num(mt+ph/2), esc(countLabel))
	histMarkers(&s, markers, x, ml, W-mr, mt, ph)
	return s.close()
}

// histScale is a histogram's value axis: linear from 0, or log-spaced
// when the values span more than a decade and a half. a and b are the
// axis' ends, transformed (tr).
type histScale struct {
	useLog       bool
	lo, hi, a, b float64
}

// newHistScale is the axis of values from lo to hi.
func newHistScale(lo, hi float64) histScale {
	h := histScale{useLog: lo > 0 && hi/lo > 30}
	if hi <= lo {
		pad := math.Max(lo*0.1, 0.5)
		lo, hi = math.Max(0, lo-pad), hi+pad
	}
	if !h.useLog {
		lo = 0
	}
	h.lo, h.hi = lo, hi
	h.a, h.b = h.tr(lo), h.tr(hi)
	if h.useLog {
		h.a -= 0.02
		h.b += 0.02
	}
	return h
}

// tr is v on the axis' scale.
func (h histScale) tr(v float64) float64 {
	if h.useLog {
		return math.Log10(v)
	}
	return v
}

// count is how many of vs fall in each of bins.
func (h histScale) count(vs []float64, bins int) []int {
	counts := make([]int, bins)
	for _, v := range vs {
		i := int((h.tr(math.Max(v, h.lo)) - h.a) / (h.b - h.a) * float64(bins))
		if i >= bins {
			i = bins - 1
		}
		if i < 0 {
			i = 0
		}
		counts[i]++
	}
	return counts
}

// ticks are the axis' ticks.
func (h histScale) ticks() []float64 {
	if h.useLog {
		return logTicks(math.Pow(10, h.a), math.Pow(10, h.b))
	}
	xt, _, _ := linTicks(h.lo, h.hi, 6)
	return xt
}

// histCounts is a histogram's count axis over a plot ph high from mt: its
// label, ticks and scale. A long tail hides behind a tall mode: counts go
// on a log scale when they span more than two decades.
func histCounts(counts []int, mt, ph float64) (string, []float64, func(c float64) float64) {
	maxC := 0
	for _, c := range counts {
		maxC = max(maxC, c)
	}
	minC := maxC
	for _, c := range counts {
		if c > 0 {
			minC = min(minC, c)
		}
	}
	if maxC >= 100*minC && maxC >= 100 {
		yTop := math.Ceil(math.Log10(float64(maxC) + 1))
		var yTicks []float64
		for v := 10.0; v <= math.Pow(10, yTop); v *= 10 {
			yTicks = append(yTicks, v)
		}
		y := func(c float64) float64 { return mt + ph - math.Log10(c+1)/yTop*ph }
		return "count (log scale)", append([]float64{0}, yTicks...), y
	}
	yTicks, _, yTop := linTicks(0, float64(maxC), 4)
	return "count", yTicks, func(c float64) float64 { return mt + ph - c/yTop*ph }
}

// histMarkers draws markers as vertical lines over a plot from left to
// right and ph high from mt, labels staggered so that close ones do not
// overlap.
func histMarkers(s *svg, markers []marker, x func(float64) float64, left, right, mt, ph float64) {
	sort.SliceStable(markers, func(i, j int) bool { return markers[i].Value < markers[j].Value })
	lastX, row := -1e9, 0
	for _, m := range markers {
		if !isFinite(m.Value) || m.Value <= 0 {
			continue
		}
		xx := x(m.Value)
		if xx < left || xx > right {
			continue
		}
		if xx-lastX < 70 {
			row++
		} else {
			row = 0
		}
		lastX = xx
		s.line(xx, mt-2, xx, mt+ph, "marker "+m.Class)
		anchor := "middle"
		if xx > right-40 {
			anchor = "end"
		} else if xx < left+40 {
			anchor = "start"
		}
		s.text(xx, mt-8-float64(row%2)*12, anchor, "marker-label "+m.Class, m.Label+" "+fmtMs(m.Value))
	}
}

// stackRow is one horizontal stacked bar of shares.
type stackRow struct {
	Label, Sub string
	Shares     correlate.Breakdown
	// ExcessMs is the row's excess, to give each part's time (0: unknown).
	ExcessMs float64
}

// attributionChart draws one 100% bar per row, split by cause.
func attributionChart(id string, rows []stackRow, causes []causeInfo) template.HTML {
	const W = 1100.0
	const labelW, rightW, rowH, barH, top = 250.0, 16.0, 46.0, 26.0, 8.0
	H := top + rowH*float64(len(rows)) + 4
	if len(rows) == 0 {
		return emptyChart(id, "attribution", "No attribution: the collectors did not run or no interval was measured", W, 80)
	}
	var s svg
	s.open(id, "chart chart-attribution", W, H, "share of excess latency per cause")
	bx, bw := labelW, W-labelW-rightW
	for i, r := range rows {
		y0 := top + rowH*float64(i)
		s.b.WriteString(`<g class="attr-row">`)
		s.text(0, y0+barH/2, "start", "row-label", r.Label)
		s.text(0, y0+barH/2+15, "start", "row-sub", r.Sub)
		total := sharesSum(r.Shares)
		if total <= 0 {
			s.rect(bx, y0, bw, barH, "", "bar-none", "")
			s.text(bx+bw/2, y0+barH/2+5, "middle", "seg-none", "no excess over the baseline")
			s.b.WriteString(`</g>`)
			continue
		}
		x := bx
		for _, c := range causes {
			v := finite(r.Shares[c.Name])
			if v <= 0 {
				continue
			}
			share := v / total
			w := share * bw
			tip := fmt.Sprintf("%s: %s — %s of the excess", r.Label, c.Label, fmtPct(share))
			if ex := finite(r.ExcessMs); ex > 0 {
				tip += " (" + fmtMs(share*ex) + ")"
			}
			s.rect(x, y0, w, barH, c.Color, "seg seg-"+c.Name, tip)
			if w >= 38 {
				s.text(x+w/2, y0+barH/2+5, "middle", "seg-label", fmtPct(share))
			}
			x += w
		}
		s.b.WriteString(`</g>`)
	}
	return s.close()
}

// miniBar draws a small stacked bar of shares for a table cell; each
// part's tooltip gives its share of the whole.
func miniBar(b correlate.Breakdown, causes []causeInfo) template.HTML {
	return drawMiniBar(b, causes, false)
}

// miniBarMs draws a small stacked bar of times (ms) per cause; each
// part's tooltip gives its share of the whole and its time.
func miniBarMs(b correlate.Breakdown, causes []causeInfo) template.HTML {
	return drawMiniBar(b, causes, true)
}

func drawMiniBar(b correlate.Breakdown, causes []causeInfo, ms bool) template.HTML {
	const W, H = 160.0, 12.0
	var s svg
	s.open("", "mini-bar", W, H, "shares of the excess")
	total := sharesSum(b)
	if total <= 0 {
		s.rect(0, 0, W, H, "", "bar-none", "no excess")
		return s.close()
	}
	x := 0.0
	for _, c := range causes {
		v := finite(b[c.Name])
		if v <= 0 {
			continue
		}
		share := v / total
		w := share * W
		tip := c.Label + ": " + fmtPct(share)
		if ms {
			tip += " (" + fmtMs(v) + ")"
		}
		s.rect(x, 0, w, H, c.Color, "seg-"+c.Name, tip)
		x += w
	}
	return s.close()
}

// timelineChart draws throughput, ITL and the excess per cause over the
// run, one panel each on a shared time axis, with the phases shaded.
func timelineChart(id string, pts []result.TimelinePoint, phases []result.Phase, causes []causeInfo) template.HTML {
	if len(pts) == 0 {
		return emptyChart(id, "timeline", "No timeline: the run recorded no per-second data", timelineW, 80)
	}
	pts = append([]result.TimelinePoint(nil), pts...)
	sort.SliceStable(pts, func(i, j int) bool { return finite(pts[i].T) < finite(pts[j].T) })
	tl := &timeline{pts: pts, bucket: timelineBucket(pts), pw: timelineW - timelineML - timelineMR}
	tl.t0, tl.t1 = finite(pts[0].T), finite(pts[len(pts)-1].T)+tl.bucket
	for _, p := range phases {
		if isFinite(p.StartS) && isFinite(p.EndS) && p.EndS > p.StartS {
			tl.t0, tl.t1 = math.Min(tl.t0, p.StartS), math.Max(tl.t1, p.EndS)
		}
	}
	if tl.t1 <= tl.t0 {
		tl.t1 = tl.t0 + 1
	}

	phaseH := 0.0
	if len(phases) > 0 {
		phaseH = 22
	}
	items, legendH := timelineLegend(causes)
	p1 := panel{"Output throughput (tokens/s)", legendH + phaseH + 30, 110}
	p2 := panel{"Latency (ms)", p1.y + p1.h + 40, 140}
	p3 := panel{"Excess latency per cause on the critical path (ms over the normal gap, summed per bucket)", p2.y + p2.h + 40, 140}
	H := p3.y + p3.h + 36

	s := &tl.s
	s.open(id, "chart chart-timeline", timelineW, H, "throughput, latency and causes over the run")
	for _, it := range items {
		if it.line {
			fmt.Fprintf(&s.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" class="%s" stroke="%s"/>`,
				num(it.x), num(it.y+12), num(it.x+18), num(it.y+12), esc(it.class), esc(it.color))
		} else {
			s.rect(it.x, it.y+6, 12, 12, it.color, "", "")
		}
		s.text(it.x+22, it.y+16, "start", "legend-text", it.label)
	}
	tl.phases(phases, legendH+4, p3.y+p3.h)
	tl.throughput(p1)
	tl.latency(p2)
	tl.causes(p3, causes)
	// time axis
	tt, _, _ := linTicks(tl.t0, tl.t1, 10)
	for _, t := range tt {
		if t < tl.t0-1e-9 || t > tl.t1+1e-9 {
			continue
		}
		s.line(tl.x(t), p3.y+p3.h, tl.x(t), p3.y+p3.h+4, "axis")
		s.text(tl.x(t), p3.y+p3.h+17, "middle", "tick", tickLabel(t))
	}
	s.text(timelineML+tl.pw/2, H-4, "middle", "axis-label", "seconds since the start of the load")
	return s.close()
}

// The timeline's width and left and right margins.
const timelineW, timelineML, timelineMR = 1100.0, 64.0, 16.0

// timeline is the timeline chart being drawn: its points, their bucket
// (s), the time axis from t0 to t1 over pw.
type timeline struct {
	s              svg
	pts            []result.TimelinePoint
	bucket, t0, t1 float64
	pw             float64
}

// panel is one of the timeline's panels, h high from y.
type panel struct {
	title string
	y, h  float64
}

// legendItem is one entry of the timeline's legend, a line or a swatch.
type legendItem struct {
	color, class, label string
	line                bool
	x, y                float64
}

// timelineBucket is the points' bucket: the median step between them (1
// for a single point).
func timelineBucket(pts []result.TimelinePoint) float64 {
	bucket := 1.0
	if len(pts) > 1 {
		var ds []float64
		for i := 1; i < len(pts); i++ {
			if d := finite(pts[i].T) - finite(pts[i-1].T); d > 0 {
				ds = append(ds, d)
			}
		}
		if len(ds) > 0 {
			sort.Float64s(ds)
			bucket = ds[len(ds)/2]
		}
	}
	return bucket
}

// timelineLegend lays out the legend in as many rows as it needs (the
// critical path has eight causes): its items and its height.
func timelineLegend(causes []causeInfo) ([]legendItem, float64) {
	items := []legendItem{
		{color: "#1f6feb", class: "tl-line", label: "tokens/s", line: true},
		{color: "#0b3d91", class: "tl-line", label: "ITL p50", line: true},
		{color: "#d1242f", class: "tl-line", label: "ITL p99", line: true},
		{color: "#8c959f", class: "tl-line dashed", label: "TTFT p50", line: true},
	}
	for _, c := range causes {
		items = append(items, legendItem{color: c.Color, label: c.Label})
	}
	lx, ly := timelineML, 0.0
	for i := range items {
		w := 30 + float64(len([]rune(items[i].label)))*6.6
		if lx > timelineML && lx+w-8 > timelineW-timelineMR {
			lx, ly = timelineML, ly+20
		}
		items[i].x, items[i].y = lx, ly
		lx += w
	}
	return items, 24.0 + ly
}

// x is time t's abscissa.
func (tl *timeline) x(t float64) float64 {
	return timelineML + (finite(t)-tl.t0)/(tl.t1-tl.t0)*tl.pw
}

// phases shades every other phase from top to bottom, and marks and names
// each.
func (tl *timeline) phases(phases []result.Phase, top, bottom float64) {
	for i, ph := range phases {
		if !(isFinite(ph.StartS) && isFinite(ph.EndS) && ph.EndS > ph.StartS) {
			continue
		}
		xa, xb := tl.x(ph.StartS), tl.x(ph.EndS)
		if i%2 == 0 {
			tl.s.rect(xa, top, xb-xa, bottom-top, "", "phase-band", "")
		}
		tl.s.line(xa, top, xa, bottom, "phase-edge")
		tl.s.text((xa+xb)/2, top+15, "middle", "phase-label", ph.Name)
	}
}

// axes draws panel p's title, grid and ticks up to top; it returns the
// panel's ordinate.
func (tl *timeline) axes(p panel, top float64, ticks []float64) func(float64) float64 {
	const ml, right = timelineML, timelineW - timelineMR
	y := func(v float64) float64 { return p.y + p.h - finite(v)/top*p.h }
	tl.s.text(ml, p.y-8, "start", "panel-title", p.title)
	for _, t := range ticks {
		tl.s.line(ml, y(t), right, y(t), "grid")
		tl.s.text(ml-6, y(t)+4, "end", "tick", tickLabel(t))
	}
	tl.s.line(ml, p.y+p.h, right, p.y+p.h, "axis")
	return y
}

// throughput draws panel p1: output tokens per second, a line over an area.
func (tl *timeline) throughput(p1 panel) {
	maxTP := 0.0
	for _, p := range tl.pts {
		maxTP = math.Max(maxTP, finite(p.OutputTokensPerSecond))
	}
	ticks, _, top := linTicks(0, math.Max(maxTP, 1), 3)
	y := tl.axes(p1, top, ticks)
	var area, ln strings.Builder
	for i, p := range tl.pts {
		xm := tl.x(finite(p.T) + tl.bucket/2)
		if i == 0 {
			fmt.Fprintf(&area, "M%s %s", num(xm), num(y(0)))
			fmt.Fprintf(&ln, "M%s %s", num(xm), num(y(p.OutputTokensPerSecond)))
		} else {
			fmt.Fprintf(&ln, "L%s %s", num(xm), num(y(p.OutputTokensPerSecond)))
		}
		fmt.Fprintf(&area, "L%s %s", num(xm), num(y(p.OutputTokensPerSecond)))
		if i == len(tl.pts)-1 {
			fmt.Fprintf(&area, "L%s %sZ", num(xm), num(y(0)))
		}
	}
	tl.s.path(area.String(), "tl-area", "", "#1f6feb")
	tl.s.path(ln.String(), "tl-line", "#1f6feb", "none")
}

// latency draws panel p2: TTFT p50, ITL p50 and ITL p99.
func (tl *timeline) latency(p2 panel) {
	maxL := 0.0
	for _, p := range tl.pts {
		maxL = math.Max(maxL, math.Max(finite(p.P99ITLMs), math.Max(finite(p.P50ITLMs), finite(p.P50TTFTMs))))
	}
	ticks, _, top := linTicks(0, math.Max(maxL, 1), 4)
	y := tl.axes(p2, top, ticks)
	tl.series(y, func(p result.TimelinePoint) float64 { return p.P50TTFTMs }, "#8c959f", "tl-line dashed", "ttft-p50")
	tl.series(y, func(p result.TimelinePoint) float64 { return p.P50ITLMs }, "#0b3d91", "tl-line", "itl-p50")
	tl.series(y, func(p result.TimelinePoint) float64 { return p.P99ITLMs }, "#d1242f", "tl-line", "itl-p99")
}

// series draws get of the points as a line broken where it has no value,
// with a dot (and its value as a tooltip) at each point when they are few.
func (tl *timeline) series(y func(float64) float64, get func(result.TimelinePoint) float64, color, class, name string) {
	var b strings.Builder
	pen := false
	for _, p := range tl.pts {
		v := get(p)
		if !isFinite(v) || v <= 0 {
			pen = false
			continue
		}
		cmd := "L"
		if !pen {
			cmd = "M"
		}
		pen = true
		fmt.Fprintf(&b, "%s%s %s", cmd, num(tl.x(finite(p.T)+tl.bucket/2)), num(y(v)))
	}
	if b.Len() > 0 {
		tl.s.path(b.String(), class+" series-"+name, color, "none")
	}
	for _, p := range tl.pts {
		if v := get(p); isFinite(v) && v > 0 && len(tl.pts) <= 120 {
			fmt.Fprintf(&tl.s.b, `<circle cx="%s" cy="%s" r="2" fill="%s"><title>%s at %ss: %s</title></circle>`,
				num(tl.x(finite(p.T)+tl.bucket/2)), num(y(v)), esc(color), esc(name), num(p.T), esc(fmtMs(v)))
		}
	}
}

// causes draws panel p3: each bucket's excess per cause, stacked.
func (tl *timeline) causes(p3 panel, causes []causeInfo) {
	maxC := 0.0
	for _, p := range tl.pts {
		t := 0.0
		for _, c := range causes {
			if v := finite(p.CausesMs[c.Name]); v > 0 {
				t += v
			}
		}
		maxC = math.Max(maxC, t)
	}
	ticks, _, top := linTicks(0, math.Max(maxC, 1), 4)
	y := tl.axes(p3, top, ticks)
	bw := math.Max(tl.pw*tl.bucket/(tl.t1-tl.t0)-1.5, 1)
	for _, p := range tl.pts {
		acc := 0.0
		for _, c := range causes {
			v := finite(p.CausesMs[c.Name])
			if v <= 0 {
				continue
			}
			tip := fmt.Sprintf("%ss: %s %s", num(p.T), c.Label, fmtMs(v))
			if t := sharesSum(correlate.Breakdown(p.CausesMs)); t > 0 {
				tip += " (" + fmtPct(v/t) + " of the excess)"
			}
			tl.s.rect(tl.x(p.T)+0.75, y(acc+v), bw, y(acc)-y(acc+v), c.Color, "tl-cause", tip)
			acc += v
		}
	}
	if maxC == 0 {
		tl.s.text(timelineML+tl.pw/2, p3.y+p3.h/2, "middle", "empty-text", "no excess latency attributed")
	}
}
