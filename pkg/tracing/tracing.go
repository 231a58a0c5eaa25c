// Package tracing emits OpenTelemetry traces over OTLP/HTTP: one server span
// per gateway request and one client span per upstream attempt, carrying the
// GenAI semantic-convention attributes (provider, models, tokens), with W3C
// trace context read from the client and passed on to the upstream.
//
// Tracing is off unless an endpoint is configured. A nil or disabled *Tracer
// is valid and costs no allocation on the request path.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// DefaultServiceName is the service.name resource attribute used when neither
// Config.ServiceName nor OTEL_SERVICE_NAME is set.
const DefaultServiceName = "tollgate-gateway"

// instrumentation is the instrumentation scope name of every span.
const instrumentation = "github.com/tollgate/tollgate/pkg/tracing"

// Config selects where and how much to trace.
type Config struct {
	// Endpoint is the OTLP/HTTP collector, e.g. http://127.0.0.1:4318. The
	// path /v1/traces is appended unless the URL already has a path. Empty
	// means off, unless OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, which then apply as the
	// OpenTelemetry specification says.
	Endpoint string
	// ServiceName is the service.name resource attribute; empty means
	// OTEL_SERVICE_NAME, or DefaultServiceName.
	ServiceName string
	// SampleRatio is the fraction of new traces that are recorded, in (0, 1];
	// 0 means 1. A request whose incoming traceparent carries a sampling
	// decision follows that decision.
	SampleRatio float64
	// Insecure sends plain HTTP to an Endpoint given without a scheme
	// ("host:port"). An http:// or https:// scheme decides on its own.
	Insecure bool
}

// Tracer starts request and attempt spans. The zero value, and a nil
// *Tracer, are disabled: every method is then a no-op.
type Tracer struct {
	tracer   trace.Tracer // nil when disabled
	provider *sdktrace.TracerProvider
	prop     propagation.TraceContext
}

// Start builds a Tracer from cfg. It returns a disabled Tracer (not nil)
// when no endpoint is configured, or when OTEL_SDK_DISABLED is true. It does
// not contact the collector: spans are exported in the background, and
// export failures are logged to log (the first of a run of failures and the
// recovery after it), never returned.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Tracer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	envEndpoint := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") + os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || (cfg.Endpoint == "" && envEndpoint == "") {
		return &Tracer{}, nil
	}
	exp, err := newExporter(cfg)
	if err != nil {
		return nil, err
	}
	res, err := newResource(ctx, cfg.ServiceName)
	if err != nil {
		return nil, err
	}
	ratio := cfg.SampleRatio
	if ratio <= 0 || ratio > 1 {
		ratio = 1
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(&loggingExporter{SpanExporter: exp, log: log}),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
	)
	log.Info("tracing enabled", "endpoint", exp.url, "sample_ratio", ratio)
	return newTracer(tp), nil
}

// NewWithProvider returns a Tracer that records into tp, a provider set up
// by the caller (tests pass one with an in-memory exporter). Shutdown shuts
// tp down.
func NewWithProvider(tp *sdktrace.TracerProvider) *Tracer { return newTracer(tp) }

// newTracer wraps a ready provider.
func newTracer(tp *sdktrace.TracerProvider) *Tracer {
	return &Tracer{tracer: tp.Tracer(instrumentation), provider: tp}
}

// newResource describes this process: the SDK, OTEL_RESOURCE_ATTRIBUTES, and
// the service name, which wins over the environment's.
func newResource(ctx context.Context, name string) (*resource.Resource, error) {
	if name == "" {
		name = os.Getenv("OTEL_SERVICE_NAME")
	}
	if name == "" {
		name = DefaultServiceName
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
		resource.WithAttributes(attribute.String("service.name", name)),
	)
	if err != nil {
		return nil, fmt.Errorf("build tracing resource: %w", err)
	}
	return res, nil
}

// Shutdown exports the spans still buffered and stops the exporter; it
// returns when done or when ctx ends. It is a no-op when disabled.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil || t.provider == nil {
		return nil
	}
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("shut down tracing: %w", err)
	}
	return nil
}

// Enabled reports whether spans are recorded and exported.
func (t *Tracer) Enabled() bool {
	return t != nil && t.tracer != nil
}

// HeaderGetter reads one request header; *fasthttp.RequestHeader satisfies it.
type HeaderGetter interface {
	Peek(key string) []byte
}

// HeaderSetter writes one request header; *fasthttp.RequestHeader satisfies it.
type HeaderSetter interface {
	Set(key, value string)
}

// StartRequest starts the server span of one gateway request, as a child of
// the W3C traceparent in hdr when there is one. endpoint is the route, e.g.
// /v1/chat/completions, and names the span; hdr may be nil. The returned
// context carries the span for StartAttempt and Inject; end the span when
// the response is complete.
func (t *Tracer) StartRequest(ctx context.Context, hdr HeaderGetter, endpoint, requestID string) (context.Context, Span) {
	if t == nil || t.tracer == nil {
		return ctx, Span{}
	}
	if hdr != nil {
		ctx = t.prop.Extract(ctx, getCarrier{hdr})
	}
	ctx, s := t.tracer.Start(ctx, endpoint,
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("http.route", endpoint),
			attribute.String("tollgate.request.id", requestID),
		))
	return ctx, Span{span: s}
}

// StartAttempt starts the client span of one upstream call, a child of the
// request span in ctx. provider is the provider kind (gen_ai.system, e.g.
// openai), model the upstream model, attempt counts from 1 across retries
// and fallbacks. The span is named "chat <model>" until SetGenAI names
// another operation.
func (t *Tracer) StartAttempt(ctx context.Context, provider, model string, attempt int) (context.Context, Span) {
	if t == nil || t.tracer == nil {
		return ctx, Span{}
	}
	ctx, s := t.tracer.Start(ctx, "chat "+model,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			keySystem.String(provider),
			keyProvider.String(provider),
			keyOperation.String("chat"),
			keyRequestModel.String(model),
			attribute.Int("tollgate.attempt", attempt),
		))
	return ctx, Span{span: s, client: true}
}

// Inject writes the traceparent (and tracestate) of the span in ctx into an
// outgoing request's headers. It writes nothing when disabled or when ctx
// holds no span.
func (t *Tracer) Inject(ctx context.Context, set HeaderSetter) {
	if t == nil || t.tracer == nil {
		return
	}
	t.prop.Inject(ctx, setCarrier{set})
}

// getCarrier adapts a HeaderGetter to the propagator; only Get is used
// by extraction.
type getCarrier struct{ h HeaderGetter }

func (c getCarrier) Get(key string) string { return string(c.h.Peek(key)) }
func (c getCarrier) Set(string, string)    {}
func (c getCarrier) Keys() []string        { return nil }

// setCarrier adapts a HeaderSetter to the propagator; only Set is used
// by injection.
type setCarrier struct{ h HeaderSetter }

func (c setCarrier) Get(string) string     { return "" }
func (c setCarrier) Set(key, value string) { c.h.Set(key, value) }
func (c setCarrier) Keys() []string        { return nil }
