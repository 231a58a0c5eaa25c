package mockllm

import (
	"bytes"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// The Amazon Bedrock Converse format.
//
// POST /model/{modelId}/converse answers a Converse JSON object;
// POST /model/{modelId}/converse-stream answers an AWS binary event stream
// (application/vnd.amazon.eventstream), one frame per event: messageStart,
// contentBlockStart (tool calls only), contentBlockDelta per word,
// contentBlockStop, messageStop and metadata (usage and metrics). Each
// event payload carries a "p" padding member, as Bedrock's do.
//
// Signatures are not verified: any Authorization header starting with
// "AWS4-HMAC-SHA256 " is accepted, and a request without one is answered
// 403 MissingAuthenticationTokenException, so an unsigned request fails
// loudly.
//
// inputTokens is the number of words in the text blocks of system and of
// every message (tool results included) plus 3 per message; outputTokens is
// the number of generated words. Tools (toolConfig.tools[].toolSpec, with
// inputSchema.json) are used as tools.go says: toolChoice {"any":{}} or
// {"tool":{"name":...}} forces toolUse blocks, auto (or none given) lets the
// last user message name a tool; stopReason "tool_use". Streamed, each
// block's input comes as fragments.
//
// Failure injections (see the package documentation): status answers a
// Bedrock error body {"message":...} with its x-amzn-ErrorType header;
// garbage is an invalid JSON body, or in a stream a frame with a corrupt
// message CRC after cut_after (default 0) chunks, then the end of the body;
// error_event_after sends a modelStreamErrorException frame and ends the
// body; no_usage leaves usage out of answers and metadata frames.

const (
	contentEventStream = "application/vnd.amazon.eventstream"
	bedrockErrorSuffix = ":http://internal.amazon.com/coral/com.amazon.bedrock/"
	bedrockPadding     = `"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"`
)

// bedrock answers /model/{modelId}/converse and /converse-stream in the
// Bedrock format; rest is "{modelId}/{action}" (the model id may hold
// slashes once the path is unescaped, so the action is the last segment).
func (s *Server) bedrock(ctx *fasthttp.RequestCtx, rest []byte) {
	s.stats.chat.Add(1)
	sc := s.getScratch()
	defer s.putScratch(sc)
	id := s.newID()
	sc.buf = appendHex(append(sc.buf[:0], "mock-"...), id)
	ctx.Response.Header.SetBytesV("x-amzn-RequestId", sc.buf)
	if !bytes.HasPrefix(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization), []byte("AWS4-HMAC-SHA256 ")) {
		bedrockError(ctx, fasthttp.StatusForbidden, "MissingAuthenticationTokenException", "Missing Authentication Token")
		return
	}
	i := bytes.LastIndexByte(rest, '/')
	var stream bool
	switch {
	case i <= 0:
		bedrockError(ctx, fasthttp.StatusNotFound, "UnknownOperationException", "unknown operation")
		return
	case string(rest[i+1:]) == "converse":
	case string(rest[i+1:]) == "converse-stream":
		stream = true
	default:
		bedrockError(ctx, fasthttp.StatusNotFound, "UnknownOperationException", "unknown operation")
		return
	}
	body := ctx.PostBody()
	if !gjson.ValidBytes(body) {
		bedrockError(ctx, fasthttp.StatusBadRequest, "ValidationException", "Malformed input request, please reformat your input and try again.")
		return
	}
	root := gjson.Parse(b2s(body))
	if m := root.Get("messages"); !m.IsArray() || !m.Get("0").Exists() {
		bedrockError(ctx, fasthttp.StatusBadRequest, "ValidationException", "The messages field must be a non-empty array.")
		return
	}
	b := resolveBehaviour(s.defaults, root.Get("mock"), &ctx.Request.Header)
	s.wait(sc.timer, b.latency)
	if b.status != 0 {
		s.stats.failuresInjected.Add(1)
		bedrockError(ctx, b.status, bedrockErrorType(b.status), "mock: injected error status")
		return
	}
	a := answer{id: id, created: time.Now().Unix(), model: b2s(rest[:i]), prompt: bedrockPromptTokens(root)}
	if tr := bedrockTools(root); tr != nil {
		n := b.words
		if stream {
			n = b.chunks
		}
		a.useTools(tr, b.toolCalls, n)
	}
	latency := b.latency.Milliseconds()
	if stream {
		f := &bedrockStream{enc: eventstream.NewEncoder(), latencyMs: latency}
		if b.garbage {
			// A corrupt frame in place of the error event, then the end.
			f.corrupt = true
			b.errorEventAfter, b.garbage, b.cutAfter = max(b.cutAfter, 0), false, -1
		}
		s.startStream(ctx, s.newStream(ctx, f, &b, &a, true))
		ctx.SetContentType(contentEventStream)
		return
	}
	if b.garbage {
		s.writeGarbage(ctx)
		return
	}
	a.words, a.usage = b.words, !b.noUsage
	s.stats.promptTokens.Add(int64(a.prompt))
	s.stats.completionTokens.Add(int64(a.words))
	s.ledger.served(b2s(rest[:i]), a.prompt, a.words, a.usage)
	sc.buf = appendConverseAnswer(sc.buf[:0], &a, latency)
	ctx.SetContentType(contentJSON)
	ctx.SetBody(sc.buf)
}

