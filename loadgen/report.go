package loadgen

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/bpfbench/bpfbench/internal/atomicfile"
	"github.com/bpfbench/bpfbench/loadgen/metrics"
	"github.com/bpfbench/bpfbench/loadgen/transport"
	"github.com/bpfbench/bpfbench/result"
)

// Backend returns vLLM's backend name for the endpoint.
func (c *Config) Backend() string {
	if c.Target.Protocol == transport.ProtocolKServeGRPC {
		return transport.ProtocolKServeGRPC
	}
	if c.Target.Endpoint == transport.EndpointChat {
		return "openai-chat"
	}
	return "openai"
}

// Failure is one failed request, as listed in the result (result.Failure).
type Failure = result.Failure

// Failures lists the failed measured requests.
func (r *Result) Failures() []Failure { return failuresOf(r.Records) }

// failuresOf lists the failed requests of recs.
func failuresOf(recs []Record) []Failure {
	var out []Failure
	for i := range recs {
		rec := &recs[i]
		if !rec.Success {
			out = append(out, Failure{Index: rec.Index, RequestID: rec.RequestID, Kind: rec.Failure, Error: rec.Error})
		}
	}
	return out
}

// JSON returns the result as vLLM's result JSON (same field names:
// completed, failed, request_throughput, mean_ttft_ms, p99_itl_ms, ttfts,
// itls, ...) with bpfbench's own data under "bpfbench": the clock anchor,
// failure reasons, token sources and every per-request record with raw
// monotonic timestamps.
// It is what WriteJSON writes, built apart as a map (for a caller that
// reads it as one, and as the tests' reference).
func (r *Result) JSON() map[string]any {
	c := &r.Config
	out := r.Metrics.Fields()
	out["date"] = r.Date.Format("20060102-150405")
	out["endpoint_type"] = c.Backend()
	out["backend"] = c.Backend()
	out["label"] = nilIfEmpty(c.Output.Label)
	out["model_id"] = c.Target.Model
	out["tokenizer_id"] = c.Target.Model
	out["num_prompts"] = len(r.Records)
	c.scenarioFields(out)
	r.requestFields(out)
	if pe := r.PromptEntropy(); pe != nil {
		// --logprobs: the first token's normalised entropy, clustered.
		out["prompt_entropy"] = pe
	}
	out["bpfbench"] = r.bpfbenchFields()
	return out
}

// scenarioFields sets vLLM's request_rate, burstiness and max_concurrency
// in out.
func (c *Config) scenarioFields(out map[string]any) {
	if math.IsInf(c.Scenario.Rate, 1) || c.Scenario.Rate == 0 {
		out["request_rate"] = "inf"
	} else {
		out["request_rate"] = c.Scenario.Rate
	}
	if c.Scenario.Constant {
		out["burstiness"] = "inf"
	} else {
		out["burstiness"] = c.Scenario.Burstiness
	}
	if c.Scenario.MaxConcurrency > 0 {
		out["max_concurrency"] = c.Scenario.MaxConcurrency
	} else {
		out["max_concurrency"] = nil
	}
}

// requestFields sets vLLM's per-request lists in out (input_lens, ttfts,
// itls, errors, ...), and the engine's
// server_timings where any request has them.
func (r *Result) requestFields(out map[string]any) {
	n := len(r.Records)
	inputLens := make([]int, n)
	outputLens := make([]int, n)
	ttfts := make([]float64, n)
	itls := make([][]float64, n)
	texts := make([]string, n)
	errs := make([]string, n)
	timings := make([]*transport.ServerTimings, n)
	hasTimings := false
	for i := range r.Records {
		rec := &r.Records[i]
		inputLens[i] = rec.PromptLen
		timings[i] = rec.ServerTimings
		hasTimings = hasTimings || rec.ServerTimings != nil
		itls[i] = []float64{}
		errs[i] = rec.Error
		if !rec.Success {
			continue
		}
		outputLens[i] = rec.OutputTokens
		ttfts[i] = float64(rec.TTFTNs()) / 1e9
		for j := 1; j < len(rec.ChunkNs); j++ {
			itls[i] = append(itls[i], float64(rec.ChunkNs[j]-rec.ChunkNs[j-1])/1e9)
		}
	}
	out["input_lens"] = inputLens
	out["output_lens"] = outputLens
	out["ttfts"] = ttfts
	out["itls"] = itls
	out["generated_texts"] = texts
	out["errors"] = errs
	if hasTimings {
		// The engine's own timings of each request (llama.cpp's), null
		// where its stream carried none, beside the client's ttfts and itls.
		out["server_timings"] = timings
	}
}

