// Package otlp exports the load generator's requests as OpenTelemetry spans
// over OTLP (gRPC or HTTP), following the GenAI semantic conventions: one
// client span per request with gen_ai.* attributes, and the arrival of every
// streamed chunk as a span event (or, past a limit, as one compact attribute
// of offsets).
package otlp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/bpfbench/bpfbench/loadgen"
)

// Protocols.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Options configure the exporter. With no endpoint in the options or in the
// environment (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// export is off.
type Options struct {
	// Endpoint is the collector: a URL (http://host:4318 or
	// http://host:4318/v1/traces for HTTP, http://host:4317 for gRPC).
	Endpoint string
	// Protocol is grpc or http/protobuf; empty: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
	// OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf.
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

// Enabled reports whether an endpoint is configured.
func (o Options) Enabled() bool {
	return o.Endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

func (o Options) protocol() (string, error) {
	p := o.Protocol
	if p == "" {
		p = os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
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

// Exporter turns load generator records into spans.
type Exporter struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	opts   Options
	anchor loadgen.Anchor
	log    *slog.Logger
	once   sync.Once
}

// New returns an exporter for opts, or nil (and no error) when export is off.
func New(ctx context.Context, o Options) (*Exporter, error) {
	if !o.Enabled() {
		return nil, nil
	}
	proto, err := o.protocol()
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
			u := withScheme(o.Endpoint)
			if pu, perr := url.Parse(u); perr == nil && (pu.Path == "" || pu.Path == "/") {
				u = strings.TrimRight(u, "/") + "/v1/traces"
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("creating the OTLP %s exporter: %w", proto, err)
	}
	return NewWithSpanExporter(exp, o), nil
}

func withScheme(s string) string {
	if strings.Contains(s, "://") {
		return s
	}
	return "http://" + s
}

// NewWithSpanExporter returns an exporter writing to exp (an OTLP exporter,
// or tracetest's in-memory one in tests).
func NewWithSpanExporter(exp sdktrace.SpanExporter, o Options) *Exporter {
	if o.MaxChunkEvents <= 0 {
		o.MaxChunkEvents = 256
	}
	name := o.ServiceName
	if name == "" {
		name = "bpfbench-loadgen"
	}
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", name)), resource.Environment())
	if err != nil {
		res = resource.NewSchemaless(attribute.String("service.name", name))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(1<<16), sdktrace.WithMaxExportBatchSize(512)),
		sdktrace.WithResource(res),
		sdktrace.WithRawSpanLimits(sdktrace.SpanLimits{
			AttributeValueLengthLimit:   -1,
			AttributeCountLimit:         64,
			EventCountLimit:             o.MaxChunkEvents + 8,
			LinkCountLimit:              8,
			AttributePerEventCountLimit: 8,
			AttributePerLinkCountLimit:  8,
		}),
	)
	return &Exporter{
		tp:     tp,
		tracer: tp.Tracer("github.com/bpfbench/bpfbench/loadgen"),
		opts:   o,
		anchor: loadgen.NewAnchor(),
		log:    slog.Default().With("component", "otlp"),
	}
}

// Hook returns a loadgen.Config.OnRecord function exporting every record
// of a run configured by cfg.
func (e *Exporter) Hook(cfg *loadgen.Config) func(*loadgen.Record) {
	c := *cfg
	return func(r *loadgen.Record) { e.Export(&c, r) }
}

// Operation returns the GenAI operation name for an endpoint.
func Operation(endpoint string) string {
	if endpoint == loadgen.EndpointChat {
		return "chat"
	}
	return "text_completion"
}

// Export records one request as a span.
func (e *Exporter) Export(cfg *loadgen.Config, r *loadgen.Record) { e.ExportWith(cfg, r) }

// ExportWith records one request as a span carrying extra attributes (the
// attribution of `bpfbench run`).
func (e *Exporter) ExportWith(cfg *loadgen.Config, r *loadgen.Record, extra ...attribute.KeyValue) {
	if r.StartNs == 0 {
		return
	}
	op := Operation(cfg.Endpoint)
	start := e.anchor.Wall(r.StartNs)
	end := e.anchor.Wall(max(r.EndNs, r.StartNs))
	inTok := r.PromptLen
	if r.UsagePromptTokens > 0 {
		inTok = r.UsagePromptTokens
	}
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", op),
		attribute.String("gen_ai.provider.name", "openai"),
		attribute.String("gen_ai.system", "openai"),
		attribute.String("gen_ai.request.model", cfg.Model),
		attribute.Int("gen_ai.request.max_tokens", r.MaxTokens),
		attribute.Int("gen_ai.usage.input_tokens", inTok),
		attribute.Int("gen_ai.usage.output_tokens", r.OutputTokens),
		attribute.String("gen_ai.request.id", r.RequestID),
		attribute.Int("http.response.status_code", r.Status),
		attribute.Int("network.local.port", r.LocalPort),
		attribute.Int64("bpfbench.start_mono_ns", r.StartNs),
		attribute.Int64("bpfbench.queue_ns", r.QueueNs()),
		attribute.Int("bpfbench.chunks", len(r.ChunkNs)),
	}
	if host, port, ok := serverAddr(cfg.Target); ok {
		attrs = append(attrs, attribute.String("server.address", host), attribute.Int("server.port", port))
	}
	if r.TokenSource != "" {
		attrs = append(attrs, attribute.String("bpfbench.token_source", r.TokenSource))
	}
	if r.Warmup {
		attrs = append(attrs, attribute.Bool("bpfbench.warmup", true))
	}
	attrs = append(attrs, extra...)
	if len(r.ChunkNs) > 0 {
		attrs = append(attrs, attribute.Float64("gen_ai.server.time_to_first_token", float64(r.TTFTNs())/1e9))
	}
	compact := len(r.ChunkNs) > e.opts.MaxChunkEvents
	if compact {
		offs := make([]int64, len(r.ChunkNs))
		for i, t := range r.ChunkNs {
			offs[i] = (t - r.StartNs) / 1e3
		}
		attrs = append(attrs, attribute.Int64Slice("bpfbench.chunk_offsets_us", offs))
	}
	_, span := e.tracer.Start(context.Background(), op+" "+cfg.Model,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(start),
		trace.WithAttributes(attrs...))
	if !compact {
		for i, t := range r.ChunkNs {
			ev := []attribute.KeyValue{attribute.Int("gen_ai.chunk.index", i)}
			if i < len(r.ChunkTokens) {
				ev = append(ev, attribute.Int("gen_ai.chunk.tokens", int(r.ChunkTokens[i])))
			}
			span.AddEvent("gen_ai.chunk", trace.WithTimestamp(e.anchor.Wall(t)), trace.WithAttributes(ev...))
		}
	}
	if !r.Success {
		span.SetAttributes(attribute.String("error.type", r.Failure))
		span.SetStatus(codes.Error, r.Error)
	}
	span.End(trace.WithTimestamp(end))
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

// Flush exports the spans queued so far.
func (e *Exporter) Flush(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := e.tp.ForceFlush(ctx); err != nil {
		return fmt.Errorf("flushing spans: %w", err)
	}
	return nil
}

// Shutdown flushes and stops the exporter. It is idempotent.
func (e *Exporter) Shutdown(ctx context.Context) error {
	var err error
	e.once.Do(func() {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err = e.tp.Shutdown(ctx)
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("shutting down the span exporter: %w", err)
	}
	return nil
}
