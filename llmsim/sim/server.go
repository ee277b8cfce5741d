// Package sim is llmsim, a simulated OpenAI-compatible streaming LLM server
// that behaves like a real engine on a CPU: continuous batching under a
// --max-num-seqs cap with a waiting queue, prefill cost proportional to the
// input tokens, decode steps made of real CPU work (so CPU contention really
// slows it), optional O_DIRECT reads per step (so disk contention does),
// optional CUDA driver calls per step through dlopen, vLLM's /metrics names,
// and error injection for tests.
package sim

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Work modes of a step.
const (
	WorkCPU   = "cpu"   // burn the step's duration in CPU time
	WorkSleep = "sleep" // sleep for the step's duration
)

// Fault kinds, injected by rate or forced per request with the
// X-Llmsim-Fault header.
const (
	FaultHTTP500   = "500"       // answer 500 before streaming
	FaultStall     = "stall"     // stop sending after the first token, keep the connection open
	FaultCut       = "cut"       // close the connection after the first token
	FaultMalformed = "malformed" // send a chunk that is not valid JSON after the first token
	FaultError     = "error"     // send an error object in the stream after the first token
)

// Config configures the simulator.
type Config struct {
	Model           string
	MaxNumSeqs      int
	MaxModelLen     int
	KVCacheTokens   int
	PrefillBase     time.Duration
	PrefillPerToken time.Duration
	DecodeStep      time.Duration
	// StepControl, when set, is a file holding the decode step in µs,
	// read every 50 ms while the server runs: the step's work raised or
	// lowered from outside (validate's compute row). Until it reads, and
	// while it cannot, DecodeStep holds.
	StepControl     string
	BatchSlowdown   float64
	Jitter          float64
	Work            string
	EOSProb         float64
	IOFile          string
	IOBytes         int
	CUDALib         string
	CUDAKernelIters int
	// KVBytesPerSeq, with CUDALib, is the device memory each sequence's KV
	// cache takes: allocated (cuMemAlloc_v2) when the engine admits it,
	// freed when it ends; a request whose allocation fails gets an error
	// ("CUDA out of memory"), as from a real engine. 0: no allocation.
	KVBytesPerSeq int64
	FailRate      float64
	StallRate     float64
	CutRate       float64
	MalformedRate float64
	ErrorRate     float64
	Seed          uint64
	// DelayHeaders holds the HTTP response headers until the first chunk
	// (they go out in its write) instead of sending them before the
	// prefill; GRPCDelayHeaders does the same on the gRPC side, and
	// GRPCCloseAfter ends every gRPC stream, status OK, after that many
	// responses (0: never), before its final one.
	DelayHeaders     bool
	GRPCDelayHeaders bool
	GRPCCloseAfter   int
	// Logprobs spreads the synthetic first-token distributions of the
	// prompts, answered to a request with logprobs, over the entropy
	// clusters (logprobs.go).
	Logprobs LogprobsProfile
	// Processes is 1 (one process does everything) or 2: this process is
	// the frontend (HTTP and gRPC, tokenizing, detokenizing, /metrics) and
	// runs the scheduler and the steps in a child process, the engine,
	// over a unix socket, as vLLM's V1 does (remote.go).
	Processes int
	// EngineLazy starts the engine process at the first generation request
	// instead of at New, so that a tracer attached to the frontend
	// meanwhile sees the fork (bpfbench's scheduler collector follows the
	// children a target forks once it runs, not those it had before).
	EngineLazy bool
}

// DefaultConfig returns the defaults of the flags.
func DefaultConfig() Config {
	return Config{
		Model:           "llmsim",
		MaxNumSeqs:      256,
		MaxModelLen:     4096,
		PrefillBase:     2 * time.Millisecond,
		PrefillPerToken: 20 * time.Microsecond,
		DecodeStep:      10 * time.Millisecond,
		BatchSlowdown:   0.01,
		Work:            WorkCPU,
		EOSProb:         0.005,
		IOBytes:         64 << 10,
		CUDAKernelIters: 1 << 14,
		Seed:            1,
		Logprobs:        LogprobsProfile{1.0 / 3, 1.0 / 3, 1.0 / 3},
		Processes:       defaultProcesses(),
	}
}

