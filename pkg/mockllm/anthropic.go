package mockllm

import "github.com/valyala/fasthttp"

// anthropicMessages answers POST /v1/messages in the Anthropic format.
// Not implemented yet.
func (s *Server) anthropicMessages(ctx *fasthttp.RequestCtx) {
	writeError(ctx, fasthttp.StatusNotImplemented, "api_error", "the Anthropic format is not implemented", "", "not_implemented")
}
