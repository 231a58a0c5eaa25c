package tracing

import (
	"context"
	"testing"

	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkRequest measures one request span with one attempt span, an
// injected traceparent and the GenAI attributes. Expected: 0 allocs/op when
// tracing is off.
func BenchmarkRequest(b *testing.B) {
	enabled := func(s sdktrace.Sampler) *Tracer {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(s))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return newTracer(tp)
	}
	tests := []struct {
		name string
		tr   *Tracer
	}{
		{name: "nil", tr: nil},
		{name: "disabled", tr: &Tracer{}},
		{name: "enabled", tr: enabled(sdktrace.AlwaysSample())},
		{name: "enabled-unsampled", tr: enabled(sdktrace.NeverSample())},
	}
	g := GenAI{System: "openai", Operation: "chat", RequestModel: "mock-gpt", ResponseModel: "mock-gpt", InputTokens: 12, OutputTokens: 7}
	for _, tc := range tests {
		b.Run(tc.name, func(b *testing.B) {
			var in, out fasthttp.RequestHeader
			in.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			base := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				ctx, rs := tc.tr.StartRequest(base, &in, "/v1/chat/completions", "req-1")
				actx, as := tc.tr.StartAttempt(ctx, "openai", "mock-gpt", 1)
				tc.tr.Inject(actx, &out)
				as.SetGenAI(g)
				as.SetStatus(200, "")
				as.End()
				rs.SetGenAI(g)
				rs.SetStatus(200, "")
				rs.End()
			}
		})
	}
}
