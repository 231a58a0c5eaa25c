package anthropic

import (
	"bytes"
	"fmt"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"strconv"
	"sync"

	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/providers/openai"
	"github.com/tollgate/tollgate/pkg/sse"
)

// Encoder turns the OpenAI chat.completion.chunk events of one streamed
// answer into the Anthropic SSE event sequence: message_start and a ping,
// then for each content block content_block_start, content_block_delta
// (text_delta or input_json_delta) and content_block_stop, and finally
// message_delta (stop_reason, usage) and message_stop. The closing events
// wait for "[DONE]" (or Finish), so the usage chunk that follows the
// finish_reason is included. Reasoning deltas are dropped.
//
// message_start carries usage.input_tokens, as the Anthropic API does and
// clients read it there (LangChain's ChatAnthropic, issue #16): the
// upstream's prompt tokens when its first event already reports usage,
// else the count of the PromptCounter given with EstimatePrompt (0 without
// one). The final message_delta always carries the upstream's figures;
// billing never uses the estimate.
//
// An Encoder is used by one goroutine at a time. Get one with NewEncoder
// and give it back with Release.
type Encoder struct {
	model     string
	requestID string
	started   bool
	closed    bool
	kind      blockKind // of the open block; blockNone when none is open
	blocks    int       // blocks opened; the open one is blocks-1
	toolIndex uint64    // OpenAI tool_calls index of the open tool block
	toolID    []byte    // raw id token of the open tool block
	usedTools bool
	stop      string // Anthropic stop reason; "" until a finish_reason
	u         providers.Usage
	scratch   []byte
	counter   PromptCounter // message_start's estimate, with prompt; may be nil
	prompt    []byte
}

// PromptCounter counts the prompt tokens of an OpenAI-format chat request
// body; *tokenize.Estimator is one.
type PromptCounter interface {
	ChatPrompt(body []byte) int
}

var encoderPool = sync.Pool{New: func() any { return new(Encoder) }}

// NewEncoder returns an encoder for an answer from model; requestID names
// the message ("msg_" + requestID).
func NewEncoder(model, requestID string) *Encoder {
	e := encoderPool.Get().(*Encoder)
	*e = Encoder{model: model, requestID: requestID, toolID: e.toolID[:0], scratch: e.scratch[:0]}
	return e
}

// EstimatePrompt sets what message_start reports as input tokens when the
// upstream has not reported usage by its first event: c's count of body,
// the OpenAI-format request sent upstream. c counts only then, once. body
// must stay unchanged until the encoder is released.
func (e *Encoder) EstimatePrompt(c PromptCounter, body []byte) {
	e.counter, e.prompt = c, body
}

// Release returns the encoder to its pool; it must not be used after.
func (e *Encoder) Release() {
	e.counter, e.prompt = nil, nil
	if cap(e.scratch) > 64<<10 {
		e.scratch = nil
	}
	encoderPool.Put(e)
}

// Usage returns the usage the OpenAI events reported.
func (e *Encoder) Usage() providers.Usage { return e.u }

// Closed reports whether the closing events (or an error event) were
// written: nothing more will be.
func (e *Encoder) Closed() bool { return e.closed }

