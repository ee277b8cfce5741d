package loadgen

import (
	"math"
	"strings"
	"unicode/utf8"

	"github.com/bpfbench/bpfbench/loadgen/metrics"
	"github.com/bpfbench/bpfbench/loadgen/transport"
	"github.com/bpfbench/bpfbench/result"
)

// Fill sets the load generator's part of d from the run, typed: vLLM's
// fields and bpfbench's own (d.Loadgen), the percentile fields
// (d.Percentiles). They are JSON()'s fields, with the records themselves,
// not a copy of them.
func (r *Result) Fill(d *result.Document) { r.fill(d, true) }

// fill is Fill, with ITLs left nil unless itls (WriteJSON's: the encoder
// writes them from the records as it goes).
func (r *Result) fill(d *result.Document, itls bool) {
	c, m := &r.Config, r.Metrics
	l := &d.Loadgen
	recs := wireRecords(r.Records)
	l.Date = r.Date.Format("20060102-150405")
	l.EndpointType, l.Backend = c.Backend(), c.Backend()
	if c.Output.Label != "" {
		label := wire(c.Output.Label)
		l.Label = &label
	}
	l.ModelID, l.TokenizerID = wire(c.Target.Model), wire(c.Target.Model)
	l.NumPrompts = len(recs)
	rate, burst := result.Rate(c.Scenario.Rate), result.Rate(c.Scenario.Burstiness)
	if math.IsInf(c.Scenario.Rate, 1) || c.Scenario.Rate == 0 {
		rate = result.Rate(math.Inf(1))
	}
	if c.Scenario.Constant {
		burst = result.Rate(math.Inf(1))
	}
	l.RequestRate, l.Burstiness = &rate, &burst
	if n := c.Scenario.MaxConcurrency; n > 0 {
		l.MaxConcurrency = &n
	}
	l.Duration, l.Completed, l.Failed = m.DurationS, m.Completed, m.Failed
	l.TotalInputTokens, l.TotalOutputTokens = m.TotalInput, m.TotalOutput
	l.RequestThroughput, l.OutputThroughput, l.TotalTokenThroughput = m.RequestThroughput, m.OutputThroughput, m.TotalTokenThroughput
	l.MaxOutputTokensPerS, l.MaxConcurrentRequests = m.MaxOutputTokensPerS, m.MaxConcurrentRequests
	if m.HasGoodput {
		g := m.RequestGoodput
		l.RequestGoodput = &g
	}
	l.MeanTTFTMs, l.MedianTTFTMs, l.StdTTFTMs = m.TTFT.Mean, m.TTFT.Median, m.TTFT.Std
	l.MeanTPOTMs, l.MedianTPOTMs, l.StdTPOTMs = m.TPOT.Mean, m.TPOT.Median, m.TPOT.Std
	l.MeanITLMs, l.MedianITLMs, l.StdITLMs = m.ITL.Mean, m.ITL.Median, m.ITL.Std
	l.MeanE2ELMs, l.MedianE2ELMs, l.StdE2ELMs = m.E2EL.Mean, m.E2EL.Median, m.E2EL.Std
	for _, x := range []struct {
		name string
		d    *metrics.Dist
	}{{"ttft", &m.TTFT}, {"tpot", &m.TPOT}, {"itl", &m.ITL}, {"e2el", &m.E2EL}} {
		for _, pv := range x.d.Percentiles {
			if d.Percentiles == nil {
				d.Percentiles = map[string]float64{}
			}
			d.Percentiles["p"+metrics.PercentileName(pv.P)+"_"+x.name+"_ms"] = pv.Value
		}
	}
	fillRequests(l, recs, itls)
	l.PromptEntropy = r.PromptEntropy()
	l.BPFBench = r.detail(recs)
}

// fillRequests sets vLLM's per-request lists (input_lens, ttfts, itls,
// errors, ...), and the engine's server_timings where any request has
// them.
func fillRequests(l *result.Loadgen, recs []Record, itls bool) {
	n := len(recs)
	l.InputLens, l.OutputLens = make([]int, n), make([]int, n)
	l.TTFTs = make([]float64, n)
	if itls {
		l.ITLs = make(result.ITLs, n)
	}
	l.GeneratedTexts, l.Errors = make([]string, n), make([]string, n)
	timings := make([]*result.Timings, n)
	hasTimings := false
	for i := range recs {
		rec := &recs[i]
		l.InputLens[i] = rec.PromptLen
		timings[i] = rec.ServerTimings
		hasTimings = hasTimings || rec.ServerTimings != nil
		l.Errors[i] = rec.Error
		if itls {
			l.ITLs[i] = []float64{}
		}
		if !rec.Success {
			continue
		}
		l.OutputLens[i] = rec.OutputTokens
		l.TTFTs[i] = float64(rec.TTFTNs()) / 1e9
		if itls && len(rec.ChunkNs) > 1 {
			itl := make([]float64, len(rec.ChunkNs)-1)
			for j := range itl {
				itl[j] = float64(rec.ChunkNs[j+1]-rec.ChunkNs[j]) / 1e9
			}
			l.ITLs[i] = itl
		}
	}
	if hasTimings {
		l.ServerTimings = timings
	}
}

