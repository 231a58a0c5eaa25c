package gemini

import (
	"bytes"
	"fmt"
	"strings"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/rawjson"
)

// Encoder turns the OpenAI chat.completion.chunk events of one streamed
// answer into Gemini's stream of GenerateContentResponse chunks: as
// server-sent events (alt=sse) or as the JSON array Gemini streams
// without it. Each text delta is a chunk with one text part. Function
// calls are sent whole, as Gemini does, in the last chunk, which carries
// the finishReason and usageMetadata; it waits for "[DONE]" (or Finish),
// so that the usage chunk that follows the finish_reason is included.
// Reasoning deltas are dropped.
//
// An Encoder is used by one goroutine at a time. Get one with NewEncoder
// and give it back with Release.
type Encoder struct {
	model, id string
	array     bool // the JSON array form, not SSE
	// passthrough: the events are Gemini's own, passed through
	// (NewPassthrough).
	passthrough bool
	started     bool // array form: "[" was written
	closed      bool
	finish      string
	u           providers.Usage
	calls       []pendingCall
}

// pendingCall is a tool call being streamed: its id, name and arguments
// (the decoded JSON text so far).
type pendingCall struct {
	id, name string
	args     []byte
}

var encoderPool = sync.Pool{New: func() any { return new(Encoder) }}

// NewEncoder returns an encoder for an answer from model; responseID
// names the response. array selects the JSON array form.
func NewEncoder(model, responseID string, array bool) *Encoder {
	e := encoderPool.Get().(*Encoder)
	*e = Encoder{model: model, id: responseID, array: array, calls: e.calls[:0]}
	return e
}

// Release returns the encoder to its pool; it must not be used after.
func (e *Encoder) Release() {
	for i := range e.calls {
		e.calls[i] = pendingCall{}
	}
	e.calls = e.calls[:0]
	encoderPool.Put(e)
}

// Closed reports whether the last chunk (or an error) was written.
func (e *Encoder) Closed() bool { return e.closed }

// open starts one chunk.
func (e *Encoder) open(dst []byte) []byte {
	switch {
	case !e.array:
		return append(dst, "data: "...)
	case e.started:
		return append(dst, ",\r\n"...)
	}
	e.started = true
	return append(dst, '[')
}

// close ends one chunk.
func (e *Encoder) close(dst []byte) []byte {
	if e.array {
		return dst
	}
	return append(dst, "\r\n\r\n"...)
}

// appendTail writes the members every chunk ends with.
func (e *Encoder) appendTail(dst []byte) []byte {
	dst = append(dst, `,"modelVersion":`...)
	dst = rawjson.AppendString(dst, e.model)
	dst = append(dst, `,"responseId":`...)
	dst = rawjson.AppendString(dst, e.id)
	return append(dst, '}')
}

// Events translates a buffer of whole OpenAI SSE events, such as one
// Stream.Event call's output. "[DONE]" writes the last chunk. An event
// that is not JSON returns an error wrapping providers.ErrMalformed.
func (e *Encoder) Events(dst, events []byte) ([]byte, error) {
	if e.passthrough {
		return e.passEvents(dst, events)
	}
	for len(events) > 0 {
		i := bytes.Index(events, []byte("\n\n"))
		if i < 0 {
			return dst, fmt.Errorf("encode gemini stream: %w: incomplete event", providers.ErrMalformed)
		}
		ev := events[:i]
		events = events[i+2:]
		var err error
		if dst, err = e.event(dst, ev); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// event translates one OpenAI event.
func (e *Encoder) event(dst, ev []byte) ([]byte, error) {
	if e.closed {
		return dst, nil
	}
	var data []byte
	for line := range bytes.SplitSeq(ev, []byte("\n")) {
		if d, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:")); ok {
			data = bytes.TrimLeft(d, " ")
		}
	}
	if len(data) == 0 {
		return dst, nil
	}
	if string(data) == "[DONE]" {
		return e.Finish(dst), nil
	}
	if !providers.ValidJSON(data) {
		return dst, fmt.Errorf("encode gemini stream: %w: event is not JSON", providers.ErrMalformed)
	}
	s := bytesString(data)
	if m := gjson.Get(s, "error.message"); m.Exists() {
		return dst, &providers.UpstreamError{Message: m.String()}
	}
	if u := gjson.Get(s, "usage"); u.IsObject() {
		e.u = openAIUsage(u)
	}
	choice := gjson.Get(s, "choices.0")
	delta := choice.Get("delta")
	if c := delta.Get("content"); c.Type == gjson.String && c.Str != "" {
		dst = e.open(dst)
		dst = append(dst, `{"candidates":[{"content":{"role":"model","parts":[{"text":`...)
		dst = append(dst, c.Raw...)
		dst = append(dst, `}]},"index":0}]`...)
		dst = e.close(e.appendTail(dst))
	}
	delta.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
		k := int(tc.Get("index").Int())
		if k < 0 || k > 127 {
			return true
		}
		for len(e.calls) <= k {
			e.calls = append(e.calls, pendingCall{})
		}
		pc := &e.calls[k]
		// gjson's strings alias the events, whose buffer is reused.
		if id := tc.Get("id").Str; id != "" {
			pc.id = strings.Clone(id)
		}
		if n := tc.Get("function.name").Str; n != "" {
			pc.name = strings.Clone(n)
		}
		pc.args = append(pc.args, tc.Get("function.arguments").Str...)
		return true
	})
	if f := choice.Get("finish_reason"); f.Type == gjson.String {
		e.finish = f.Str
	}
	return dst, nil
}

// Finish writes the last chunk (function calls, finishReason and
// usageMetadata) unless it was written; use it when the upstream
// completed without "[DONE]".
func (e *Encoder) Finish(dst []byte) []byte {
	if e.closed {
		return dst
	}
	e.closed = true
	if e.passthrough {
		if e.array {
			if !e.started {
				dst = append(dst, '[')
			}
			dst = append(dst, ']')
		}
		return dst
	}
	dst = e.open(dst)
	dst = append(dst, `{"candidates":[{"content":{"role":"model","parts":[`...)
	n := 0
	for _, pc := range e.calls {
		if pc.name == "" {
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		out, err := appendCallPart(dst, pc.id, pc.name, string(pc.args))
		if err != nil { // arguments cut or not an object: sent empty
			out, _ = appendCallPart(dst, pc.id, pc.name, "{}")
		}
		dst = out
		n++
	}
	if n == 0 {
		dst = append(dst, `{"text":""}`...)
	}
	dst = append(dst, `]},"finishReason":"`...)
	dst = append(dst, finishFromOpenAI(e.finish)...)
	dst = append(dst, `","index":0}],`...)
	dst = appendUsageMetadata(dst, e.u)
	dst = e.close(e.appendTail(dst))
	if e.array {
		dst = append(dst, ']')
	}
	return dst
}

// Fail writes a Gemini error for a failure after the stream started, for
// an HTTP status code; nothing is written after it.
func (e *Encoder) Fail(dst []byte, code int, message string) []byte {
	e.closed = true
	dst = e.open(dst)
	dst = AppendErrorBody(dst, code, message)
	dst = e.close(dst)
	if e.array {
		dst = append(dst, ']')
	}
	return dst
}
