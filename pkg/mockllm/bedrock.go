package mockllm

import "github.com/valyala/fasthttp"

// bedrock answers /model/{modelId}/converse and /converse-stream in the
// Bedrock format; rest is "{modelId}/{action}". Not implemented yet.
func (s *Server) bedrock(ctx *fasthttp.RequestCtx, rest []byte) {
	writeError(ctx, fasthttp.StatusNotImplemented, "api_error", "the Bedrock format is not implemented", "", "not_implemented")
}
