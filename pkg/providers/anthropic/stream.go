package anthropic

import (
	"fmt"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"io"
	"strconv"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/sse"
)

// blockKind is the type of the content block being streamed.
type blockKind uint8

const (
	blockNone blockKind = iota
	blockText
	blockTool
	blockThinking
	blockOther // redacted thinking, server tool blocks: not relayed
)

// stream translates Anthropic SSE events into chat.completion.chunk events,
// one upstream event at a time.
type stream struct {
	name         string
	model        string // fallback when message_start names none
	created      int64
	includeUsage bool
	started      bool // message_start seen: pre is set
	finished     bool // the finish chunk was sent
	block        blockKind
	tools        int // tool_use blocks so far; the current one is tools-1
	u            usage
	pre          []byte // `data: {"id":..,"object":..,"created":..,"model":..,`
	scratch      []byte
}

var streamPool = sync.Pool{New: func() any { return new(stream) }}

// Stream returns the decoder for a streamed answer to c.
func (p *Provider) Stream(c *providers.Call) providers.Stream {
	s := streamPool.Get().(*stream)
	*s = stream{name: p.name, model: c.Model, created: p.now().Unix(), includeUsage: c.IncludeUsage,
		pre: s.pre[:0], scratch: s.scratch[:0]}
	return s
}

// Framer returns nil: Anthropic streams are server-sent events.
func (s *stream) Framer(io.Reader) providers.Framer { return nil }

// Complete reports whether the upstream sent a stop reason or message_stop.
func (s *stream) Complete() bool { return s.finished }

// Usage returns the usage reported so far: input from message_start,
// output from message_delta.
func (s *stream) Usage() providers.Usage { return s.u.providers() }

// Close returns the decoder to its pool.
func (s *stream) Close() {
	if cap(s.scratch) > 64<<10 {
		s.scratch = nil
	}
	streamPool.Put(s)
}

// Event translates one Anthropic event. ping and unknown events produce
// nothing; message_stop produces the usage chunk (when asked) and [DONE].
func (s *stream) Event(dst, ev []byte) ([]byte, providers.State, error) {
	var name, data []byte
	name, data, s.scratch = sse.Parse(ev, s.scratch)
	if len(data) == 0 { // comment or keep-alive
		return dst, providers.More, nil
	}
	if !providers.ValidJSON(data) {
		return dst, providers.Failed, fmt.Errorf("provider %s: %w: event is not JSON", s.name, providers.ErrMalformed)
	}
	d := bytesString(data)
	typ := inner(member(d, "type"))
	if typ == "" {
		typ = bytesString(name)
	}
	switch typ {
	case "message_start":
		return s.start(dst, d), providers.More, nil
	case "error":
		return dst, providers.Failed, upstreamError(d)
	case "ping":
		return dst, providers.More, nil
	}
	if !s.started {
		switch typ {
		case "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop":
			return dst, providers.Failed, fmt.Errorf("provider %s: %w: %s before message_start", s.name, providers.ErrMalformed, typ)
		}
		return dst, providers.More, nil
	}
	switch typ {
	case "content_block_start":
		dst = s.blockStart(dst, member(d, "content_block"))
	case "content_block_delta":
		dst = s.blockDelta(dst, member(d, "delta"))
	case "content_block_stop":
		s.block = blockNone
	case "message_delta":
		s.u.update(member(d, "usage"))
		if stop := member(member(d, "delta"), "stop_reason"); isString(stop) {
			dst = s.finish(dst, finishReason(stop))
		}
	case "message_stop":
		dst = s.finish(dst, `"stop"`)
		if pu := s.u.providers(); s.includeUsage && pu.Reported {
			dst = append(dst, s.pre...)
			dst = append(dst, `"choices":[],"usage":`...)
			dst = appendOpenAIUsage(dst, pu)
			dst = append(dst, "}\n\n"...)
		}
		return append(dst, "data: [DONE]\n\n"...), providers.Done, nil
	}
	return dst, providers.More, nil
}

// upstreamError describes an Anthropic error event.
func upstreamError(d string) error {
	e := gjson.Get(d, "error")
	msg := e.Get("message").String()
	if msg == "" {
		msg = "error event"
	}
	if t := e.Get("type").String(); t != "" {
		msg = t + ": " + msg
	}
	return &providers.UpstreamError{Message: msg}
}

