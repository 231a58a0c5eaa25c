package mockllm

import (
	"fmt"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// This file holds the Anthropic Messages format (POST /v1/messages and
// /v1/messages/count_tokens):
// requests, non-stream answers and errors. anthropic_stream.go holds its
// SSE streams.
//
// The same per-request behaviour applies as in the OpenAI format (see the
// package documentation). Differences:
//   - max_tokens is required, as on the real API (400 without it); any
//     x-api-key and anthropic-version are accepted and nothing of them is
//     recorded.
//   - input_tokens counts the words of every text block (string content,
//     text blocks and the text of tool_result contents) plus 3 per message,
//     and the system prompt (string or text blocks) as one more message:
//     an OpenAI chat request and its Anthropic translation count the same.
//     output_tokens counts the generated words.
//   - Tools (tools[].input_schema) are used as tools.go says: tool_choice
//     {"type":"any"} or {"type":"tool","name":...} forces tool_use blocks,
//     auto (or none given) lets the last user message name a tool, and
//     disable_parallel_tool_use keeps it to one; stop_reason "tool_use".
//     Streamed, each block's input comes as input_json_delta fragments.
//   - Errors are Anthropic-shaped: {"type":"error","error":{"type","message"}};
//     error_event_after sends an "error" event with an overloaded_error.
//   - Requests count in Stats.Chat.

// anthropicRequest holds the top-level fields of a Messages request. Its
// values point into the body and must not outlive the handler.
type anthropicRequest struct {
	model, messages, system, maxTokens gjson.Result
	stream, tools, choice, mock        gjson.Result
}

// parseAnthropicRequest reads the body in one pass. It answers 400 and
// reports false when the body is not a Messages request (counting: a
// count_tokens request, which has no max_tokens).
func parseAnthropicRequest(ctx *fasthttp.RequestCtx, counting bool) (anthropicRequest, bool) {
	var r anthropicRequest
	body := ctx.PostBody()
	if !gjson.ValidBytes(body) {
		anthropicBadRequest(ctx, "the request body is not valid JSON")
		return r, false
	}
	root := gjson.Parse(b2s(body))
	if !root.IsObject() {
		anthropicBadRequest(ctx, "the request body must be a JSON object")
		return r, false
	}
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "model":
			r.model = v
		case "messages":
			r.messages = v
		case "system":
			r.system = v
		case "max_tokens":
			r.maxTokens = v
		case "stream":
			r.stream = v
		case "tools":
			r.tools = v
		case "tool_choice":
			r.choice = v
		case "mock":
			r.mock = v
		}
		return true
	})
	switch {
	case r.model.Type != gjson.String || r.model.Str == "":
		anthropicBadRequest(ctx, "model: Field required")
		return r, false
	case !r.messages.IsArray():
		anthropicBadRequest(ctx, "messages: Field required")
		return r, false
	case r.maxTokens.Type != gjson.Number && !counting:
		anthropicBadRequest(ctx, "max_tokens: Field required")
		return r, false
	}
	return r, true
}

// toolRequest reads the tools of a Messages request (tools.go), or
// returns nil when it declares none.
func (r *anthropicRequest) toolRequest() *toolRequest {
	if !r.tools.IsArray() {
		return nil
	}
	tr := &toolRequest{parallel: r.choice.Get("disable_parallel_tool_use").Type != gjson.True}
	r.tools.ForEach(func(_, t gjson.Result) bool {
		if name := t.Get("name"); name.Type == gjson.String {
			tr.decls = append(tr.decls, toolDecl{name: name, schema: t.Get("input_schema")})
		}
		return true
	})
	switch r.choice.Get("type").Str {
	case "none":
		tr.mode = modeNone
	case "any":
		tr.mode = modeRequired
	case "tool":
		if n := r.choice.Get("name"); n.Type == gjson.String {
			tr.mode, tr.named = modeNamed, n
		}
	}
	// A system-role message inside messages (the current API accepts them;
	// Claude Code ends its requests with one) is an instruction, not a
	// turn: the last turn is the last message of another role.
	msgs := r.messages.Array()
	for len(msgs) > 0 && msgs[len(msgs)-1].Get("role").Str == "system" {
		msgs = msgs[:len(msgs)-1]
	}
	if len(msgs) == 0 || msgs[len(msgs)-1].Get("role").Str != "user" {
		return tr
	}
	content := msgs[len(msgs)-1].Get("content")
	content.ForEach(func(_, b gjson.Result) bool {
		if b.Get("type").Str == "tool_result" {
			tr.results = append(tr.results, resultText(b.Get("content")))
		}
		return true
	})
	if len(tr.results) == 0 {
		tr.lastText = resultText(content)
	}
	return tr
}

