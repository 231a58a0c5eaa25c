package mockllm

import (
	"bytes"
	"fmt"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// This file holds the Gemini API wire format (generativelanguage
// googleapis.com, version v1beta): POST /v1beta/models/{model}:{method}
// with the methods generateContent, streamGenerateContent (with ?alt=sse
// only), countTokens, embedContent and batchEmbedContents. gemini_stream.go holds its
// server-sent events.
//
// Answers follow the documented shapes: a GenerateContentResponse has
// candidates[0].content {role "model", parts}, finishReason "STOP",
// usageMetadata {promptTokenCount, candidatesTokenCount, totalTokenCount},
// modelVersion (the model of the path) and responseId. Function
// declarations (parameters, or parametersJsonSchema) are used as tools.go
// says: toolConfig.functionCallingConfig.mode "ANY" forces functionCall
// parts (of allowedFunctionNames only, when given), AUTO (or no mode) lets
// the last user message name a function, NONE answers text.
// promptTokenCount is the number of words of every text part of contents
// and systemInstruction, plus 3 per content (systemInstruction counts as
// one). Errors, injected or not, are Gemini error bodies
// {"error":{"code","message","status"}}; the X-Mock-* headers and the
// body's "mock" object work as for the OpenAI format. Embeddings are the
// same vectors the OpenAI format gives for the same single string; Gemini
// reports no usage for them.

// geminiRequest holds the top-level members of a Gemini request body. Its
// values point into the body and must not outlive the handler.
type geminiRequest struct {
	contents, system, tools, toolConfig gjson.Result
	requests, content, dims, mock       gjson.Result
}

// parseGeminiRequest reads the body in one pass. It answers 400 and
// reports false when the body is not a JSON object.
func parseGeminiRequest(ctx *fasthttp.RequestCtx) (geminiRequest, bool) {
	var r geminiRequest
	body := ctx.PostBody()
	if !gjson.ValidBytes(body) {
		geminiError(ctx, fasthttp.StatusBadRequest, "Invalid JSON payload received.")
		return r, false
	}
	root := gjson.Parse(b2s(body))
	if !root.IsObject() {
		geminiError(ctx, fasthttp.StatusBadRequest, "Invalid JSON payload received: the body must be an object.")
		return r, false
	}
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "contents":
			r.contents = v
		case "systemInstruction", "system_instruction":
			r.system = v
		case "tools":
			r.tools = v
		case "toolConfig", "tool_config":
			r.toolConfig = v
		case "requests":
			r.requests = v
		case "content":
			r.content = v
		case "outputDimensionality", "output_dimensionality":
			r.dims = v
		case "mock":
			r.mock = v
		}
		return true
	})
	return r, true
}

// gemini answers /v1beta/models/{model}:{method}; rest is "{model}:{method}".
func (s *Server) gemini(ctx *fasthttp.RequestCtx, rest []byte) {
	i := bytes.LastIndexByte(rest, ':')
	if i <= 0 || !validModelID(rest[:i]) {
		geminiError(ctx, fasthttp.StatusNotFound, "The requested model path is not valid.")
		return
	}
	model, method := rest[:i], rest[i+1:]
	var buf [256]byte
	modelRaw := b2s(append(append(append(buf[:0], '"'), model...), '"'))
	switch string(method) {
	case "generateContent":
		s.geminiGenerate(ctx, modelRaw, false)
	case "streamGenerateContent":
		if string(ctx.QueryArgs().Peek("alt")) != "sse" {
			geminiError(ctx, fasthttp.StatusBadRequest, "mock: streamGenerateContent is served with alt=sse only.")
			return
		}
		s.geminiGenerate(ctx, modelRaw, true)
	case "countTokens":
		s.geminiCount(ctx)
	case "embedContent":
		s.geminiEmbed(ctx, modelRaw, false)
	case "batchEmbedContents":
		s.geminiEmbed(ctx, modelRaw, true)
	default:
		geminiError(ctx, fasthttp.StatusNotFound, "The requested method is not supported.")
	}
}

