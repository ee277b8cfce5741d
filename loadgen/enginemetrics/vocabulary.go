// Package enginemetrics scrapes an inference server's own Prometheus
// endpoint while a load runs and maps the known engines' metric names
// (vLLM, SGLang, TGI, llama.cpp) to one vocabulary: requests running and
// waiting, KV-cache usage, preemptions, prefix-cache hit rate, queue time
// and token totals. An engine it does not know keeps its raw gauges and
// counters (bounded) and is flagged as unmatched.
//
// It also estimates, per request, how long the request waited in the
// engine's queue before its prefill could start (queue.go), from the
// engine's slot count and waiting gauge and the client's own timestamps.
package enginemetrics

import (
	"math"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// The vocabulary: one name per quantity, whatever the engine calls it.
const (
	// RequestsRunning is the number of requests in the engine's running
	// batch (its slots in use).
	RequestsRunning = "requests_running"
	// RequestsWaiting is the number of requests queued in the engine,
	// admitted but not yet scheduled.
	RequestsWaiting = "requests_waiting"
	// KVCacheUsage is the fraction of the KV cache in use, 0..1.
	KVCacheUsage = "kv_cache_usage"
	// Preemptions is the engine's cumulative count of preempted
	// (vLLM) or retracted (SGLang) requests.
	Preemptions = "preemptions_total"
	// PrefixCacheHitRate is the fraction of prompt tokens served from the
	// prefix cache, 0..1: over the interval since the previous sample
	// when the engine exports hit and query counters, else the engine's
	// own gauge.
	PrefixCacheHitRate = "prefix_cache_hit_rate"
	// QueueTimeMs is the mean time in the engine's queue of the requests
	// the engine observed since the previous sample (its histogram's sum
	// and count), in ms.
	QueueTimeMs = "queue_time_mean_ms"
	// PromptTokens and GenerationTokens are the engine's cumulative
	// prompt (prefill) and generated tokens.
	PromptTokens     = "prompt_tokens_total"
	GenerationTokens = "generation_tokens_total"
)

// Names is the vocabulary in display order.
var Names = []string{RequestsRunning, RequestsWaiting, KVCacheUsage, Preemptions, PrefixCacheHitRate, QueueTimeMs, PromptTokens, GenerationTokens}

// Engines.
const (
	EngineVLLM     = "vllm"
	EngineSGLang   = "sglang"
	EngineTGI      = "tgi"
	EngineLlamaCpp = "llamacpp"
	EngineUnknown  = "unknown"
)

// kind is how a vocabulary value is read from the engine's families.
type kind int

const (
	gauge     kind = iota // the value (summed over label sets)
	gaugeMean             // the value, averaged over label sets (ratios)
	counter               // the cumulative value (summed over label sets)
	ratio                 // Δnum / Δ(sum of den) over the interval
	histMean              // Δsum / Δcount over the interval, seconds → ms
	histSum               // the histogram's cumulative sum (token totals)
)

// source is one way an engine exports a vocabulary value.
type source struct {
	kind kind
	num  string   // the family (the numerator of a ratio)
	den  []string // a ratio's denominator: the sum of these families
}

func (s source) String() string {
	switch s.kind {
	case ratio:
		return s.num + " / (" + strings.Join(s.den, " + ") + ")"
	case histMean:
		return s.num + " (Δsum / Δcount)"
	case histSum:
		return s.num + " (sum)"
	}
	return s.num
}

// vocabularies holds, per engine and vocabulary name, the engine's
// sources in order of preference (the first present wins). Names as the
// engines' Prometheus clients expose them: Python's prometheus_client
// adds `_total` to a counter's name, Rust's metrics exporter (TGI) does
// not.
var vocabularies = map[string]map[string][]source{
	// vllm/v1/metrics/loggers.py (PrometheusStatLogger). vLLM 0.9 renamed
	// vllm:gpu_cache_usage_perc to vllm:kv_cache_usage_perc (both a
	// ratio, 1 = 100%) and vllm:gpu_prefix_cache_{hits,queries} to
	// vllm:prefix_cache_{hits,queries}; the V0 engine had a
	// vllm:gpu_prefix_cache_hit_rate gauge.
	EngineVLLM: {
		RequestsRunning: {{kind: gauge, num: "vllm:num_requests_running"}},
		RequestsWaiting: {{kind: gauge, num: "vllm:num_requests_waiting"}},
		KVCacheUsage: {
			{kind: gaugeMean, num: "vllm:kv_cache_usage_perc"},
			{kind: gaugeMean, num: "vllm:gpu_cache_usage_perc"},
		},
		Preemptions: {{kind: counter, num: "vllm:num_preemptions_total"}},
		PrefixCacheHitRate: {
			{kind: ratio, num: "vllm:prefix_cache_hits_total", den: []string{"vllm:prefix_cache_queries_total"}},
			{kind: ratio, num: "vllm:gpu_prefix_cache_hits_total", den: []string{"vllm:gpu_prefix_cache_queries_total"}},
			{kind: gaugeMean, num: "vllm:gpu_prefix_cache_hit_rate"},
		},
		QueueTimeMs:      {{kind: histMean, num: "vllm:request_queue_time_seconds"}},
		PromptTokens:     {{kind: counter, num: "vllm:prompt_tokens_total"}},
		GenerationTokens: {{kind: counter, num: "vllm:generation_tokens_total"}},
	},
	// python/sglang/srt/metrics/collector.py (SchedulerMetricsCollector,
	// TokenizerMetricsCollector). sglang:token_usage is the KV pool's
	// used fraction; retractions are SGLang's preemptions
	// (sglang:num_retracted_requests_total; the older
	// sglang:num_retracted_reqs gauge is per interval, not cumulative).
	EngineSGLang: {
		RequestsRunning:    {{kind: gauge, num: "sglang:num_running_reqs"}},
		RequestsWaiting:    {{kind: gauge, num: "sglang:num_queue_reqs"}},
		KVCacheUsage:       {{kind: gaugeMean, num: "sglang:token_usage"}},
		Preemptions:        {{kind: counter, num: "sglang:num_retracted_requests_total"}},
		PrefixCacheHitRate: {{kind: gaugeMean, num: "sglang:cache_hit_rate"}},
		QueueTimeMs:        {{kind: histMean, num: "sglang:queue_time_seconds"}},
		PromptTokens:       {{kind: counter, num: "sglang:prompt_tokens_total"}},
		GenerationTokens:   {{kind: counter, num: "sglang:generation_tokens_total"}},
	},
	// docs/source/reference/metrics.md (router/src/server.rs). TGI
	// exports no KV-cache, preemption or prefix-cache metric; its token
	// totals are the sums of its per-request histograms.
	EngineTGI: {
		RequestsRunning:  {{kind: gauge, num: "tgi_batch_current_size"}},
		RequestsWaiting:  {{kind: gauge, num: "tgi_queue_size"}},
		QueueTimeMs:      {{kind: histMean, num: "tgi_request_queue_duration"}},
		PromptTokens:     {{kind: histSum, num: "tgi_request_input_length"}},
		GenerationTokens: {{kind: histSum, num: "tgi_request_generated_tokens"}},
	},
	// tools/server/server-task.cpp (server_task_result_metrics::to_metrics),
	// served with --metrics. requests_deferred are the tasks waiting for a
	// free slot. llamacpp:kv_cache_usage_ratio was removed in 2025 builds;
	// prompt_tokens_total excludes the cached tokens counted by
	// prompt_tokens_cached_total (newer builds). No preemptions, no queue
	// time histogram.
	EngineLlamaCpp: {
		RequestsRunning:    {{kind: gauge, num: "llamacpp:requests_processing"}},
		RequestsWaiting:    {{kind: gauge, num: "llamacpp:requests_deferred"}},
		KVCacheUsage:       {{kind: gaugeMean, num: "llamacpp:kv_cache_usage_ratio"}},
		PrefixCacheHitRate: {{kind: ratio, num: "llamacpp:prompt_tokens_cached_total", den: []string{"llamacpp:prompt_tokens_cached_total", "llamacpp:prompt_tokens_total"}}},
		PromptTokens:       {{kind: counter, num: "llamacpp:prompt_tokens_total"}},
		GenerationTokens:   {{kind: counter, num: "llamacpp:tokens_predicted_total"}},
	},
}

var prefixes = []struct{ prefix, engine string }{
	{"vllm:", EngineVLLM}, {"sglang:", EngineSGLang}, {"tgi_", EngineTGI}, {"llamacpp:", EngineLlamaCpp},
}

// Detect names the engine whose prefix most families carry, or
// EngineUnknown.
func Detect(families map[string]*dto.MetricFamily) string {
	best, bestN := EngineUnknown, 0
	for _, p := range prefixes {
		n := 0
		for name := range families {
			if strings.HasPrefix(name, p.prefix) {
				n++
			}
		}
		if n > bestN {
			best, bestN = p.engine, n
		}
	}
	return best
}

// reading is what one scrape holds of a family: its value, or a
// histogram's (or summary's) sum and count, over every label set.
type reading struct {
	value, sum, count float64
	n                 int // label sets
}

// readFamily aggregates a family's label sets.
func readFamily(mf *dto.MetricFamily) reading {
	var r reading
	for _, m := range mf.GetMetric() {
		r.n++
		switch {
		case m.Gauge != nil:
			r.value += m.Gauge.GetValue()
		case m.Counter != nil:
			r.value += m.Counter.GetValue()
		case m.Untyped != nil:
			r.value += m.Untyped.GetValue()
		case m.Histogram != nil:
			r.sum += m.Histogram.GetSampleSum()
			r.count += float64(m.Histogram.GetSampleCount())
		case m.Summary != nil:
			r.sum += m.Summary.GetSampleSum()
			r.count += float64(m.Summary.GetSampleCount())
		default:
			r.n--
		}
	}
	return r
}

// snapshot is one scrape reduced to the families the vocabulary reads.
type snapshot map[string]reading

// vocabulary maps one engine's snapshots to values.
type vocabulary struct {
	engine  string
	sources map[string][]source
	chosen  map[string]source // the source each name was first read from
}

func newVocabulary(engine string) *vocabulary {
	return &vocabulary{engine: engine, sources: vocabularies[engine], chosen: map[string]source{}}
}

// families lists every family the vocabulary may read.
func (v *vocabulary) families() map[string]bool {
	out := map[string]bool{}
	for _, srcs := range v.sources {
		for _, s := range srcs {
			out[s.num] = true
			for _, d := range s.den {
				out[d] = true
			}
		}
	}
	return out
}

func (v *vocabulary) snapshot(families map[string]*dto.MetricFamily) snapshot {
	snap := snapshot{}
	for name := range v.families() {
		if mf, ok := families[name]; ok {
			snap[name] = readFamily(mf)
		}
	}
	return snap
}

// values maps a snapshot to the vocabulary; prev is the previous
// snapshot (nil for the first), for the values per interval. A counter
// that went down (the engine restarted) gives no interval value.
func (v *vocabulary) values(cur, prev snapshot) map[string]float64 {
	out := map[string]float64{}
	for name, srcs := range v.sources {
		for _, s := range srcs {
			val, present, ok := s.read(cur, prev)
			if !present {
				continue
			}
			if _, seen := v.chosen[name]; !seen {
				v.chosen[name] = s
			}
			if ok && !math.IsNaN(val) && !math.IsInf(val, 0) {
				out[name] = val
			}
			break
		}
	}
	return out
}

// read is the source's value; present says its families are in the
// scrape, ok that it has a value this interval.
func (s source) read(cur, prev snapshot) (val float64, present, ok bool) {
	r, found := cur[s.num]
	if !found || r.n == 0 {
		return 0, false, false
	}
	switch s.kind {
	case gauge, counter:
		return r.value, true, true
	case gaugeMean:
		return r.value / float64(r.n), true, true
	case histSum:
		return r.sum, true, true
	case histMean:
		p, had := prev[s.num]
		if !had {
			return 0, true, false
		}
		dc, ds := r.count-p.count, r.sum-p.sum
		if dc <= 0 || ds < 0 {
			return 0, true, false
		}
		return ds / dc * 1e3, true, true
	case ratio:
		var den, pden float64
		for _, d := range s.den {
			cr, found := cur[d]
			if !found {
				return 0, false, false
			}
			den += cr.value
			pden += prev[d].value
		}
		p, had := prev[s.num]
		if !had {
			return 0, true, false
		}
		dn, dd := r.value-p.value, den-pden
		if dd <= 0 || dn < 0 {
			return 0, true, false
		}
		return dn / dd, true, true
	}
	return 0, false, false
}

// Sources says which of the engine's metrics each vocabulary name was
// read from.
func (v *vocabulary) Sources() map[string]string {
	out := make(map[string]string, len(v.chosen))
	for name, s := range v.chosen {
		out[name] = s.String()
	}
	return out
}

// rawKey names a series: the family and its labels, sorted.
func rawKey(name string, m *dto.Metric) string {
	lp := m.GetLabel()
	if len(lp) == 0 {
		return name
	}
	parts := make([]string, 0, len(lp))
	for _, l := range lp {
		parts = append(parts, l.GetName()+"="+`"`+l.GetValue()+`"`)
	}
	sort.Strings(parts)
	return name + "{" + strings.Join(parts, ",") + "}"
}

// rawValues reads every gauge, counter and untyped series of a scrape.
func rawValues(families map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			switch {
			case m.Gauge != nil:
				out[rawKey(name, m)] = m.Gauge.GetValue()
			case m.Counter != nil:
				out[rawKey(name, m)] = m.Counter.GetValue()
			case m.Untyped != nil:
				out[rawKey(name, m)] = m.Untyped.GetValue()
			}
		}
	}
	return out
}

// overall is the vocabulary from first to last: interval values over the
// span, counters and token totals as their increase, gauges as last.
func (v *vocabulary) overall(last, first snapshot) map[string]float64 {
	if last == nil || first == nil {
		return nil
	}
	out := map[string]float64{}
	for name, s := range v.chosen {
		val, _, ok := s.read(last, first)
		if !ok {
			continue
		}
		if s.kind == counter || s.kind == histSum {
			f, _, fok := s.read(first, nil)
			if !fok || val < f {
				continue
			}
			val -= f
		}
		out[name] = val
	}
	return out
}
