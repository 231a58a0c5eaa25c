package mockllm

// OpenAI streams: every event is "data: <json>\n\n" and the stream ends
// with "data: [DONE]\n\n". One id serves all chunks of a stream, exactly one
// chunk carries a finish_reason, and the usage chunk ("choices":[]) is sent
// only when the request set stream_options.include_usage.

const (
	sseDone       = "data: [DONE]\n\n"
	sseErrorEvent = `data: {"error":{"message":"mock: injected stream error","type":"server_error","param":null,"code":null}}` + "\n\n"
)

// appendOpenAIPrefix appends the members every chunk of a stream shares,
// ending with a comma.
func appendOpenAIPrefix(dst []byte, st *stream, idPrefix, object string) []byte {
	dst = append(dst, `data: {"id":"`...)
	dst = append(dst, idPrefix...)
	dst = appendHex(dst, st.a.id)
	dst = append(dst, `","object":"`...)
	dst = append(dst, object...)
	dst = append(dst, `","created":`...)
	dst = appendInt(dst, st.a.created)
	dst = append(dst, `,"model":`...)
	dst = append(dst, st.a.model...)
	return append(dst, ',')
}

// appendChunkEnd closes a chunk: "usage":null on every chunk when the usage
// chunk will follow, as OpenAI does.
func appendChunkEnd(dst []byte, st *stream) []byte {
	if st.includeUsage {
		dst = append(dst, `,"usage":null`...)
	}
	return append(dst, "}\n\n"...)
}

// appendUsageChunk appends the final usage chunk with no choices.
func appendUsageChunk(dst []byte, st *stream) []byte {
	dst = append(dst, st.pre...)
	dst = append(dst, `"choices":[]`...)
	dst = st.a.appendUsage(dst, st.a.prompt, st.written)
	return append(dst, "}\n\n"...)
}

func finishReason(last bool, reason string) string {
	if last {
		return reason
	}
	return "null"
}

// chatStream streams chat.completion.chunk events. A text answer is a role
// chunk, then one content chunk per word, the last carrying
// finish_reason "stop". A tool-call answer is, per call, a chunk naming
// the call (with the role, for the first) and chunks with fragments of its
// arguments (tools.go), then a chunk with finish_reason "tool_calls".
type chatStream struct{}

func (chatStream) prepare(st *stream) {
	st.pre = appendOpenAIPrefix(st.pre[:0], st, "chatcmpl-", "chat.completion.chunk")
	if len(st.a.calls) > 0 {
		planCalls(st, false)
	}
}

// appendChunk appends a chunk with the given delta object and finish reason
// (a JSON value: null or a quoted string).
func (chatStream) appendChunk(dst []byte, st *stream, delta, finish string) []byte {
	dst = append(dst, st.pre...)
	dst = append(dst, `"choices":[{"index":0,"delta":`...)
	dst = append(dst, delta...)
	dst = append(dst, `,"logprobs":null,"finish_reason":`...)
	dst = append(dst, finish...)
	dst = append(dst, "}]"...)
	return appendChunkEnd(dst, st)
}

// appendItem writes the opening of a call or a fragment of its arguments.
func (chatStream) appendItem(dst []byte, st *stream, it planItem, frag string) []byte {
	dst = append(dst, st.pre...)
	dst = append(dst, `"choices":[{"index":0,"delta":{`...)
	if it.kind == itemOpen && it.call == 0 {
		dst = append(dst, `"role":"assistant","content":null,"refusal":null,`...)
	}
	dst = append(dst, `"tool_calls":[{"index":`...)
	dst = appendInt(dst, int64(it.call))
	if it.kind == itemOpen {
		dst = append(dst, `,"id":"`...)
		dst = appendCallID(dst, "call_", st.a.id, it.call)
		dst = append(dst, `","type":"function","function":{"name":`...)
		dst = append(dst, st.a.calls[it.call].name...)
		dst = append(dst, `,"arguments":""}}]}`...)
	} else {
		dst = append(dst, `,"function":{"arguments":"`...)
		dst = appendEscaped(dst, frag)
		dst = append(dst, `"}}]}`...)
	}
	dst = append(dst, `,"logprobs":null,"finish_reason":null}]`...)
	return appendChunkEnd(dst, st)
}

