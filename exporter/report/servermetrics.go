package report

import (
	"fmt"
	"html/template"
	"math"
	"sort"
	"strings"

	"github.com/bpfbench/bpfbench/result"
)

// The vocabulary names of the server's metrics (as result.json has them).
const (
	smRunning  = "requests_running"
	smWaiting  = "requests_waiting"
	smKV       = "kv_cache_usage"
	smPreempt  = "preemptions_total"
	smPrefix   = "prefix_cache_hit_rate"
	smQueueMs  = "queue_time_mean_ms"
	smPrompt   = "prompt_tokens_total"
	smGenerate = "generation_tokens_total"
)

// serverMetricsRows are the server metrics' figures for the page.
func (d doc) serverMetricsRows() []kvRow {
	m := d.ServerMetrics
	if m == nil {
		return nil
	}
	rows := []kvRow{{Name: "Endpoint", Value: orDash(m.URL)}}
	if !m.Found {
		return append(rows, kvRow{Name: "Not scraped", Value: orDash(m.Note), Warn: true})
	}
	eng := orDash(m.Engine)
	if !m.VocabularyMatched {
		eng += " (vocabulary not matched: raw series)"
	}
	rows = append(rows,
		kvRow{Name: "Engine", Value: eng, Warn: !m.VocabularyMatched},
		kvRow{Name: "Samples (period)", Value: fmt.Sprintf("%s (%s)", fmtNum(float64(len(m.Samples))), fmtMs(m.PeriodMs))},
	)
	fail := fmtNum(float64(m.ScrapeFailures)) + " of " + fmtNum(float64(m.Scrapes))
	if m.LastError != "" {
		fail += ": " + m.LastError
	}
	rows = append(rows, kvRow{Name: "Failed scrapes", Value: fail, Warn: m.ScrapeFailures > 0})
	if !m.VocabularyMatched {
		if n := len(m.RawSeries); n > 0 {
			v := fmtNum(float64(n)) + " series"
			if m.RawSeriesDropped > 0 {
				v += fmt.Sprintf(" (%s more left out)", fmtNum(float64(m.RawSeriesDropped)))
			}
			rows = append(rows, kvRow{Name: "Raw series kept", Value: v})
		}
		return rows
	}
	peak := func(name, label string, format func(float64) string) {
		if v, ok := m.Peaks[name]; ok {
			rows = append(rows, kvRow{Name: label, Value: format(v)})
		}
	}
	peak(smRunning, "Peak requests running", fmtNum)
	peak(smWaiting, "Peak requests waiting", fmtNum)
	peak(smKV, "Peak KV-cache usage", fmtPct)
	over := func(name, label string, format func(float64) string, warn func(float64) bool) {
		if v, ok := m.Overall[name]; ok {
			rows = append(rows, kvRow{Name: label, Value: format(v), Warn: warn != nil && warn(v)})
		}
	}
	over(smPreempt, "Preemptions during the run", fmtNum, func(v float64) bool { return v > 0 })
	over(smQueueMs, "Mean queue time (engine)", fmtMs, nil)
	over(smPrefix, "Prefix-cache hit rate", fmtPct, nil)
	over(smPrompt, "Prompt tokens (engine)", fmtNum, nil)
	over(smGenerate, "Generated tokens (engine)", fmtNum, nil)
	return rows
}

