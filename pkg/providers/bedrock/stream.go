package bedrock

import (
	"fmt"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"io"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
)

// stream translates a ConverseStream answer, frame by frame, into
// chat.completion.chunk events.
type stream struct {
	name         string
	includeUsage bool
	started      bool // the role chunk went out
	complete     bool // messageStop (the finish reason) arrived
	metadata     bool // the metadata frame (usage) arrived
	usage        providers.Usage
	head         []byte  // `data: {"id":...,"model":...,` shared by every chunk
	tools        []int64 // contentBlockIndex of each tool call, by OpenAI index
	fr           framer
}

var streamPool = sync.Pool{New: func() any { return new(stream) }}

// Stream returns the decoder of a streamed answer to c.
func (p *Provider) Stream(c *providers.Call) providers.Stream {
	s := streamPool.Get().(*stream)
	s.name, s.includeUsage = p.name, c.IncludeUsage
	s.started, s.complete, s.metadata = false, false, false
	s.usage = providers.Usage{}
	s.tools = s.tools[:0]
	s.head = append(s.head[:0], `data: {"id":"`...)
	s.head = appendID(s.head, c)
	s.head = append(s.head, `","object":"chat.completion.chunk","created":`...)
	s.head = appendInt(s.head, p.now().Unix())
	s.head = append(s.head, `,"model":`...)
	s.head = rawjson.AppendString(s.head, c.Model)
	s.head = append(s.head, ',')
	return s
}

// Framer returns the event-stream framing over src.
func (s *stream) Framer(src io.Reader) providers.Framer {
	s.fr.reset(src)
	return &s.fr
}

// Event translates one frame.
func (s *stream) Event(dst, ev []byte) ([]byte, providers.State, error) {
	h, payload, ok := parseFrame(ev)
	if !ok {
		return dst, providers.Failed, fmt.Errorf("provider %s: %w: event-stream frame", s.name, providers.ErrMalformed)
	}
	switch string(h.messageType) {
	case "", "event":
	case "exception":
		return dst, providers.Failed, &providers.UpstreamError{Message: exceptionMessage(h.exceptionType, payload)}
	case "error":
		return dst, providers.Failed, &providers.UpstreamError{Message: string(h.errorCode) + ": " + string(h.errorMessage)}
	default:
		return dst, providers.More, nil
	}
	if len(payload) > 0 && !providers.ValidJSON(payload) {
		return dst, providers.Failed, fmt.Errorf("provider %s: %w: %s payload is not JSON", s.name, providers.ErrMalformed, h.eventType)
	}
	d := bytesString(payload)
	switch string(h.eventType) {
	case "messageStart":
		dst = s.start(dst)
	case "contentBlockStart":
		if tu := gjson.Get(d, "start.toolUse"); tu.IsObject() {
			dst = s.toolStart(s.start(dst), gjson.Get(d, "contentBlockIndex").Int(), tu)
		}
	case "contentBlockDelta":
		dst = s.delta(dst, d)
	case "messageStop":
		dst = s.chunk(s.start(dst), "{}", finishReason(gjson.Get(d, "stopReason").Str, len(s.tools) > 0))
		s.complete = true
		if s.metadata {
			return s.end(dst), providers.Done, nil
		}
	case "metadata":
		if u := gjson.Get(d, "usage"); u.IsObject() {
			s.usage = parseUsage(u)
		}
		s.metadata = true
		if s.complete {
			return s.end(dst), providers.Done, nil
		}
	}
	return dst, providers.More, nil
}

// exceptionMessage describes an exception frame: its type and message.
func exceptionMessage(typ, payload []byte) string {
	msg := ""
	if providers.ValidJSON(payload) {
		msg = gjson.Get(bytesString(payload), "message").String()
	}
	switch {
	case len(typ) == 0 && msg == "":
		return "exception event"
	case msg == "":
		return string(typ)
	case len(typ) == 0:
		return msg
	}
	return string(typ) + ": " + msg
}

// start appends the role chunk before the first chunk of the answer.
func (s *stream) start(dst []byte) []byte {
	if s.started {
		return dst
	}
	s.started = true
	return s.chunk(dst, `{"role":"assistant","content":""}`, "")
}