// bpfbenchFields returns bpfbench's own data: the clock anchor, failure
// reasons, token sources, client costs and every per-request record.
func (r *Result) bpfbenchFields() map[string]any {
	c := &r.Config
	m := r.Metrics
	bb := map[string]any{
		"clock":                     "CLOCK_MONOTONIC",
		"anchor":                    r.Anchor,
		"start_ns":                  r.StartNs,
		"end_ns":                    r.EndNs,
		"target":                    transport.Redacted(c.Target.URL),
		"endpoint":                  c.Target.Endpoint,
		"percentiles":               c.Metrics.Percentiles,
		"goodput":                   c.Metrics.Goodput,
		"failure_reasons":           m.Failures,
		"failures":                  r.Failures(),
		"token_sources":             m.TokenSources,
		"chunks":                    m.Chunks,
		"retried_stale_connections": m.RetriedStaleConns,
		"client_cpu_seconds":        r.ClientCPU.Seconds(),
		"mean_queue_ms":             m.Queue.Mean,
		"protocol":                  c.Target.Protocol,
		"time_to_headers_ms":        distJSON(m.Headers),
		"headers_with_first_chunk":  m.HeadersWithFirstChunk,
		"headers_timed":             m.HeadersTimed,
		"header_blocking":           nilIfEmpty(m.HeaderBlocking),
		"max_queue_ms":              maxOf(m.Queue),
		"warmup":                    r.Warmup,
		"records":                   r.Records,
	}
	if cpu := r.ClientCPU.Seconds(); cpu > 0 {
		bb["chunks_per_cpu_second"] = float64(m.Chunks) / cpu
	}
	return bb
}

// distJSON is d as {mean, median, p50, p99, ...} in ms.
func distJSON(d metrics.Dist) map[string]any {
	out := map[string]any{"mean": d.Mean, "median": d.Median, "n": d.N}
	for _, p := range d.Percentiles {
		out["p"+metrics.PercentileName(p.P)] = p.Value
	}
	return out
}

