// Package loadgen is bpfbench's load generator for OpenAI-compatible
// streaming servers (vLLM, SGLang, TGI, llama.cpp, Ollama). It records the
// arrival of every streamed chunk on CLOCK_MONOTONIC, the clock of the
// kernel's events, and the local TCP port of each request's connection, so
// that a later stage can join client-side token gaps with what the kernel saw.
// Its metrics follow the definitions of vLLM's benchmark client exactly.
package loadgen

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/loadgen/kserve"
)

// Config is one load run.
type Config struct {
	Target   string // base URL of the server, e.g. http://127.0.0.1:8000 (kserve-grpc: HOST:PORT)
	Endpoint string // EndpointCompletions (default) or EndpointChat
	// Protocol is ProtocolOpenAI (default) or ProtocolKServeGRPC.
	Protocol string
	Model    string
	Label    string

	// Rate is the request rate in requests/s; 0 or +Inf sends everything at
	// once (closed loop when MaxConcurrency is set).
	Rate float64
	// Burstiness is vLLM's gamma shape: 1 is Poisson, < 1 burstier, > 1 smoother.
	Burstiness float64
	// Constant sends at exactly 1/Rate intervals.
	Constant bool
	// MaxConcurrency caps the requests in flight; 0 means no cap.
	MaxConcurrency int
	// NumRequests is the number of measured requests; with Duration set and
	// NumRequests 0, requests are sent until Duration has passed.
	NumRequests int
	Duration    time.Duration
	// Warmup requests are sent before the measured run and reported apart.
	Warmup int

	Dataset DatasetConfig
	// TracePath replays a JSONL trace of {timestamp, input_len, output_len}:
	// it gives both the prompts and the send times. TraceTimeUnit is "s" or "ms".
	TracePath     string
	TraceTimeUnit string
	// Requests, when set (Go API only), are sent instead of a dataset; when
	// any has OffsetNs > 0 the offsets are the send times (as a trace).
	Requests []Request

	// IgnoreEOS asks the server to generate exactly max_tokens. Like vLLM,
	// the random dataset always sets it.
	IgnoreEOS bool
	// NoUsage leaves out stream_options.include_usage.
	NoUsage bool
	Seed    uint64

	Timeout         time.Duration // per request, 0 for none
	StallTimeout    time.Duration // longest silence within a response, 0 for none
	HeaderTimeout   time.Duration // from a request's start to its response headers (HTTP), 0 for none
	RequestIDPrefix string
	Headers         http.Header
	NoKeepAlive     bool
	ExtraBody       map[string]any
	// Logprobs asks for the top-K log-probabilities of every token (0:
	// off) and keeps the first token's, for the prompt entropy (logprobs.go).
	Logprobs int
	// NetHTTP sends requests through Go's net/http instead of the raw
	// HTTP/1.1 transport (which serves http:// targets without a proxy).
	// NoTraceparent sends requests without a W3C traceparent header.
	NoTraceparent bool
	NetHTTP       bool

	Percentiles []float64
	Goodput     Goodput

	// OnRecord, if set, is called as each request finishes, from the
	// request's goroutine (it must be safe for concurrent use).
	OnRecord func(*Record)
	// Progress, if set, is called after each measured request with the
	// number done and the total (0 when running for a duration).
	Progress func(done, total int)
}

// DefaultConfig returns the defaults the flags use.
func DefaultConfig() Config {
	return Config{
		Protocol:    ProtocolOpenAI,
		Endpoint:    EndpointCompletions,
		Model:       "llmsim",
		Rate:        math.Inf(1),
		Burstiness:  1,
		NumRequests: 200,
		Dataset: DatasetConfig{
			Name:      DatasetRandom,
			InputLen:  128,
			OutputLen: 64,
			RAG:       DefaultRAG(),
		},
		TraceTimeUnit: "s",
		Seed:          0,
		Timeout:       6 * time.Hour,
		StallTimeout:  DefaultStallTimeout,
		HeaderTimeout: DefaultHeaderTimeout,
		Percentiles:   []float64{50, 90, 99},
	}
}

// The defaults of the stall and header timeouts. A server that sends
// nothing for a minute fails the request as a stall; one that has not
// finished its response headers five minutes after the request fails it
// too (a server that holds its headers until the first token, behind a
// queue longer than these, needs them raised).
const (
	DefaultStallTimeout  = time.Minute
	DefaultHeaderTimeout = 5 * time.Minute
)