// chunk appends a chunk with a delta object and a finish reason ("" for null).
func (s *stream) chunk(dst []byte, delta, finish string) []byte {
	dst = append(dst, s.head...)
	dst = append(dst, `"choices":[{"index":0,"delta":`...)
	dst = append(dst, delta...)
	return s.chunkEnd(dst, finish)
}

// chunkEnd closes a chunk whose delta object has been written.
func (s *stream) chunkEnd(dst []byte, finish string) []byte {
	dst = append(dst, `,"logprobs":null,"finish_reason":`...)
	if finish == "" {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '"')
		dst = append(dst, finish...)
		dst = append(dst, '"')
	}
	return append(dst, "}]}\n\n"...)
}

// deltaStart opens a chunk's delta object.
func (s *stream) deltaStart(dst []byte) []byte {
	dst = append(dst, s.head...)
	return append(dst, `"choices":[{"index":0,"delta":{`...)
}

// toolStart appends the chunk opening a tool call: index, id, name and
// empty arguments, as OpenAI streams it.
func (s *stream) toolStart(dst []byte, block int64, tu gjson.Result) []byte {
	s.tools = append(s.tools, block)
	dst = s.deltaStart(dst)
	dst = append(dst, `"tool_calls":[{"index":`...)
	dst = appendInt(dst, int64(len(s.tools)-1))
	dst = append(dst, `,"id":`...)
	dst = rawjson.AppendRawString(dst, tu.Get("toolUseId").Raw)
	dst = append(dst, `,"type":"function","function":{"name":`...)
	dst = rawjson.AppendRawString(dst, tu.Get("name").Raw)
	dst = append(dst, `,"arguments":""}}]}`...)
	return s.chunkEnd(dst, "")
}

// delta appends the chunk of a contentBlockDelta: text, or a fragment of a
// tool call's arguments. Reasoning and other deltas are dropped.
func (s *stream) delta(dst []byte, d string) []byte {
	delta := rawMember(d, "delta")
	if text := rawMember(delta, "text"); text != "" {
		if text[0] != '"' || text == `""` {
			return dst
		}
		dst = s.deltaStart(s.start(dst))
		dst = append(dst, `"content":`...)
		dst = rawjson.AppendRaw(dst, text)
		dst = append(dst, '}')
		return s.chunkEnd(dst, "")
	}
	in := rawMember(rawMember(delta, "toolUse"), "input")
	if in == "" || in[0] != '"' || in == `""` {
		return dst
	}
	dst = s.deltaStart(s.start(dst))
	dst = append(dst, `"tool_calls":[{"index":`...)
	dst = appendInt(dst, int64(s.toolIndex(gjson.Get(d, "contentBlockIndex").Int())))
	dst = append(dst, `,"function":{"arguments":`...)
	dst = rawjson.AppendRaw(dst, in)
	dst = append(dst, "}}]}"...)
	return s.chunkEnd(dst, "")
}

// toolIndex returns the OpenAI index of the tool call in content block
// block, registering one for a block that had no start.
func (s *stream) toolIndex(block int64) int {
	for i := len(s.tools) - 1; i >= 0; i-- {
		if s.tools[i] == block {
			return i
		}
	}
	s.tools = append(s.tools, block)
	return len(s.tools) - 1
}

// end appends the usage chunk (when the client asked) and [DONE].
func (s *stream) end(dst []byte) []byte {
	if s.includeUsage {
		dst = append(dst, s.head...)
		dst = append(dst, `"choices":[]`...)
		dst = appendUsage(dst, s.usage)
		dst = append(dst, "}\n\n"...)
	}
	return append(dst, "data: [DONE]\n\n"...)
}

// Complete reports whether messageStop (the finish reason) arrived.
func (s *stream) Complete() bool { return s.complete }

// Usage returns the usage of the metadata frame.
func (s *stream) Usage() providers.Usage { return s.usage }

// Close returns the decoder to its pool.
func (s *stream) Close() {
	s.fr.src = nil
	streamPool.Put(s)
}
