package tracing

import (
	"context"
	"log/slog"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// loggingExporter logs export failures to the injected logger instead of the
// OpenTelemetry global error handler: the first failure of a run, then the
// recovery. It returns nil for a failed batch so that the SDK does not hand
// the error to that global handler as well; the batch is dropped either way.
type loggingExporter struct {
	sdktrace.SpanExporter
	log     *slog.Logger
	failing atomic.Bool // set by the first failed export, cleared by a success
}

// ExportSpans exports spans and logs a change between working and failing.
func (e *loggingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	switch {
	case err != nil && !e.failing.Swap(true):
		e.log.Warn("trace export failing", "spans", len(spans), "err", err)
	case err == nil && e.failing.Swap(false):
		e.log.Info("trace export recovered")
	}
	return nil
}
