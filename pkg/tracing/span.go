package tracing

import (
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// GenAI semantic-convention attribute keys. gen_ai.provider.name is the
// newer name of gen_ai.system; both are written so either kind of backend
// finds the provider.
const (
	keySystem        = attribute.Key("gen_ai.system")
	keyProvider      = attribute.Key("gen_ai.provider.name")
	keyOperation     = attribute.Key("gen_ai.operation.name")
	keyRequestModel  = attribute.Key("gen_ai.request.model")
	keyResponseModel = attribute.Key("gen_ai.response.model")
	keyInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	keyOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
	keyStatusCode    = attribute.Key("http.response.status_code")
	keyErrorType     = attribute.Key("error.type")
)

// GenAI holds the GenAI attributes known once a call has been answered.
// Empty strings and zero token counts are not written.
type GenAI struct {
	// System is the provider kind (gen_ai.system), e.g. openai, anthropic.
	System string
	// Operation is gen_ai.operation.name, e.g. chat, embeddings,
	// text_completion.
	Operation string
	// RequestModel is the model asked for (gen_ai.request.model).
	RequestModel string
	// ResponseModel is the model that answered (gen_ai.response.model).
	ResponseModel string
	// InputTokens and OutputTokens are gen_ai.usage.input_tokens and
	// gen_ai.usage.output_tokens.
	InputTokens, OutputTokens int64
}

// Span is one request or attempt span. The zero value, returned when
// tracing is off, does nothing. Methods must not be called after End.
type Span struct {
	span   trace.Span // nil when disabled
	client bool       // attempt span: 4xx is an error too
}

// SetGenAI records the GenAI attributes a. On an attempt span a non-empty
// Operation also renames the span "<operation> <model>".
func (s Span) SetGenAI(a GenAI) {
	if s.span == nil || !s.span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 8)
	if a.System != "" {
		attrs = append(attrs, keySystem.String(a.System), keyProvider.String(a.System))
	}
	if a.Operation != "" {
		attrs = append(attrs, keyOperation.String(a.Operation))
	}
	if a.RequestModel != "" {
		attrs = append(attrs, keyRequestModel.String(a.RequestModel))
	}
	if a.ResponseModel != "" {
		attrs = append(attrs, keyResponseModel.String(a.ResponseModel))
	}
	if a.InputTokens != 0 {
		attrs = append(attrs, keyInputTokens.Int64(a.InputTokens))
	}
	if a.OutputTokens != 0 {
		attrs = append(attrs, keyOutputTokens.Int64(a.OutputTokens))
	}
	s.span.SetAttributes(attrs...)
	if s.client && a.Operation != "" && a.RequestModel != "" {
		s.span.SetName(a.Operation + " " + a.RequestModel)
	}
}

// SetStatus records the HTTP status code and, when errType is not empty,
// error.type. The span is marked as failed when errType is set, on 5xx, and
// on an attempt span also on 4xx (the server span of a request treats 4xx
// as the client's fault, as the HTTP conventions say).
func (s Span) SetStatus(code int, errType string) {
	if s.span == nil || !s.span.IsRecording() {
		return
	}
	if code > 0 {
		s.span.SetAttributes(keyStatusCode.Int(code))
	}
	failed := errType != "" || code >= 500 || (s.client && code >= 400)
	if !failed {
		return
	}
	if errType == "" {
		// The HTTP conventions use the status code itself.
		errType = strconv.Itoa(code)
	}
	s.span.SetAttributes(keyErrorType.String(errType))
	s.span.SetStatus(codes.Error, errType)
}

// End finishes the span.
func (s Span) End() {
	if s.span != nil {
		s.span.End()
	}
}
