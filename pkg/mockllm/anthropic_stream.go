package mockllm

// Anthropic streams: every event is "event: <type>\ndata: <json>\n\n".
// A text answer is message_start, content_block_start (text), ping, one
// content_block_delta per word, content_block_stop, message_delta
// (stop_reason, output usage) and message_stop. A tool-call answer has a
// tool_use block per call instead (the ping after the first block's
// start), whose input arrives as input_json_delta fragments (tools.go).

const anthropicErrorEvent = "event: error\ndata: " +
	`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}` + "\n\n"

// anthropicStream streams Messages events.
type anthropicStream struct{}

func (anthropicStream) prepare(st *stream) {
	st.pre = st.pre[:0]
	if len(st.a.calls) > 0 {
		planCalls(st, true)
	}
}

// event appends the "event:" line and the start of the data line.
func anthropicEvent(dst []byte, typ string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: "...)
	return dst
}

func (anthropicStream) headEvents(st *stream) int {
	if len(st.a.calls) > 0 {
		return 1 + st.lead // message_start, then the plan's
	}
	return 3 // message_start, block start, ping
}

func (s anthropicStream) appendHead(dst []byte, st *stream, i int) []byte {
	switch {
	case i == 0:
		dst = anthropicEvent(dst, "message_start")
		dst = append(dst, `{"type":"message_start","message":{"id":"msg_`...)
		dst = appendHex(dst, st.a.id)
		dst = append(dst, `","type":"message","role":"assistant","model":`...)
		dst = append(dst, st.a.model...)
		dst = append(dst, `,"content":[],"stop_reason":null,"stop_sequence":null`...)
		if st.includeUsage {
			dst = appendAnthropicUsage(dst, st.a.prompt, st.a.written, 0)
		}
		return append(dst, "}}\n\n"...)
	case len(st.a.calls) > 0:
		return appendItems(dst, st, s, false)
	case i == 1:
		dst = anthropicEvent(dst, "content_block_start")
		return append(dst, `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`+"\n\n"...)
	}
	return appendPing(dst)
}

func appendPing(dst []byte) []byte {
	return append(dst, "event: ping\ndata: {\"type\":\"ping\"}\n\n"...)
}

// appendItem writes a tool_use block's start (and, after the first, the
// ping), a fragment of its input, or its stop.
func (anthropicStream) appendItem(dst []byte, st *stream, it planItem, frag string) []byte {
	switch it.kind {
	case itemOpen:
		dst = anthropicEvent(dst, "content_block_start")
		dst = append(dst, `{"type":"content_block_start","index":`...)
		dst = appendInt(dst, int64(it.call))
		dst = append(dst, `,"content_block":{"type":"tool_use","id":"`...)
		dst = appendCallID(dst, "toolu_", st.a.id, it.call)
		dst = append(dst, `","name":`...)
		dst = append(dst, st.a.calls[it.call].name...)
		dst = append(dst, `,"input":{}}}`+"\n\n"...)
		if it.call == 0 {
			dst = appendPing(dst)
		}
		return dst
	case itemClose:
		dst = anthropicEvent(dst, "content_block_stop")
		dst = append(dst, `{"type":"content_block_stop","index":`...)
		dst = appendInt(dst, int64(it.call))
		return append(dst, "}\n\n"...)
	}
	dst = anthropicEvent(dst, "content_block_delta")
	dst = append(dst, `{"type":"content_block_delta","index":`...)
	dst = appendInt(dst, int64(it.call))
	dst = append(dst, `,"delta":{"type":"input_json_delta","partial_json":"`...)
	dst = appendEscaped(dst, frag)
	return append(dst, `"}}`+"\n\n"...)
}

func (s anthropicStream) appendContent(dst []byte, st *stream, i int, _ bool) []byte {
	if len(st.a.calls) > 0 {
		return appendItems(dst, st, s, true)
	}
	dst = anthropicEvent(dst, "content_block_delta")
	dst = append(dst, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`...)
	dst = st.a.appendChunk(dst, i)
	return append(dst, `"}}`+"\n\n"...)
}

func (anthropicStream) tailEvents(st *stream) int {
	if len(st.a.calls) > 0 {
		return st.trail + 2 // the plan's, message_delta, message_stop
	}
	return 3 // block stop, message_delta, message_stop
}

func (s anthropicStream) appendTail(dst []byte, st *stream, i int) []byte {
	if len(st.a.calls) > 0 {
		if i < st.trail {
			return appendItems(dst, st, s, false)
		}
		i -= st.trail - 1 // message_delta is 1
	}
	switch i {
	case 0:
		dst = anthropicEvent(dst, "content_block_stop")
		return append(dst, `{"type":"content_block_stop","index":0}`+"\n\n"...)
	case 1:
		stop := "end_turn"
		if len(st.a.calls) > 0 {
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
