// Package otlp exports the load generator's requests over OTLP (gRPC or
// HTTP) following the GenAI semantic conventions (v1.41.0, the release the
// Go semconv package carries): one client span per request, under the
// trace id and span id the request was sent with in its traceparent header
// (so a server that traces, such as vLLM with --otlp-traces-endpoint, puts
// its spans under it), the arrival of every streamed chunk as a span event
// (or, past a limit, one compact attribute of offsets), and the GenAI client
// metrics: gen_ai.client.operation.duration, gen_ai.client.token.usage,
// gen_ai.client.operation.time_to_first_chunk and
// gen_ai.client.operation.time_per_output_chunk.
package otlp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// Protocols.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Options configure the exporter. With no endpoint in the options or in the
// environment (OTEL_EXPORTER_OTLP_ENDPOINT, or the signal's own
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_METRICS_ENDPOINT)
// export is off; OTEL_TRACES_EXPORTER=none or OTEL_METRICS_EXPORTER=none
// turns one signal off.
type Options struct {
	// Endpoint is the collector of both signals: a URL (http://host:4318,
	// to which /v1/traces and /v1/metrics are added, for HTTP;
	// http://host:4317 for gRPC).
	Endpoint string
	// Protocol is grpc or http/protobuf; empty: the signal's
	// OTEL_EXPORTER_OTLP_{TRACES,METRICS}_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL,
	// else http/protobuf.
	Protocol string
	// ServiceName is the resource's service.name (default bpfbench-loadgen;
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES apply too).
	ServiceName string
	// MaxChunkEvents is the most chunk events per span; requests with more
	// chunks carry bpfbench.chunk_offsets_us instead (default 256).
	MaxChunkEvents int
}

// RegisterFlags defines --otlp-endpoint and --otlp-protocol on fs.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Endpoint, "otlp-endpoint", o.Endpoint, "export request spans to this OTLP collector `URL` (or set OTEL_EXPORTER_OTLP_ENDPOINT)")
	fs.StringVar(&o.Protocol, "otlp-protocol", o.Protocol, "OTLP protocol: grpc or http/protobuf (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)")
	fs.IntVar(&o.MaxChunkEvents, "otlp-max-chunk-events", 256, "most chunk events per span; beyond, chunk offsets go in one attribute")
}

// The signals, as the OTEL_ environment names them.
const (
	sigTraces  = "TRACES"
	sigMetrics = "METRICS"
)

// Enabled reports whether either signal is exported.
func (o Options) Enabled() bool { return o.enabled(sigTraces) || o.enabled(sigMetrics) }

// enabled reports whether signal has an endpoint and is not turned off.
func (o Options) enabled(signal string) bool {
	if os.Getenv("OTEL_"+signal+"_EXPORTER") == "none" {
		return false
	}
	return o.Endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != ""
}

func (o Options) protocol(signal string) (string, error) {
	p := o.Protocol
	if p == "" {
		p = os.Getenv("OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL")
	}
	if p == "" {
		p = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch p {
	case "", ProtocolHTTP, "http":
		return ProtocolHTTP, nil
	case ProtocolGRPC:
		return ProtocolGRPC, nil
	}
	return "", fmt.Errorf("OTLP protocol %q: use grpc or http/protobuf", p)
}

// httpURL is the HTTP endpoint of a signal for --otlp-endpoint u: the
// signal's path is added to a bare URL, and replaces the other signal's.
func httpURL(u, path string) string {
	u = withScheme(u)
	pu, err := url.Parse(u)
	if err != nil {
		return u
	}
	switch pu.Path {
	case "", "/", "/v1/traces", "/v1/metrics":
		pu.Path = path
		return pu.String()
	}
	return u
}

func newSpanExporter(ctx context.Context, o Options) (sdktrace.SpanExporter, error) {
	proto, err := o.protocol(sigTraces)
	if err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	switch proto {
	case ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if o.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(withScheme(o.Endpoint)))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	default:
		var opts []otlptracehttp.Option
		if o.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(httpURL(o.Endpoint, "/v1/traces")))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("creating the OTLP %s span exporter: %w", proto, err)
	}
	return exp, nil
}

