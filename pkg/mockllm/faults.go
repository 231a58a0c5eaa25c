package mockllm

import (
	"strconv"

	"github.com/valyala/fasthttp"
)

// This file holds the failure injections a conformance run needs on top of
// status, cut_after, garbage and error_event_after: refusal,
// context_overflow, bad_usage, error_event_status and healthy (see the
// package documentation).

// faults are the per-request settings of this file.
type faults struct {
	refusal          bool
	contextOverflow  bool
	badUsage         bool
	errorEventStatus int // 0: a server_error event
	healthy          bool
}

// injected reports whether a fault of this file is set.
func (f *faults) injected() bool { return f.refusal || f.contextOverflow || f.badUsage }

// set stores v in the setting id.
func (f *faults) set(id optionID, v int64) {
	switch id {
	case optRefusal:
		f.refusal = v != 0
	case optContextOverflow:
		f.contextOverflow = v != 0
	case optBadUsage:
		f.badUsage = v != 0
	case optErrorEventStatus:
		f.errorEventStatus = statusOption(v)
	case optHealthy:
		f.healthy = v != 0
	}
}

// heal cancels every injected failure, keeping latency, delays and sizes.
func (b *behaviour) heal() {
	b.status, b.cutAfter, b.errorEventAfter, b.garbage = 0, -1, -1, false
	b.faults = faults{healthy: true}
}

// Bodies of the refusals, as OpenAI writes them.
const (
	refusalBody = `{"error":{"message":"Your request was rejected as a result of our safety system. ` +
		`Your prompt may contain text that is not allowed by our safety system.",` +
		`"type":"invalid_request_error","param":null,"code":"content_policy_violation"}}`
	badUsageMember = `,"usage":{"prompt_tokens":-1,"completion_tokens":"many","total_tokens":null}`
)

// reject answers a refusal or a context-length overflow when b asks for
// one, and reports whether it did. The overflow names a context window one
// token smaller than the prompt, as OpenAI names the real one.
func (s *Server) reject(ctx *fasthttp.RequestCtx, b *behaviour, a *answer) bool {
	switch {
	case b.refusal:
		s.stats.failuresInjected.Add(1)
		ctx.SetStatusCode(fasthttp.StatusBadRequest)
		ctx.SetContentType(contentJSON)
		ctx.SetBodyString(refusalBody)
		return true
	case b.contextOverflow:
		s.stats.failuresInjected.Add(1)
		ctx.SetStatusCode(fasthttp.StatusBadRequest)
		ctx.SetContentType(contentJSON)
		body := append(make([]byte, 0, 320), `{"error":{"message":"This model's maximum context length is `...)
		body = strconv.AppendInt(body, int64(max(a.prompt-1, 0)), 10)
		body = append(body, ` tokens. However, your messages resulted in `...)
		body = strconv.AppendInt(body, int64(a.prompt), 10)
		body = append(body, ` tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`...)
		ctx.SetBody(body)
		return true
	}
	return false
}

// appendUsage appends the answer's usage member, comma first: the counts,
// or a malformed object when the request asked for bad usage.
func (a *answer) appendUsage(dst []byte, prompt, completion int) []byte {
	if a.tier != "" {
		dst = append(dst, `,"service_tier":"`...)
		dst = append(dst, a.tier...)
		dst = append(dst, '"')
	}
	if a.fault.badUsage {
		return append(dst, badUsageMember...)
	}
	return appendUsage(dst, prompt, completion)
}

// appendOpenAIError appends the mid-stream error event of an OpenAI stream:
// a server_error, or the error of the status error_event_status names.
func appendOpenAIError(dst []byte, a *answer) []byte {
	st := a.fault.errorEventStatus
	if st == 0 {
		return append(dst, sseErrorEvent...)
	}
	typ, code := statusError(st)
	if st == statusOverloaded {
		typ, code = "overloaded_error", "overloaded"
	}
	dst = append(dst, `data: {"error":{"message":"mock: injected stream error (HTTP `...)
	dst = strconv.AppendInt(dst, int64(st), 10)
	dst = append(dst, `)","type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, `","param":null,"code":`...)
	if code == "" {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '"')
		dst = append(dst, code...)
		dst = append(dst, '"')
	}
	return append(dst, "}}\n\n"...)
}
