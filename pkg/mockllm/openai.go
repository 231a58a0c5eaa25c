package mockllm

import (
	"bytes"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// This file holds the OpenAI wire format: requests, non-stream answers,
// errors and models. openai_stream.go holds its SSE streams and
// embeddings.go the embeddings endpoint.

const contentJSON = "application/json"

// request holds the top-level fields of an OpenAI request body. Its values
// point into the body and must not outlive the handler.
type request struct {
	model, messages, prompt, input       gjson.Result
	stream, streamOptions, tools, choice gjson.Result
	dimensions, encodingFormat, mock     gjson.Result
	maxTokens                            gjson.Result // max_tokens or max_completion_tokens
	parallel                             gjson.Result // parallel_tool_calls
	serviceTier                          gjson.Result // service_tier
	toolReq                              *toolRequest // chat: set by chat, read by respond
}

// parseRequest reads the body in one pass. It answers 400 and reports false
// when the body is not a JSON object or has no model.
func parseRequest(ctx *fasthttp.RequestCtx) (request, bool) {
	var r request
	body := ctx.PostBody()
	if !gjson.ValidBytes(body) {
		badRequest(ctx, "we could not parse the JSON body of your request", "")
		return r, false
	}
	root := gjson.Parse(b2s(body))
	if !root.IsObject() {
		badRequest(ctx, "the request body must be a JSON object", "")
		return r, false
	}
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "model":
			r.model = v
		case "messages":
			r.messages = v
		case "prompt":
			r.prompt = v
		case "input":
			r.input = v
		case "stream":
			r.stream = v
		case "stream_options":
			r.streamOptions = v
		case "tools":
			r.tools = v
		case "tool_choice":
			r.choice = v
		case "dimensions":
			r.dimensions = v
		case "encoding_format":
			r.encodingFormat = v
		case "mock":
			r.mock = v
		case "max_tokens", "max_completion_tokens":
			r.maxTokens = v
		case "parallel_tool_calls":
			r.parallel = v
		case "service_tier":
			r.serviceTier = v
		}
		return true
	})
	if r.model.Type != gjson.String || r.model.Str == "" {
		badRequest(ctx, "you must provide a model parameter", "model")
		return r, false
	}
	return r, true
}

// includeUsage reports whether a stream request asked for the usage chunk.
func (r *request) includeUsage() bool {
	return r.streamOptions.Get("include_usage").Type == gjson.True
}

// toolRequest reads the tools of a chat request (tools.go), or returns nil
// when it declares none: tools[].function (name, parameters), tool_choice
// ("none", "auto", "required" or {"type":"function","function":{"name"}}),
// parallel_tool_calls, and the last message (a user's text, or the
// trailing role "tool" messages).
func (r *request) toolRequest() *toolRequest {
	if !r.tools.IsArray() {
		return nil
	}
	tr := &toolRequest{parallel: r.parallel.Type != gjson.False}
	r.tools.ForEach(func(_, t gjson.Result) bool {
		fn := t.Get("function")
		if name := fn.Get("name"); name.Type == gjson.String {
			tr.decls = append(tr.decls, toolDecl{name: name, schema: fn.Get("parameters")})
		}
		return true
	})
	switch {
	case r.choice.Type == gjson.String && r.choice.Str == "none":
		tr.mode = modeNone
	case r.choice.Type == gjson.String && r.choice.Str == "required":
		tr.mode = modeRequired
	case r.choice.IsObject() && r.choice.Get("function.name").Type == gjson.String:
		tr.mode, tr.named = modeNamed, r.choice.Get("function.name")
	}
	msgs := r.messages.Array()
	for i := len(msgs) - 1; i >= 0; i-- {
		role := msgs[i].Get("role").Str
		if role != "tool" && role != "function" {
			if i == len(msgs)-1 && role == "user" {
				tr.lastText = resultText(msgs[i].Get("content"))
			}
			break
		}
		tr.results = append(tr.results, resultText(msgs[i].Get("content")))
	}
	return tr
}

