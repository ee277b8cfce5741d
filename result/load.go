package result

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
)

// Loadgen is the load generator's part of result.json: vLLM's benchmark
// result fields (flat vLLM names) and bpfbench's own records under
// "bpfbench". The percentile fields (p99_ttft_ms, ...) depend on the
// run's --percentiles and are held in Document.Percentiles.
type Loadgen struct {
	Date         string  `json:"date,omitempty"`
	EndpointType string  `json:"endpoint_type,omitempty"`
	Backend      string  `json:"backend,omitempty"`
	Label        *string `json:"label,omitempty"`
	ModelID      string  `json:"model_id,omitempty"`
	TokenizerID  string  `json:"tokenizer_id,omitempty"`
	NumPrompts   int     `json:"num_prompts,omitempty"`
	// RequestRate and Burstiness are numbers, or "inf".
	RequestRate    *Rate `json:"request_rate,omitempty"`
	Burstiness     *Rate `json:"burstiness,omitempty"`
	MaxConcurrency *int  `json:"max_concurrency,omitempty"`

	Duration              float64  `json:"duration"`
	Completed             int      `json:"completed"`
	Failed                int      `json:"failed"`
	TotalInputTokens      int      `json:"total_input_tokens"`
	TotalOutputTokens     int      `json:"total_output_tokens"`
	RequestThroughput     float64  `json:"request_throughput"`
	OutputThroughput      float64  `json:"output_throughput"`
	TotalTokenThroughput  float64  `json:"total_token_throughput"`
	MaxOutputTokensPerS   float64  `json:"max_output_tokens_per_s"`
	MaxConcurrentRequests int      `json:"max_concurrent_requests"`
	RequestGoodput        *float64 `json:"request_goodput"`

	MeanTTFTMs   float64 `json:"mean_ttft_ms"`
	MedianTTFTMs float64 `json:"median_ttft_ms"`
	StdTTFTMs    float64 `json:"std_ttft_ms"`
	MeanTPOTMs   float64 `json:"mean_tpot_ms"`
	MedianTPOTMs float64 `json:"median_tpot_ms"`
	StdTPOTMs    float64 `json:"std_tpot_ms"`
	MeanITLMs    float64 `json:"mean_itl_ms"`
	MedianITLMs  float64 `json:"median_itl_ms"`
	StdITLMs     float64 `json:"std_itl_ms"`
	MeanE2ELMs   float64 `json:"mean_e2el_ms"`
	MedianE2ELMs float64 `json:"median_e2el_ms"`
	StdE2ELMs    float64 `json:"std_e2el_ms"`

	// Per request, in send order: input and output lengths (tokens),
	// TTFT and inter-token gaps (seconds), text and error ("" for none).
	InputLens      []int       `json:"input_lens,omitempty"`
	OutputLens     []int       `json:"output_lens,omitempty"`
	TTFTs          []float64   `json:"ttfts,omitempty"`
	ITLs           ITLs        `json:"itls,omitempty"`
	GeneratedTexts []string    `json:"generated_texts,omitempty"`
	Errors         []string    `json:"errors,omitempty"`
	ServerTimings  []*Timings  `json:"server_timings,omitempty" load:"omitempty"`
	PromptEntropy  *Entropy    `json:"prompt_entropy,omitempty" load:"omitempty"`
	BPFBench       *LoadDetail `json:"bpfbench,omitempty"`
}

// Rate is a number that may be infinite, written "inf" as vLLM does.
type Rate float64

// MarshalJSON writes +Inf as "inf".
func (r Rate) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(r), 1) {
		return []byte(`"inf"`), nil
	}
	return json.Marshal(float64(r))
}

// UnmarshalJSON reads a number or "inf".
func (r *Rate) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return err
		}
		*r = Rate(f)
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*r = Rate(f)
	return nil
}

// String is the rate as result.json writes it ("inf" or the number).
func (r Rate) String() string {
	if math.IsInf(float64(r), 1) {
		return "inf"
	}
	return strconv.FormatFloat(float64(r), 'f', -1, 64)
}

// ITLs are the inter-token gaps of each request, seconds. Files of other
// benchmark tools hold one flat list; it reads as one request's.
type ITLs [][]float64

// UnmarshalJSON reads a list per request or one flat list.
func (l *ITLs) UnmarshalJSON(b []byte) error {
	var nested [][]float64
	if err := json.Unmarshal(b, &nested); err == nil {
		*l = nested
		return nil
	}
	var flat []float64
	if err := json.Unmarshal(b, &flat); err != nil {
		return err
	}
	*l = ITLs{flat}
	return nil
}

