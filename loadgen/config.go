package loadgen

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/loadgen/dataset"
	"github.com/bpfbench/bpfbench/loadgen/kserve"
	"github.com/bpfbench/bpfbench/loadgen/metrics"
	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// Config is one load run, in the parts that each piece of the run uses.
type Config struct {
	// Target is where and how each request is sent: the server, the API,
	// the model, what a request asks for, its timeouts and headers, and
	// the transport (the client's options).
	Target transport.Options
	// Scenario is which requests are sent, and when: their count or
	// duration, the arrivals, the dataset and its lengths.
	Scenario Scenario
	// Metrics is what the result reports: its percentiles and goodput.
	Metrics metrics.Options
	// Output names the run and its requests, and says who hears of them
	// as they finish.
	Output Output
}

// Scenario is which requests a run sends, and when.
type Scenario struct {
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
	// Seed draws the arrivals and the prompts.
	Seed uint64

	Dataset dataset.Config
	// TracePath replays a JSONL trace of {timestamp, input_len, output_len}:
	// it gives both the prompts and the send times. TraceTimeUnit is "s" or "ms".
	TracePath     string
	TraceTimeUnit string
	// Requests, when set (Go API only), are sent instead of a dataset; when
	// any has OffsetNs > 0 the offsets are the send times (as a trace).
	Requests []Request
}

// Output names a run and its requests, and who hears of them.
type Output struct {
	Label string // stored in the result
	// RequestIDPrefix starts every request's id (its x-request-id header);
	// Run draws one when it is empty.
	RequestIDPrefix string
	// OnRecord, if set, is called as each request finishes, from the
	// request's goroutine (it must be safe for concurrent use).
	OnRecord func(*Record)
	// Progress, if set, is called after each measured request with the
	// number done and the total (0 when running for a duration).
	Progress func(done, total int)
}

// Record and Request are the transport's: what was measured of one
// request, and what it sends.
type (
	Record  = transport.Record
	Request = transport.Request
)