// RegisterFlags defines the simulator's flags on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Model, "model", c.Model, "model name served")
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", c.MaxNumSeqs, "most sequences in a batch; the rest wait in the queue")
	fs.IntVar(&c.MaxModelLen, "max-model-len", c.MaxModelLen, "context length: input + output tokens")
	fs.IntVar(&c.KVCacheTokens, "kv-cache-tokens", c.KVCacheTokens, "KV cache size in tokens, for vllm:gpu_cache_usage_perc (0: max-num-seqs * max-model-len / 4)")
	fs.DurationVar(&c.PrefillBase, "prefill-base", c.PrefillBase, "fixed cost of prefilling one request")
	fs.DurationVar(&c.PrefillPerToken, "prefill-per-token", c.PrefillPerToken, "prefill cost per input token")
	fs.DurationVar(&c.DecodeStep, "itl", c.DecodeStep, "duration of a decode step with one sequence (the inter-token latency)")
	fs.StringVar(&c.StepControl, "step-control", c.StepControl, "a `file` holding the decode step in µs, read every 50 ms: --itl changed while the server runs")
	fs.Float64Var(&c.BatchSlowdown, "batch-slowdown", c.BatchSlowdown, "extra decode step time per additional sequence in the batch, as a fraction of --itl")
	fs.Float64Var(&c.Jitter, "jitter", c.Jitter, "step time jitter: uniform in ±this fraction")
	fs.StringVar(&c.Work, "work", c.Work, "step work: cpu (burns CPU time, slowed by CPU contention) or sleep")
	fs.Float64Var(&c.EOSProb, "eos-prob", c.EOSProb, "probability per token of an EOS when the request does not set ignore_eos")
	fs.StringVar(&c.IOFile, "io-file", c.IOFile, "read this file with O_DIRECT at every step (like KV offload)")
	fs.IntVar(&c.IOBytes, "io-bytes", c.IOBytes, "bytes read from --io-file per step")
	fs.StringVar(&c.CUDALib, "cuda-lib", c.CUDALib, "dlopen this CUDA driver library (libcuda.so.1 or tools/cudastub) and call it at every step")
	fs.IntVar(&c.CUDAKernelIters, "cuda-kernel-iters", c.CUDAKernelIters, "loop length of the step kernel on a real GPU")
	fs.Int64Var(&c.KVBytesPerSeq, "kv-bytes-per-seq", c.KVBytesPerSeq, "with --cuda-lib: allocate this many bytes of device memory (cuMemAlloc_v2) for each sequence's KV cache when the engine admits it, freed when it ends; a request whose allocation fails (out of memory) fails with HTTP 500 or an error in its stream (0: off)")
	fs.Float64Var(&c.FailRate, "fail-rate", c.FailRate, "fraction of requests answered with HTTP 500")
	fs.Float64Var(&c.StallRate, "stall-rate", c.StallRate, "fraction of requests that stall after their first token")
	fs.Float64Var(&c.CutRate, "cut-rate", c.CutRate, "fraction of requests whose connection is cut after their first token")
	fs.Float64Var(&c.MalformedRate, "malformed-rate", c.MalformedRate, "fraction of requests that get a malformed JSON chunk")
	fs.Float64Var(&c.ErrorRate, "error-rate", c.ErrorRate, "fraction of requests that get an error object in the stream")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "random seed")
	fs.BoolVar(&c.DelayHeaders, "delay-headers", c.DelayHeaders, "HTTP: send the response headers with the first chunk instead of before the prefill (as a gateway that buffers them would)")
	fs.BoolVar(&c.GRPCDelayHeaders, "grpc-delay-headers", c.GRPCDelayHeaders, "gRPC: send the response headers with the first response instead of before the prefill")
	fs.Var(&c.Logprobs, "logprobs-profile", "synthetic top-K logprobs of a request that asks for them, the same for a prompt every time (by its hash): low, mid, high (every prompt's normalised first-token entropy in that cluster: <1/3, <2/3, ≥2/3), mixed, or low=F,mid=F,high=F (the clusters' fractions)")
	fs.IntVar(&c.Processes, "processes", c.Processes, "1: one process; 2: a frontend (HTTP, gRPC, tokenize, detokenize, /metrics) and an engine child process (scheduler, steps, IO, CUDA calls) over a unix socket, as vLLM V1")
	fs.BoolVar(&c.EngineLazy, "engine-lazy", c.EngineLazy, "with --processes 2: start the engine process at the first generation request instead of at startup")
	fs.IntVar(&c.GRPCCloseAfter, "grpc-close-after", c.GRPCCloseAfter, "gRPC: end every stream (status OK) after this many responses, before its final one (0: never)")
}

