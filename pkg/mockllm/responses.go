package mockllm

import (
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// The OpenAI Responses API: POST /v1/responses (and Azure's
// /openai/v1/responses), non-stream and stream.
//
// The answer is one message with one output_text part, the generated words;
// with function tools declared, the tools a user message names are called
// instead (tools.go): one function_call item per call, streamed as
// response.output_item.added, response.function_call_arguments.delta (one
// per content chunk), response.function_call_arguments.done and
// response.output_item.done; trailing function_call_output items are
// quoted in the text answer.
// Usage is always reported (unless no_usage): input_tokens are the words of
// the input (a string, or the text of each item's content: a string or its
// input_text/output_text parts; a function_call_output's output) plus 3 per
// item, plus the words of instructions plus 3 when set; output_tokens are
// the generated words plus reasoning_tokens. Two settings fill the usage
// details: X-Mock-Cached-Tokens / cached_tokens (at most input_tokens) and
// X-Mock-Reasoning-Tokens / reasoning_tokens.
//
// max_output_tokens bounds the generated words like max_tokens does on
// chat; when it cut the answer short, the response's status is
// "incomplete" (incomplete_details.reason "max_output_tokens") and a
// stream ends with response.incomplete instead of response.completed.
//
// A stream is, with sequence_number counting from 0 over every event:
// response.created, response.in_progress, response.output_item.added,
// response.content_part.added, one response.output_text.delta per word,
// response.output_text.done, response.content_part.done,
// response.output_item.done and response.completed (usage inside). The
// failure settings work as on chat; error_event_after ends the stream with
// response.failed (error code "server_error", or rate_limit_exceeded and
// overloaded for error_event_status 429 and 529; usage null). bad_usage
// writes malformed usage; refusal and context_overflow answer as on chat.
//
// The ledger (GET /ledger) records output_tokens as the completion tokens;
// it does not itemise cached tokens, so traffic that sets cached_tokens
// does not reconcile by cost.

// responses answers POST /v1/responses.
func (s *Server) responses(ctx *fasthttp.RequestCtx) {
	s.stats.responses.Add(1)
	r, ok := parseRequest(ctx)
	if !ok {
		return
	}
	body := b2s(ctx.PostBody())
	r.maxTokens = gjson.Get(body, "max_output_tokens")
	r.toolReq = responsesToolRequest(&r)
	b := resolveBehaviour(s.defaults, r.mock, &ctx.Request.Header)
	a := answer{model: r.model.Raw, prompt: responsesPromptTokens(r.input, gjson.Get(body, "instructions"))}
	planned := b.words
	if r.stream.Type == gjson.True {
		planned = b.chunks
	}
	if n := r.maxTokens.Int(); n > 0 && n < int64(planned) {
		a.incomplete = true
	}
	a.cached = min(b.cachedTokens, a.prompt)
	a.reasoning = b.reasoningTokens
	a.usage = !b.noUsage // streams report usage in their terminal event, unasked
	sc := s.getScratch()
	defer s.putScratch(sc)
	if s.respond(ctx, &r, &a, responsesStream{}, sc) {
		sc.buf = appendResponse(sc.buf[:0], &a, a.status(), a.words, a.usage)
		ctx.SetContentType(contentJSON)
		ctx.SetBody(sc.buf)
	}
}

// responsesPromptTokens counts the input and instructions of a Responses
// request (see the comment at the top of this file).
func responsesPromptTokens(input, instructions gjson.Result) int {
	n := 0
	if instructions.Type == gjson.String {
		n += 3 + countWordsJSON(instructions.Raw)
	}
	if input.Type == gjson.String {
		return n + countWordsJSON(input.Raw)
	}
	forEachRaw(input.Raw, func(item string) {
		n += 3
		if out := member(item, "output"); len(out) > 0 && out[0] == '"' {
			n += countWordsJSON(out)
		}
		c := member(item, "content")
		if c == "" {
			return
		}
		switch c[0] {
		case '"':
			n += countWordsJSON(c)
		case '[':
			forEachRaw(c, func(part string) {
				switch member(part, "type") {
				case `"input_text"`, `"output_text"`, `"text"`:
					n += countWordsJSON(member(part, "text"))
				}
			})
		}
	})
	return n
}

// status is the response status of a finished answer.
func (a *answer) status() string {
	if a.incomplete {
		return "incomplete"
	}
	return "completed"
}

// itemStatus is the status of the finished message item.
func itemStatus(a *answer) string {
	if a.incomplete {
		return "incomplete"
	}
	return "completed"
}

// appendResponse appends a response object with the given status and, for
// words >= 0, the message of that many words (words < 0: no output yet).
func appendResponse(dst []byte, a *answer, status string, words int, usage bool) []byte {
	dst = append(dst, `{"id":"resp_`...)
	dst = appendHex(dst, a.id)
	dst = append(dst, `","object":"response","created_at":`...)
	dst = appendInt(dst, a.created)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, status...)
	dst = append(dst, `","background":false,"error":`...)
	if status == "failed" {
		dst = appendResponseError(dst, a)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"incomplete_details":`...)
	if status == "incomplete" {
		dst = append(dst, `{"reason":"max_output_tokens"}`...)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"model":`...)
	dst = append(dst, a.model...)
	dst = append(dst, `,"output":[`...)
	switch {
	case len(a.calls) > 0 && words >= 0:
		for j := range a.calls {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = appendCallItem(dst, a, j, "completed", true)
		}
	case words >= 0:
		dst = appendMessageItem(dst, a, itemStatus(a), words)
	}
	dst = append(dst, `],"parallel_tool_calls":true,"previous_response_id":null,"store":false,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":`...)
	if usage {
		dst = appendResponsesUsage(dst, a, max(words, 0))
	} else {
		dst = append(dst, "null"...)
	}
	return append(dst, `,"metadata":{}}`...)
}