// geminiCount answers countTokens: {"totalTokens"} counted as
// promptTokenCount is, over contents (and systemInstruction) or over
// generateContentRequest's.
func (s *Server) geminiCount(ctx *fasthttp.RequestCtx) {
	r, ok := parseGeminiRequest(ctx)
	if !ok {
		return
	}
	contents, system := r.contents, r.system
	if g := gjson.GetBytes(ctx.PostBody(), "generateContentRequest"); g.IsObject() {
		contents, system = g.Get("contents"), g.Get("systemInstruction")
	}
	if !contents.IsArray() {
		geminiError(ctx, fasthttp.StatusBadRequest, "* CountTokensRequest.contents: contents is not specified")
		return
	}
	ctx.SetContentType(contentJSON)
	ctx.SetBody(fmt.Appendf(nil, `{"totalTokens":%d}`, geminiPromptTokens(contents, system)))
}

// geminiGenerate answers generateContent and streamGenerateContent.
func (s *Server) geminiGenerate(ctx *fasthttp.RequestCtx, modelRaw string, stream bool) {
	s.stats.chat.Add(1)
	r, ok := parseGeminiRequest(ctx)
	if !ok {
		return
	}
	if !r.contents.IsArray() || len(r.contents.Raw) <= 2 || r.contents.Get("#").Int() == 0 {
		geminiError(ctx, fasthttp.StatusBadRequest, "* GenerateContentRequest.contents: contents is not specified")
		return
	}
	a := answer{model: modelRaw, prompt: geminiPromptTokens(r.contents, r.system)}
	sc := s.getScratch()
	defer s.putScratch(sc)
	b := resolveBehaviour(s.defaults, r.mock, &ctx.Request.Header)
	if !s.geminiPrelude(ctx, &b, sc.timer) {
		return
	}
	if tr := r.toolRequest(); tr != nil {
		n := b.words
		if stream {
			n = b.chunks
		}
		a.useTools(tr, b.toolCalls, n)
	}
	a.id = s.newID()
	a.created = time.Now().Unix()
	if stream {
		s.startStream(ctx, s.newStream(ctx, geminiStream{}, &b, &a, true))
		return
	}
	if b.garbage {
		s.writeGarbage(ctx)
		return
	}
	a.words = b.words
	a.usage = !b.noUsage
	s.stats.promptTokens.Add(int64(a.prompt))
	s.stats.completionTokens.Add(int64(a.words))
	s.ledger.served(a.model, a.prompt, a.words, a.usage)
	sc.buf = appendGeminiResponse(sc.buf[:0], &a)
	ctx.SetContentType(contentJSON)
	ctx.SetBody(sc.buf)
}

// toolRequest reads the function declarations of a request (tools.go),
// or returns nil when it declares none.
func (r *geminiRequest) toolRequest() *toolRequest {
	tr := &toolRequest{parallel: true}
	r.tools.ForEach(func(_, tool gjson.Result) bool {
		decls := tool.Get("functionDeclarations")
		if !decls.Exists() {
			decls = tool.Get("function_declarations")
		}
		decls.ForEach(func(_, d gjson.Result) bool {
			if name := d.Get("name"); name.Type == gjson.String {
				schema := d.Get("parameters")
				for _, k := range [...]string{"parametersJsonSchema", "parameters_json_schema"} {
					if v := d.Get(k); v.Exists() {
						schema = v
					}
				}
				tr.decls = append(tr.decls, toolDecl{name: name, schema: schema})
			}
			return true
		})
		return true
	})
	if len(tr.decls) == 0 {
		return nil
	}
	cfg := r.toolConfig.Get("functionCallingConfig")
	if !cfg.Exists() {
		cfg = r.toolConfig.Get("function_calling_config")
	}
	switch cfg.Get("mode").Str {
	case "NONE":
		tr.mode = modeNone
	case "ANY":
		tr.mode = modeRequired
		allowed := cfg.Get("allowedFunctionNames")
		if !allowed.Exists() {
			allowed = cfg.Get("allowed_function_names")
		}
		if first := allowed.Get("0"); first.Type == gjson.String {
			tr.mode, tr.named = modeNamed, first
		}
	}
	contents := r.contents.Array()
	last := contents[len(contents)-1]
	last.Get("parts").ForEach(func(_, p gjson.Result) bool {
		if fr := p.Get("functionResponse"); fr.Exists() {
			tr.results = append(tr.results, resultText(fr.Get("response")))
		}
		return true
	})
	if len(tr.results) == 0 && last.Get("role").Str != "model" {
		tr.lastText = resultText(last.Get("parts"))
	}
	return tr
}