func (c *Config) validate() error {
	switch {
	case c.MaxNumSeqs < 1:
		return errors.New("--max-num-seqs must be at least 1")
	case c.MaxModelLen < 2:
		return errors.New("--max-model-len must be at least 2")
	case c.Work != WorkCPU && c.Work != WorkSleep:
		return fmt.Errorf("--work %q: use cpu or sleep", c.Work)
	case c.PrefillBase < 0 || c.PrefillPerToken < 0 || c.DecodeStep < 0:
		return errors.New("durations must not be negative")
	case c.GRPCCloseAfter < 0:
		return errors.New("--grpc-close-after must not be negative")
	case c.KVBytesPerSeq < 0:
		return errors.New("--kv-bytes-per-seq must not be negative")
	case c.KVBytesPerSeq > 0 && c.CUDALib == "":
		return errors.New("--kv-bytes-per-seq allocates device memory: it needs --cuda-lib (libcuda.so.1 or tools/cudastub's)")
	case c.Processes != 1 && c.Processes != 2:
		return fmt.Errorf("--processes %d: use 1 or 2", c.Processes)
	}
	return nil
}

type metrics struct {
	reg              *prometheus.Registry
	running, waiting prometheus.Gauge
	gpuCache, kvUse  prometheus.Gauge
	promptTokens     prometheus.Counter
	generationTokens prometheus.Counter
	success          *prometheus.CounterVec
	ttft, itl, tpot  prometheus.Histogram
	e2e, queueTime   prometheus.Histogram
	stepDuration     prometheus.Histogram
	faults           *prometheus.CounterVec
	kvAllocFailures  prometheus.Counter
}

func (m *metrics) cacheUsage(v float64) {
	v = min(v, 1)
	m.gpuCache.Set(v)
	m.kvUse.Set(v)
}