// Event translates one OpenAI SSE event (whole, including its blank line)
// into zero or more Anthropic events appended to dst. "[DONE]" writes the
// closing events; an OpenAI error event becomes an Anthropic error event.
// An event that is not JSON returns an error wrapping providers.ErrMalformed.
func (e *Encoder) Event(dst, ev []byte) ([]byte, error) {
	var data []byte
	_, data, e.scratch = sse.Parse(ev, e.scratch)
	if len(data) == 0 || e.closed {
		return dst, nil
	}
	if string(data) == "[DONE]" {
		return e.Finish(dst), nil
	}
	if !providers.ValidJSON(data) {
		return dst, fmt.Errorf("encode messages stream: %w: event is not JSON", providers.ErrMalformed)
	}
	var errObj, usage, choices string
	eachMember(bytesString(data), func(k, v string) bool {
		switch k {
		case "error":
			errObj = v
		case "usage":
			usage = v
		case "choices":
			choices = v
		}
		return true
	})
	if len(errObj) > 0 && errObj[0] == '{' {
		return e.failRaw(dst, ErrAPI, inner(member(errObj, "message"))), nil
	}
	if len(usage) > 0 && usage[0] == '{' {
		e.u = openai.ParseUsage(usage) // the one reader of an OpenAI usage object
	}
	if !e.started {
		dst = e.start(dst)
	}
	var choice string
	forEachRaw(choices, func(_ int, c string) bool {
		choice = c
		return false
	})
	if choice == "" {
		return dst, nil
	}
	var delta, finish string
	eachMember(choice, func(k, v string) bool {
		switch k {
		case "delta":
			delta = v
		case "finish_reason":
			finish = v
		}
		return true
	})
	var content, calls string
	eachMember(delta, func(k, v string) bool {
		switch k {
		case "content":
			content = v
		case "tool_calls":
			calls = v
		}
		return true
	})
	if c := inner(content); c != "" {
		dst = e.text(dst, c)
	}
	forEachRaw(calls, func(_ int, tc string) bool {
		dst = e.toolCall(dst, tc)
		return true
	})
	if fr := finish; isString(fr) {
		e.stop = stopReason(inner(fr))
		dst = e.closeBlock(dst)
	}
	return dst, nil
}

// Events translates a buffer of whole OpenAI SSE events, such as one
// Stream.Event call's output (which may hold several), calling Event for
// each. A trailing incomplete event is an error.
func (e *Encoder) Events(dst, events []byte) ([]byte, error) {
	for len(events) > 0 {
		n := eventEnd(events)
		if n < 0 {
			return dst, fmt.Errorf("encode messages stream: %w: incomplete event", providers.ErrMalformed)
		}
		var err error
		if dst, err = e.Event(dst, events[:n]); err != nil {
			return dst, err
		}
		events = events[n:]
	}
	return dst, nil
}

// eventEnd returns the index just past the blank line ending the first
// event in b, or -1.
func eventEnd(b []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
		if i < len(b) && b[i] == '\n' {
			return i + 1
		}
		if i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n' {
			return i + 2
		}
	}
}

// Finish writes the closing events (closing the open block first) unless
// they were written; use it when the upstream completed without "[DONE]".
func (e *Encoder) Finish(dst []byte) []byte {
	if e.closed {
		return dst
	}
	if !e.started {
		dst = e.start(dst)
	}
	dst = e.closeBlock(dst)
	e.closed = true
	stop := e.stop
	if stop == "" {
		stop = "end_turn"
	}
	if stop == "end_turn" && e.usedTools {
		stop = "tool_use"
	}
	dst = appendEventHead(dst, "message_delta")
	dst = append(dst, `{"type":"message_delta","delta":{"stop_reason":"`...)
	dst = append(dst, stop...)
	dst = append(dst, `","stop_sequence":null},"usage":`...)
	dst = appendAnthropicUsage(dst, e.u)
	dst = append(dst, "}\n\n"...)
	dst = appendEventHead(dst, "message_stop")
	return append(dst, `{"type":"message_stop"}`+"\n\n"...)
}

// Fail writes an Anthropic error event for a failure after the stream
// started; nothing is written after it.
func (e *Encoder) Fail(dst []byte, errType, message string) []byte {
	e.closed = true
	dst = appendEventHead(dst, "error")
	dst = appendErrorObject(dst, errType, message)
	return append(dst, "\n\n"...)
}

// failRaw is Fail with an already escaped message.
func (e *Encoder) failRaw(dst []byte, errType, rawMessage string) []byte {
	e.closed = true
	dst = appendEventHead(dst, "error")
	dst = append(dst, `{"type":"error","error":{"type":"`...)
	dst = append(dst, errType...)
	dst = append(dst, `","message":"`...)
	dst = rawjson.AppendRawBody(dst, rawMessage)
	return append(dst, `"}}`+"\n\n"...)
}

// appendEventHead appends the event line and the start of the data line.
func appendEventHead(dst []byte, name string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	return append(dst, "\ndata: "...)
}