func newMetricExporter(ctx context.Context, o Options) (sdkmetric.Exporter, error) {
	proto, err := o.protocol(sigMetrics)
	if err != nil {
		return nil, err
	}
	var exp sdkmetric.Exporter
	switch proto {
	case ProtocolGRPC:
		var opts []otlpmetricgrpc.Option
		if o.Endpoint != "" {
			opts = append(opts, otlpmetricgrpc.WithEndpointURL(withScheme(o.Endpoint)))
		}
		exp, err = otlpmetricgrpc.New(ctx, opts...)
	default:
		var opts []otlpmetrichttp.Option
		if o.Endpoint != "" {
			opts = append(opts, otlpmetrichttp.WithEndpointURL(httpURL(o.Endpoint, "/v1/metrics")))
		}
		exp, err = otlpmetrichttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("creating the OTLP %s metric exporter: %w", proto, err)
	}
	return exp, nil
}

// Exporter turns load generator records into spans and GenAI client
// metrics.
type Exporter struct {
	tp     *sdktrace.TracerProvider // nil: no spans
	tracer trace.Tracer
	mp     *sdkmetric.MeterProvider // nil: no metrics
	inst   instruments
	opts   Options
	anchor loadgen.Anchor
	log    *slog.Logger
	once   sync.Once
}

// instruments are the GenAI client metrics.
type instruments struct {
	duration   genaiconv.ClientOperationDuration
	tokens     genaiconv.ClientTokenUsage
	firstChunk genaiconv.ClientOperationTimeToFirstChunk
	perChunk   genaiconv.ClientOperationTimePerOutputChunk
}

// The explicit bucket boundaries the GenAI conventions recommend: one set
// for the durations (s: the operation, the first chunk, the time per
// output chunk), one for token counts.
var (
	durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	tokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

const scope = "github.com/bpfbench/bpfbench/loadgen"

// New returns an exporter for opts, or nil (and no error) when export is off.
func New(ctx context.Context, o Options) (*Exporter, error) {
	if !o.Enabled() {
		return nil, nil
	}
	var (
		spans   sdktrace.SpanExporter
		metrics sdkmetric.Reader
	)
	if o.enabled(sigTraces) {
		exp, err := newSpanExporter(ctx, o)
		if err != nil {
			return nil, err
		}
		spans = exp
	}
	if o.enabled(sigMetrics) {
		exp, err := newMetricExporter(ctx, o)
		if err != nil {
			if spans != nil {
				spans.Shutdown(ctx)
			}
			return nil, err
		}
		// Every OTEL_METRIC_EXPORT_INTERVAL (default 60 s) and at Flush.
		metrics = sdkmetric.NewPeriodicReader(exp)
	}
	return NewWithExporters(spans, metrics, o), nil
}

func withScheme(s string) string {
	if strings.Contains(s, "://") {
		return s
	}
	return "http://" + s
}

// NewWithSpanExporter returns an exporter of spans only, writing to exp (an
// OTLP exporter, or tracetest's in-memory one in tests).
func NewWithSpanExporter(exp sdktrace.SpanExporter, o Options) *Exporter {
	return NewWithExporters(exp, nil, o)
}

// NewWithExporters returns an exporter writing spans to spans and the
// metrics through metrics (a periodic reader around an OTLP exporter, or
// a manual reader in tests); either may be nil.
func NewWithExporters(spans sdktrace.SpanExporter, metrics sdkmetric.Reader, o Options) *Exporter {
	if o.MaxChunkEvents <= 0 {
		o.MaxChunkEvents = 256
	}
	name := o.ServiceName
	if name == "" {
		name = "bpfbench-loadgen"
	}
	res, err := resource.Merge(resource.NewSchemaless(semconv.ServiceName(name)), resource.Environment())
	if err != nil {
		res = resource.NewSchemaless(semconv.ServiceName(name))
	}
	e := &Exporter{
		opts:   o,
		anchor: loadgen.NewAnchor(),
		log:    slog.Default().With("component", "otlp"),
	}
	if spans != nil {
		e.tp = sdktrace.NewTracerProvider(
			sdktrace.WithBatcher(spans, sdktrace.WithMaxQueueSize(1<<16), sdktrace.WithMaxExportBatchSize(512)),
			sdktrace.WithResource(res),
			sdktrace.WithIDGenerator(requestIDs{}),
			sdktrace.WithRawSpanLimits(sdktrace.SpanLimits{
				AttributeValueLengthLimit:   -1,
				AttributeCountLimit:         64,
				EventCountLimit:             o.MaxChunkEvents + 8,
				LinkCountLimit:              8,
				AttributePerEventCountLimit: 8,
				AttributePerLinkCountLimit:  8,
			}),
		)
		e.tracer = e.tp.Tracer(scope, trace.WithSchemaURL(semconv.SchemaURL))
	}
	if metrics != nil {
		e.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics), sdkmetric.WithResource(res))
		m := e.mp.Meter(scope, metric.WithSchemaURL(semconv.SchemaURL))
		var errs [4]error
		e.inst.duration, errs[0] = genaiconv.NewClientOperationDuration(m, metric.WithExplicitBucketBoundaries(durationBuckets...))
		e.inst.tokens, errs[1] = genaiconv.NewClientTokenUsage(m, metric.WithExplicitBucketBoundaries(tokenBuckets...))
		e.inst.firstChunk, errs[2] = genaiconv.NewClientOperationTimeToFirstChunk(m, metric.WithExplicitBucketBoundaries(durationBuckets...))
		e.inst.perChunk, errs[3] = genaiconv.NewClientOperationTimePerOutputChunk(m, metric.WithExplicitBucketBoundaries(durationBuckets...))
		if err := errors.Join(errs[:]...); err != nil {
			// (Only a malformed name or option fails, and the failed
			// instrument is a no-op.)
			e.log.Warn("creating the GenAI client metrics", "err", err)
		}
	}
	return e
}