func maxOf(d metrics.Dist) float64 {
	v := 0.0
	for _, p := range d.Percentiles {
		v = math.Max(v, p.Value)
	}
	return v
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// WriteJSON writes the result JSON: JSON() as encoding/json's Encoder
// writes it, byte for byte, through result's encoder (the one of
// result.json) from the typed result (Fill, the itls written from the
// records as they are written). On an error (a NaN or
// infinite number, which encoding/json refuses too) part of it may have
// been written.
func (r *Result) WriteJSON(w io.Writer) error {
	var d result.Document
	r.fill(&d, false)
	return d.WriteLoad(w)
}

// WriteFile writes the result JSON to path, atomically: a temporary file
// renamed over path once complete.
func (r *Result) WriteFile(path string) error {
	return atomicfile.Write(path, 0o644, func(w *bufio.Writer) error { return r.WriteJSON(w) })
}

// WriteSummary prints the summary table with the sections of vLLM's.
func (r *Result) WriteSummary(w io.Writer) {
	t := summaryTable{w}
	t.header(" Serving Benchmark Result ", '=')
	r.writeTotals(t)
	m := r.Metrics
	for _, s := range []struct {
		name, header string
		d            *metrics.Dist
	}{
		{"TTFT", "Time to First Token", &m.TTFT},
		{"TPOT", "Time per Output Token (excl. 1st token)", &m.TPOT},
		{"ITL", "Inter-token Latency", &m.ITL},
		{"E2EL", "End-to-end Latency", &m.E2EL},
	} {
		t.header(s.header, '-')
		t.dist(s.name, s.d)
	}
	t.header(" bpfbench ", '-')
	r.writeClient(t)
	r.writeFailures(t)
	fmt.Fprintln(w, "==================================================")
}

// summaryTable writes the lines of the summary table to w.
type summaryTable struct{ w io.Writer }

// line writes one labelled value, floats with two decimals.
func (t summaryTable) line(label string, v any) {
	switch x := v.(type) {
	case float64:
		fmt.Fprintf(t.w, "%-40s %-10.2f\n", label, x)
	default:
		fmt.Fprintf(t.w, "%-40s %-10v\n", label, x)
	}
}

// header writes s centred in a 50-character line of fill.
func (t summaryTable) header(s string, fill byte) {
	pad := 50 - len(s)
	left := pad / 2
	b := make([]byte, 0, 50)
	for i := 0; i < left; i++ {
		b = append(b, fill)
	}
	b = append(b, s...)
	for len(b) < 50 {
		b = append(b, fill)
	}
	fmt.Fprintln(t.w, string(b))
}

// dist writes the mean, median, standard deviation and percentiles of the
// latency d, named name.
func (t summaryTable) dist(name string, d *metrics.Dist) {
	t.line("Mean "+name+" (ms):", d.Mean)
	t.line("Median "+name+" (ms):", d.Median)
	t.line("Std "+name+" (ms):", d.Std)
	for _, pv := range d.Percentiles {
		t.line("P"+metrics.PercentileName(pv.P)+" "+name+" (ms):", pv.Value)
	}
}

// writeTotals writes the counts, the configured load and the throughputs.
func (r *Result) writeTotals(t summaryTable) {
	m := r.Metrics
	c := &r.Config
	t.line("Successful requests:", m.Completed)
	t.line("Failed requests:", m.Failed)
	if c.Scenario.MaxConcurrency > 0 {
		t.line("Maximum request concurrency:", c.Scenario.MaxConcurrency)
	}
	if !math.IsInf(c.Scenario.Rate, 1) && c.Scenario.Rate > 0 {
		t.line("Request rate configured (RPS):", c.Scenario.Rate)
	}
	t.line("Benchmark duration (s):", m.DurationS)
	t.line("Total input tokens:", m.TotalInput)
	t.line("Total generated tokens:", m.TotalOutput)
	t.line("Request throughput (req/s):", m.RequestThroughput)
	if m.HasGoodput {
		t.line("Request goodput (req/s):", m.RequestGoodput)
	}
	t.line("Output token throughput (tok/s):", m.OutputThroughput)
	t.line("Peak output token throughput (tok/s):", m.MaxOutputTokensPerS)
	t.line("Peak concurrent requests:", float64(m.MaxConcurrentRequests))
	t.line("Total Token throughput (tok/s):", m.TotalTokenThroughput)
}

// writeClient writes bpfbench's own lines: client queueing, token sources,
// time to headers, prompt entropy and the client's CPU.
func (r *Result) writeClient(t summaryTable) {
	m := r.Metrics
	t.line("Mean client queue time (ms):", m.Queue.Mean)
	srcs := make([]string, 0, len(m.TokenSources))
	for k := range m.TokenSources {
		srcs = append(srcs, k)
	}
	sort.Strings(srcs)
	for _, k := range srcs {
		t.line("Requests with tokens from "+k+":", m.TokenSources[k])
	}
	t.line("Retried stale connections:", m.RetriedStaleConns)
	if m.Headers.N > 0 {
		t.line("Median time to headers (ms):", m.Headers.Median)
		for _, pv := range m.Headers.Percentiles {
			if pv.P == 99 {
				t.line("P99 time to headers (ms):", pv.Value)
			}
		}
		t.line("Headers with the first chunk:", fmt.Sprintf("%d of %d", m.HeadersWithFirstChunk, m.HeadersTimed))
	}
	if pe := r.PromptEntropy(); pe != nil {
		t.line(fmt.Sprintf("Prompts with top-%d logprobs:", pe.K), pe.N)
		if pe.N > 0 {
			t.line("Mean first-token entropy (0-1):", pe.Mean)
			t.line("Prompt entropy low/mid/high (%):", fmt.Sprintf("%.0f / %.0f / %.0f", pe.Clusters[EntropyLow]*100, pe.Clusters[EntropyMid]*100, pe.Clusters[EntropyHigh]*100))
		}
	}
	if cpu := r.ClientCPU.Seconds(); cpu > 0 {
		t.line("Client CPU (s):", cpu)
		t.line("Chunks per client CPU-second:", float64(m.Chunks)/cpu)
	}
}

// writeFailures writes the failures by kind, the header-blocking warning
// and the first failure.
func (r *Result) writeFailures(t summaryTable) {
	m := r.Metrics
	kinds := make([]string, 0, len(m.Failures))
	for k := range m.Failures {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		t.line("Failed ("+k+"):", m.Failures[k])
	}
	if m.HeaderBlocking != "" {
		fmt.Fprintln(t.w, m.HeaderBlocking)
	}
	if f := r.Failures(); len(f) > 0 {
		fmt.Fprintf(t.w, "first failure: request %s: %s: %s\n", f[0].RequestID, f[0].Kind, f[0].Error)
	}
}
