package mockllm

import "github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"

// bedrockStream writes ConverseStream events as AWS event-stream frames,
// encoded by the AWS SDK's encoder. A text answer is messageStart, a
// contentBlockDelta per word, contentBlockStop, messageStop and metadata; a
// tool call adds a contentBlockStart naming the tool, and its input comes
// as an opening fragment, a fragment per word and a closing fragment.
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

// inputDelta appends a contentBlockDelta carrying a fragment of the tool
// input (already escaped for a JSON string).
func (f *bedrockStream) inputDelta(dst []byte, fragment string, word int) []byte {
	f.payload = append(f.payload[:0], `{"contentBlockIndex":0,"delta":{"toolUse":{"input":"`...)
	f.payload = append(f.payload, fragment...)
	if word >= 0 {
		f.payload = appendChunkWord(f.payload, word)
	}
	f.payload = append(f.payload, `"}}`...)
	return f.event(dst, "contentBlockDelta")
}

func (f *bedrockStream) prepare(*stream) {}

func (f *bedrockStream) headEvents(st *stream) int {
	if st.a.tool != "" {
		return 3 // messageStart, contentBlockStart, the opening of the input
	}
	return 1 // messageStart
}

func (f *bedrockStream) appendHead(dst []byte, st *stream, i int) []byte {
	switch i {
	case 0:
		f.payload = append(f.payload[:0], `{"role":"assistant"`...)
		return f.event(dst, "messageStart")
	case 1:
		f.payload = append(f.payload[:0], `{"contentBlockIndex":0,"start":{"toolUse":{"toolUseId":"tooluse_`...)
		f.payload = appendHex(f.payload, st.a.id)
		f.payload = append(f.payload, `","name":`...)
		f.payload = append(f.payload, st.a.tool...)
		f.payload = append(f.payload, "}}"...)
		return f.event(dst, "contentBlockStart")
	}
	return f.inputDelta(dst, toolArgsOpen, -1)
}

func (f *bedrockStream) appendContent(dst []byte, st *stream, i int, _ bool) []byte {
	if st.a.tool != "" {
		return f.inputDelta(dst, "", i)
	}
	f.payload = append(f.payload[:0], `{"contentBlockIndex":0,"delta":{"text":"`...)
	f.payload = appendChunkWord(f.payload, i)
	f.payload = append(f.payload, `"}`...)
	return f.event(dst, "contentBlockDelta")
}

func (f *bedrockStream) tailEvents(st *stream) int {
	if st.a.tool != "" {
		return 4 // the closing of the input, contentBlockStop, messageStop, metadata
	}
	return 3
}

func (f *bedrockStream) appendTail(dst []byte, st *stream, i int) []byte {
	if st.a.tool != "" {
		if i == 0 {
			return f.inputDelta(dst, toolArgsClose, -1)
		}
		i--
	}
	switch i {
	case 0:
		f.payload = append(f.payload[:0], `{"contentBlockIndex":0`...)
		return f.event(dst, "contentBlockStop")
	case 1:
		f.payload = append(f.payload[:0], `{"stopReason":"`...)
		if st.a.tool != "" {
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