// requestIDs gives a request's span the trace id and span id it was sent
// with (its traceparent), passed in the context; spans of records without
// them get random ones.
type requestIDs struct{}

type idsKey struct{}

type spanIDs struct {
	trace trace.TraceID
	span  trace.SpanID
}

func (requestIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if v, ok := ctx.Value(idsKey{}).(spanIDs); ok {
		return v.trace, v.span
	}
	var t trace.TraceID
	for !t.IsValid() {
		putUint64(t[:8], rand.Uint64())
		putUint64(t[8:], rand.Uint64())
	}
	return t, randomSpanID()
}

func (requestIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return randomSpanID() }

func randomSpanID() trace.SpanID {
	var s trace.SpanID
	for !s.IsValid() {
		putUint64(s[:], rand.Uint64())
	}
	return s
}

func putUint64(b []byte, v uint64) {
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
}

// withIDs returns ctx carrying r's trace context, when it has a valid one.
func withIDs(ctx context.Context, r *loadgen.Record) context.Context {
	t, err := trace.TraceIDFromHex(r.TraceID)
	if err != nil {
		return ctx
	}
	s, err := trace.SpanIDFromHex(r.SpanID)
	if err != nil {
		return ctx
	}
	return context.WithValue(ctx, idsKey{}, spanIDs{t, s})
}

// Hook returns a loadgen.Config.OnRecord function exporting every record
// of a run configured by cfg.
func (e *Exporter) Hook(cfg *loadgen.Config) func(*loadgen.Record) {
	c := *cfg
	return func(r *loadgen.Record) { e.Export(&c, r) }
}

// Operation returns the GenAI operation name for an endpoint.
func Operation(endpoint string) string {
	if endpoint == transport.EndpointChat {
		return semconv.GenAIOperationNameChat.Value.AsString()
	}
	return semconv.GenAIOperationNameTextCompletion.Value.AsString()
}

// ErrorType is the error.type of a failed request: the HTTP status code
// when the server answered with one, else the failure kind (loadgen.Fail*:
// connect, timeout, stall, cut, malformed, stream_error, no_tokens,
// canceled), and _OTHER for any other; empty for a success.
func ErrorType(r *loadgen.Record) string {
	switch {
	case r.Success:
		return ""
	case r.Failure == transport.FailHTTPStatus && r.Status > 0:
		return strconv.Itoa(r.Status)
	case r.Failure == "" || r.Failure == transport.FailOther:
		return semconv.ErrorTypeOther.Value.AsString()
	}
	return r.Failure
}