// floatList is a comma-separated list of floats as a flag.Value.
type floatList struct{ p *[]float64 }

func (f floatList) String() string {
	if f.p == nil {
		return ""
	}
	s := make([]string, len(*f.p))
	for i, v := range *f.p {
		s[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}

func (f floatList) Set(s string) error {
	var out []float64
	for _, x := range strings.Split(s, ",") {
		x = strings.TrimSpace(x)
		if x == "" {
			continue
		}
		v, err := strconv.ParseFloat(x, 64)
		if err != nil || v < 0 || v > 100 {
			return fmt.Errorf("percentile %q: want a number in [0, 100]", x)
		}
		out = append(out, v)
	}
	*f.p = out
	return nil
}

// headerFlag is a repeatable KEY=VALUE header flag.
type headerFlag struct{ h *http.Header }

func (f headerFlag) String() string { return "" }

func (f headerFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("header %q: want KEY=VALUE", s)
	}
	if *f.h == nil {
		*f.h = http.Header{}
	}
	f.h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	return nil
}

// RegisterFlags defines the load flags on fs, with c's current values as
// defaults (start from DefaultConfig()).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Target, "target", c.Target, "base `URL` of the OpenAI-compatible server, e.g. http://127.0.0.1:8000")
	fs.StringVar(&c.Endpoint, "endpoint", c.Endpoint, "API: completions (/v1/completions) or chat (/v1/chat/completions)")
	fs.StringVar(&c.Protocol, "protocol", c.Protocol, "openai (HTTP, SSE) or kserve-grpc (KServe v2 / Triton gRPC, a ModelStreamInfer stream per request; --target HOST:PORT, inputs text_input, max_tokens, stream, output text_output)")
	fs.StringVar(&c.Model, "model", c.Model, "model name sent in requests")
	fs.StringVar(&c.Label, "label", c.Label, "label stored in the result")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "request rate in requests/s; inf sends all at once (closed loop with --max-concurrency)")
	fs.Float64Var(&c.Burstiness, "burstiness", c.Burstiness, "gamma shape of inter-arrival times: 1 Poisson, <1 burstier, >1 smoother")
	fs.BoolVar(&c.Constant, "constant", c.Constant, "send at a constant rate instead of Poisson/gamma arrivals")
	fs.IntVar(&c.MaxConcurrency, "max-concurrency", c.MaxConcurrency, "most requests in flight (0: no cap)")
	fs.IntVar(&c.NumRequests, "num-requests", c.NumRequests, "number of measured requests (0 with --duration: until the duration has passed)")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "send requests for this long instead of a count")
	fs.IntVar(&c.Warmup, "warmup", c.Warmup, "warm-up requests sent before the measured run")
	fs.StringVar(&c.Dataset.Name, "dataset", c.Dataset.Name, "prompts: random, jsonl, sharegpt, rag (shared prefix + passages + question) or multiturn (chat conversations)")
	fs.StringVar(&c.Dataset.Path, "dataset-path", c.Dataset.Path, "file of the jsonl or sharegpt dataset (multiturn: ShareGPT conversations)")
	fs.IntVar(&c.Dataset.InputLen, "input-len", c.Dataset.InputLen, "random dataset: input tokens per request (multiturn: per user message)")
	fs.StringVar(&c.Dataset.InputLenFile, "input-len-file", c.Dataset.InputLenFile, "random and rag datasets: input lengths from a `file` of one integer a line (in order) or len,count lines (a histogram)")
	fs.IntVar(&c.Dataset.RAG.PrefixLen, "rag-prefix-len", c.Dataset.RAG.PrefixLen, "rag: tokens of the prefix (system prompt and document) that starts each request")
	fs.IntVar(&c.Dataset.RAG.Prefixes, "rag-prefixes", c.Dataset.RAG.Prefixes, "rag: distinct shared prefixes, taken in turn")
	fs.Float64Var(&c.Dataset.RAG.Shared, "rag-shared", c.Dataset.RAG.Shared, "rag: fraction of requests carrying a shared prefix (the others carry their own)")
	fs.IntVar(&c.Dataset.RAG.Passages, "rag-passages", c.Dataset.RAG.Passages, "rag: retrieved passages per request")
	fs.IntVar(&c.Dataset.RAG.PassageLen, "rag-passage-len", c.Dataset.RAG.PassageLen, "rag: mean tokens of a passage (lognormal)")
	fs.Float64Var(&c.Dataset.RAG.PassageSigma, "rag-passage-sigma", c.Dataset.RAG.PassageSigma, "rag: sigma of the log of the passage lengths (0: all equal)")
	fs.StringVar(&c.Dataset.RAG.PassageLenFile, "rag-passage-len-file", c.Dataset.RAG.PassageLenFile, "rag: passage lengths from a `file` (as --input-len-file) instead of the lognormal")
	fs.IntVar(&c.Dataset.RAG.QuestionLen, "rag-question-len", c.Dataset.RAG.QuestionLen, "rag: tokens of the question that ends each request")
	fs.Var(&c.Dataset.Multiturn.Turns, "turns", "multiturn: turns per conversation, `N` or MIN-MAX (default 4; with --dataset-path every turn of the file's)")
	fs.DurationVar(&c.Dataset.Multiturn.ThinkTime, "think-time", c.Dataset.Multiturn.ThinkTime, "multiturn: pause between a reply and the conversation's next turn")
	fs.StringVar(&c.Dataset.Multiturn.Replies, "multiturn-replies", c.Dataset.Multiturn.replies(), "multiturn: replies in the history: server (the server's own, each turn after the previous reply) or recorded (the file's)")
	fs.IntVar(&c.Dataset.OutputLen, "output-len", c.Dataset.OutputLen, "output tokens per request (random; default for jsonl records without one)")
	fs.Float64Var(&c.Dataset.RangeRatio, "range-ratio", c.Dataset.RangeRatio, "random dataset: lengths uniform in [len*(1-r), len*(1+r)]")
	fs.IntVar(&c.Dataset.ShareGPTOutputLen, "sharegpt-output-len", c.Dataset.ShareGPTOutputLen, "sharegpt: fixed output length (0: the reference answer's)")
	fs.StringVar(&c.TracePath, "trace", c.TracePath, "replay a JSONL trace of {timestamp, input_len, output_len} (send times and lengths)")
	fs.StringVar(&c.TraceTimeUnit, "trace-time-unit", c.TraceTimeUnit, "unit of the trace timestamps: s or ms")
	fs.BoolVar(&c.IgnoreEOS, "ignore-eos", c.IgnoreEOS, "ask the server to ignore EOS (always on for the random dataset, as in vLLM)")
	fs.BoolVar(&c.NoUsage, "no-usage", c.NoUsage, "do not ask for stream_options.include_usage")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "random seed of arrivals and prompts")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "total timeout of one request (0: none)")
	fs.DurationVar(&c.StallTimeout, "stall-timeout", c.StallTimeout, "fail a request when no byte arrives for this long, the response headers included (0: never)")
	fs.DurationVar(&c.HeaderTimeout, "header-timeout", c.HeaderTimeout, "fail a request whose response headers are not complete this long after it was sent (HTTP; 0: never)")
	fs.StringVar(&c.RequestIDPrefix, "request-id-prefix", c.RequestIDPrefix, "prefix of the x-request-id header (default: bench-<random>-)")
	fs.Var(headerFlag{&c.Headers}, "header", "extra request header `KEY=VALUE` (repeatable); $OPENAI_API_KEY, when set and no Authorization header is given, is sent as Authorization: Bearer … (openai protocol; Authorization= sends none); a credential's value is not written into a run's manifest")
	fs.BoolVar(&c.NoKeepAlive, "no-keepalive", c.NoKeepAlive, "open a new connection for every request")
	fs.BoolVar(&c.NoTraceparent, "no-traceparent", c.NoTraceparent, "send no W3C traceparent header (by default each request carries one, whose ids its OTLP span takes, so a tracing engine's spans join it)")
	fs.BoolVar(&c.NetHTTP, "net-http", c.NetHTTP, "send through Go's net/http instead of the raw HTTP/1.1 transport on non-blocking sockets (used for http:// targets without a proxy)")
	fs.Var(floatList{&c.Percentiles}, "percentiles", "comma-separated percentiles to report, e.g. 50,90,99")
	fs.Var(&c.Goodput, "goodput", "SLOs for goodput as ttft:MS,tpot:MS,e2el:MS")
	fs.Var(logprobsFlag{&c.Logprobs}, "logprobs", "ask for the top-`K` log-probabilities of each token (completions: logprobs K; chat: logprobs, top_logprobs K) and report the first token's normalised entropy per prompt, clustered low/mid/high (0: off; openai protocol)")
}