// start writes message_start and a ping. OpenAI reports usage at the end,
// so input_tokens is mostly the estimate (see Encoder); message_delta
// carries the upstream's figures.
func (e *Encoder) start(dst []byte) []byte {
	e.started = true
	dst = appendEventHead(dst, "message_start")
	dst = append(dst, `{"type":"message_start","message":{"id":"msg_`...)
	dst = rawjson.AppendStringBody(dst, e.requestID)
	dst = append(dst, `","type":"message","role":"assistant","model":`...)
	dst = rawjson.AppendString(dst, e.model)
	dst = append(dst, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":`...)
	dst = appendUint(dst, e.startInput())
	dst = append(dst, `,"output_tokens":0}}}`+"\n\n"...)
	dst = appendEventHead(dst, "ping")
	return append(dst, `{"type":"ping"}`+"\n\n"...)
}

// startInput is message_start's input_tokens: the upstream's (less cached
// tokens, as message_delta counts them) when reported, else the estimate.
func (e *Encoder) startInput() uint64 {
	switch {
	case e.u.Reported:
		return e.u.Prompt - min(e.u.Cached, e.u.Prompt)
	case e.counter != nil:
		return uint64(max(e.counter.ChatPrompt(e.prompt), 0))
	}
	return 0
}

// blockHead appends the start of an event about the open block, up to and
// including its index and a comma.
func (e *Encoder) blockHead(dst []byte, name string) []byte {
	dst = appendEventHead(dst, name)
	dst = append(dst, `{"type":"`...)
	dst = append(dst, name...)
	dst = append(dst, `","index":`...)
	return strconv.AppendInt(dst, int64(e.blocks-1), 10)
}

// text writes a text delta, opening a text block when needed.
func (e *Encoder) text(dst []byte, raw string) []byte {
	if e.kind != blockText {
		dst = e.closeBlock(dst)
		e.kind = blockText
		e.blocks++
		dst = e.blockHead(dst, "content_block_start")
		dst = append(dst, `,"content_block":{"type":"text","text":""}}`+"\n\n"...)
	}
	dst = e.blockHead(dst, "content_block_delta")
	dst = append(dst, `,"delta":{"type":"text_delta","text":"`...)
	dst = rawjson.AppendRawBody(dst, raw)
	return append(dst, `"}}`+"\n\n"...)
}

// toolCall writes one tool_calls element: a new call opens a tool_use
// block, argument fragments become input_json_delta events.
func (e *Encoder) toolCall(dst []byte, tc string) []byte {
	idx, _ := providers.Count(member(tc, "index")) // a bad index is 0
	id := member(tc, "id")
	fn := member(tc, "function")
	newID := inner(id) != "" && inner(id) != inner(bytesString(e.toolID))
	if e.kind != blockTool || idx != e.toolIndex || newID {
		dst = e.closeBlock(dst)
		e.kind, e.toolIndex, e.usedTools = blockTool, idx, true
		e.toolID = append(e.toolID[:0], id...)
		e.blocks++
		dst = e.blockHead(dst, "content_block_start")
		dst = append(dst, `,"content_block":{"type":"tool_use","id":"`...)
		if inner(id) != "" {
			dst = rawjson.AppendRawBody(dst, inner(id))
		} else {
			dst = append(dst, "toolu_"...)
			dst = appendUint(dst, idx)
		}
		dst = append(dst, `","name":`...)
		dst = rawjson.AppendRawString(dst, member(fn, "name"))
		dst = append(dst, `,"input":{}}}`+"\n\n"...)
	}
	args := inner(member(fn, "arguments"))
	if args == "" {
		return dst
	}
	dst = e.blockHead(dst, "content_block_delta")
	dst = append(dst, `,"delta":{"type":"input_json_delta","partial_json":"`...)
	dst = rawjson.AppendRawBody(dst, args)
	return append(dst, `"}}`+"\n\n"...)
}

// closeBlock writes content_block_stop for the open block, if any.
func (e *Encoder) closeBlock(dst []byte) []byte {
	if e.kind == blockNone {
		return dst
	}
	e.kind = blockNone
	dst = e.blockHead(dst, "content_block_stop")
	return append(dst, "}\n\n"...)
}
