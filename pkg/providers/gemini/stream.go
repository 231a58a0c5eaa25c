package gemini

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

// stream translates a streamGenerateContent?alt=sse answer, one
// GenerateContentResponse per event, into chat.completion.chunk events.
type stream struct {
	p            *Provider
	model        string
	includeUsage bool
	started      bool // the role chunk was written and pre is set
	complete     bool
	calls        int // tool calls streamed so far
	created      int64
	usage        providers.Usage
	pre          []byte // every chunk's start, up to and including "choices":
	scratch      []byte
}

var streamPool = sync.Pool{New: func() any { return new(stream) }}

// Stream returns a pooled decoder for a streamed answer to c.
func (p *Provider) Stream(c *providers.Call) providers.Stream {
	s := streamPool.Get().(*stream)
	*s = stream{
		p:            p,
		model:        c.Model,
		includeUsage: c.IncludeUsage,
		created:      p.now().Unix(),
		pre:          s.pre[:0],
		scratch:      s.scratch[:0],
	}
	return s
}

// Framer returns nil: Gemini streams are server-sent events with alt=sse.
func (s *stream) Framer(io.Reader) providers.Framer { return nil }

// Complete reports whether Gemini sent a finish reason.
func (s *stream) Complete() bool { return s.complete }

// Usage returns the latest usageMetadata Gemini sent.
func (s *stream) Usage() providers.Usage { return s.usage }

// Close returns the decoder to its pool.
func (s *stream) Close() {
	s.p = nil
	if cap(s.scratch) > 64<<10 {
		s.scratch = nil
	}
	streamPool.Put(s)
}

// Event translates one Gemini event. The event with a finishReason ends the
// answer: the finish chunk, the usage chunk (when asked) and [DONE] follow
// it and the state is Done.
func (s *stream) Event(dst, ev []byte) ([]byte, providers.State, error) {
	if s.complete {
		return dst, providers.Done, nil
	}
	var data []byte
	_, data, s.scratch = sse.Parse(ev, s.scratch)
	if len(data) == 0 { // comment or keep-alive
		return dst, providers.More, nil
	}
	if !providers.ValidJSON(data) {
		return dst, providers.Failed, fmt.Errorf("provider %s: %w: stream event is not JSON", s.p.name, providers.ErrMalformed)
	}
	d := bytesString(data)
	if i := rawjson.SkipSpace(d, 0); i >= len(d) || d[i] != '{' {
		return dst, providers.Failed, fmt.Errorf("provider %s: %w: stream event is not an object", s.p.name, providers.ErrMalformed)
	}
	var cands, usage, id, model, feedback, errv string
	forEachMember(d, func(k, v string) bool {
		switch k {
		case "candidates":
			cands = v
		case "usageMetadata":
			usage = v
		case "responseId":
			id = v
		case "modelVersion":
			model = v
		case "promptFeedback":
			feedback = v
		case "error":
			errv = v
		}
		return true
	})
	if errv != "" {
		msg := gjson.Get(errv, "message").String()
		if msg == "" {
			msg = "error event"
		}
		return dst, providers.Failed, &providers.UpstreamError{Message: msg}
	}
	if len(usage) > 0 && usage[0] == '{' {
		s.usage = parseUsage(usage)
	}
	if !s.started {
		s.start(id, model)
		dst = s.appendChunk(dst, `{"role":"assistant","content":""}`, "null")
	}
	cand := firstElem(cands)
	var parts, reason string
	forEachMember(cand, func(k, v string) bool {
		switch k {
		case "content":
			parts = member(v, "parts")
		case "finishReason":
			reason = inner(v)
		}
		return true
	})
	dst = s.appendParts(dst, parts)
	switch {
	case reason != "":
		return s.finish(dst, finishReason(reason, s.calls > 0)), providers.Done, nil
	case cand == "" && isString(member(feedback, "blockReason")):
		return s.finish(dst, "content_filter"), providers.Done, nil
	}
	return dst, providers.More, nil
}