// appendResponseError appends the error object of a failed response: a
// server_error, or the code of the status error_event_status names.
func appendResponseError(dst []byte, a *answer) []byte {
	code := "server_error"
	switch st := a.fault.errorEventStatus; {
	case st == fasthttp.StatusTooManyRequests:
		code = "rate_limit_exceeded"
	case st == statusOverloaded:
		code = "overloaded"
	}
	dst = append(dst, `{"code":"`...)
	dst = append(dst, code...)
	return append(dst, `","message":"mock: injected stream error"}`...)
}

// appendMessageItem appends the answer's message item: its text part holds
// the first words generated words (words < 0: no part yet).
func appendMessageItem(dst []byte, a *answer, status string, words int) []byte {
	dst = append(dst, `{"id":"msg_`...)
	dst = appendHex(dst, a.id)
	dst = append(dst, `","type":"message","status":"`...)
	dst = append(dst, status...)
	dst = append(dst, `","role":"assistant","content":[`...)
	if words >= 0 {
		dst = appendTextPart(dst, a, words)
	}
	return append(dst, "]}"...)
}

// appendTextPart appends an output_text part of the answer's first n
// words (with the mention of a tool result, tools.go).
func appendTextPart(dst []byte, a *answer, n int) []byte {
	dst = append(dst, `{"type":"output_text","annotations":[],"logprobs":[],"text":"`...)
	dst = a.appendText(dst, n)
	return append(dst, `"}`...)
}

// appendCallItem appends call j of the answer as a function_call item,
// with its arguments when args (else "").
func appendCallItem(dst []byte, a *answer, j int, status string, args bool) []byte {
	dst = append(dst, `{"id":"`...)
	dst = appendCallID(dst, "fc_", a.id, j)
	dst = append(dst, `","type":"function_call","status":"`...)
	dst = append(dst, status...)
	dst = append(dst, `","arguments":"`...)
	if args {
		dst = appendEscaped(dst, a.calls[j].args)
	}
	dst = append(dst, `","call_id":"`...)
	dst = appendCallID(dst, "call_", a.id, j)
	dst = append(dst, `","name":`...)
	dst = append(dst, a.calls[j].name...)
	return append(dst, '}')
}

