package mockllm

// Gemini streams (streamGenerateContent?alt=sse): every event is
// "data: <GenerateContentResponse>\r\n\r\n" carrying the next piece of the
// answer and the usage so far; the last one carries finishReason "STOP".
// There is no terminator: the stream ends with the body. Function calls are
// never split, as the Gemini API sends them: all of them come whole in one
// event, which Stats counts as one completion token and cut_after and
// error_event_after count as one content chunk. An injected error event is
// a Gemini error object.

const geminiErrorEvent = `data: {"error":{"code":500,"message":"mock: injected stream error","status":"INTERNAL"}}` + "\r\n\r\n"

// geminiStream writes Gemini stream events. A text answer is one event per
// word, the last with the finish reason (or one empty event with it when
// there are no words). A tool-call answer is one event holding every call,
// its usage counting the planned chunks.
type geminiStream struct{}

// prepare precomputes the members every event ends with and turns a tool
// call's planned chunks into one event.
func (geminiStream) prepare(st *stream) {
	st.pre = append(st.pre[:0], `,"modelVersion":`...)
	st.pre = append(st.pre, st.a.model...)
	st.pre = append(st.pre, `,"responseId":"`...)
	st.pre = appendHex(st.pre, st.a.id)
	st.pre = append(st.pre, "\"}\r\n\r\n"...)
	if len(st.a.calls) > 0 {
		st.a.words = st.chunks
		st.chunks = 1
		st.stopAt = min(st.stopAt, 1)
	}
}

func (geminiStream) headEvents(*stream) int                         { return 0 }
func (geminiStream) appendHead(dst []byte, _ *stream, _ int) []byte { return dst }

// appendEvent appends one event whose parts are written by part; n is the
// number of candidate tokens so far.
func appendGeminiEvent(dst []byte, st *stream, last bool, n int, part func([]byte) []byte) []byte {
	dst = append(dst, `data: {"candidates":[{"content":{"parts":[`...)
	dst = part(dst)
	dst = append(dst, `],"role":"model"}`...)
	if last {
		dst = append(dst, `,"finishReason":"STOP"`...)
	}
	dst = append(dst, `,"index":0}]`...)
	if st.includeUsage {
		dst = appendGeminiUsage(dst, st.a.prompt, n)
	}
	return append(dst, st.pre...)
}

func (geminiStream) appendContent(dst []byte, st *stream, i int, last bool) []byte {
	if len(st.a.calls) > 0 {
		return appendGeminiEvent(dst, st, last, st.a.words, func(dst []byte) []byte {
			return appendGeminiCalls(dst, st.a.calls)
		})
	}
	return appendGeminiEvent(dst, st, last, i+1, func(dst []byte) []byte {
		dst = append(dst, `{"text":"`...)
		dst = st.a.appendChunk(dst, i)
		return append(dst, `"}`...)
	})
}

func (geminiStream) tailEvents(st *stream) int {
	if st.chunks == 0 {
		return 1 // no content event carried the finish reason
	}
	return 0
}

func (geminiStream) appendTail(dst []byte, st *stream, _ int) []byte {
	return appendGeminiEvent(dst, st, true, 0, func(dst []byte) []byte {
		return append(dst, `{"text":""}`...)
	})
}

func (geminiStream) appendError(dst []byte, _ *stream) []byte {
	return append(dst, geminiErrorEvent...)
}