// bedrockError answers status with a Bedrock error body and type header.
// msg is a constant of this package and needs no JSON escaping.
func bedrockError(ctx *fasthttp.RequestCtx, status int, typ, msg string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType(contentJSON)
	ctx.Response.Header.Set("x-amzn-ErrorType", typ+bedrockErrorSuffix)
	ctx.ResetBody()
	ctx.WriteString(`{"message":"`)
	ctx.WriteString(msg)
	ctx.WriteString(`"}`)
}

// bedrockErrorType returns the Bedrock exception of an injected status.
func bedrockErrorType(status int) string {
	switch status {
	case fasthttp.StatusBadRequest:
		return "ValidationException"
	case fasthttp.StatusUnauthorized:
		return "UnrecognizedClientException"
	case fasthttp.StatusForbidden:
		return "AccessDeniedException"
	case fasthttp.StatusNotFound:
		return "ResourceNotFoundException"
	case fasthttp.StatusRequestTimeout:
		return "ModelTimeoutException"
	case fasthttp.StatusFailedDependency:
		return "ModelErrorException"
	case fasthttp.StatusTooManyRequests:
		return "ThrottlingException"
	case fasthttp.StatusServiceUnavailable:
		return "ServiceUnavailableException"
	}
	if status >= 500 {
		return "InternalServerException"
	}
	return "ValidationException"
}

// bedrockTools reads the tools of a Converse request (tools.go), or
// returns nil when it declares none.
func bedrockTools(root gjson.Result) *toolRequest {
	tc := root.Get("toolConfig")
	tools := tc.Get("tools")
	if !tools.IsArray() {
		return nil
	}
	tr := &toolRequest{parallel: true}
	tools.ForEach(func(_, t gjson.Result) bool {
		spec := t.Get("toolSpec")
		if name := spec.Get("name"); name.Type == gjson.String {
			tr.decls = append(tr.decls, toolDecl{name: name, schema: spec.Get("inputSchema.json")})
		}
		return true
	})
	choice := tc.Get("toolChoice")
	switch {
	case choice.Get("any").Exists():
		tr.mode = modeRequired
	case choice.Get("tool.name").Type == gjson.String:
		tr.mode, tr.named = modeNamed, choice.Get("tool.name")
	}
	msgs := root.Get("messages").Array()
	if len(msgs) == 0 || msgs[len(msgs)-1].Get("role").Str != "user" {
		return tr
	}
	content := msgs[len(msgs)-1].Get("content")
	content.ForEach(func(_, b gjson.Result) bool {
		if r := b.Get("toolResult"); r.Exists() {
			tr.results = append(tr.results, resultText(r.Get("content")))
		}
		return true
	})
	if len(tr.results) == 0 {
		tr.lastText = resultText(content)
	}
	return tr
}

// bedrockPromptTokens counts the words of the text blocks of system and of
// every message, tool results included, plus 3 per message.
func bedrockPromptTokens(root gjson.Result) int {
	n := 0
	forEachRaw(root.Get("system").Raw, func(block string) {
		n += countWordsJSON(member(block, "text"))
	})
	forEachRaw(root.Get("messages").Raw, func(m string) {
		n += 3
		forEachRaw(member(m, "content"), func(block string) {
			if t := member(block, "text"); t != "" {
				n += countWordsJSON(t)
				return
			}
			forEachRaw(member(member(block, "toolResult"), "content"), func(part string) {
				n += countWordsJSON(member(part, "text"))
			})
		})
	})
	return n
}

// appendConverseAnswer appends a non-stream Converse answer.
func appendConverseAnswer(dst []byte, a *answer, latencyMs int64) []byte {
	dst = append(dst, `{"metrics":{"latencyMs":`...)
	dst = appendInt(dst, latencyMs)
	dst = append(dst, `},"output":{"message":{"content":[`...)
	stop := "end_turn"
	if len(a.calls) == 0 {
		dst = append(dst, `{"text":"`...)
		dst = a.appendText(dst, a.words)
		dst = append(dst, `"}`...)
	} else {
		stop = "tool_use"
		for j, c := range a.calls {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"toolUse":{"input":`...)
			dst = append(dst, c.args...)
			dst = append(dst, `,"name":`...)
			dst = append(dst, c.name...)
			dst = append(dst, `,"toolUseId":"`...)
			dst = appendCallID(dst, "tooluse_", a.id, j)
			dst = append(dst, `"}}`...)
		}
	}
	dst = append(dst, `],"role":"assistant"}},"stopReason":"`...)
	dst = append(dst, stop...)
	dst = append(dst, '"')
	if a.usage {
		dst = appendConverseUsage(dst, a.prompt, a.words)
	}
	return append(dst, '}')
}

// appendConverseUsage appends a Converse usage member, comma first.
func appendConverseUsage(dst []byte, prompt, completion int) []byte {
	dst = append(dst, `,"usage":{"inputTokens":`...)
	dst = appendInt(dst, int64(prompt))
	dst = append(dst, `,"outputTokens":`...)
	dst = appendInt(dst, int64(completion))
	dst = append(dst, `,"totalTokens":`...)
	dst = appendInt(dst, int64(prompt+completion))
	return append(dst, '}')
}