// start reads message_start: the id, model and input usage; it sends the
// role chunk.
func (s *stream) start(dst []byte, d string) []byte {
	msg := member(d, "message")
	s.u.update(member(msg, "usage"))
	if s.started {
		return dst
	}
	s.started = true
	s.pre = append(s.pre[:0], `data: {"id":"chatcmpl-`...)
	s.pre = rawjson.AppendRawBody(s.pre, inner(member(msg, "id")))
	s.pre = append(s.pre, `","object":"chat.completion.chunk","created":`...)
	s.pre = strconv.AppendInt(s.pre, s.created, 10)
	s.pre = append(s.pre, `,"model":`...)
	if m := member(msg, "model"); isString(m) {
		s.pre = rawjson.AppendRawString(s.pre, m)
	} else {
		s.pre = rawjson.AppendString(s.pre, s.model)
	}
	s.pre = append(s.pre, ',')
	dst = s.open(dst)
	dst = append(dst, `{"role":"assistant","content":""}`...)
	return s.close(dst, "null")
}

// open starts a chunk up to its delta object.
func (s *stream) open(dst []byte) []byte {
	dst = append(dst, s.pre...)
	return append(dst, `"choices":[{"index":0,"delta":`...)
}

// close ends a chunk after its delta object with a raw finish reason.
func (s *stream) close(dst []byte, finish string) []byte {
	dst = append(dst, `,"logprobs":null,"finish_reason":`...)
	dst = append(dst, finish...)
	return append(dst, "}]}\n\n"...)
}

// blockStart handles content_block_start: a tool_use block announces a
// tool call; a text block with initial text sends it.
func (s *stream) blockStart(dst []byte, block string) []byte {
	switch member(block, "type") {
	case `"text"`:
		s.block = blockText
		return s.text(dst, `{"content":"`, inner(member(block, "text")))
	case `"thinking"`:
		s.block = blockThinking
		return s.text(dst, `{"reasoning_content":"`, inner(member(block, "thinking")))
	case `"tool_use"`:
		s.block = blockTool
		s.tools++
		dst = s.open(dst)
		dst = append(dst, `{"tool_calls":[{"index":`...)
		dst = strconv.AppendInt(dst, int64(s.tools-1), 10)
		dst = append(dst, `,"id":`...)
		dst = rawjson.AppendRawString(dst, member(block, "id"))
		dst = append(dst, `,"type":"function","function":{"name":`...)
		dst = rawjson.AppendRawString(dst, member(block, "name"))
		dst = append(dst, `,"arguments":""}}]}`...)
		return s.close(dst, "null")
	}
	s.block = blockOther
	return dst
}

// blockDelta handles content_block_delta: text, tool input JSON and
// thinking fragments become content, arguments and reasoning_content.
func (s *stream) blockDelta(dst []byte, delta string) []byte {
	switch member(delta, "type") {
	case `"text_delta"`:
		return s.text(dst, `{"content":"`, inner(member(delta, "text")))
	case `"thinking_delta"`:
		return s.text(dst, `{"reasoning_content":"`, inner(member(delta, "thinking")))
	case `"input_json_delta"`:
		frag := inner(member(delta, "partial_json"))
		if frag == "" || s.block != blockTool {
			return dst
		}
		dst = s.open(dst)
		dst = append(dst, `{"tool_calls":[{"index":`...)
		dst = strconv.AppendInt(dst, int64(s.tools-1), 10)
		dst = append(dst, `,"function":{"arguments":"`...)
		dst = rawjson.AppendRawBody(dst, frag)
		dst = append(dst, `"}}]}`...)
		return s.close(dst, "null")
	}
	return dst // signature_delta, citations_delta: nothing to relay
}

// text sends a chunk whose delta is head + the escaped text + `"}`, unless
// the text is empty.
func (s *stream) text(dst []byte, head, raw string) []byte {
	if raw == "" {
		return dst
	}
	dst = s.open(dst)
	dst = append(dst, head...)
	dst = rawjson.AppendRawBody(dst, raw)
	dst = append(dst, `"}`...)
	return s.close(dst, "null")
}

// finish sends the one chunk with a finish reason.
func (s *stream) finish(dst []byte, reason string) []byte {
	if s.finished {
		return dst
	}
	s.finished = true
	dst = s.open(dst)
	dst = append(dst, "{}"...)
	return s.close(dst, reason)
}