// chatPromptTokens counts the words of every message's content (a string
// or the text parts of an array) plus 3 per message.
func chatPromptTokens(messages gjson.Result) int {
	n := 0
	forEachRaw(messages.Raw, func(m string) {
		n += 3
		c := member(m, "content")
		if c == "" {
			return
		}
		switch c[0] {
		case '"':
			n += countWordsJSON(c)
		case '[':
			forEachRaw(c, func(part string) {
				if member(part, "type") == `"text"` {
					n += countWordsJSON(member(part, "text"))
				}
			})
		}
	})
	return n
}

// inputTokens counts a prompt or embeddings input: the words of a string,
// one per token id, summed over arrays. It also returns the number of
// inputs (1 for a string or a token-id array).
func inputTokens(v gjson.Result) (tokens, inputs int) {
	forEachInput(v, func(raw string) {
		inputs++
		if raw[0] == '"' {
			tokens += countWordsJSON(raw)
			return
		}
		forEachRaw(raw, func(string) { tokens++ })
	})
	return tokens, inputs
}

// forEachInput calls f with the raw JSON of each input of a prompt or
// embeddings input: a string, an array of strings, an array of token ids
// (one input) or an array of token-id arrays.
func forEachInput(v gjson.Result, f func(raw string)) {
	switch {
	case v.Type == gjson.String:
		f(v.Raw)
		return
	case !v.IsArray():
		return
	}
	if first := v.Get("0"); first.Type == gjson.Number {
		f(v.Raw) // one input given as token ids
		return
	}
	forEachRaw(v.Raw, func(e string) {
		if e[0] == '"' || e[0] == '[' {
			f(e)
		}
	})
}

// chat answers POST /v1/chat/completions.
func (s *Server) chat(ctx *fasthttp.RequestCtx) {
	s.stats.chat.Add(1)
	r, ok := parseRequest(ctx)
	if !ok {
		return
	}
	if !r.messages.IsArray() {
		badRequest(ctx, "messages must be an array", "messages")
		return
	}
	r.toolReq = r.toolRequest()
	a := answer{model: r.model.Raw, prompt: chatPromptTokens(r.messages)}
	sc := s.getScratch()
	defer s.putScratch(sc)
	if s.respond(ctx, &r, &a, chatStream{}, sc) {
		sc.buf = appendChatCompletion(sc.buf[:0], &a)
		ctx.SetContentType(contentJSON)
		ctx.SetBody(sc.buf)
	}
}

// completions answers POST /v1/completions.
func (s *Server) completions(ctx *fasthttp.RequestCtx) {
	s.stats.completions.Add(1)
	r, ok := parseRequest(ctx)
	if !ok {
		return
	}
	tokens, inputs := inputTokens(r.prompt)
	if inputs == 0 {
		badRequest(ctx, "prompt must be a string or an array", "prompt")
		return
	}
	a := answer{model: r.model.Raw, prompt: tokens}
	sc := s.getScratch()
	defer s.putScratch(sc)
	if s.respond(ctx, &r, &a, textStream{}, sc) {
		sc.buf = appendTextCompletion(sc.buf[:0], &a)
		ctx.SetContentType(contentJSON)
		ctx.SetBody(sc.buf)
	}
}

