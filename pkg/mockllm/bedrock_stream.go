package mockllm

import "github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"

// bedrockStream writes ConverseStream events as AWS event-stream frames,
// encoded by the AWS SDK's encoder. A text answer is messageStart, a
// contentBlockDelta per word, contentBlockStop, messageStop and metadata; a
// tool-call answer has, per call, contentBlockStart naming the tool,
// contentBlockDelta fragments of its input (tools.go) and contentBlockStop.
type bedrockStream struct {
	enc       *eventstream.Encoder
	w         sliceWriter
	payload   []byte
	latencyMs int64
	corrupt   bool // the error event is a frame with a corrupt CRC
}

// sliceWriter appends what is written to b.
type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// frame appends one event-stream message with the given headers and the
// payload in f.payload.
func (f *bedrockStream) frame(dst []byte, headers eventstream.Headers) []byte {
	f.w.b = dst
	if err := f.enc.Encode(&f.w, eventstream.Message{Headers: headers, Payload: f.payload}); err != nil {
		return dst // cannot happen: headers and payload are small
	}
	return f.w.b
}

// event appends an event frame of type typ with the payload in f.payload.
func (f *bedrockStream) event(dst []byte, typ string) []byte {
	f.payload = append(f.payload, ',')
	f.payload = append(f.payload, bedrockPadding...)
	f.payload = append(f.payload, '}')
	return f.frame(dst, eventstream.Headers{
		{Name: ":event-type", Value: eventstream.StringValue(typ)},
		{Name: ":content-type", Value: eventstream.StringValue(contentJSON)},
		{Name: ":message-type", Value: eventstream.StringValue("event")},
	})
}

func (f *bedrockStream) prepare(st *stream) {
	if len(st.a.calls) > 0 {
		planCalls(st, true)
	}
}

func (f *bedrockStream) headEvents(st *stream) int {
	return 1 + st.lead // messageStart, then a tool-call plan's
}

func (f *bedrockStream) appendHead(dst []byte, st *stream, i int) []byte {
	if i == 0 {
		f.payload = append(f.payload[:0], `{"role":"assistant"`...)
		return f.event(dst, "messageStart")
	}
	return appendItems(dst, st, f, false)
}

// appendItem writes a toolUse block's start, a fragment of its input or
// its stop.
func (f *bedrockStream) appendItem(dst []byte, st *stream, it planItem, frag string) []byte {
	f.payload = append(f.payload[:0], `{"contentBlockIndex":`...)
	f.payload = appendInt(f.payload, int64(it.call))
	switch it.kind {
	case itemOpen:
		f.payload = append(f.payload, `,"start":{"toolUse":{"toolUseId":"`...)
		f.payload = appendCallID(f.payload, "tooluse_", st.a.id, it.call)
		f.payload = append(f.payload, `","name":`...)
		f.payload = append(f.payload, st.a.calls[it.call].name...)
		f.payload = append(f.payload, "}}"...)
		return f.event(dst, "contentBlockStart")
	case itemClose:
		return f.event(dst, "contentBlockStop")
	}
	f.payload = append(f.payload, `,"delta":{"toolUse":{"input":"`...)
	f.payload = appendEscaped(f.payload, frag)
	f.payload = append(f.payload, `"}}`...)
	return f.event(dst, "contentBlockDelta")
}

func (f *bedrockStream) appendContent(dst []byte, st *stream, i int, _ bool) []byte {
	if len(st.a.calls) > 0 {
		return appendItems(dst, st, f, true)
	}
	f.payload = append(f.payload[:0], `{"contentBlockIndex":0,"delta":{"text":"`...)
	f.payload = st.a.appendChunk(f.payload, i)
	f.payload = append(f.payload, `"}`...)
	return f.event(dst, "contentBlockDelta")
}

func (f *bedrockStream) tailEvents(st *stream) int {
	if len(st.a.calls) > 0 {
		return st.trail + 2 // the plan's, messageStop, metadata
	}
	return 3 // contentBlockStop, messageStop, metadata
}

func (f *bedrockStream) appendTail(dst []byte, st *stream, i int) []byte {
	if len(st.a.calls) > 0 {
		if i < st.trail {
			return appendItems(dst, st, f, false)
		}
		i -= st.trail - 1 // messageStop is 1
	}
	switch i {
	case 0:
		f.payload = append(f.payload[:0], `{"contentBlockIndex":0`...)
		return f.event(dst, "contentBlockStop")
	case 1:
		f.payload = append(f.payload[:0], `{"stopReason":"`...)
		if len(st.a.calls) > 0 {
			f.payload = append(f.payload, `tool_use"`...)
		} else {
			f.payload = append(f.payload, `end_turn"`...)
		}
		return f.event(dst, "messageStop")
	}
	f.payload = append(f.payload[:0], `{"metrics":{"latencyMs":`...)
	f.payload = appendInt(f.payload, f.latencyMs)
	f.payload = append(f.payload, '}')
	if st.includeUsage {
		f.payload = appendConverseUsage(f.payload, st.a.prompt, st.written)
	}
	return f.event(dst, "metadata")
}

// appendError appends a modelStreamErrorException frame, or for garbage a
// metadata frame whose payload was changed after its CRC was computed.
func (f *bedrockStream) appendError(dst []byte, _ *stream) []byte {
	if f.corrupt {
		f.payload = append(f.payload[:0], `{"metrics":{"latencyMs":0}`...)
		start := len(dst)
		dst = f.event(dst, "metadata")
		if len(dst)-start > 16 {
			dst[len(dst)-5] ^= 0xff // last payload byte; the message CRC no longer matches
		}
		return dst
	}
	f.payload = append(f.payload[:0], `{"message":"mock: injected stream error","originalStatusCode":500}`...)
	return f.frame(dst, eventstream.Headers{
		{Name: ":exception-type", Value: eventstream.StringValue("modelStreamErrorException")},
		{Name: ":content-type", Value: eventstream.StringValue(contentJSON)},
		{Name: ":message-type", Value: eventstream.StringValue("exception")},
	})
}