// Timings are an engine's own timings of a request (llama.cpp's), in ms.
type Timings struct {
	CacheN              int     `json:"cache_n"`
	PromptN             int     `json:"prompt_n"`
	PromptMs            float64 `json:"prompt_ms"`
	PromptPerTokenMs    float64 `json:"prompt_per_token_ms"`
	PromptPerSecond     float64 `json:"prompt_per_second"`
	PredictedN          int     `json:"predicted_n"`
	PredictedMs         float64 `json:"predicted_ms"`
	PredictedPerTokenMs float64 `json:"predicted_per_token_ms"`
	PredictedPerSecond  float64 `json:"predicted_per_second"`
}

// Entropy is the run's prompt entropy (--logprobs): the first token's
// normalised entropy, clustered.
type Entropy struct {
	K            int     `json:"k"`
	N            int     `json:"n"`
	Missing      int     `json:"missing,omitempty"`
	Mean         float64 `json:"mean"`
	P50          float64 `json:"p50"`
	MeanTopKMass float64 `json:"mean_top_k_mass"`
	Thresholds   struct {
		LowBelow float64 `json:"low_below"`
		HighFrom float64 `json:"high_from"`
	} `json:"thresholds"`
	Clusters map[string]float64 `json:"clusters"`
	Counts   map[string]int     `json:"counts"`
}

// Logprobs are the first token's top log-probabilities and their entropy.
type Logprobs struct {
	Top     []float32 `json:"top"`
	Entropy float64   `json:"entropy"`
}

// Request is the load generator's record of one request (its
// transport.Record, an alias of this type): everything measured for it.
// Every *Ns field is a CLOCK_MONOTONIC timestamp in nanoseconds
// (internal/clock.Fast, loadgen.Mono), zero when the event never happened.
type Request struct {
	Index     int    `json:"index"`
	RequestID string `json:"request_id"`
	Warmup    bool   `json:"warmup,omitempty"`
	// PromptLen is the input length in tokens as the dataset knows it (vLLM's
	// prompt_len); MaxTokens the output length asked for.
	PromptLen int `json:"prompt_len"`
	MaxTokens int `json:"max_tokens"`
	// Conversation and Turn place a request of the multiturn dataset: its
	// conversation (from 1) and its turn in it (from 1); zero otherwise.
	Conversation int `json:"conversation,omitempty"`
	Turn         int `json:"turn,omitempty"`

	// ScheduledNs is when the arrival process wanted the request sent;
	// StartNs when the client started it (vLLM's start time: TTFT and E2EL
	// are measured from it); StartNs-ScheduledNs is the client queue time.
	ScheduledNs int64 `json:"scheduled_ns"`
	StartNs     int64 `json:"start_ns"`
	// SlotWaitNs is the part of the queue time spent waiting for a free
	// slot under --max-concurrency (the run's cap, not a late client).
	SlotWaitNs int64 `json:"slot_wait_ns,omitempty"`
	// ConnNs is when a connection was obtained, SentNs when the request was
	// fully written to it, FirstByteNs when the first response byte arrived.
	ConnNs      int64 `json:"conn_ns,omitempty"`
	SentNs      int64 `json:"sent_ns,omitempty"`
	FirstByteNs int64 `json:"first_byte_ns,omitempty"`
	// HeadersNs is when the response headers arrived, apart from the first
	// token: the status line and headers parsed (HTTP), the HEADERS frame
	// (gRPC: the stream's Header returned). A server or gateway that holds
	// them until the first token shows as HeadersNs at ChunkNs[0].
	HeadersNs int64 `json:"headers_ns,omitempty"`
	// ChunkNs holds the arrival time of every chunk that carried output
	// (choices); chunks delivered by one socket read share one timestamp.
	ChunkNs []int64 `json:"chunk_ns"`
	// PausedNs is when a slow-reading request (transport.SlowRead) stopped and
	// started reading again: the reader's own backpressure, not a delay of
	// the load generator.
	PausedNs *[2]int64 `json:"paused_ns,omitempty"`
	// ChunkTokens holds the tokens carried by each chunk when the server
	// reported them per chunk; nil means one token per chunk.
	ChunkTokens []int32 `json:"chunk_tokens,omitempty"`
	// LastNs is vLLM's "most recent timestamp": the last chunk with output
	// (completions) or the last data chunk (chat). E2EL is LastNs-StartNs.
	LastNs int64 `json:"last_ns,omitempty"`
	// EndNs is when the stream closed (or the request failed).
	EndNs int64 `json:"end_ns"`

	OutputTokens      int    `json:"output_tokens"`
	UsagePromptTokens int    `json:"usage_prompt_tokens,omitempty"`
	TokenSource       string `json:"token_source,omitempty"`
	TextBytes         int    `json:"text_bytes,omitempty"`

	// LocalPort is the client-side TCP port of the connection that carried
	// the request, for the join with the kernel's TCP events.
	LocalPort  int  `json:"local_port"`
	ConnReused bool `json:"conn_reused,omitempty"`
	// RetriedStaleConn is set when the request was sent on a reused
	// keep-alive connection that turned out closed before any response byte
	// (EOF or a reset on the write or the first read: the server had closed
	// it while advertising keep-alive) and was sent again, once, on a new
	// connection. Every timestamp above is the retry's: StartNs is when the
	// retry was started.
	RetriedStaleConn bool `json:"retried_stale_connection,omitempty"`

	// TraceID and SpanID are the W3C trace context the request was sent
	// with (its traceparent header, lowercase hex): its OTLP span carries
	// them, so the spans of a server that traces become its children.
	TraceID string `json:"trace_id,omitempty"`
	SpanID  string `json:"span_id,omitempty"`
	// ResponseID and ResponseModel are the "id" and "model" of the stream's
	// first chunk; FinishReasons each choice's finish_reason, in the order
	// they came.
	ResponseID    string   `json:"response_id,omitempty"`
	ResponseModel string   `json:"response_model,omitempty"`
	FinishReasons []string `json:"finish_reasons,omitempty"`
	// ServerTimings is the engine's own account of the request, when its
	// stream's last chunk carries one (llama.cpp's "timings").
	ServerTimings *Timings `json:"server_timings,omitempty"`
	// FirstToken holds the first generated token's top-K log-probabilities
	// and their normalised entropy, when the run asked for them
	// (--logprobs) and the stream carried them.
	FirstToken *Logprobs `json:"first_token_logprobs,omitempty"`

	Status  int    `json:"status"`
	Success bool   `json:"success"`
	Failure string `json:"failure,omitempty"`
	Error   string `json:"error,omitempty"`
}