// respond runs the steps every generated answer shares: it resolves the
// behaviour, waits, answers injected failures and streams with f. It
// reports true when the caller should write the non-stream body of a,
// which it has completed and counted.
func (s *Server) respond(ctx *fasthttp.RequestCtx, r *request, a *answer, f streamer, sc *scratch) bool {
	b := resolveBehaviour(s.defaults, r.mock, &ctx.Request.Header)
	if n := r.maxTokens.Int(); n > 0 {
		// Like a real model, never produce more than max_tokens.
		b.chunks = int(min(int64(b.chunks), n))
		b.words = int(min(int64(b.words), n))
	}
	if !s.prelude(ctx, &b, sc.timer) || s.reject(ctx, &b, a) {
		return false
	}
	a.fault = b.faults
	a.tier = answerTier(r.serviceTier)
	a.id = s.newID()
	a.created = time.Now().Unix()
	if r.toolReq != nil {
		n := b.words
		if r.stream.Type == gjson.True {
			n = b.chunks
		}
		a.useTools(r.toolReq, b.toolCalls, n)
	}
	if r.stream.Type == gjson.True {
		s.startStream(ctx, s.newStream(ctx, f, &b, a, r.includeUsage()))
		return false
	}
	if b.garbage {
		s.writeGarbage(ctx)
		return false
	}
	a.words = b.words
	a.usage = !b.noUsage
	s.stats.promptTokens.Add(int64(a.prompt))
	s.stats.completionTokens.Add(int64(a.words))
	s.ledger.served(a.model, a.prompt, a.words+a.reasoning, a.usage && !a.fault.badUsage)
	return true
}

// answerTier is the service_tier the answer reports: the request's flex or
// priority, else none.
func answerTier(v gjson.Result) string {
	switch v.Str { // constants: v.Str points into the request body, which a stream outlives
	case "flex":
		return "flex"
	case "priority":
		return "priority"
	}
	return ""
}

// writeGarbage answers 200 with a body that is not JSON.
func (s *Server) writeGarbage(ctx *fasthttp.RequestCtx) {
	s.stats.failuresInjected.Add(1)
	ctx.SetContentType(contentJSON)
	ctx.SetBodyString(`{"id":"chatcmpl-garbage","choices":[{<<mock garbage: not JSON>>`)
}