func newMetrics(model string) *metrics {
	reg := prometheus.NewRegistry()
	l := prometheus.Labels{"model_name": model}
	lat := []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	g := func(name, help string) prometheus.Gauge {
		x := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: l})
		reg.MustRegister(x)
		return x
	}
	c := func(name, help string) prometheus.Counter {
		x := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: l})
		reg.MustRegister(x)
		return x
	}
	h := func(name, help string) prometheus.Histogram {
		x := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: l, Buckets: lat})
		reg.MustRegister(x)
		return x
	}
	m := &metrics{
		reg:              reg,
		running:          g("vllm:num_requests_running", "Number of requests in model execution batches."),
		waiting:          g("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
		gpuCache:         g("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage."),
		kvUse:            g("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
		promptTokens:     c("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		generationTokens: c("vllm:generation_tokens_total", "Number of generation tokens processed."),
		ttft:             h("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
		itl:              h("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
		tpot:             h("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds."),
		e2e:              h("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds."),
		queueTime:        h("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request."),
		stepDuration:     h("llmsim_step_duration_seconds", "Duration of one engine step (prefill and decode)."),
		kvAllocFailures:  c("llmsim_kv_alloc_failures_total", "Requests failed because their KV cache allocation (cuMemAlloc_v2, --kv-bytes-per-seq) ran out of device memory."),
	}
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: l}, []string{"finished_reason"})
	m.faults = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmsim_injected_faults_total", Help: "Faults injected, by kind.", ConstLabels: l}, []string{"kind"})
	reg.MustRegister(m.success, m.faults)
	return m
}

// Server is a running simulator.
type Server struct {
	cfg     Config
	log     *slog.Logger
	eng     backend
	m       *metrics
	mux     *http.ServeMux
	cancel  context.CancelFunc
	nextID  atomic.Uint64
	rngMu   sync.Mutex
	rng     *rand.Rand
	created int64
	once    sync.Once
}

// New validates cfg, opens the devices it names and starts the engine.
// Close stops it.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.KVCacheTokens <= 0 {
		cfg.KVCacheTokens = max(cfg.MaxNumSeqs*cfg.MaxModelLen/4, 1)
	}
	s := &Server{
		cfg:     cfg,
		log:     slog.Default().With("component", "llmsim"),
		m:       newMetrics(cfg.Model),
		rng:     rand.New(rand.NewPCG(cfg.Seed, 0x666c74)),
		created: time.Now().Unix(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if cfg.Processes == 2 {
		r, err := startRemote(&s.cfg, s.m, s.log)
		if err != nil {
			cancel()
			return nil, err
		}
		s.eng = r
	} else {
		e := newEngine(&s.cfg, localOut{s.m}, s.log)
		if err := e.start(ctx); err != nil {
			cancel()
			return nil, err
		}
		s.eng = e
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, true) })
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}))
	s.mux = mux
	return s, nil
}

// Handler serves the OpenAI-compatible API, /health and /metrics.
func (s *Server) Handler() http.Handler { return s.mux }

// backend is the engine as the frontend sees it: in this process
// (*engine) or in a child process over a socket (*remoteEngine).
type backend interface {
	submit(*seq)
	// cancel takes s out of the batch at the next step.
	cancel(*seq)
	stats() Stats
	close() error
}

func (e *engine) cancel(s *seq) { s.canceled.Store(true) }
func (e *engine) close() error  { return nil }
func (e *engine) stats() Stats {
	return Stats{Steps: e.steps.Load(), IOErrors: e.ioErrs.Load(), CUDAErrors: e.gpuErrs.Load()}
}

// Steps returns the number of engine steps run so far.
func (s *Server) Steps() int64 { return s.eng.stats().Steps }

// EnginePid is the engine process's pid with Processes 2, else 0.
func (s *Server) EnginePid() int {
	if r, ok := s.eng.(*remoteEngine); ok {
		return int(r.pid.Load())
	}
	return 0
}

// Stats are the engine's counters.
type Stats struct {
	Steps      int64 // engine steps run
	IOErrors   int64 // failed --io-file reads
	CUDAErrors int64 // steps whose CUDA calls failed
}

// Stats returns the engine's counters.
func (s *Server) Stats() Stats { return s.eng.stats() }

// Close stops the engine (and waits for its process with Processes 2). It
// is idempotent.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		s.cancel()
		err = s.eng.close()
	})
	return err
}

// Serve serves on l until ctx ends.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	hs := &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	}()
	err := hs.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": s.cfg.Model, "object": "model", "created": s.created, "owned_by": "llmsim",
			"root": s.cfg.Model, "max_model_len": s.cfg.MaxModelLen,
		}},
	})
}

