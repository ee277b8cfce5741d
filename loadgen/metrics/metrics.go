// Package metrics computes vLLM's serving benchmark metrics from the
// records of a run: latency distributions (TTFT, TPOT, ITL, E2EL, queue,
// headers), throughputs, goodput and the failures by kind.
package metrics

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// Dist summarizes one latency metric in milliseconds, as vLLM does: mean,
// median, population standard deviation and percentiles interpolated
// linearly (numpy's default). An empty sample gives zeros, like numpy on [0].
type Dist struct {
	Mean        float64
	Median      float64
	Std         float64
	Percentiles []PV
	N           int
}

// PV is one percentile and its value.
type PV struct {
	P     float64
	Value float64
}

// Percentile returns the p-th percentile of sorted xs with linear interpolation.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n == 1 {
		return sorted[0]
	}
	r := p / 100 * float64(n-1)
	lo := int(math.Floor(r))
	hi := int(math.Ceil(r))
	if lo < 0 {
		lo = 0
	}
	if hi >= n {
		hi = n - 1
	}
	return sorted[lo] + (sorted[hi]-sorted[lo])*(r-float64(lo))
}

// NewDist summarizes xs (already in the unit wanted); xs is sorted in place.
func NewDist(xs []float64, percentiles []float64) Dist {
	d := Dist{N: len(xs)}
	if len(xs) == 0 {
		for _, p := range percentiles {
			d.Percentiles = append(d.Percentiles, PV{P: p})
		}
		return d
	}
	sort.Float64s(xs)
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	d.Mean = sum / float64(len(xs))
	ss := 0.0
	for _, x := range xs {
		ss += (x - d.Mean) * (x - d.Mean)
	}
	d.Std = math.Sqrt(ss / float64(len(xs)))
	d.Median = Percentile(xs, 50)
	for _, p := range percentiles {
		d.Percentiles = append(d.Percentiles, PV{P: p, Value: Percentile(xs, p)})
	}
	return d
}

// msOfNs returns ns in milliseconds, sorted: ns is sorted as integers,
// which float64(n)/1e6 keeps in order, so NewDist's sort finds the list
// sorted. A long list of non-negative ns (the ITLs) is radix-sorted: the
// ITLs of 100 requests of 256 tokens in a quarter of sort.Float64s's time
// (BenchmarkMsOfNs). ns is reordered.
func msOfNs(ns []int64) []float64 {
	if len(ns) >= radixMin && slices.Min(ns) >= 0 {
		radixSort(ns, slices.Max(ns))
	} else {
		slices.Sort(ns)
	}
	ms := make([]float64, len(ns))
	for i, n := range ns {
		ms[i] = float64(n) / 1e6
	}
	return ms
}

// radixMin is the length from which msOfNs radix-sorts.
const radixMin = 512