// geminiPromptTokens counts the words of every text part plus 3 per
// content, systemInstruction included.
func geminiPromptTokens(contents, system gjson.Result) int {
	n := 0
	count := func(content string) {
		n += 3
		forEachRaw(member(content, "parts"), func(part string) {
			if t := member(part, "text"); t != "" && t[0] == '"' {
				n += countWordsJSON(t)
			}
		})
	}
	forEachRaw(contents.Raw, count)
	if system.IsObject() {
		count(system.Raw)
	}
	return n
}

// geminiPrelude waits the latency and answers an injected status with a
// Gemini error body. It reports whether the caller should go on.
func (s *Server) geminiPrelude(ctx *fasthttp.RequestCtx, b *behaviour, timer *time.Timer) bool {
	s.wait(timer, b.latency)
	if b.status == 0 {
		return true
	}
	s.stats.failuresInjected.Add(1)
	if b.status == fasthttp.StatusTooManyRequests || b.status == fasthttp.StatusServiceUnavailable {
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "1")
	}
	geminiError(ctx, b.status, "mock: injected error status")
	return false
}

// appendGeminiResponse appends a GenerateContentResponse.
func appendGeminiResponse(dst []byte, a *answer) []byte {
	dst = append(dst, `{"candidates":[{"content":{"parts":[`...)
	if len(a.calls) == 0 {
		dst = append(dst, `{"text":"`...)
		dst = a.appendText(dst, a.words)
		dst = append(dst, `"}`...)
	} else {
		dst = appendGeminiCalls(dst, a.calls)
	}
	dst = append(dst, `],"role":"model"},"finishReason":"STOP","index":0}]`...)
	if a.usage {
		dst = appendGeminiUsage(dst, a.prompt, a.words)
	}
	return appendGeminiTail(dst, a)
}

