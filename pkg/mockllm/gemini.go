package mockllm

import "github.com/valyala/fasthttp"

// gemini answers /v1beta/models/{model}:{method} in the Gemini format; rest
// is "{model}:{method}". Not implemented yet.
func (s *Server) gemini(ctx *fasthttp.RequestCtx, rest []byte) {
	writeError(ctx, fasthttp.StatusNotImplemented, "api_error", "the Gemini format is not implemented", "", "not_implemented")
}