func (chatStream) headEvents(st *stream) int {
	if len(st.a.calls) > 0 {
		return st.lead
	}
	return 1 // the role
}

func (c chatStream) appendHead(dst []byte, st *stream, _ int) []byte {
	if len(st.a.calls) > 0 {
		return appendItems(dst, st, c, false)
	}
	return c.appendChunk(dst, st, `{"role":"assistant","content":"","refusal":null}`, "null")
}

func (c chatStream) appendContent(dst []byte, st *stream, i int, last bool) []byte {
	if len(st.a.calls) > 0 {
		return appendItems(dst, st, c, true)
	}
	dst = append(dst, st.pre...)
	dst = append(dst, `"choices":[{"index":0,"delta":{"content":"`...)
	dst = st.a.appendChunk(dst, i)
	dst = append(dst, `"},"logprobs":null,"finish_reason":`...)
	dst = append(dst, finishReason(last, `"stop"`)...)
	dst = append(dst, "}]"...)
	return appendChunkEnd(dst, st)
}

func (chatStream) tailEvents(st *stream) int {
	n := 1 // [DONE]
	switch {
	case len(st.a.calls) > 0:
		n += st.trail + 1 // the rest of the arguments, the finish chunk
	case st.chunks == 0:
		n++ // no content chunk carried the finish reason
	}
	if st.includeUsage {
		n++
	}
	return n
}

func (c chatStream) appendTail(dst []byte, st *stream, i int) []byte {
	switch {
	case len(st.a.calls) > 0:
		switch {
		case i < st.trail:
			return appendItems(dst, st, c, false)
		case i == st.trail:
			return c.appendChunk(dst, st, "{}", `"tool_calls"`)
		}
		i -= st.trail + 1
	case st.chunks == 0:
		if i == 0 {
			return c.appendChunk(dst, st, "{}", `"stop"`)
		}
		i--
	}
	if st.includeUsage && i == 0 {
		return appendUsageChunk(dst, st)
	}
	return append(dst, sseDone...)
}

func (chatStream) appendError(dst []byte, st *stream) []byte {
	return appendOpenAIError(dst, &st.a)
}

// textStream streams text_completion chunks: one word each, the last
// carrying finish_reason "stop".
type textStream struct{}

func (textStream) prepare(st *stream) {
	st.pre = appendOpenAIPrefix(st.pre[:0], st, "cmpl-", "text_completion")
}

func (textStream) headEvents(*stream) int                         { return 0 }
func (textStream) appendHead(dst []byte, _ *stream, _ int) []byte { return dst }

// appendText appends a chunk with word i (or no text when i < 0).
func (textStream) appendText(dst []byte, st *stream, i int, last bool) []byte {
	dst = append(dst, st.pre...)
	dst = append(dst, `"choices":[{"text":"`...)
	if i >= 0 {
		dst = appendChunkWord(dst, i)
	}
	dst = append(dst, `","index":0,"logprobs":null,"finish_reason":`...)
	dst = append(dst, finishReason(last, `"stop"`)...)
	dst = append(dst, "}]"...)
	return appendChunkEnd(dst, st)
}

func (t textStream) appendContent(dst []byte, st *stream, i int, last bool) []byte {
	return t.appendText(dst, st, i, last)
}

func (textStream) tailEvents(st *stream) int {
	n := 1 // [DONE]
	if st.chunks == 0 {
		n++
	}
	if st.includeUsage {
		n++
	}
	return n
}

func (t textStream) appendTail(dst []byte, st *stream, i int) []byte {
	if st.chunks == 0 {
		if i == 0 {
			return t.appendText(dst, st, -1, true)
		}
		i--
	}
	if st.includeUsage && i == 0 {
		return appendUsageChunk(dst, st)
	}
	return append(dst, sseDone...)
}

func (textStream) appendError(dst []byte, st *stream) []byte {
	return appendOpenAIError(dst, &st.a)
}