// appendGeminiCalls appends a functionCall part per call.
func appendGeminiCalls(dst []byte, calls []call) []byte {
	for j, c := range calls {
		if j > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"functionCall":{"name":`...)
		dst = append(dst, c.name...)
		dst = append(dst, `,"args":`...)
		dst = append(dst, c.args...)
		dst = append(dst, `}}`...)
	}
	return dst
}

// appendGeminiUsage appends a usageMetadata member, comma first.
func appendGeminiUsage(dst []byte, prompt, candidates int) []byte {
	dst = append(dst, `,"usageMetadata":{"promptTokenCount":`...)
	dst = appendInt(dst, int64(prompt))
	dst = append(dst, `,"candidatesTokenCount":`...)
	dst = appendInt(dst, int64(candidates))
	dst = append(dst, `,"totalTokenCount":`...)
	dst = appendInt(dst, int64(prompt+candidates))
	return append(dst, '}')
}

// appendGeminiTail appends modelVersion and responseId and closes the
// response object.
func appendGeminiTail(dst []byte, a *answer) []byte {
	dst = append(dst, `,"modelVersion":`...)
	dst = append(dst, a.model...)
	dst = append(dst, `,"responseId":"`...)
	dst = appendHex(dst, a.id)
	return append(dst, `"}`...)
}

// geminiEmbed answers embedContent (one content) and batchEmbedContents
// (requests[], each with its own content and outputDimensionality).
func (s *Server) geminiEmbed(ctx *fasthttp.RequestCtx, modelRaw string, batch bool) {
	s.stats.embeddings.Add(1)
	r, ok := parseGeminiRequest(ctx)
	if !ok {
		return
	}
	var inputs []gjson.Result // each request (batch) or the body
	if batch {
		if !r.requests.IsArray() || r.requests.Get("#").Int() == 0 {
			geminiError(ctx, fasthttp.StatusBadRequest, "* BatchEmbedContentsRequest.requests: requests is not specified")
			return
		}
		inputs = r.requests.Array()
	} else {
		inputs = []gjson.Result{gjson.Parse(b2s(ctx.PostBody()))}
	}
	tokens := 0
	for _, in := range inputs {
		parts := in.Get("content.parts")
		if !parts.IsArray() || parts.Get("#").Int() == 0 {
			geminiError(ctx, fasthttp.StatusBadRequest, "* EmbedContentRequest.content: content is not specified")
			return
		}
		if d := in.Get("outputDimensionality"); d.Exists() && (d.Type != gjson.Number || d.Int() < 1 || d.Int() > maxDims) {
			geminiError(ctx, fasthttp.StatusBadRequest, "* EmbedContentRequest.outputDimensionality: must be between 1 and 16384")
			return
		}
		parts.ForEach(func(_, p gjson.Result) bool {
			if t := p.Get("text"); t.Type == gjson.String {
				tokens += countWordsJSON(t.Raw)
			}
			return true
		})
	}
	b := resolveBehaviour(s.defaults, r.mock, &ctx.Request.Header)
	sc := s.getScratch()
	defer s.putScratch(sc)
	if !s.geminiPrelude(ctx, &b, sc.timer) {
		return
	}
	if b.garbage {
		s.writeGarbage(ctx)
		return
	}
	s.stats.promptTokens.Add(int64(tokens))
	s.ledger.served(modelRaw, tokens, 0, false) // the Gemini API reports no usage for embeddings
	dst := sc.buf[:0]
	if batch {
		dst = append(dst, `{"embeddings":[`...)
	} else {
		dst = append(dst, `{"embedding":`...)
	}
	for i, in := range inputs {
		dims := s.dims
		if d := in.Get("outputDimensionality"); d.Exists() {
			dims = int(d.Int())
		}
		if b.dims > 0 {
			dims = b.dims
		}
		if cap(sc.vec) < dims {
			sc.vec = make([]float32, dims)
		}
		vec := sc.vec[:dims]
		parts := in.Get("content.parts")
		seed := parts.Raw
		if t := parts.Get("0.text"); parts.Get("#").Int() == 1 && t.Type == gjson.String {
			seed = t.Raw // the same vector as the OpenAI format's for this string
		}
		embed(vec, seed)
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"values":`...)
		dst = appendFloats(dst, vec)
		dst = append(dst, '}')
	}
	if batch {
		dst = append(dst, ']')
	}
	sc.buf = append(dst, '}')
	ctx.SetContentType(contentJSON)
	ctx.SetBody(sc.buf)
}

// geminiError answers status with a Gemini error body. msg is a constant
// of this package and needs no JSON escaping.
func geminiError(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType(contentJSON)
	ctx.ResetBody()
	var buf [16]byte
	ctx.WriteString(`{"error":{"code":`)
	ctx.Write(appendInt(buf[:0], int64(status)))
	ctx.WriteString(`,"message":"`)
	ctx.WriteString(msg)
	ctx.WriteString(`","status":"`)
	ctx.WriteString(geminiStatus(status))
	ctx.WriteString(`"}}`)
}

// geminiStatus returns the google.rpc status name Gemini sends with an
// HTTP status.
func geminiStatus(status int) string {
	switch status {
	case fasthttp.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case fasthttp.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case fasthttp.StatusForbidden:
		return "PERMISSION_DENIED"
	case fasthttp.StatusNotFound:
		return "NOT_FOUND"
	case fasthttp.StatusConflict:
		return "ABORTED"
	case fasthttp.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case fasthttp.StatusNotImplemented:
		return "UNIMPLEMENTED"
	case fasthttp.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case fasthttp.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}