// ConfigError is a configuration that cannot run: a load option out of its
// range, a missing target, options that do not go together. The CLI
// exits with its usage status (2).
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Validate checks the configuration: every error is a *ConfigError that
// names the flag and its valid range.
func (c *Config) Validate() error {
	if err := c.validate(); err != nil {
		return &ConfigError{err}
	}
	return nil
}

func (c *Config) validate() error {
	if err := c.checkRanges(); err != nil {
		return err
	}
	switch c.Protocol {
	case ProtocolOpenAI, "":
		if _, err := EndpointURL(c.Target, c.Endpoint); err != nil {
			return err
		}
	case ProtocolKServeGRPC:
		if _, err := kserve.Target(c.Target); err != nil {
			return err
		}
		if c.isMultiturn() {
			return errors.New("--dataset multiturn needs --protocol openai (its replies come from the chat API)")
		}
	default:
		return fmt.Errorf("--protocol %q: use %s or %s", c.Protocol, ProtocolOpenAI, ProtocolKServeGRPC)
	}
	if c.NumRequests == 0 && c.Duration == 0 && c.TracePath == "" && len(c.Requests) == 0 {
		return errors.New("nothing to send: set --num-requests or --duration")
	}
	if c.Duration > 0 && c.NumRequests == 0 && math.IsInf(c.Rate, 1) && c.MaxConcurrency == 0 && c.TracePath == "" {
		return errors.New("--duration at an infinite rate needs --max-concurrency (closed loop) or a --rate")
	}
	if c.TracePath == "" && len(c.Requests) == 0 {
		return c.Dataset.Check(c.Endpoint)
	}
	return nil
}