// start sets the chunk prefix from the first event's raw responseId and
// modelVersion.
func (s *stream) start(id, model string) {
	s.started = true
	pre := append(s.pre[:0], `data: {"id":"chatcmpl-`...)
	pre = s.p.appendID(pre, id)
	pre = append(pre, `","object":"chat.completion.chunk","created":`...)
	pre = strconv.AppendInt(pre, s.created, 10)
	pre = append(pre, `,"model":`...)
	pre = appendModel(pre, model, s.model)
	s.pre = append(pre, `,"choices":`...)
}

// appendChunk appends a chunk with the given delta object and finish
// reason (a JSON value).
func (s *stream) appendChunk(dst []byte, delta, finish string) []byte {
	dst = append(dst, s.pre...)
	dst = append(dst, `[{"index":0,"delta":`...)
	dst = append(dst, delta...)
	dst = append(dst, `,"logprobs":null,"finish_reason":`...)
	dst = append(dst, finish...)
	return append(dst, "}]}\n\n"...)
}

const chunkEnd = `},"logprobs":null,"finish_reason":null}]}` + "\n\n"

// appendParts appends the content chunks of one event's raw parts array:
// adjacent text parts share one chunk; each function call is a head chunk
// and an arguments chunk; thought parts are dropped.
func (s *stream) appendParts(dst []byte, parts string) []byte {
	inText := false
	forEachElem(parts, func(part string) bool {
		var text, thought, fc, sig string
		forEachMember(part, func(k, v string) bool {
			switch k {
			case "text":
				text = v
			case "thought":
				thought = v
			case "functionCall":
				fc = v
			case "thoughtSignature":
				sig = v
			}
			return true
		})
		switch {
		case thought == "true":
		case isString(text):
			if t := inner(text); t != "" {
				if !inText {
					dst = append(dst, s.pre...)
					dst = append(dst, `[{"index":0,"delta":{"content":"`...)
					inText = true
				}
				dst = append(dst, t...)
			}
		case len(fc) > 0 && fc[0] == '{':
			if inText {
				dst = append(dst, '"')
				dst = append(dst, chunkEnd...)
				inText = false
			}
			dst = s.appendCall(dst, fc, sig)
		}
		return true
	})
	if inText {
		dst = append(dst, '"')
		dst = append(dst, chunkEnd...)
	}
	return dst
}

// appendCall streams one raw functionCall: its head, then its arguments.
func (s *stream) appendCall(dst []byte, fc, sig string) []byte {
	var id, name, args string
	forEachMember(fc, func(k, v string) bool {
		switch k {
		case "id":
			id = v
		case "name":
			name = v
		case "args":
			args = v
		}
		return true
	})
	k := s.calls
	s.calls++
	dst = append(dst, s.pre...)
	dst = append(dst, `[{"index":0,"delta":{"tool_calls":[`...)
	dst = appendToolCall(dst, id, name, args, sig, k, true)
	dst = append(dst, ']')
	dst = append(dst, chunkEnd...)
	dst = append(dst, s.pre...)
	dst = append(dst, `[{"index":0,"delta":{"tool_calls":[{"index":`...)
	dst = strconv.AppendInt(dst, int64(k), 10)
	dst = append(dst, `,"function":{"arguments":"`...)
	dst = appendArgs(dst, args)
	dst = append(dst, `"}}]`...)
	return append(dst, chunkEnd...)
}

// finish appends the finish chunk, the usage chunk when the client asked
// and usage was reported, and [DONE].
func (s *stream) finish(dst []byte, reason string) []byte {
	s.complete = true
	dst = append(dst, s.pre...)
	dst = append(dst, `[{"index":0,"delta":{},"logprobs":null,"finish_reason":"`...)
	dst = append(dst, reason...)
	dst = append(dst, "\"}]}\n\n"...)
	if s.includeUsage && s.usage.Reported {
		dst = append(dst, s.pre...)
		dst = append(dst, `[],`...)
		dst = appendUsage(dst, s.usage)
		dst = append(dst, "}\n\n"...)
	}
	return append(dst, "data: [DONE]\n\n"...)
}