// detail is bpfbench's own object: the clock anchor, failure reasons,
// token sources, client costs and every per-request record.
func (r *Result) detail(recs []Record) *result.LoadDetail {
	c, m := &r.Config, r.Metrics
	dt := &result.LoadDetail{
		Clock:                 "CLOCK_MONOTONIC",
		Anchor:                result.Anchor{MonoNs: r.Anchor.MonoNs, UnixNs: r.Anchor.UnixNs},
		StartNs:               r.StartNs,
		EndNs:                 r.EndNs,
		Target:                wire(transport.Redacted(c.Target.URL)),
		Endpoint:              wire(c.Target.Endpoint),
		Percentiles:           c.Metrics.Percentiles,
		Goodput:               c.Metrics.Goodput,
		FailureReasons:        m.Failures,
		Failures:              failuresOf(recs),
		TokenSources:          m.TokenSources,
		Chunks:                m.Chunks,
		RetriedStaleConns:     m.RetriedStaleConns,
		ClientCPUSeconds:      r.ClientCPU.Seconds(),
		MeanQueueMs:           m.Queue.Mean,
		MaxQueueMs:            maxOf(m.Queue),
		Protocol:              wire(c.Target.Protocol),
		TimeToHeadersMs:       result.Dist{"mean": m.Headers.Mean, "median": m.Headers.Median, "n": float64(m.Headers.N)},
		HeadersWithFirstChunk: m.HeadersWithFirstChunk,
		HeadersTimed:          m.HeadersTimed,
		Warmup:                wireRecords(r.Warmup),
		Records:               recs,
	}
	for _, p := range m.Headers.Percentiles {
		dt.TimeToHeadersMs["p"+metrics.PercentileName(p.P)] = p.Value
	}
	if s := m.HeaderBlocking; s != "" {
		s = wire(s)
		dt.HeaderBlocking = &s
	}
	if cpu := r.ClientCPU.Seconds(); cpu > 0 {
		dt.ChunksPerCPUSecond = float64(m.Chunks) / cpu
	}
	return dt
}

// wire is s as JSON reads it back: each byte that is not UTF-8 the
// replacement character, as encoding/json writes it. result.json's load
// part held what its reader made of the load's JSON; it still does.
func wire(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		c, n := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// wireRecords is recs with their strings as JSON reads them back (wire):
// recs itself when every one is UTF-8 (no copy), else a copy.
func wireRecords(recs []Record) []Record {
	out := recs
	for i := range recs {
		r := recs[i]
		r.RequestID, r.TokenSource, r.TraceID, r.SpanID = wire(r.RequestID), wire(r.TokenSource), wire(r.TraceID), wire(r.SpanID)
		r.ResponseID, r.ResponseModel, r.Failure, r.Error = wire(r.ResponseID), wire(r.ResponseModel), wire(r.Failure), wire(r.Error)
		reasons := r.FinishReasons
		for j, f := range reasons {
			if w := wire(f); w != f {
				if &reasons[0] == &recs[i].FinishReasons[0] {
					reasons = append([]string(nil), reasons...)
				}
				reasons[j] = w
			}
		}
		r.FinishReasons = reasons
		if !sameStrings(&r, &recs[i]) {
			if &out[0] == &recs[0] {
				out = append([]Record(nil), recs...)
			}
			out[i] = r
		}
	}
	return out
}

// sameStrings reports whether a's strings are b's (wireRecords changed none).
func sameStrings(a, b *Record) bool {
	return a.RequestID == b.RequestID && a.TokenSource == b.TokenSource && a.TraceID == b.TraceID && a.SpanID == b.SpanID &&
		a.ResponseID == b.ResponseID && a.ResponseModel == b.ResponseModel && a.Failure == b.Failure && a.Error == b.Error &&
		(len(a.FinishReasons) == 0 || &a.FinishReasons[0] == &b.FinishReasons[0])
}