// DefaultConfig returns the defaults the flags use.
func DefaultConfig() Config {
	return Config{
		Target: transport.Options{
			Protocol:      transport.ProtocolOpenAI,
			Endpoint:      transport.EndpointCompletions,
			Model:         "llmsim",
			Timeout:       6 * time.Hour,
			StallTimeout:  DefaultStallTimeout,
			HeaderTimeout: DefaultHeaderTimeout,
		},
		Scenario: Scenario{
			Rate:        math.Inf(1),
			Burstiness:  1,
			NumRequests: 200,
			Dataset: dataset.Config{
				Name:      dataset.Random,
				InputLen:  128,
				OutputLen: 64,
				RAG:       dataset.DefaultRAG(),
			},
			TraceTimeUnit: "s",
			Seed:          0,
		},
		Metrics: metrics.Options{Percentiles: []float64{50, 90, 99}},
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
	fs.StringVar(&c.Target.URL, "target", c.Target.URL, "base `URL` of the OpenAI-compatible server, e.g. http://127.0.0.1:8000")
	fs.StringVar(&c.Target.Endpoint, "endpoint", c.Target.Endpoint, "API: completions (/v1/completions) or chat (/v1/chat/completions)")
	fs.StringVar(&c.Target.Protocol, "protocol", c.Target.Protocol, "openai (HTTP, SSE) or kserve-grpc (KServe v2 / Triton gRPC, a ModelStreamInfer stream per request; --target HOST:PORT, inputs text_input, max_tokens, stream, output text_output)")
	fs.StringVar(&c.Target.Model, "model", c.Target.Model, "model name sent in requests")
	fs.StringVar(&c.Output.Label, "label", c.Output.Label, "label stored in the result")
	fs.Float64Var(&c.Scenario.Rate, "rate", c.Scenario.Rate, "request rate in requests/s; inf sends all at once (closed loop with --max-concurrency)")
	fs.Float64Var(&c.Scenario.Burstiness, "burstiness", c.Scenario.Burstiness, "gamma shape of inter-arrival times: 1 Poisson, <1 burstier, >1 smoother")
	fs.BoolVar(&c.Scenario.Constant, "constant", c.Scenario.Constant, "send at a constant rate instead of Poisson/gamma arrivals")
	fs.IntVar(&c.Scenario.MaxConcurrency, "max-concurrency", c.Scenario.MaxConcurrency, "most requests in flight (0: no cap)")
	fs.IntVar(&c.Scenario.NumRequests, "num-requests", c.Scenario.NumRequests, "number of measured requests (0 with --duration: until the duration has passed)")
	fs.DurationVar(&c.Scenario.Duration, "duration", c.Scenario.Duration, "send requests for this long instead of a count")
	fs.IntVar(&c.Scenario.Warmup, "warmup", c.Scenario.Warmup, "warm-up requests sent before the measured run")
	fs.StringVar(&c.Scenario.Dataset.Name, "dataset", c.Scenario.Dataset.Name, "prompts: random, jsonl, sharegpt, rag (shared prefix + passages + question) or multiturn (chat conversations)")
	fs.StringVar(&c.Scenario.Dataset.Path, "dataset-path", c.Scenario.Dataset.Path, "file of the jsonl or sharegpt dataset (multiturn: ShareGPT conversations)")
	fs.IntVar(&c.Scenario.Dataset.InputLen, "input-len", c.Scenario.Dataset.InputLen, "random dataset: input tokens per request (multiturn: per user message)")
	fs.StringVar(&c.Scenario.Dataset.InputLenFile, "input-len-file", c.Scenario.Dataset.InputLenFile, "random and rag datasets: input lengths from a `file` of one integer a line (in order) or len,count lines (a histogram)")
	fs.IntVar(&c.Scenario.Dataset.RAG.PrefixLen, "rag-prefix-len", c.Scenario.Dataset.RAG.PrefixLen, "rag: tokens of the prefix (system prompt and document) that starts each request")
	fs.IntVar(&c.Scenario.Dataset.RAG.Prefixes, "rag-prefixes", c.Scenario.Dataset.RAG.Prefixes, "rag: distinct shared prefixes, taken in turn")
	fs.Float64Var(&c.Scenario.Dataset.RAG.Shared, "rag-shared", c.Scenario.Dataset.RAG.Shared, "rag: fraction of requests carrying a shared prefix (the others carry their own)")
	fs.IntVar(&c.Scenario.Dataset.RAG.Passages, "rag-passages", c.Scenario.Dataset.RAG.Passages, "rag: retrieved passages per request")
	fs.IntVar(&c.Scenario.Dataset.RAG.PassageLen, "rag-passage-len", c.Scenario.Dataset.RAG.PassageLen, "rag: mean tokens of a passage (lognormal)")
	fs.Float64Var(&c.Scenario.Dataset.RAG.PassageSigma, "rag-passage-sigma", c.Scenario.Dataset.RAG.PassageSigma, "rag: sigma of the log of the passage lengths (0: all equal)")
	fs.StringVar(&c.Scenario.Dataset.RAG.PassageLenFile, "rag-passage-len-file", c.Scenario.Dataset.RAG.PassageLenFile, "rag: passage lengths from a `file` (as --input-len-file) instead of the lognormal")
	fs.IntVar(&c.Scenario.Dataset.RAG.QuestionLen, "rag-question-len", c.Scenario.Dataset.RAG.QuestionLen, "rag: tokens of the question that ends each request")
	fs.Var(&c.Scenario.Dataset.Multiturn.Turns, "turns", "multiturn: turns per conversation, `N` or MIN-MAX (default 4; with --dataset-path every turn of the file's)")
	fs.DurationVar(&c.Scenario.Dataset.Multiturn.ThinkTime, "think-time", c.Scenario.Dataset.Multiturn.ThinkTime, "multiturn: pause between a reply and the conversation's next turn")
	fs.StringVar(&c.Scenario.Dataset.Multiturn.Replies, "multiturn-replies", c.Scenario.Dataset.Multiturn.ReplyMode(), "multiturn: replies in the history: server (the server's own, each turn after the previous reply) or recorded (the file's)")
	fs.IntVar(&c.Scenario.Dataset.OutputLen, "output-len", c.Scenario.Dataset.OutputLen, "output tokens per request (random; default for jsonl records without one)")
	fs.Float64Var(&c.Scenario.Dataset.RangeRatio, "range-ratio", c.Scenario.Dataset.RangeRatio, "random dataset: lengths uniform in [len*(1-r), len*(1+r)]")
	fs.IntVar(&c.Scenario.Dataset.ShareGPTOutputLen, "sharegpt-output-len", c.Scenario.Dataset.ShareGPTOutputLen, "sharegpt: fixed output length (0: the reference answer's)")
	fs.StringVar(&c.Scenario.TracePath, "trace", c.Scenario.TracePath, "replay a JSONL trace of {timestamp, input_len, output_len} (send times and lengths)")
	fs.StringVar(&c.Scenario.TraceTimeUnit, "trace-time-unit", c.Scenario.TraceTimeUnit, "unit of the trace timestamps: s or ms")
	fs.BoolVar(&c.Target.IgnoreEOS, "ignore-eos", c.Target.IgnoreEOS, "ask the server to ignore EOS (always on for the random dataset, as in vLLM)")
	fs.BoolVar(&c.Target.NoUsage, "no-usage", c.Target.NoUsage, "do not ask for stream_options.include_usage")
	fs.Uint64Var(&c.Scenario.Seed, "seed", c.Scenario.Seed, "random seed of arrivals and prompts")
	fs.DurationVar(&c.Target.Timeout, "timeout", c.Target.Timeout, "total timeout of one request (0: none)")
	fs.DurationVar(&c.Target.StallTimeout, "stall-timeout", c.Target.StallTimeout, "fail a request when no byte arrives for this long, the response headers included (0: never)")
	fs.DurationVar(&c.Target.HeaderTimeout, "header-timeout", c.Target.HeaderTimeout, "fail a request whose response headers are not complete this long after it was sent (HTTP; gRPC: the stream's headers or its first response; 0: never)")
	fs.StringVar(&c.Output.RequestIDPrefix, "request-id-prefix", c.Output.RequestIDPrefix, "prefix of the x-request-id header (default: bench-<random>-)")
	fs.Var(headerFlag{&c.Target.Headers}, "header", "extra request header `KEY=VALUE` (repeatable); $OPENAI_API_KEY, when set and no Authorization header is given, is sent as Authorization: Bearer … (openai protocol; Authorization= sends none); a credential's value is not written into a run's manifest")
	fs.BoolVar(&c.Target.NoKeepAlive, "no-keepalive", c.Target.NoKeepAlive, "open a new connection for every request")
	fs.BoolVar(&c.Target.NoTraceparent, "no-traceparent", c.Target.NoTraceparent, "send no W3C traceparent header (by default each request carries one, whose ids its OTLP span takes, so a tracing engine's spans join it)")
	fs.BoolVar(&c.Target.NetHTTP, "net-http", c.Target.NetHTTP, "send through Go's net/http instead of the raw HTTP/1.1 transport on non-blocking sockets (used for http:// targets without a proxy)")
	fs.Var(floatList{&c.Metrics.Percentiles}, "percentiles", "comma-separated percentiles to report, e.g. 50,90,99")
	fs.Var(&c.Metrics.Goodput, "goodput", "SLOs for goodput as ttft:MS,tpot:MS,e2el:MS")
	fs.Var(logprobsFlag{&c.Target.Logprobs}, "logprobs", "ask for the top-`K` log-probabilities of each token (completions: logprobs K; chat: logprobs, top_logprobs K) and report the first token's normalised entropy per prompt, clustered low/mid/high (0: off; openai protocol)")
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
	switch c.Target.Protocol {
	case transport.ProtocolOpenAI, "":
		if _, err := transport.EndpointURL(c.Target.URL, c.Target.Endpoint); err != nil {
			return err
		}
	case transport.ProtocolKServeGRPC:
		if _, err := kserve.Target(c.Target.URL); err != nil {
			return err
		}
		if c.isMultiturn() {
			return errors.New("--dataset multiturn needs --protocol openai (its replies come from the chat API)")
		}
	default:
		return fmt.Errorf("--protocol %q: use %s or %s", c.Target.Protocol, transport.ProtocolOpenAI, transport.ProtocolKServeGRPC)
	}
	if c.Scenario.NumRequests == 0 && c.Scenario.Duration == 0 && c.Scenario.TracePath == "" && len(c.Scenario.Requests) == 0 {
		return errors.New("nothing to send: set --num-requests or --duration")
	}
	if c.Scenario.Duration > 0 && c.Scenario.NumRequests == 0 && math.IsInf(c.Scenario.Rate, 1) && c.Scenario.MaxConcurrency == 0 && c.Scenario.TracePath == "" {
		return errors.New("--duration at an infinite rate needs --max-concurrency (closed loop) or a --rate")
	}
	if c.Scenario.TracePath == "" && len(c.Scenario.Requests) == 0 {
		return c.Scenario.Dataset.Check(c.Target.Endpoint)
	}
	return nil
}

// checkRanges checks each number of the configuration against its range.
// Rate 0 is refused here (the flag's inf sends all at once); Run, for
// callers of the Go API that leave it unset, takes 0 as inf.
func (c *Config) checkRanges() error {
	d := &c.Scenario.Dataset
	switch {
	case c.Scenario.Rate == 0:
		return errors.New("--rate 0: give a rate in requests/s above 0, or inf to send all at once")
	case c.Scenario.Rate < 0 || math.IsNaN(c.Scenario.Rate):
		return fmt.Errorf("--rate %v: give a rate in requests/s above 0, or inf to send all at once", c.Scenario.Rate)
	case !(c.Scenario.Burstiness > 0) || math.IsInf(c.Scenario.Burstiness, 1):
		return fmt.Errorf("--burstiness %v: give a gamma shape above 0 (1: Poisson)", c.Scenario.Burstiness)
	}
	for _, n := range []struct {
		flag string
		v    int
		min  int
		what string
	}{
		{"num-requests", c.Scenario.NumRequests, 0, "0 (with --duration) or more"},
		{"max-concurrency", c.Scenario.MaxConcurrency, 0, "0 (no cap) or more"},
		{"warmup", c.Scenario.Warmup, 0, "0 or more"},
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
		{"duration", c.Scenario.Duration, "0 (a count instead) or more"},
		{"timeout", c.Target.Timeout, "0 (none) or more"},
		{"stall-timeout", c.Target.StallTimeout, "0 (never) or more"},
		{"header-timeout", c.Target.HeaderTimeout, "0 (never) or more"},
		{"think-time", d.Multiturn.ThinkTime, "0 or more"},
	} {
		if t.v < 0 {
			return fmt.Errorf("--%s %v: give %s", t.flag, t.v, t.what)
		}
	}
	// The generated datasets need lengths of a token or more (a file's
	// records, a trace and the Go API's Requests carry their own).
	if c.Scenario.TracePath == "" && len(c.Scenario.Requests) == 0 && d.Synthetic() {
		if d.OutputLen < 1 {
			return fmt.Errorf("--output-len %d: give 1 or more tokens", d.OutputLen)
		}
		if d.InputLen < 1 && d.InputLenFile == "" && d.Name != dataset.RAG {
			return fmt.Errorf("--input-len %d: give 1 or more tokens", d.InputLen)
		}
	}
	if r := d.RangeRatio; r < 0 || r >= 1 || math.IsNaN(r) {
		return fmt.Errorf("--range-ratio %v: give a fraction in [0, 1)", r)
	}
	return nil
}