// serverQueueRows are the queue estimate's figures for the page.
func (d doc) serverQueueRows() []kvRow {
	q := d.ServerQueue
	if q == nil {
		return nil
	}
	if !q.Available {
		return []kvRow{{Name: "Server queue", Value: "not estimated: " + orDash(q.Reason)}}
	}
	rows := []kvRow{
		{Name: "Server queue share of TTFT", Value: fmtPct(q.ShareOfTTFT), Warn: q.ShareOfTTFT >= 0.2},
		{Name: "Requests that waited (slots)", Value: fmt.Sprintf("%s (%s slots)", fmtNum(float64(q.RequestsQueued)), fmtNum(float64(q.Slots)))},
	}
	if q.RequestsQueued > 0 {
		rows = append(rows, kvRow{Name: "Wait: mean / max", Value: fmtMs(q.MeanMs) + " / " + fmtMs(q.MaxMs)})
	}
	if q.EngineMeanMs != nil {
		rows = append(rows, kvRow{Name: "Engine's own mean queue time", Value: fmtMs(*q.EngineMeanMs)})
	}
	rows = append(rows, kvRow{Name: "Replay vs engine's waiting gauge", Value: fmt.Sprintf("±%s requests", fmtNum(round2(q.WaitingError))), Warn: q.WaitingError > 1})
	if q.Unconfirmed > 0 {
		rows = append(rows, kvRow{Name: "Waits the engine did not confirm", Value: fmtNum(float64(q.Unconfirmed))})
	}
	return rows
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// serverMetricsChart draws requests running and waiting over the run
// (and the KV-cache usage on its own scale when the engine exports it).
func serverMetricsChart(id string, m *result.ServerMetrics) template.HTML {
	const W, H = 1100.0, 190.0
	const ml, mr, mt, mb = 64.0, 64.0, 34.0, 36.0
	if m == nil || !m.VocabularyMatched || len(m.Samples) == 0 {
		return emptyChart(id, "server metrics", "No server metrics in the vocabulary", W, 80)
	}
	pts := append([]result.ServerSample(nil), m.Samples...)
	sort.SliceStable(pts, func(i, j int) bool { return finite(pts[i].T) < finite(pts[j].T) })
	t0, t1 := finite(pts[0].T), finite(pts[len(pts)-1].T)
	if t1 <= t0 {
		t1 = t0 + 1
	}
	pw, ph := W-ml-mr, H-mt-mb
	x := func(t float64) float64 { return ml + (finite(t)-t0)/(t1-t0)*pw }
	maxN, hasKV := 1.0, false
	for _, p := range pts {
		maxN = math.Max(maxN, math.Max(finite(p.Values[smRunning]), finite(p.Values[smWaiting])))
		_, ok := p.Values[smKV]
		hasKV = hasKV || ok
	}
	ticks, _, top := linTicks(0, maxN, 4)
	y := func(v float64) float64 { return mt + ph - finite(v)/top*ph }
	yKV := func(v float64) float64 { return mt + ph - math.Min(math.Max(finite(v), 0), 1)*ph }

	var s svg
	s.open(id, "chart chart-server-metrics", W, H, "the server's requests running and waiting over the run")
	serverMetricsLegend(&s, ml, hasKV)
	for _, t := range ticks {
		s.line(ml, y(t), W-mr, y(t), "grid")
		s.text(ml-6, y(t)+4, "end", "tick", tickLabel(t))
	}
	if hasKV {
		for _, f := range []float64{0, 0.5, 1} {
			s.text(W-mr+6, yKV(f)+4, "start", "tick", fmtPct(f))
		}
	}
	s.line(ml, mt+ph, W-mr, mt+ph, "axis")
	serverMetricsSeries(&s, pts, smRunning, "#1f6feb", "tl-line", x, y)
	serverMetricsSeries(&s, pts, smWaiting, "#d1242f", "tl-line", x, y)
	if hasKV {
		serverMetricsSeries(&s, pts, smKV, "#8c959f", "tl-line dashed", x, yKV)
	}
	tt, _, _ := linTicks(t0, t1, 10)
	for _, t := range tt {
		if t < t0-1e-9 || t > t1+1e-9 {
			continue
		}
		s.line(x(t), mt+ph, x(t), mt+ph+4, "axis")
		s.text(x(t), mt+ph+17, "middle", "tick", tickLabel(t))
	}
	s.text(ml+pw/2, H-4, "middle", "axis-label", "seconds since the start of the load")
	return s.close()
}

// serverMetricsLegend draws the chart's legend from lx along its top
// line, the KV-cache usage's with hasKV.
func serverMetricsLegend(s *svg, lx float64, hasKV bool) {
	legend := func(color, class, label string) {
		fmt.Fprintf(&s.b, `<line x1="%s" y1="12" x2="%s" y2="12" class="%s" stroke="%s"/>`, num(lx), num(lx+18), esc(class), esc(color))
		s.text(lx+22, 16, "start", "legend-text", label)
		lx += 30 + float64(len([]rune(label)))*6.6
	}
	legend("#1f6feb", "tl-line", "requests running")
	legend("#d1242f", "tl-line", "requests waiting")
	if hasKV {
		legend("#8c959f", "tl-line dashed", "KV-cache usage (right axis)")
	}
}

// serverMetricsSeries draws the samples' metric name as a line (x, yf
// place a sample), lifting the pen over samples without a finite value.
func serverMetricsSeries(s *svg, pts []result.ServerSample, name, color, class string, x, yf func(float64) float64) {
	var b strings.Builder
	pen := false
	for _, p := range pts {
		v, ok := p.Values[name]
		if !ok || !isFinite(v) {
			pen = false
			continue
		}
		cmd := "L"
		if !pen {
			cmd = "M"
		}
		pen = true
		fmt.Fprintf(&b, "%s%s %s", cmd, num(x(p.T)), num(yf(v)))
	}
	if b.Len() > 0 {
		s.path(b.String(), class+" series-"+name, color, "none")
	}
}

// serverMetricsLines are the terminal summary's lines.
func (d doc) serverMetricsLines() []string {
	m := d.ServerMetrics
	if m == nil {
		return nil
	}
	if !m.Found {
		return []string{"Server metrics: not scraped (" + orDash(m.Note) + ")"}
	}
	head := fmt.Sprintf("Server metrics (%s, %s): %d samples", orDash(m.Engine), m.URL, len(m.Samples))
	if m.ScrapeFailures > 0 {
		head += fmt.Sprintf(", %d of %d scrapes failed (last: %s)", m.ScrapeFailures, m.Scrapes, m.LastError)
	}
	out := []string{head}
	if !m.VocabularyMatched {
		out = append(out, fmt.Sprintf("  vocabulary not matched: %d raw series kept", len(m.RawSeries)))
		return out
	}
	var parts []string
	if v, ok := m.Peaks[smWaiting]; ok {
		parts = append(parts, "peak waiting "+fmtNum(v))
	}
	if v, ok := m.Peaks[smRunning]; ok {
		parts = append(parts, "peak running "+fmtNum(v))
	}
	if v, ok := m.Peaks[smKV]; ok {
		parts = append(parts, "peak KV usage "+fmtPct(v))
	}
	if v, ok := m.Overall[smPreempt]; ok {
		parts = append(parts, "preemptions +"+fmtNum(v))
	}
	if v, ok := m.Overall[smQueueMs]; ok {
		parts = append(parts, "mean queue time "+fmtMs(v))
	}
	if v, ok := m.Overall[smPrefix]; ok {
		parts = append(parts, "prefix-cache hits "+fmtPct(v))
	}
	if len(parts) > 0 {
		out = append(out, "  "+strings.Join(parts, ", "))
	}
	if q := d.ServerQueue; q != nil && q.Available {
		out = append(out, fmt.Sprintf("  server queue: %s of the TTFT; %d requests waited (%d slots), mean %s", fmtPct(q.ShareOfTTFT), q.RequestsQueued, q.Slots, fmtMs(q.MeanMs)))
	}
	return out
}

// diagnoseServer reads the server's own metrics: its queue's share of the
// TTFT, preemptions, a full KV cache, and scrapes that failed.
func (d doc) diagnoseServer() []string {
	m := d.ServerMetrics
	if m == nil || !m.Found {
		return nil
	}
	var out []string
	if q := d.ServerQueue; q != nil && q.Available && q.RequestsQueued > 0 && q.ShareOfTTFT >= 0.1 {
		out = append(out, fmt.Sprintf("%s requests waited in the engine's queue for one of its %d slots (mean %s): %s of the time to first token is that queue; more slots or fewer concurrent requests shorten it.",
			fmtNum(float64(q.RequestsQueued)), q.Slots, fmtMs(q.MeanMs), fmtPct(q.ShareOfTTFT)))
	}
	if v := m.Overall[smPreempt]; v > 0 {
		out = append(out, fmt.Sprintf("The engine preempted %s requests during the run (KV cache full): their tokens were recomputed or swapped.", fmtNum(v)))
	} else if v := m.Peaks[smKV]; v >= 0.95 {
		out = append(out, fmt.Sprintf("The engine's KV cache reached %s.", fmtPct(v)))
	}
	if m.Scrapes > 0 && m.ScrapeFailures*2 > m.Scrapes {
		out = append(out, fmt.Sprintf("%d of %d scrapes of %s failed (%s).", m.ScrapeFailures, m.Scrapes, m.URL, m.LastError))
	}
	return out
}