// anthropicPromptTokens counts the system prompt and messages as the
// package documentation says.
func anthropicPromptTokens(system, messages gjson.Result) int {
	n := 0
	switch {
	case system.Type == gjson.String:
		n += 3 + countWordsJSON(system.Raw)
	case system.IsArray():
		n += 3 + blockWords(system.Raw)
	}
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
			n += blockWords(c)
		}
	})
	return n
}

// blockWords counts the words of the text blocks of an array, including
// the content of tool_result blocks.
func blockWords(blocks string) int {
	n := 0
	forEachRaw(blocks, func(b string) {
		switch member(b, "type") {
		case `"text"`:
			n += countWordsJSON(member(b, "text"))
		case `"tool_result"`:
			c := member(b, "content")
			if c == "" {
				return
			}
			switch c[0] {
			case '"':
				n += countWordsJSON(c)
			case '[':
				n += blockWords(c)
			}
		}
	})
	return n
}

// anthropicMessages answers POST /v1/messages in the Anthropic format.
func (s *Server) anthropicMessages(ctx *fasthttp.RequestCtx) {
	s.stats.chat.Add(1)
	r, ok := parseAnthropicRequest(ctx, false)
	if !ok {
		return
	}
	a := answer{model: r.model.Raw, prompt: anthropicPromptTokens(r.system, r.messages)}
	sc := s.getScratch()
	defer s.putScratch(sc)
	b := resolveBehaviour(s.defaults, r.mock, &ctx.Request.Header)
	a.written = min(b.cacheWrite, a.prompt)
	if !s.anthropicPrelude(ctx, &b, sc.timer) {
		return
	}
	if tr := r.toolRequest(); tr != nil {
		n := b.words
		if r.stream.Type == gjson.True {
			n = b.chunks
		}
		a.useTools(tr, b.toolCalls, n)
	}
	a.id = s.newID()
	a.created = time.Now().Unix()
	var rid [20]byte
	ctx.Response.Header.SetBytesV("request-id", appendHex(append(rid[:0], "req_"...), a.id))
	if r.stream.Type == gjson.True {
		s.startStream(ctx, s.newStream(ctx, anthropicStream{}, &b, &a, true))
		return
	}
	if b.garbage {
		s.stats.failuresInjected.Add(1)
		ctx.SetContentType(contentJSON)
		ctx.SetBodyString(`{"id":"msg_garbage","type":"message","content":[{<<mock garbage: not JSON>>`)
		return
	}
	a.words = b.words
	a.usage = !b.noUsage
	s.stats.promptTokens.Add(int64(a.prompt))
	s.stats.completionTokens.Add(int64(a.words))
	s.ledger.served(a.model, a.prompt, a.words, a.usage)
	sc.buf = appendAnthropicMessage(sc.buf[:0], &a)
	ctx.SetContentType(contentJSON)
	ctx.SetBody(sc.buf)
}

// anthropicCountTokens answers POST /v1/messages/count_tokens:
// {"input_tokens": N}, N the prompt tokens /v1/messages would report.
// It generates nothing, so it adds to no token counter.
func (s *Server) anthropicCountTokens(ctx *fasthttp.RequestCtx) {
	r, ok := parseAnthropicRequest(ctx, true)
	if !ok {
		return
	}
	sc := s.getScratch()
	defer s.putScratch(sc)
	b := resolveBehaviour(s.defaults, r.mock, &ctx.Request.Header)
	if !s.anthropicPrelude(ctx, &b, sc.timer) {
		return
	}
	ctx.SetContentType(contentJSON)
	ctx.SetBody(fmt.Appendf(nil, `{"input_tokens":%d}`, anthropicPromptTokens(r.system, r.messages)))
}