// TTFTNs is the time to first token, measured from StartNs.
func (r *Request) TTFTNs() int64 {
	if len(r.ChunkNs) == 0 {
		return 0
	}
	return r.ChunkNs[0] - r.StartNs
}

// HeadersAfterNs is the time to the response headers, from StartNs; 0
// when they never came.
func (r *Request) HeadersAfterNs() int64 {
	if r.HeadersNs == 0 {
		return 0
	}
	return r.HeadersNs - r.StartNs
}

// LatencyNs is the end-to-end latency (vLLM's E2EL).
func (r *Request) LatencyNs() int64 {
	if r.LastNs == 0 {
		return 0
	}
	return r.LastNs - r.StartNs
}

// LateNs is how late the client itself started the request: its queue
// time less the wait for a slot under --max-concurrency (a load
// generator short of CPU wakes late for its sends).
func (r *Request) LateNs() int64 { return max(r.QueueNs()-r.SlotWaitNs, 0) }

// QueueNs is how late the client started the request against its schedule.
func (r *Request) QueueNs() int64 {
	if r.StartNs == 0 || r.ScheduledNs == 0 {
		return 0
	}
	return r.StartNs - r.ScheduledNs
}

// Anchor ties the monotonic clock to wall-clock time.
type Anchor struct {
	MonoNs int64 `json:"mono_ns"`
	UnixNs int64 `json:"unix_ns"`
}

// Dist is a distribution in ms: mean, median, count and percentiles
// ("p99": value).
type Dist map[string]float64

// Failure is one failed request.
type Failure struct {
	Index     int    `json:"index"`
	RequestID string `json:"request_id"`
	Kind      string `json:"kind"`
	Error     string `json:"error"`
}

