package transport

// Failure kinds, the reasons a request is counted as failed.
const (
	FailHTTPStatus    = "http_status"    // the server answered with a non-200 status
	FailGRPCStatus    = "grpc_status"    // the server ended a gRPC stream with an error status
	FailConnect       = "connect"        // the connection could not be made (refused, DNS, ...)
	FailTimeout       = "timeout"        // the request ran past its total timeout
	FailStall         = "stall"          // no byte arrived for the stall timeout
	FailHeaderTimeout = "header_timeout" // the response headers were not complete within the header timeout
	FailCut           = "cut"            // the stream ended before its end ([DONE], a finish_reason, triton_final_response)
	FailMalformed     = "malformed"      // a chunk was not valid JSON (gRPC: a response without one BYTES text_output)
	FailStreamError   = "stream_error"   // the server sent an error object in the stream
	FailNoTokens      = "no_tokens"      // the stream completed without one chunk of output
	FailCanceled      = "canceled"       // the run was canceled while the request was in flight
	FailOther         = "other"
)

// Token sources, how a request's output token count was obtained.
const (
	TokensFromUsage  = "usage"  // the final usage object (stream_options.include_usage)
	TokensFromDelta  = "delta"  // per-chunk cumulative usage (continuous usage stats)
	TokensFromChunks = "chunks" // one token per chunk carrying output
)

// Record is everything measured for one request. Every *Ns field is a
// CLOCK_MONOTONIC timestamp in nanoseconds (internal/clock.Fast, loadgen.Mono), zero when the event
// never happened.
type Record struct {
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
	// PausedNs is when a slow-reading request (SlowRead) stopped and
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
	ServerTimings *ServerTimings `json:"server_timings,omitempty"`
	// FirstToken holds the first generated token's top-K log-probabilities
	// and their normalised entropy, when the run asked for them
	// (--logprobs) and the stream carried them.
	FirstToken *TokenLogprobs `json:"first_token_logprobs,omitempty"`

	Status  int    `json:"status"`
	Success bool   `json:"success"`
	Failure string `json:"failure,omitempty"`
	Error   string `json:"error,omitempty"`
}

// TTFTNs is the time to first token, measured from StartNs.
func (r *Record) TTFTNs() int64 {
	if len(r.ChunkNs) == 0 {
		return 0
	}
	return r.ChunkNs[0] - r.StartNs
}

// HeadersAfterNs is the time to the response headers, from StartNs; 0
// when they never came.
func (r *Record) HeadersAfterNs() int64 {
	if r.HeadersNs == 0 {
		return 0
	}
	return r.HeadersNs - r.StartNs
}

// LatencyNs is the end-to-end latency (vLLM's E2EL).
func (r *Record) LatencyNs() int64 {
	if r.LastNs == 0 {
		return 0
	}
	return r.LastNs - r.StartNs
}

// QueueNs is how late the client started the request against its schedule.
func (r *Record) QueueNs() int64 {
	if r.StartNs == 0 || r.ScheduledNs == 0 {
		return 0
	}
	return r.StartNs - r.ScheduledNs
}