// anthropicPrelude waits the latency and answers an injected status with
// an Anthropic error body. It reports whether the caller should go on.
func (s *Server) anthropicPrelude(ctx *fasthttp.RequestCtx, b *behaviour, timer *time.Timer) bool {
	s.wait(timer, b.latency)
	if b.status == 0 {
		return true
	}
	s.stats.failuresInjected.Add(1)
	if b.status == fasthttp.StatusTooManyRequests || b.status == fasthttp.StatusServiceUnavailable || b.status == statusOverloaded {
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "1")
	}
	writeAnthropicError(ctx, b.status, anthropicErrorType(b.status), "mock: injected error status")
	return false
}

// statusOverloaded is Anthropic's status for an overloaded API.
const statusOverloaded = 529

// anthropicErrorType returns the Anthropic error type of a status.
func anthropicErrorType(status int) string {
	switch status {
	case fasthttp.StatusUnauthorized:
		return "authentication_error"
	case fasthttp.StatusForbidden:
		return "permission_error"
	case fasthttp.StatusNotFound:
		return "not_found_error"
	case fasthttp.StatusRequestEntityTooLarge:
		return "request_too_large"
	case fasthttp.StatusTooManyRequests:
		return "rate_limit_error"
	case fasthttp.StatusServiceUnavailable, statusOverloaded:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// anthropicBadRequest answers 400 with an invalid_request_error.
func anthropicBadRequest(ctx *fasthttp.RequestCtx, msg string) {
	writeAnthropicError(ctx, fasthttp.StatusBadRequest, "invalid_request_error", msg)
}

// writeAnthropicError answers status with an Anthropic error body. typ and
// msg are constants of this package and need no JSON escaping.
func writeAnthropicError(ctx *fasthttp.RequestCtx, status int, typ, msg string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType(contentJSON)
	ctx.ResetBody()
	ctx.WriteString(`{"type":"error","error":{"type":"`)
	ctx.WriteString(typ)
	ctx.WriteString(`","message":"`)
	ctx.WriteString(msg)
	ctx.WriteString(`"}}`)
}

// appendAnthropicMessage appends a non-stream message object.
func appendAnthropicMessage(dst []byte, a *answer) []byte {
	dst = append(dst, `{"id":"msg_`...)
	dst = appendHex(dst, a.id)
	dst = append(dst, `","type":"message","role":"assistant","model":`...)
	dst = append(dst, a.model...)
	dst = append(dst, `,"content":[`...)
	stop := "end_turn"
	if len(a.calls) == 0 {
		dst = append(dst, `{"type":"text","text":"`...)
		dst = a.appendText(dst, a.words)
		dst = append(dst, `"}`...)
	} else {
		stop = "tool_use"
		for j, c := range a.calls {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"type":"tool_use","id":"`...)
			dst = appendCallID(dst, "toolu_", a.id, j)
			dst = append(dst, `","name":`...)
			dst = append(dst, c.name...)
			dst = append(dst, `,"input":`...)
			dst = append(dst, c.args...)
			dst = append(dst, '}')
		}
	}
	dst = append(dst, `],"stop_reason":"`...)
	dst = append(dst, stop...)
	dst = append(dst, `","stop_sequence":null`...)
	if a.usage {
		dst = appendAnthropicUsage(dst, a.prompt, a.written, a.words)
	}
	return append(dst, '}')
}

// appendAnthropicUsage appends a full usage member, comma first: of prompt
// tokens, written are reported as cache_creation_input_tokens and the rest
// as input_tokens.
func appendAnthropicUsage(dst []byte, prompt, written, output int) []byte {
	dst = append(dst, `,"usage":{"input_tokens":`...)
	dst = appendInt(dst, int64(prompt-written))
	dst = append(dst, `,"cache_creation_input_tokens":`...)
	dst = appendInt(dst, int64(written))
	dst = append(dst, `,"cache_read_input_tokens":0,"output_tokens":`...)
	dst = appendInt(dst, int64(output))
	return append(dst, '}')
}