// checkRanges checks each number of the configuration against its range.
// Rate 0 is refused here (the flag's inf sends all at once); Run, for
// callers of the Go API that leave it unset, takes 0 as inf.
func (c *Config) checkRanges() error {
	d := &c.Dataset
	switch {
	case c.Rate == 0:
		return errors.New("--rate 0: give a rate in requests/s above 0, or inf to send all at once")
	case c.Rate < 0 || math.IsNaN(c.Rate):
		return fmt.Errorf("--rate %v: give a rate in requests/s above 0, or inf to send all at once", c.Rate)
	case !(c.Burstiness > 0) || math.IsInf(c.Burstiness, 1):
		return fmt.Errorf("--burstiness %v: give a gamma shape above 0 (1: Poisson)", c.Burstiness)
	}
	for _, n := range []struct {
		flag string
		v    int
		min  int
		what string
	}{
		{"num-requests", c.NumRequests, 0, "0 (with --duration) or more"},
		{"max-concurrency", c.MaxConcurrency, 0, "0 (no cap) or more"},
		{"warmup", c.Warmup, 0, "0 or more"},
		{"input-len", d.InputLen, 0, "1 or more tokens"},
		{"output-len", d.OutputLen, 0, "1 or more tokens"},
		{"sharegpt-output-len", d.ShareGPTOutputLen, 0, "0 (the reference answer's) or more"},
		{"rag-prefix-len", d.RAG.PrefixLen, 0, "0 or more tokens"},
		{"rag-prefixes", d.RAG.Prefixes, 0, "0 or more"},
		{"rag-passages", d.RAG.Passages, 0, "0 or more"},
		{"rag-passage-len", d.RAG.PassageLen, 0, "0 or more tokens"},
		{"rag-question-len", d.RAG.QuestionLen, 0, "0 or more tokens"},
	} {
		if n.v < n.min {
			return fmt.Errorf("--%s %d: give %s", n.flag, n.v, n.what)
		}
	}
	for _, t := range []struct {
		flag string
		v    time.Duration
		what string
	}{
		{"duration", c.Duration, "0 (a count instead) or more"},
		{"timeout", c.Timeout, "0 (none) or more"},
		{"stall-timeout", c.StallTimeout, "0 (never) or more"},
		{"header-timeout", c.HeaderTimeout, "0 (never) or more"},
		{"think-time", d.Multiturn.ThinkTime, "0 or more"},
	} {
		if t.v < 0 {
			return fmt.Errorf("--%s %v: give %s", t.flag, t.v, t.what)
		}
	}
	// The generated datasets need lengths of a token or more (a file's
	// records, a trace and the Go API's Requests carry their own).
	if c.TracePath == "" && len(c.Requests) == 0 && d.synthetic() {
		if d.OutputLen < 1 {
			return fmt.Errorf("--output-len %d: give 1 or more tokens", d.OutputLen)
		}
		if d.InputLen < 1 && d.InputLenFile == "" && d.Name != DatasetRAG {
			return fmt.Errorf("--input-len %d: give 1 or more tokens", d.InputLen)
		}
	}
	if r := d.RangeRatio; r < 0 || r >= 1 || math.IsNaN(r) {
		return fmt.Errorf("--range-ratio %v: give a fraction in [0, 1)", r)
	}
	return nil
}