// responsesToolRequest reads the tools of a Responses request (tools.go),
// or returns nil when it declares none: function tools (name,
// parameters), tool_choice ("none", "auto", "required" or
// {"type":"function","name"}), parallel_tool_calls, and the last input
// item: a user message's text, or the trailing function_call_output items.
func responsesToolRequest(r *request) *toolRequest {
	if !r.tools.IsArray() {
		return nil
	}
	tr := &toolRequest{parallel: r.parallel.Type != gjson.False}
	r.tools.ForEach(func(_, t gjson.Result) bool {
		if name := t.Get("name"); t.Get("type").Str == "function" && name.Type == gjson.String {
			tr.decls = append(tr.decls, toolDecl{name: name, schema: t.Get("parameters")})
		}
		return true
	})
	switch {
	case r.choice.Type == gjson.String && r.choice.Str == "none":
		tr.mode = modeNone
	case r.choice.Type == gjson.String && r.choice.Str == "required":
		tr.mode = modeRequired
	case r.choice.IsObject() && r.choice.Get("name").Type == gjson.String:
		tr.mode, tr.named = modeNamed, r.choice.Get("name")
	}
	if r.input.Type == gjson.String {
		tr.lastText = r.input.Str
		return tr
	}
	items := r.input.Array()
	for i := len(items) - 1; i >= 0; i-- {
		if items[i].Get("type").Str != "function_call_output" {
			if i == len(items)-1 && items[i].Get("role").Str == "user" {
				tr.lastText = resultText(items[i].Get("content"))
			}
			break
		}
		tr.results = append(tr.results, resultText(items[i].Get("output")))
	}
	return tr
}

// appendResponsesUsage appends a Responses usage object, or a malformed
// one for bad_usage.
func appendResponsesUsage(dst []byte, a *answer, words int) []byte {
	if a.fault.badUsage {
		return append(dst, `{"input_tokens":-1,"output_tokens":"many","total_tokens":null}`...)
	}
	out := words + a.reasoning
	dst = append(dst, `{"input_tokens":`...)
	dst = appendInt(dst, int64(a.prompt))
	dst = append(dst, `,"input_tokens_details":{"cached_tokens":`...)
	dst = appendInt(dst, int64(a.cached))
	dst = append(dst, `},"output_tokens":`...)
	dst = appendInt(dst, int64(out))
	dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":`...)
	dst = appendInt(dst, int64(a.reasoning))
	dst = append(dst, `},"total_tokens":`...)
	dst = appendInt(dst, int64(a.prompt+out))
	return append(dst, '}')
}

// responsesStream streams Responses API events (see the top of this file).
type responsesStream struct{}

// responsesHead and responsesTail name the events around the deltas.
var (
	responsesHead = [...]string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	responsesTail = [...]string{"response.output_text.done", "response.content_part.done", "response.output_item.done", ""} // "" is the terminal event
)

// prepare marks the stream as reporting usage (in its terminal event),
// which Responses streams do unasked, and lays out a tool-call answer:
// per call, response.output_item.added, its
// response.function_call_arguments.delta events (one per content chunk),
// then response.function_call_arguments.done and
// response.output_item.done.
func (responsesStream) prepare(st *stream) {
	st.includeUsage = st.a.usage
	if len(st.a.calls) > 0 {
		planCalls(st, true)
	}
}

// appendItem writes one plan item of a tool-call answer.
func (responsesStream) appendItem(dst []byte, st *stream, it planItem, frag string) []byte {
	address := func(dst []byte) []byte {
		dst = append(dst, `"item_id":"`...)
		dst = appendCallID(dst, "fc_", st.a.id, it.call)
		dst = append(dst, `","output_index":`...)
		return appendInt(dst, int64(it.call))
	}
	switch it.kind {
	case itemOpen:
		dst = appendEventStart(dst, st, "response.output_item.added")
		dst = append(dst, `"output_index":`...)
		dst = appendInt(dst, int64(it.call))
		dst = append(dst, `,"item":`...)
		dst = appendCallItem(dst, &st.a, it.call, "in_progress", false)
	case itemFragment:
		dst = appendEventStart(dst, st, "response.function_call_arguments.delta")
		dst = address(dst)
		dst = append(dst, `,"delta":"`...)
		dst = appendEscaped(dst, frag)
		dst = append(dst, '"')
	default:
		dst = appendEventStart(dst, st, "response.function_call_arguments.done")
		dst = address(dst)
		dst = append(dst, `,"name":`...)
		dst = append(dst, st.a.calls[it.call].name...)
		dst = append(dst, `,"arguments":"`...)
		dst = appendEscaped(dst, st.a.calls[it.call].args)
		dst = append(dst, "\"}\n\n"...)
		dst = appendEventStart(dst, st, "response.output_item.done")
		dst = append(dst, `"output_index":`...)
		dst = appendInt(dst, int64(it.call))
		dst = append(dst, `,"item":`...)
		dst = appendCallItem(dst, &st.a, it.call, "completed", true)
	}
	return append(dst, "}\n\n"...)
}