// inputTokens is the prompt length: the server's usage, else the dataset's.
func inputTokens(r *loadgen.Record) int {
	if r.UsagePromptTokens > 0 {
		return r.UsagePromptTokens
	}
	return r.PromptLen
}

// Export records one request as a span and in the metrics.
func (e *Exporter) Export(cfg *loadgen.Config, r *loadgen.Record) { e.ExportWith(cfg, r) }

// ExportWith records one request as a span carrying extra attributes (the
// attribution of `bpfbench run`), and in the metrics.
func (e *Exporter) ExportWith(cfg *loadgen.Config, r *loadgen.Record, extra ...attribute.KeyValue) {
	if r.StartNs == 0 {
		return
	}
	if e.tp != nil {
		e.span(cfg, r, extra)
	}
	if e.mp != nil && !r.Warmup {
		e.record(cfg, r)
	}
}

// common are the attributes of both the span and the metrics.
func common(cfg *loadgen.Config, r *loadgen.Record) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 32)
	attrs = append(attrs,
		semconv.GenAIOperationNameKey.String(Operation(cfg.Target.Endpoint)),
		semconv.GenAIProviderNameOpenAI,
		semconv.GenAIRequestModel(cfg.Target.Model),
	)
	if r.ResponseModel != "" {
		attrs = append(attrs, semconv.GenAIResponseModel(r.ResponseModel))
	}
	if host, port, ok := serverAddr(cfg.Target.URL); ok {
		attrs = append(attrs, semconv.ServerAddress(host), semconv.ServerPort(port))
	}
	return attrs
}

func (e *Exporter) span(cfg *loadgen.Config, r *loadgen.Record, extra []attribute.KeyValue) {
	start := e.anchor.Wall(r.StartNs)
	end := e.anchor.Wall(max(r.EndNs, r.StartNs))
	attrs := append(common(cfg, r),
		semconv.GenAIRequestMaxTokens(r.MaxTokens),
		semconv.GenAIRequestStream(true),
		semconv.GenAIUsageInputTokens(inputTokens(r)),
		semconv.GenAIUsageOutputTokens(r.OutputTokens),
		attribute.String("bpfbench.request.id", r.RequestID),
		semconv.NetworkLocalPort(r.LocalPort),
		attribute.Int64("bpfbench.start_mono_ns", r.StartNs),
		attribute.Int64("bpfbench.queue_ns", r.QueueNs()),
		attribute.Int("bpfbench.chunks", len(r.ChunkNs)),
	)
	if r.Status > 0 {
		attrs = append(attrs, semconv.HTTPResponseStatusCode(r.Status))
	}
	if r.ResponseID != "" {
		attrs = append(attrs, semconv.GenAIResponseID(r.ResponseID))
	}
	if len(r.FinishReasons) > 0 {
		attrs = append(attrs, semconv.GenAIResponseFinishReasons(r.FinishReasons...))
	}
	if len(r.ChunkNs) > 0 {
		attrs = append(attrs, semconv.GenAIResponseTimeToFirstChunk(float64(r.TTFTNs())/1e9))
	}
	if r.TokenSource != "" {
		attrs = append(attrs, attribute.String("bpfbench.token_source", r.TokenSource))
	}
	if r.Warmup {
		attrs = append(attrs, attribute.Bool("bpfbench.warmup", true))
	}
	if et := ErrorType(r); et != "" {
		attrs = append(attrs, semconv.ErrorTypeKey.String(et))
	}
	attrs = append(attrs, extra...)
	compact := len(r.ChunkNs) > e.opts.MaxChunkEvents
	if compact {
		offs := make([]int64, len(r.ChunkNs))
		for i, t := range r.ChunkNs {
			offs[i] = (t - r.StartNs) / 1e3
		}
		attrs = append(attrs, attribute.Int64Slice("bpfbench.chunk_offsets_us", offs))
	}
	op := Operation(cfg.Target.Endpoint)
	_, span := e.tracer.Start(withIDs(context.Background(), r), op+" "+cfg.Target.Model,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(start),
		trace.WithAttributes(attrs...))
	if !compact {
		for i, t := range r.ChunkNs {
			ev := []attribute.KeyValue{attribute.Int("bpfbench.chunk.index", i)}
			if i < len(r.ChunkTokens) {
				ev = append(ev, attribute.Int("bpfbench.chunk.tokens", int(r.ChunkTokens[i])))
			}
			span.AddEvent("bpfbench.chunk", trace.WithTimestamp(e.anchor.Wall(t)), trace.WithAttributes(ev...))
		}
	}
	if !r.Success {
		span.SetStatus(codes.Error, r.Error)
	}
	span.End(trace.WithTimestamp(end))
}