// apiRequest is the part of a completions or chat request llmsim reads.
type apiRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []apiMessage    `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage         bool `json:"include_usage"`
		ContinuousUsageStats bool `json:"continuous_usage_stats"`
	} `json:"stream_options"`
	IgnoreEOS bool `json:"ignore_eos"`
	N         *int `json:"n"`
	// Logprobs is an integer K (completions) or a boolean (chat, with
	// TopLogprobs K).
	Logprobs    json.RawMessage `json:"logprobs"`
	TopLogprobs *int            `json:"top_logprobs"`
}

type apiMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

func writeError(w http.ResponseWriter, status int, typ, param, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"object": "error",
		"error":  map[string]any{"message": msg, "type": typ, "param": param, "code": status},
	})
}

// countText returns the tokens of a prompt or message content: a string,
// a list of strings, or a list of {type: text, text} parts. Tokens are
// whitespace-separated words.
func countText(raw json.RawMessage) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var str string
	if err := json.Unmarshal(raw, &str); err == nil {
		return len(strings.Fields(str)), nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return 0, errors.New("must be a string or a list")
	}
	n := 0
	for _, item := range list {
		var s string
		if err := json.Unmarshal(item, &s); err == nil {
			n += len(strings.Fields(s))
			continue
		}
		var part struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(item, &part); err != nil {
			return 0, errors.New("list items must be strings or text parts")
		}
		n += len(strings.Fields(part.Text))
	}
	return n, nil
}

func (s *Server) pickFault(r *http.Request) string {
	if f := r.Header.Get("X-Llmsim-Fault"); f != "" {
		return f
	}
	return s.drawFault()
}

// drawFault draws a request's fault from the configured rates.
func (s *Server) drawFault() string {
	if s.cfg.FailRate+s.cfg.StallRate+s.cfg.CutRate+s.cfg.MalformedRate+s.cfg.ErrorRate == 0 {
		return ""
	}
	s.rngMu.Lock()
	x := s.rng.Float64()
	s.rngMu.Unlock()
	for _, f := range []struct {
		rate float64
		kind string
	}{{s.cfg.FailRate, FaultHTTP500}, {s.cfg.StallRate, FaultStall}, {s.cfg.CutRate, FaultCut}, {s.cfg.MalformedRate, FaultMalformed}, {s.cfg.ErrorRate, FaultError}} {
		if x < f.rate {
			return f.kind
		}
		x -= f.rate
	}
	return ""
}

var words = strings.Fields(`the of and to in is was for on are with as at be by this have from or one had not but
what all were when we there can an your which their said if do will each about how up out them then she many some
so these would other into has more her two like him see time could no make than first been its who now people my`)

// generate serves a completion request, or a chat completion one when
// chat: it checks the request, submits it to the engine and answers.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	reqID := r.Header.Get("X-Request-Id")
	if reqID == "" {
		reqID = "llmsim-" + strconv.FormatUint(s.nextID.Add(1), 10)
	}
	w.Header().Set("X-Request-Id", reqID)
	var req apiRequest
	if e := readRequest(r, &req); e != nil {
		e.write(w)
		return
	}
	promptLen, maxTokens, e := s.lengths(&req, chat)
	if e != nil {
		e.write(w)
		return
	}
	topK, err := requestLogprobs(&req, chat)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "logprobs", err.Error())
		return
	}
	var lps []float64
	if topK >= 0 {
		lps = s.cfg.Logprobs.TopLogprobs(promptText(&req, chat), max(topK, 1))
	}
	fault := s.pickFault(r)
	if fault != "" {
		s.m.faults.WithLabelValues(fault).Inc()
	}
	if fault == FaultHTTP500 {
		writeError(w, http.StatusInternalServerError, "internal_server_error", "", "injected failure")
		return
	}

	sq := &seq{
		id:        reqID,
		promptLen: promptLen,
		maxTokens: maxTokens,
		ignoreEOS: req.IgnoreEOS,
		out:       make(chan token, maxTokens+1),
		arrival:   time.Now(),
	}
	defer s.eng.cancel(sq)
	s.eng.submit(sq)

	model := req.Model
	if model == "" {
		model = s.cfg.Model
	}
	if !req.Stream {
		s.complete(w, r, sq, chat, model, reqID)
		return
	}
	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	continuous := req.StreamOptions != nil && req.StreamOptions.ContinuousUsageStats
	s.stream(w, r, sq, chat, model, reqID, fault, includeUsage, continuous, lps, topK)
}

// badRequest is a request the API refuses (400, invalid_request_error):
// the parameter at fault and why.
type badRequest struct{ param, msg string }

// write answers the request with the error.
func (e *badRequest) write(w http.ResponseWriter) {
	writeError(w, http.StatusBadRequest, "invalid_request_error", e.param, e.msg)
}

// readRequest reads the body of r into req and checks that it asks for
// one choice.
func readRequest(r *http.Request, req *apiRequest) *badRequest {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		return &badRequest{"", "reading the request body: " + err.Error()}
	}
	if err := json.Unmarshal(body, req); err != nil {
		return &badRequest{"", "the request body is not valid JSON: " + err.Error()}
	}
	if req.N != nil && *req.N > 1 {
		return &badRequest{"n", fmt.Sprintf("n=%d is not supported: llmsim generates one choice per request (n must be 1)", *req.N)}
	}
	return nil
}

// lengths returns the tokens of req's prompt (at least 1) and the tokens
// to generate, and checks that both fit the model's context.
func (s *Server) lengths(req *apiRequest, chat bool) (promptLen, maxTokens int, e *badRequest) {
	promptLen, e = promptTokens(req, chat)
	if e != nil {
		return 0, 0, e
	}
	promptLen = max(promptLen, 1)
	if promptLen >= s.cfg.MaxModelLen {
		return 0, 0, &badRequest{"prompt", fmt.Sprintf("the prompt has %d tokens; this model's maximum context length is %d", promptLen, s.cfg.MaxModelLen)}
	}
	maxTokens = 16
	if chat {
		maxTokens = s.cfg.MaxModelLen - promptLen
	}
	if req.MaxCompletionTokens != nil {
		maxTokens = *req.MaxCompletionTokens
	} else if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	if maxTokens < 1 {
		return 0, 0, &badRequest{"max_tokens", "max_tokens must be at least 1"}
	}
	if promptLen+maxTokens > s.cfg.MaxModelLen {
		return 0, 0, &badRequest{"max_tokens", fmt.Sprintf("prompt (%d) + max_tokens (%d) exceed this model's maximum context length %d", promptLen, maxTokens, s.cfg.MaxModelLen)}
	}
	return promptLen, maxTokens, nil
}

// promptTokens counts the tokens of req's prompt, or of its messages for
// chat.
func promptTokens(req *apiRequest, chat bool) (int, *badRequest) {
	if !chat {
		n, err := countText(req.Prompt)
		if err != nil {
			return 0, &badRequest{"prompt", "prompt " + err.Error()}
		}
		return n, nil
	}
	if len(req.Messages) == 0 {
		return 0, &badRequest{"messages", "messages must not be empty"}
	}
	promptLen := 0
	for _, m := range req.Messages {
		n, err := countText(m.Content)
		if err != nil {
			return 0, &badRequest{"messages", "message content " + err.Error()}
		}
		promptLen += n
	}
	return promptLen, nil
}

// chunkWriter builds stream chunks without fmt.
type chunkWriter struct {
	prefix []byte // `data: {"id":...,"model":...,"choices":[{"index":0,`
	buf    []byte
	chat   bool
	// lps are the top logprobs every token carries (nil: "logprobs":
	// null), top how many of them are listed.
	lps []float64
	top int
}

func newChunkWriter(chat bool, id, model string, created int64) *chunkWriter {
	idj, _ := json.Marshal(id)
	mj, _ := json.Marshal(model)
	obj := `"text_completion"`
	if chat {
		obj = `"chat.completion.chunk"`
	}
	p := []byte(`data: {"id":`)
	p = append(p, idj...)
	p = append(p, `,"object":`...)
	p = append(p, obj...)
	p = append(p, `,"created":`...)
	p = strconv.AppendInt(p, created, 10)
	p = append(p, `,"model":`...)
	p = append(p, mj...)
	return &chunkWriter{prefix: p, chat: chat}
}

func (c *chunkWriter) token(t token, promptLen int, continuous bool) {
	b := append(c.buf, c.prefix...)
	b = append(b, `,"choices":[{"index":0,`...)
	if c.chat {
		b = append(b, `"delta":{`...)
		if t.index == 0 {
			b = append(b, `"role":"assistant",`...)
		}
		b = append(b, `"content":" `...)
		b = append(b, words[t.index%len(words)]...)
		b = append(b, `"},"logprobs":`...)
	} else {
		b = append(b, `"text":" `...)
		b = append(b, words[t.index%len(words)]...)
		b = append(b, `","logprobs":`...)
	}
	if c.lps == nil {
		b = append(b, "null"...)
	} else {
		b = appendLogprobs(b, c.chat, " "+words[t.index%len(words)], c.lps, c.top)
	}
	b = append(b, `,"finish_reason":`...)
	if t.finish == "" {
		b = append(b, "null"...)
	} else {
		b = append(b, '"')
		b = append(b, t.finish...)
		b = append(b, '"')
	}
	b = append(b, '}', ']')
	if continuous {
		b = appendUsage(b, promptLen, t.index+1)
	}
	b = append(b, "}\n\n"...)
	c.buf = b
}

func appendUsage(b []byte, prompt, completion int) []byte {
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt+completion), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(completion), 10)
	return append(b, '}')
}

func (c *chunkWriter) usage(prompt, completion int) {
	b := append(c.buf, c.prefix...)
	b = append(b, `,"choices":[]`...)
	b = appendUsage(b, prompt, completion)
	c.buf = append(b, "}\n\n"...)
}

// stream answers a streaming request with one SSE event per token
// (coalesced when the engine is ahead of the writes), acting out fault
// after the first write.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, sq *seq, chat bool, model, reqID, fault string, includeUsage, continuous bool, lps []float64, topK int) {
	rc, cw := s.openStream(w, chat, model, reqID)
	cw.lps, cw.top = lps, topK
	var st streamState
	for st.finish == "" {
		var t token
		select {
		case t = <-sq.out:
		case <-r.Context().Done():
			return
		}
		// Coalesce what the engine already produced: one write, one flush.
		cw.buf = cw.buf[:0]
		for {
			if t.finish == finishOOM {
				// The headers are out: the error goes in the stream.
				w.Write(append(cw.buf, "data: {\"object\":\"error\",\"error\":{\"message\":\""+oomMessage+"\",\"type\":\"internal_server_error\",\"code\":500}}\n\ndata: [DONE]\n\n"...))
				rc.Flush()
				return
			}
			cw.token(t, sq.promptLen, continuous)
			st.n++
			s.observeToken(t, sq, &st.first, &st.last)
			if t.finish != "" {
				st.finish = t.finish
				break
			}
			select {
			case t = <-sq.out:
				continue
			default:
			}
			break
		}
		if _, err := w.Write(cw.buf); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if fault != "" && st.n >= 1 {
			var done bool
			if fault, done = s.injectFault(w, r, rc, sq, fault); done {
				return
			}
		}
	}
	s.endStream(w, rc, cw, sq, includeUsage, &st)
}

// streamState is what a stream has sent: its tokens, when the first and
// the last went out, and why it finished.
type streamState struct {
	n           int
	first, last time.Time
	finish      string
}

// openStream sends the stream's headers (flushed now unless DelayHeaders)
// and returns its controller and chunk writer.
func (s *Server) openStream(w http.ResponseWriter, chat bool, model, reqID string) (*http.ResponseController, *chunkWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if !s.cfg.DelayHeaders {
		rc.Flush()
	}
	idPrefix := "cmpl-"
	if chat {
		idPrefix = "chatcmpl-"
	}
	return rc, newChunkWriter(chat, idPrefix+reqID, model, time.Now().Unix())
}

// injectFault acts out fault once tokens are out: a stall, a cut or an
// error event ends the stream (done); a malformed event is written once
// and the fault cleared.
func (s *Server) injectFault(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, sq *seq, fault string) (string, bool) {
	switch fault {
	case FaultStall:
		s.eng.cancel(sq)
		<-r.Context().Done()
		return fault, true
	case FaultCut:
		s.eng.cancel(sq)
		panic(http.ErrAbortHandler)
	case FaultError:
		s.eng.cancel(sq)
		w.Write([]byte("data: {\"object\":\"error\",\"error\":{\"message\":\"injected error in stream\",\"type\":\"internal_server_error\",\"code\":500}}\n\ndata: [DONE]\n\n"))
		rc.Flush()
		return fault, true
	case FaultMalformed:
		w.Write([]byte("data: {\"choices\":[{\"index\":0,\"text\": broken\n\n"))
		rc.Flush()
		return "", false
	}
	return fault, false
}

// endStream writes the usage event (when asked) and [DONE], and observes
// the request's end.
func (s *Server) endStream(w http.ResponseWriter, rc *http.ResponseController, cw *chunkWriter, sq *seq, includeUsage bool, st *streamState) {
	cw.buf = cw.buf[:0]
	if includeUsage {
		cw.usage(sq.promptLen, st.n)
	}
	cw.buf = append(cw.buf, "data: [DONE]\n\n"...)
	w.Write(cw.buf)
	rc.Flush()
	s.m.success.WithLabelValues(st.finish).Inc()
	s.m.e2e.Observe(st.last.Sub(sq.arrival).Seconds())
	if st.n > 1 {
		s.m.tpot.Observe(st.last.Sub(st.first).Seconds() / float64(st.n-1))
	}
}

func (s *Server) observeToken(t token, sq *seq, first, last *time.Time) {
	if t.index == 0 {
		*first = t.at
		s.m.ttft.Observe(t.at.Sub(sq.arrival).Seconds())
	} else {
		s.m.itl.Observe(t.at.Sub(*last).Seconds())
	}
	*last = t.at
}

// complete answers a non-streaming request once every token is generated.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, sq *seq, chat bool, model, reqID string) {
	var text strings.Builder
	var first, last time.Time
	n := 0
	finish := ""
	for finish == "" {
		select {
		case t := <-sq.out:
			if t.finish == finishOOM {
				writeError(w, http.StatusInternalServerError, "internal_server_error", "", oomMessage)
				return
			}
			text.WriteString(" " + words[t.index%len(words)])
			n++
			s.observeToken(t, sq, &first, &last)
			finish = t.finish
		case <-r.Context().Done():
			return
		}
	}
	usage := map[string]int{"prompt_tokens": sq.promptLen, "completion_tokens": n, "total_tokens": sq.promptLen + n}
	var out map[string]any
	if chat {
		out = map[string]any{
			"id": "chatcmpl-" + reqID, "object": "chat.completion", "created": time.Now().Unix(), "model": model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text.String()}, "finish_reason": finish}},
			"usage":   usage,
		}
	} else {
		out = map[string]any{
			"id": "cmpl-" + reqID, "object": "text_completion", "created": time.Now().Unix(), "model": model,
			"choices": []any{map[string]any{"index": 0, "text": text.String(), "logprobs": nil, "finish_reason": finish}},
			"usage":   usage,
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
	s.m.success.WithLabelValues(finish).Inc()
	s.m.e2e.Observe(last.Sub(sq.arrival).Seconds())
}