// appendEventStart appends the event line and the data's type and
// sequence number, ending with a comma.
func appendEventStart(dst []byte, st *stream, typ string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, typ...)
	dst = append(dst, `","sequence_number":`...)
	dst = appendInt(dst, int64(st.seq))
	st.seq++
	return append(dst, ',')
}

// appendPartAddress appends the members that locate the text part.
func appendPartAddress(dst []byte, st *stream) []byte {
	dst = append(dst, `"item_id":"msg_`...)
	dst = appendHex(dst, st.a.id)
	return append(dst, `","output_index":0,"content_index":0,`...)
}

func (responsesStream) headEvents(st *stream) int {
	if len(st.a.calls) > 0 {
		return 2 + st.lead // created, in_progress, the items before the first chunk
	}
	return len(responsesHead)
}

func (rs responsesStream) appendHead(dst []byte, st *stream, i int) []byte {
	if len(st.a.calls) > 0 && i >= 2 {
		return appendItems(dst, st, rs, false)
	}
	dst = appendEventStart(dst, st, responsesHead[i])
	switch i {
	case 0, 1:
		dst = append(dst, `"response":`...)
		dst = appendResponse(dst, &st.a, "in_progress", -1, false)
	case 2:
		dst = append(dst, `"output_index":0,"item":`...)
		dst = appendMessageItem(dst, &st.a, "in_progress", -1)
	default:
		dst = appendPartAddress(dst, st)
		dst = append(dst, `"part":`...)
		dst = appendTextPart(dst, &st.a, 0)
	}
	return append(dst, "}\n\n"...)
}

func (rs responsesStream) appendContent(dst []byte, st *stream, i int, _ bool) []byte {
	if len(st.a.calls) > 0 {
		return appendItems(dst, st, rs, true)
	}
	dst = appendEventStart(dst, st, "response.output_text.delta")
	dst = appendPartAddress(dst, st)
	dst = append(dst, `"delta":"`...)
	dst = st.a.appendChunk(dst, i)
	return append(dst, "\",\"logprobs\":[]}\n\n"...)
}

func (responsesStream) tailEvents(st *stream) int {
	if len(st.a.calls) > 0 {
		return st.trail + 1 // the items after the last chunk, the terminal event
	}
	return len(responsesTail)
}

func (rs responsesStream) appendTail(dst []byte, st *stream, i int) []byte {
	if len(st.a.calls) > 0 {
		if i < st.trail {
			return appendItems(dst, st, rs, false)
		}
		i = len(responsesTail) - 1 // the terminal event
	}
	typ := responsesTail[i]
	switch {
	case typ != "":
	case st.a.incomplete:
		typ = "response.incomplete"
	default:
		typ = "response.completed"
	}
	dst = appendEventStart(dst, st, typ)
	switch i {
	case 0:
		dst = appendPartAddress(dst, st)
		dst = append(dst, `"text":"`...)
		dst = st.a.appendText(dst, st.written)
		dst = append(dst, `","logprobs":[]`...)
	case 1:
		dst = appendPartAddress(dst, st)
		dst = append(dst, `"part":`...)
		dst = appendTextPart(dst, &st.a, st.written)
	case 2:
		dst = append(dst, `"output_index":0,"item":`...)
		dst = appendMessageItem(dst, &st.a, itemStatus(&st.a), st.written)
	default:
		dst = append(dst, `"response":`...)
		dst = appendResponse(dst, &st.a, st.a.status(), st.written, st.a.usage)
	}
	return append(dst, "}\n\n"...)
}

func (responsesStream) appendError(dst []byte, st *stream) []byte {
	dst = appendEventStart(dst, st, "response.failed")
	dst = append(dst, `"response":`...)
	dst = appendResponse(dst, &st.a, "failed", st.written, false)
	return append(dst, "}\n\n"...)
}
