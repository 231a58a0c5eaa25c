package mockllm

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// routeOther dispatches the provider formats whose paths carry the model:
// Gemini (/v1beta/models/{model}:{method}, gemini.go), Bedrock
// (/model/{modelId}/converse[-stream], bedrock.go) and Azure OpenAI
// (/openai/deployments/{deployment}/{endpoint}, answered in the OpenAI
// format). It reports whether it answered.
func (s *Server) routeOther(ctx *fasthttp.RequestCtx, path []byte) bool {
	switch {
	case bytes.HasPrefix(path, []byte("/v1beta/models/")):
		if s.method(ctx, fasthttp.MethodPost) {
			s.gemini(ctx, path[len("/v1beta/models/"):])
		}
		return true
	case bytes.HasPrefix(path, []byte("/model/")):
		if s.method(ctx, fasthttp.MethodPost) {
			s.bedrock(ctx, path[len("/model/"):])
		}
		return true
	case bytes.HasPrefix(path, []byte("/openai/deployments/")):
		rest := path[len("/openai/deployments/"):]
		i := bytes.IndexByte(rest, '/')
		if i < 0 || !s.method(ctx, fasthttp.MethodPost) {
			if i < 0 {
				writeError(ctx, fasthttp.StatusNotFound, "invalid_request_error", "unknown path", "", "unknown_url")
			}
			return true
		}
		switch string(rest[i:]) {
		case "/chat/completions":
			s.chat(ctx)
		case "/completions":
			s.completions(ctx)
		case "/embeddings":
			s.embeddings(ctx)
		default:
			writeError(ctx, fasthttp.StatusNotFound, "invalid_request_error", "unknown path", "", "unknown_url")
		}
		return true
	}
	return false
}