// appendChatCompletion appends a chat.completion object.
func appendChatCompletion(dst []byte, a *answer) []byte {
	dst = append(dst, `{"id":"chatcmpl-`...)
	dst = appendHex(dst, a.id)
	dst = append(dst, `","object":"chat.completion","created":`...)
	dst = appendInt(dst, a.created)
	dst = append(dst, `,"model":`...)
	dst = append(dst, a.model...)
	dst = append(dst, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	if len(a.calls) == 0 {
		dst = append(dst, '"')
		dst = a.appendText(dst, a.words)
		dst = append(dst, `","refusal":null},"logprobs":null,"finish_reason":"stop"}]`...)
	} else {
		dst = append(dst, `null,"refusal":null,"tool_calls":[`...)
		for j, c := range a.calls {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"id":"`...)
			dst = appendCallID(dst, "call_", a.id, j)
			dst = append(dst, `","type":"function","function":{"name":`...)
			dst = append(dst, c.name...)
			dst = append(dst, `,"arguments":"`...)
			dst = appendEscaped(dst, c.args)
			dst = append(dst, `"}}`...)
		}
		dst = append(dst, `]},"logprobs":null,"finish_reason":"tool_calls"}]`...)
	}
	if a.usage {
		dst = a.appendUsage(dst, a.prompt, a.words)
	}
	return append(dst, '}')
}

// appendCallID appends the id of call j of answer id: prefix and id in hex,
// then "_j" for calls after the first.
func appendCallID(dst []byte, prefix string, id uint64, j int) []byte {
	dst = append(dst, prefix...)
	dst = appendHex(dst, id)
	if j > 0 {
		dst = append(dst, '_')
		dst = appendInt(dst, int64(j))
	}
	return dst
}

// appendTextCompletion appends a text_completion object.
func appendTextCompletion(dst []byte, a *answer) []byte {
	dst = append(dst, `{"id":"cmpl-`...)
	dst = appendHex(dst, a.id)
	dst = append(dst, `","object":"text_completion","created":`...)
	dst = appendInt(dst, a.created)
	dst = append(dst, `,"model":`...)
	dst = append(dst, a.model...)
	dst = append(dst, `,"choices":[{"text":"`...)
	dst = appendWords(dst, a.words)
	dst = append(dst, `","index":0,"logprobs":null,"finish_reason":"stop"}]`...)
	if a.usage {
		dst = a.appendUsage(dst, a.prompt, a.words)
	}
	return append(dst, '}')
}

// appendUsage appends a usage member, comma first.
func appendUsage(dst []byte, prompt, completion int) []byte {
	dst = append(dst, `,"usage":{"prompt_tokens":`...)
	dst = appendInt(dst, int64(prompt))
	dst = append(dst, `,"completion_tokens":`...)
	dst = appendInt(dst, int64(completion))
	dst = append(dst, `,"total_tokens":`...)
	dst = appendInt(dst, int64(prompt+completion))
	return append(dst, '}')
}

// badRequest answers 400 with an invalid_request_error.
func badRequest(ctx *fasthttp.RequestCtx, msg, param string) {
	writeError(ctx, fasthttp.StatusBadRequest, "invalid_request_error", msg, param, "")
}

// writeError answers status with an OpenAI error body. msg, param and code
// are constants of this package and need no JSON escaping; an empty param
// or code is written as null.
func writeError(ctx *fasthttp.RequestCtx, status int, typ, msg, param, code string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType(contentJSON)
	ctx.ResetBody()
	ctx.WriteString(`{"error":{"message":"`)
	ctx.WriteString(msg)
	ctx.WriteString(`","type":"`)
	ctx.WriteString(typ)
	ctx.WriteString(`","param":`)
	writeNullable(ctx, param)
	ctx.WriteString(`,"code":`)
	writeNullable(ctx, code)
	ctx.WriteString(`}}`)
}

func writeNullable(ctx *fasthttp.RequestCtx, v string) {
	if v == "" {
		ctx.WriteString("null")
		return
	}
	ctx.WriteString(`"`)
	ctx.WriteString(v)
	ctx.WriteString(`"`)
}

// statusError returns the OpenAI error type and code of an injected status.
func statusError(status int) (typ, code string) {
	switch status {
	case fasthttp.StatusUnauthorized:
		return "invalid_request_error", "invalid_api_key"
	case fasthttp.StatusForbidden:
		return "permission_error", ""
	case fasthttp.StatusNotFound:
		return "invalid_request_error", "model_not_found"
	case fasthttp.StatusTooManyRequests:
		return "requests", "rate_limit_exceeded"
	}
	if status >= 500 {
		return "server_error", ""
	}
	return "invalid_request_error", ""
}

// mockModels are listed by GET /v1/models; any other model name is
// answered too.
var mockModels = [...]string{"mock-chat", "mock-embedding"}

// appendModels appends the GET /v1/models list object.
func appendModels(dst []byte, created int64) []byte {
	dst = append(dst, `{"object":"list","data":[`...)
	for i, id := range mockModels {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendModel(dst, id, created)
	}
	return append(dst, "]}"...)
}

func appendModel(dst []byte, id string, created int64) []byte {
	dst = append(dst, `{"id":"`...)
	dst = append(dst, id...)
	dst = append(dst, `","object":"model","created":`...)
	dst = appendInt(dst, created)
	return append(dst, `,"owned_by":"tollgate-mock"}`...)
}

// modelID returns the id of a GET /v1/models/{id} path.
func modelID(path []byte) ([]byte, bool) {
	id, ok := bytes.CutPrefix(path, []byte("/v1/models/"))
	return id, ok && len(id) > 0 && bytes.IndexByte(id, '/') < 0
}

// model answers GET /v1/models/{id}: every id exists.
func (s *Server) model(ctx *fasthttp.RequestCtx, id []byte) {
	if !validModelID(id) {
		writeError(ctx, fasthttp.StatusNotFound, "invalid_request_error", "the model does not exist", "model", "model_not_found")
		return
	}
	sc := s.getScratch()
	defer s.putScratch(sc)
	sc.buf = appendModel(sc.buf[:0], b2s(id), time.Now().Unix())
	ctx.SetContentType(contentJSON)
	ctx.SetBody(sc.buf)
}

// validModelID accepts ids that need no JSON escaping.
func validModelID(id []byte) bool {
	for _, c := range id {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