// record adds a request to the GenAI client metrics. The SDK takes no
// timestamps for measurements: a request is measured when it is exported
// (as it finishes, through Hook), and its data points are dated by the
// collection. Every request adds its duration (with error.type when it
// failed); a successful one adds its token counts, its time to first chunk
// and the gap before each later chunk (the figures of the report: failed
// requests are left out of them, as vLLM's client does).
func (e *Exporter) record(cfg *loadgen.Config, r *loadgen.Record) {
	ctx := context.Background()
	attrs := common(cfg, r)
	// (NewSet sorts the slice it is given: each set gets its own.)
	with := func(kv attribute.KeyValue) attribute.Set {
		return attribute.NewSet(append(slices.Clip(slices.Clone(attrs)), kv)...)
	}
	dur := float64(max(r.EndNs, r.StartNs)-r.StartNs) / 1e9
	if et := ErrorType(r); et != "" {
		e.inst.duration.RecordSet(ctx, dur, with(semconv.ErrorTypeKey.String(et)))
		return
	}
	set := attribute.NewSet(slices.Clone(attrs)...)
	e.inst.duration.RecordSet(ctx, dur, set)
	if in := inputTokens(r); in > 0 {
		e.inst.tokens.RecordSet(ctx, int64(in), with(semconv.GenAITokenTypeInput))
	}
	if r.OutputTokens > 0 {
		e.inst.tokens.RecordSet(ctx, int64(r.OutputTokens), with(semconv.GenAITokenTypeOutput))
	}
	if len(r.ChunkNs) == 0 {
		return
	}
	e.inst.firstChunk.RecordSet(ctx, float64(r.TTFTNs())/1e9, set)
	for i := 1; i < len(r.ChunkNs); i++ {
		e.inst.perChunk.RecordSet(ctx, float64(r.ChunkNs[i]-r.ChunkNs[i-1])/1e9, set)
	}
}

func serverAddr(target string) (string, int, bool) {
	if !strings.Contains(target, "://") {
		target = "http://" + target
	}
	u, err := url.Parse(target)
	if err != nil {
		return "", 0, false
	}
	host, ps, err := net.SplitHostPort(u.Host)
	if err != nil {
		host = u.Host
		ps = "80"
		if u.Scheme == "https" {
			ps = "443"
		}
	}
	p, err := strconv.Atoi(ps)
	if err != nil {
		return "", 0, false
	}
	return host, p, true
}

// ExportResult exports every record of a finished run (for runs made
// without the hook).
func (e *Exporter) ExportResult(res *loadgen.Result) {
	for i := range res.Warmup {
		e.Export(&res.Config, &res.Warmup[i])
	}
	for i := range res.Records {
		e.Export(&res.Config, &res.Records[i])
	}
}

// Flush exports the spans queued so far and the metrics as they stand.
func (e *Exporter) Flush(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var errs []error
	if e.tp != nil {
		if err := e.tp.ForceFlush(ctx); err != nil {
			errs = append(errs, fmt.Errorf("flushing spans: %w", err))
		}
	}
	if e.mp != nil {
		if err := e.mp.ForceFlush(ctx); err != nil {
			errs = append(errs, fmt.Errorf("flushing metrics: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Shutdown flushes and stops the exporter. It is idempotent.
func (e *Exporter) Shutdown(ctx context.Context) error {
	var errs []error
	e.once.Do(func() {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if e.tp != nil {
			if err := e.tp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("shutting down the span exporter: %w", err))
			}
		}
		if e.mp != nil {
			if err := e.mp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("shutting down the metric exporter: %w", err))
			}
		}
	})
	return errors.Join(errs...)
}
