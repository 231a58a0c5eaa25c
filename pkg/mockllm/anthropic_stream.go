package mockllm

// Anthropic streams: every event is "event: <type>\ndata: <json>\n\n".
// A text answer is message_start, content_block_start (text), ping, one
// content_block_delta per word, content_block_stop, message_delta
// (stop_reason, output usage) and message_stop. A tool call has a tool_use
// block instead, whose input arrives as input_json_delta fragments: the
// opening {"input":", one word each, then the closing "}.

const anthropicErrorEvent = "event: error\ndata: " +
	`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}` + "\n\n"

// anthropicStream streams Messages events.
type anthropicStream struct{}

func (anthropicStream) prepare(st *stream) { st.pre = st.pre[:0] }

// event appends the "event:" line and the start of the data line.
func anthropicEvent(dst []byte, typ string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: "...)
	return dst
}

func (anthropicStream) headEvents(st *stream) int {
	if st.a.tool != "" {
		return 4 // message_start, block start, ping, input opening
	}
	return 3 // message_start, block start, ping
}

func (anthropicStream) appendHead(dst []byte, st *stream, i int) []byte {
	switch i {
	case 0:
		dst = anthropicEvent(dst, "message_start")
		dst = append(dst, `{"type":"message_start","message":{"id":"msg_`...)
		dst = appendHex(dst, st.a.id)
		dst = append(dst, `","type":"message","role":"assistant","model":`...)
		dst = append(dst, st.a.model...)
		dst = append(dst, `,"content":[],"stop_reason":null,"stop_sequence":null`...)
		if st.includeUsage {
			dst = appendAnthropicUsage(dst, st.a.prompt, 0)
		}
		return append(dst, "}}\n\n"...)
	case 1:
		dst = anthropicEvent(dst, "content_block_start")
		if st.a.tool == "" {
			return append(dst, `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`+"\n\n"...)
		}
		dst = append(dst, `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_`...)
		dst = appendHex(dst, st.a.id)
		dst = append(dst, `","name":`...)
		dst = append(dst, st.a.tool...)
		return append(dst, `,"input":{}}}`+"\n\n"...)
	case 2:
		return append(dst, "event: ping\ndata: {\"type\":\"ping\"}\n\n"...)
	}
	return anthropicJSONDelta(dst, toolArgsOpen)
}

// anthropicJSONDelta appends an input_json_delta with a fragment already
// escaped for a JSON string.
func anthropicJSONDelta(dst []byte, fragment string) []byte {
	dst = anthropicEvent(dst, "content_block_delta")
	dst = append(dst, `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"`...)
	dst = append(dst, fragment...)
	return append(dst, `"}}`+"\n\n"...)
}

func (anthropicStream) appendContent(dst []byte, st *stream, i int, _ bool) []byte {
	dst = anthropicEvent(dst, "content_block_delta")
	dst = append(dst, `{"type":"content_block_delta","index":0,"delta":{"type":"`...)
	if st.a.tool != "" {
		dst = append(dst, `input_json_delta","partial_json":"`...)
	} else {
		dst = append(dst, `text_delta","text":"`...)
	}
	dst = appendChunkWord(dst, i)
	return append(dst, `"}}`+"\n\n"...)
}

func (anthropicStream) tailEvents(st *stream) int {
	if st.a.tool != "" {
		return 4 // input closing, block stop, message_delta, message_stop
	}
	return 3
}

func (anthropicStream) appendTail(dst []byte, st *stream, i int) []byte {
	if st.a.tool != "" {
		if i == 0 {
			return anthropicJSONDelta(dst, toolArgsClose)
		}
		i--
	}
	switch i {
	case 0:
		dst = anthropicEvent(dst, "content_block_stop")
		return append(dst, `{"type":"content_block_stop","index":0}`+"\n\n"...)
	case 1:
		stop := "end_turn"
		if st.a.tool != "" {
			stop = "tool_use"
		}
		dst = anthropicEvent(dst, "message_delta")
		dst = append(dst, `{"type":"message_delta","delta":{"stop_reason":"`...)
		dst = append(dst, stop...)
		dst = append(dst, `","stop_sequence":null}`...)
		if st.includeUsage {
			dst = append(dst, `,"usage":{"output_tokens":`...)
			dst = appendInt(dst, int64(st.written))
			dst = append(dst, '}')
		}
		return append(dst, "}\n\n"...)
	}
	dst = anthropicEvent(dst, "message_stop")
	return append(dst, `{"type":"message_stop"}`+"\n\n"...)
}

func (anthropicStream) appendError(dst []byte, _ *stream) []byte {
	return append(dst, anthropicErrorEvent...)
}