// LoadDetail is the load generator's own object ("bpfbench"): the clock,
// the target, the failures, the client's cost and every request's record.
type LoadDetail struct {
	Clock                 string             `json:"clock,omitempty"`
	Anchor                Anchor             `json:"anchor"`
	StartNs               int64              `json:"start_ns"`
	EndNs                 int64              `json:"end_ns"`
	Target                string             `json:"target,omitempty"`
	Endpoint              string             `json:"endpoint,omitempty"`
	Percentiles           []float64          `json:"percentiles,omitempty"`
	Goodput               map[string]float64 `json:"goodput,omitempty"`
	FailureReasons        map[string]int     `json:"failure_reasons,omitempty"`
	Failures              []Failure          `json:"failures,omitempty"`
	TokenSources          map[string]int     `json:"token_sources,omitempty"`
	Chunks                int                `json:"chunks"`
	RetriedStaleConns     int                `json:"retried_stale_connections"`
	ClientCPUSeconds      float64            `json:"client_cpu_seconds"`
	ChunksPerCPUSecond    float64            `json:"chunks_per_cpu_second,omitempty" load:"if=client_cpu_seconds"`
	MeanQueueMs           float64            `json:"mean_queue_ms"`
	MaxQueueMs            float64            `json:"max_queue_ms"`
	Protocol              string             `json:"protocol,omitempty"`
	TimeToHeadersMs       Dist               `json:"time_to_headers_ms,omitempty"`
	HeadersWithFirstChunk int                `json:"headers_with_first_chunk"`
	HeadersTimed          int                `json:"headers_timed"`
	HeaderBlocking        *string            `json:"header_blocking,omitempty"`
	Warmup                []Request          `json:"warmup"`
	Records               []Request          `json:"records"`
}

// Metric is a numeric load field by its vLLM name (completed,
// mean_ttft_ms, ...); false for a name it does not hold.
func (l *Loadgen) Metric(name string) (float64, bool) {
	switch name {
	case "duration":
		return l.Duration, true
	case "completed":
		return float64(l.Completed), true
	case "failed":
		return float64(l.Failed), true
	case "total_input_tokens":
		return float64(l.TotalInputTokens), true
	case "total_output_tokens":
		return float64(l.TotalOutputTokens), true
	case "request_throughput":
		return l.RequestThroughput, true
	case "output_throughput":
		return l.OutputThroughput, true
	case "total_token_throughput":
		return l.TotalTokenThroughput, true
	case "max_output_tokens_per_s":
		return l.MaxOutputTokensPerS, true
	case "max_concurrent_requests":
		return float64(l.MaxConcurrentRequests), true
	case "request_goodput":
		if l.RequestGoodput == nil {
			return 0, false
		}
		return *l.RequestGoodput, true
	}
	for _, m := range []struct {
		name              string
		mean, median, std float64
	}{{"ttft", l.MeanTTFTMs, l.MedianTTFTMs, l.StdTTFTMs}, {"tpot", l.MeanTPOTMs, l.MedianTPOTMs, l.StdTPOTMs},
		{"itl", l.MeanITLMs, l.MedianITLMs, l.StdITLMs}, {"e2el", l.MeanE2ELMs, l.MedianE2ELMs, l.StdE2ELMs}} {
		switch name {
		case "mean_" + m.name + "_ms":
			return m.mean, true
		case "median_" + m.name + "_ms":
			return m.median, true
		case "std_" + m.name + "_ms":
			return m.std, true
		}
	}
	return 0, false
}

// SetLoad fills the load generator's part from its result fields (its
// JSON()): the typed fields, the percentile fields, and in Other any
// field not typed here. Each field is encoded on its own, so that no
// encoding of the whole result (the per-request lists of a long run) is
// held beside the typed copy.
func (d *Document) SetLoad(fields map[string]any) error {
	for k, v := range fields {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding the load result's %s: %w", k, err)
		}
		if f, ok := docField[k]; ok && f.load {
			dst := reflect.ValueOf(d).Elem().FieldByIndex(f.index).Addr().Interface()
			if err := json.Unmarshal(b, dst); err != nil {
				return fmt.Errorf("reading the load result's %s: %w", k, err)
			}
			continue
		}
		if _, ok := PercentileKey(k); ok {
			var f *float64
			if err := json.Unmarshal(b, &f); err != nil {
				return fmt.Errorf("reading the load result's %s: %w", k, err)
			}
			if f != nil {
				if d.Percentiles == nil {
					d.Percentiles = map[string]float64{}
				}
				d.Percentiles[k] = *f
			}
			continue
		}
		if d.Other == nil {
			d.Other = map[string]json.RawMessage{}
		}
		d.Other[k] = b
	}
	return nil
}