// radixSort sorts xs, all in [0, hi], least significant 11-bit digit
// first, as many digits as hi has (ITLs under 4 s: two).
func radixSort(xs []int64, hi int64) {
	const bits, mask = 11, 1<<11 - 1
	src, dst := xs, make([]int64, len(xs))
	var c [1 << bits]int32
	for shift := 0; shift < 64 && hi>>shift > 0; shift += bits {
		clear(c[:])
		for _, x := range src {
			c[(x>>shift)&mask]++
		}
		at := int32(0)
		for d := range c {
			at, c[d] = at+c[d], at
		}
		for _, x := range src {
			d := (x >> shift) & mask
			dst[c[d]] = x
			c[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &xs[0] {
		copy(xs, src)
	}
}

// Goodput holds service level objectives in milliseconds keyed by "ttft",
// "tpot" or "e2el" (vLLM's --goodput).
type Goodput map[string]float64

// ParseGoodput parses "ttft:MS,tpot:MS,e2el:MS" (commas or spaces).
func ParseGoodput(s string) (Goodput, error) {
	g := Goodput{}
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		k, v, ok := strings.Cut(f, ":")
		if !ok {
			return nil, fmt.Errorf("goodput %q: want KEY:MS pairs such as ttft:500,tpot:50", f)
		}
		k = strings.ToLower(strings.TrimSpace(k))
		if k != "ttft" && k != "tpot" && k != "e2el" {
			return nil, fmt.Errorf("goodput metric %q: use ttft, tpot or e2el", k)
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || x < 0 {
			return nil, fmt.Errorf("goodput %s: %q is not a non-negative number of milliseconds", k, v)
		}
		g[k] = x
	}
	return g, nil
}

// String formats g in the form ParseGoodput reads.
func (g Goodput) String() string {
	var parts []string
	for _, k := range []string{"ttft", "tpot", "e2el"} {
		if v, ok := g[k]; ok {
			parts = append(parts, k+":"+strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	return strings.Join(parts, ",")
}

// Set implements flag.Value.
func (g *Goodput) Set(s string) error {
	x, err := ParseGoodput(s)
	if err != nil {
		return err
	}
	if *g == nil {
		*g = Goodput{}
	}
	for k, v := range x {
		(*g)[k] = v
	}
	return nil
}

// Metrics are vLLM's serving benchmark metrics over one run.
type Metrics struct {
	Completed            int
	Failed               int
	TotalInput           int
	TotalOutput          int
	DurationS            float64
	RequestThroughput    float64
	RequestGoodput       float64
	HasGoodput           bool
	OutputThroughput     float64
	TotalTokenThroughput float64
	TTFT, TPOT, ITL      Dist
	E2EL                 Dist
	// Queue is the client queue time: how late requests were started
	// against their schedule (bpfbench's own, not in vLLM).
	Queue                 Dist
	MaxOutputTokensPerS   float64
	MaxConcurrentRequests int
	// Failures counts failed requests by failure kind.
	Failures map[string]int
	// TokenSources counts successful requests by how their output tokens were counted.
	TokenSources map[string]int
	// Chunks is the number of output chunks received over all requests.
	Chunks int
	// RetriedStaleConns counts the requests sent again on a new connection
	// because the kept-alive one they were given had been closed by the
	// server (Record.RetriedStaleConn).
	RetriedStaleConns int
	// Headers is the time to the response headers (Record.HeadersNs, from
	// StartNs, ms) over the successful requests that saw them.
	Headers Dist
	// HeadersTimed counts the successful requests with both headers and a
	// chunk; HeadersWithFirstChunk those of them whose headers came with
	// their first chunk: no earlier before it than HeadersWithFirstChunkNs
	// or a tenth of the request's TTFT, whichever is longer (a loaded
	// client can take a millisecond between reading the headers and the
	// chunk that came with them).
	HeadersTimed, HeadersWithFirstChunk int
	// HeaderBlocking says that the response headers were held until the
	// first token (see HeaderBlockingShare); empty when they were not.
	HeaderBlocking string
}

// The header-blocking rule: a run says "header blocking" when at least
// HeaderBlockingShare of its successful requests got their headers within
// HeadersWithFirstChunkNs (or a tenth of their TTFT) of their first chunk and its median
// TTFT is over HeaderBlockingMinTTFTMs, so that headers and the first
// token could have been told apart had the server sent them early.
const (
	HeadersWithFirstChunkNs = int64(time.Millisecond)
	HeaderBlockingShare     = 0.9
	HeaderBlockingMinTTFTMs = 10.0
)

// Options are what a run's metrics report: the percentiles of every
// distribution and the SLOs that count a request as good (goodput). They
// are loadgen.Config's Metrics.
type Options struct {
	Percentiles []float64
	Goodput     Goodput
}

// Compute applies vLLM's calculate_metrics to the records of a run that
// lasted durS seconds.
func Compute(recs []transport.Record, durS float64, opts Options) *Metrics {
	percentiles, goodput := opts.Percentiles, opts.Goodput
	m := &Metrics{DurationS: durS, Failures: map[string]int{}, TokenSources: map[string]int{}}
	var s samples
	chunks := 0
	for i := range recs {
		chunks += len(recs[i].ChunkNs)
	}
	s.itls = make([]int64, 0, chunks)
	for i := range recs {
		r := &recs[i]
		if r.RetriedStaleConn {
			m.RetriedStaleConns++
		}
		if !r.Success {
			m.Failed++
			m.Failures[r.Failure]++
			continue
		}
		s.add(m, r, goodput)
	}
	if durS > 0 {
		m.RequestThroughput = float64(m.Completed) / durS
		m.OutputThroughput = float64(m.TotalOutput) / durS
		m.TotalTokenThroughput = float64(m.TotalInput+m.TotalOutput) / durS
		if len(goodput) > 0 {
			m.RequestGoodput = float64(s.good) / durS
		}
	}
	m.HasGoodput = len(goodput) > 0
	m.TTFT = NewDist(s.ttfts, percentiles)
	m.TPOT = NewDist(s.tpots, percentiles)
	m.ITL = NewDist(msOfNs(s.itls), percentiles)
	m.E2EL = NewDist(s.e2els, percentiles)
	m.Queue = NewDist(s.queue, percentiles)
	m.Headers = NewDist(s.headers, percentiles)
	if m.HeadersTimed > 0 && float64(m.HeadersWithFirstChunk) >= HeaderBlockingShare*float64(m.HeadersTimed) && m.TTFT.Median > HeaderBlockingMinTTFTMs {
		m.HeaderBlocking = fmt.Sprintf("header blocking: headers arrive with the first token (%d of %d requests), p50 %.0f ms after the request; a gateway (or the server) holds the connection that long",
			m.HeadersWithFirstChunk, m.HeadersTimed, m.Headers.Median)
	}
	m.MaxOutputTokensPerS, m.MaxConcurrentRequests = peaks(recs)
	return m
}

// samples holds the per-request values of a run's distributions, in ms
// (itls in ns), and the count of requests within every goodput SLO.
type samples struct {
	ttfts, tpots, e2els, queue, headers []float64
	itls                                []int64
	good                                int
}

// add counts the successful request r into m's totals and s's samples.
func (s *samples) add(m *Metrics, r *transport.Record, goodput Goodput) {
	m.Completed++
	m.Chunks += len(r.ChunkNs)
	m.TokenSources[r.TokenSource]++
	outLen := r.OutputTokens
	m.TotalOutput += outLen
	m.TotalInput += r.PromptLen
	ttft := float64(r.TTFTNs()) / 1e9
	lat := float64(r.LatencyNs()) / 1e9
	tpot := 0.0
	if outLen > 1 {
		tpot = (lat - ttft) / float64(outLen-1)
		s.tpots = append(s.tpots, tpot*1e3)
	}
	for j := 1; j < len(r.ChunkNs); j++ {
		s.itls = append(s.itls, r.ChunkNs[j]-r.ChunkNs[j-1])
	}
	s.ttfts = append(s.ttfts, ttft*1e3)
	if r.HeadersNs != 0 {
		s.headers = append(s.headers, float64(r.HeadersAfterNs())/1e6)
		if len(r.ChunkNs) > 0 {
			m.HeadersTimed++
			if r.ChunkNs[0]-r.HeadersNs <= max(HeadersWithFirstChunkNs, r.TTFTNs()/10) {
				m.HeadersWithFirstChunk++
			}
		}
	}
	s.e2els = append(s.e2els, lat*1e3)
	s.queue = append(s.queue, float64(r.QueueNs())/1e6)
	if len(goodput) > 0 && goodput.met(ttft, tpot, lat) {
		s.good++
	}
}

// met reports whether a request's TTFT, TPOT and latency, in seconds, are
// within every SLO of g.
func (g Goodput) met(ttft, tpot, lat float64) bool {
	if v, has := g["ttft"]; has && ttft > v/1e3 {
		return false
	}
	if v, has := g["tpot"]; has && tpot > v/1e3 {
		return false
	}
	if v, has := g["e2el"]; has && lat > v/1e3 {
		return false
	}
	return true
}

// peaks computes vLLM's peak output tokens per second and the concurrent
// requests at that peak, over one-second buckets.
func peaks(recs []transport.Record) (float64, int) {
	var minStart, maxEnd int64 = math.MaxInt64, math.MinInt64
	for i := range recs {
		r := &recs[i]
		if !r.Success {
			continue
		}
		minStart = min(minStart, r.StartNs)
		maxEnd = max(maxEnd, r.LastNs)
	}
	if minStart == math.MaxInt64 {
		return 0, 0
	}
	n := int(math.Ceil(float64(maxEnd-minStart)/1e9)) + 1
	tokens := make([]float64, n)
	conc := make([]int, n)
	for i := range recs {
		r := &recs[i]
		if !r.Success {
			continue
		}
		for _, t := range r.ChunkNs {
			if b := int((t - minStart) / 1e9); b >= 0 && b < n {
				tokens[b]++
			}
		}
		s := int((r.StartNs - minStart) / 1e9)
		e := int((r.LastNs - minStart) / 1e9)
		for b := s; b <= e && b < n; b++ {
			conc[b]++
		}
	}
	return slices.Max(tokens), slices.Max(conc)
}

// PercentileName formats a percentile the way vLLM names it: 99 -> "99", 99.9 -> "99.9".
func PercentileName(p float64) string {
	if p == math.Trunc(p) {
		return strconv.Itoa(int(p))
	}
	return strconv.FormatFloat(p, 'f', -1, 64)
}

// Fields returns the metrics under vLLM's result JSON names
// (mean_ttft_ms, p99_itl_ms, request_throughput, ...).
func (m *Metrics) Fields() map[string]any {
	f := map[string]any{
		"duration":                m.DurationS,
		"completed":               m.Completed,
		"failed":                  m.Failed,
		"total_input_tokens":      m.TotalInput,
		"total_output_tokens":     m.TotalOutput,
		"request_throughput":      m.RequestThroughput,
		"output_throughput":       m.OutputThroughput,
		"total_token_throughput":  m.TotalTokenThroughput,
		"max_output_tokens_per_s": m.MaxOutputTokensPerS,
		"max_concurrent_requests": m.MaxConcurrentRequests,
		"request_goodput":         nil,
	}
	if m.HasGoodput {
		f["request_goodput"] = m.RequestGoodput
	}
	for _, d := range []struct {
		name string
		d    *Dist
	}{{"ttft", &m.TTFT}, {"tpot", &m.TPOT}, {"itl", &m.ITL}, {"e2el", &m.E2EL}} {
		f["mean_"+d.name+"_ms"] = d.d.Mean
		f["median_"+d.name+"_ms"] = d.d.Median
		f["std_"+d.name+"_ms"] = d.d.Std
		for _, pv := range d.d.Percentiles {
			f["p"+PercentileName(pv.P)+"_"+d.name+"_ms"] = pv.Value
		}
	}
	return f
}

// Value returns one metric by its vLLM field name (p99_ttft_ms,
// mean_itl_ms, request_throughput, ...). Percentiles not computed for the
// run are computed on demand only if listed; otherwise ok is false.
func (m *Metrics) Value(name string) (float64, bool) {
	v, ok := m.Fields()[name]
	if !ok {
		return 0, false
	}
	switch x := v.(type) {
	case float64:
		return x, true
	case int:
		return float64(x), true
	}
	return 0, false
}

// MetricPercentile parses a metric name like "p99_ttft_ms" into the
// percentile (99) and the metric ("ttft"); ok is false for other names.
func MetricPercentile(name string) (p float64, metric string, ok bool) {
	if !strings.HasPrefix(name, "p") || !strings.HasSuffix(name, "_ms") {
		return 0, "", false
	}
	body := strings.TrimSuffix(strings.TrimPrefix(name, "p"), "_ms")
	ps, metric, found := strings.Cut(body, "_")
	if !found {
		return 0, "", false
	}
	p, err := strconv.ParseFloat(ps, 64)
	if err != nil {
		return 0, "", false
	}
	return p, metric, true
}