// Result is the outcome of a run.
type Result struct {
	Config Config
	// Anchor ties the monotonic timestamps to wall-clock time.
	Anchor Anchor
	// StartNs and EndNs bound the measured run (monotonic ns).
	StartNs, EndNs int64
	Date           time.Time
	// Records are the measured requests in send order; Warmup the warm-up ones.
	Records []Record
	Warmup  []Record
	Metrics *Metrics
	// Dataset describes the prompts sent, for the run's manifest.
	Dataset DatasetInfo
	// ClientCPU is the CPU time (user+system) the whole process used during
	// the measured run, from getrusage.
	ClientCPU time.Duration
}

// DurationS is the run's duration in seconds (vLLM's benchmark_duration).
func (r *Result) DurationS() float64 { return float64(r.EndNs-r.StartNs) / 1e9 }

// plan returns the requests and their send offsets (-1: decided online).
func (c *Config) plan() ([]Request, error) {
	switch {
	case len(c.Requests) > 0:
		reqs := make([]Request, len(c.Requests))
		copy(reqs, c.Requests)
		return reqs, nil
	case c.TracePath != "":
		reqs, err := LoadTrace(c.TracePath, c.TraceTimeUnit, c.Dataset.OutputLen, c.Seed)
		if err != nil {
			return nil, err
		}
		if c.NumRequests > 0 && c.NumRequests < len(reqs) {
			reqs = reqs[:c.NumRequests]
		}
		return reqs, nil
	}
	return LoadDataset(c.Dataset, c.planCount(), c.Seed)
}

// planCount is the number of requests to generate: --num-requests, or in
// duration mode enough to cycle through.
func (c *Config) planCount() int {
	if c.NumRequests == 0 {
		return 1024
	}
	return c.NumRequests
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Run sends the load and measures it. Failed requests are recorded, not
// returned as errors; an error means the run itself could not be made.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Endpoint == "" {
		cfg.Endpoint = EndpointCompletions
	}
	if cfg.Burstiness == 0 {
		cfg.Burstiness = 1
	}
	if cfg.Rate == 0 {
		cfg.Rate = math.Inf(1)
	}
	if cfg.Percentiles == nil {
		cfg.Percentiles = []float64{50, 90, 99}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Dataset.synthetic() {
		cfg.IgnoreEOS = true
	}
	if cfg.RequestIDPrefix == "" {
		cfg.RequestIDPrefix = fmt.Sprintf("bench-%08x-", uint32(Mono()^int64(os.Getpid())<<16))
	}
	var (
		reqs []Request
		mt   *multiturnRun // the multiturn dataset's conversations
		err  error
	)
	if cfg.isMultiturn() {
		if mt, err = newMultiturnRun(&cfg); err == nil {
			reqs = mt.reqs
		}
	} else {
		reqs, err = cfg.plan()
	}
	if err != nil {
		return nil, err
	}
	client, err := NewClient(ClientOptions{
		Target:        cfg.Target,
		Endpoint:      cfg.Endpoint,
		Model:         cfg.Model,
		IgnoreEOS:     cfg.IgnoreEOS,
		IncludeUsage:  !cfg.NoUsage,
		Headers:       cfg.Headers,
		Timeout:       cfg.Timeout,
		StallTimeout:  cfg.StallTimeout,
		HeaderTimeout: cfg.HeaderTimeout,
		NoKeepAlive:   cfg.NoKeepAlive,
		ExtraBody:     cfg.logprobsBody(),
		NetHTTP:       cfg.NetHTTP || mt != nil, // multiturn needs the replies' text
		NoTraceparent: cfg.NoTraceparent,
		Protocol:      cfg.Protocol,
	})
	if err != nil {
		return nil, err
	}
	defer client.Close()

	res := &Result{Config: cfg, Date: time.Now()}
	if mt != nil {
		mt.wrap(client)
		res.Dataset = cfg.describe(nil, mt.convs)
	} else {
		res.Dataset = cfg.describe(reqs, nil)
	}
	if cfg.Warmup > 0 {
		res.Warmup = make([]Record, cfg.Warmup)
		var wg sync.WaitGroup
		limit := make(chan struct{}, max(cfg.MaxConcurrency, 1)*4)
		if cfg.MaxConcurrency > 0 {
			limit = make(chan struct{}, cfg.MaxConcurrency)
		}
		for i := range res.Warmup {
			limit <- struct{}{}
			wg.Add(1)
			go func(rec *Record) {
				defer wg.Done()
				defer func() { <-limit }()
				rec.Warmup = true
				rec.Index = -1
				rec.RequestID = cfg.RequestIDPrefix + "warmup-" + strconv.Itoa(i)
				rec.ScheduledNs = Mono()
				client.Do(ctx, &reqs[0], rec)
				if cfg.OnRecord != nil {
					cfg.OnRecord(rec)
				}
			}(&res.Warmup[i])
		}
		wg.Wait()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}

	arr := NewArrivals(cfg.Rate, cfg.Burstiness, cfg.Constant, cfg.Seed)
	var offsets []int64
	durationMode := cfg.Duration > 0 && cfg.NumRequests == 0 && cfg.TracePath == "" && len(cfg.Requests) == 0
	if !durationMode {
		offsets = arr.Offsets(len(reqs))
		// A trace, or Go API requests with offsets, fix the send times.
		useOffsets := cfg.TracePath != ""
		for _, r := range cfg.Requests {
			if r.OffsetNs > 0 {
				useOffsets = true
			}
		}
		if useOffsets {
			for i := range reqs {
				offsets[i] = max(reqs[i].OffsetNs, 0)
			}
		}
	}
	total := len(reqs)
	if durationMode {
		total = 0
	}
	var sem chan struct{}
	if cfg.MaxConcurrency > 0 {
		sem = make(chan struct{}, cfg.MaxConcurrency)
	}

	var (
		mu      sync.Mutex
		records = make([]*Record, 0, len(reqs))
		wg      sync.WaitGroup
		done    atomic.Int64
	)
	res.Anchor = NewAnchor()
	cpu0 := cpuTime()
	start := Mono()
	res.StartNs = start
	var deadline int64
	if cfg.Duration > 0 {
		deadline = start + int64(cfg.Duration)
	}
	if mt != nil {
		records = mt.run(ctx, &cfg, client, arr, start, deadline, sem, durationMode)
	}
	p := &pacer{ctx: ctx, arr: arr, offsets: offsets, start: start, deadline: deadline, durationMode: durationMode, sem: sem}
	for i := 0; mt == nil; i++ {
		if !durationMode && i >= len(reqs) {
			break
		}
		at, ok := p.wait(i)
		if !ok {
			break
		}
		rec := &Record{
			Index:       i,
			RequestID:   cfg.RequestIDPrefix + strconv.Itoa(i),
			ScheduledNs: at,
		}
		mu.Lock()
		records = append(records, rec)
		mu.Unlock()
		req := &reqs[i%len(reqs)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			client.Do(ctx, req, rec)
			if sem != nil {
				<-sem
			}
			if cfg.OnRecord != nil {
				cfg.OnRecord(rec)
			}
			n := done.Add(1)
			if cfg.Progress != nil {
				cfg.Progress(int(n), total)
			}
		}()
	}
	wg.Wait()
	res.EndNs = Mono()
	res.ClientCPU = cpuTime() - cpu0
	res.Records = make([]Record, len(records))
	for i, r := range records {
		res.Records[i] = *r
	}
	sort.Slice(res.Records, func(a, b int) bool { return res.Records[a].Index < res.Records[b].Index })
	res.Metrics = ComputeMetrics(res.Records, res.DurationS(), cfg.Percentiles, cfg.Goodput)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, nil
}
