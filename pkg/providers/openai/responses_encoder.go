package openai

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"github.com/tollgate/tollgate/pkg/sse"
)

// ResponsesEncoder turns the OpenAI chat.completion.chunk events of one
// streamed answer into the Responses API event sequence, for a Responses
// request served by translation (RequestFromResponses):
//
//	response.created, response.in_progress
//	per text answer: response.output_item.added (message),
//	  response.content_part.added, response.output_text.delta...,
//	  response.output_text.done, response.content_part.done,
//	  response.output_item.done
//	per tool call: response.output_item.added (function_call),
//	  response.function_call_arguments.delta...,
//	  response.function_call_arguments.done, response.output_item.done
//	response.completed (or response.incomplete: finish reason length or
//	  content_filter), with the whole response and its usage
//
// Every event carries its sequence_number, from 0. The terminal event
// waits for "[DONE]" (or Finish), so the usage chunk that follows the
// finish reason is in it: input_tokens, input_tokens_details.cached_tokens,
// output_tokens, output_tokens_details.reasoning_tokens, as the upstream
// reported them (the figures the gateway bills). Reasoning deltas are
// dropped: a translated target's reasoning is not returned.
//
// An encoder is used by one goroutine at a time. Get one with
// NewResponsesEncoder and give it back with Release.
type ResponsesEncoder struct {
	model   string
	id      string // the request id's hex: resp_<id>, msg_<id>_<n>, fc_<id>_<n>
	created int64
	seq     int64
	started bool
	closed  bool
	kind    itemKind // of the open item
	items   int      // items opened; the open one is items-1
	text    []byte   // the open message's text, escaped
	callIdx uint64   // chat tool_calls index of the open call
	callID  []byte   // its call_id, escaped
	name    []byte   // its name, escaped
	args    []byte   // its arguments, escaped
	output  []byte   // the finished items, comma separated
	finish  string   // the chat finish reason
	u       providers.Usage
	scratch []byte
}

type itemKind uint8

const (
	itemNone itemKind = iota
	itemMessage
	itemCall
)

var responsesEncoderPool = sync.Pool{New: func() any { return new(ResponsesEncoder) }}

// NewResponsesEncoder returns an encoder for an answer from model to the
// request requestID (which names the response and its items), created at
// unix second created.
func NewResponsesEncoder(model, requestID string, created int64) *ResponsesEncoder {
	e := responsesEncoderPool.Get().(*ResponsesEncoder)
	*e = ResponsesEncoder{model: model, id: trimRespPrefix(requestID), created: created,
		text: e.text[:0], callID: e.callID[:0], name: e.name[:0], args: e.args[:0], output: e.output[:0], scratch: e.scratch[:0]}
	return e
}

// Release returns the encoder to its pool; it must not be used after.
func (e *ResponsesEncoder) Release() {
	if cap(e.text)+cap(e.args)+cap(e.output) > 256<<10 {
		e.text, e.args, e.output = nil, nil, nil
	}
	responsesEncoderPool.Put(e)
}

// Usage returns the usage the chat events reported.
func (e *ResponsesEncoder) Usage() providers.Usage { return e.u }

// Closed reports whether the terminal event (or an error event) was
// written: nothing more will be.
func (e *ResponsesEncoder) Closed() bool { return e.closed }

// Events translates a buffer of whole chat SSE events (one Stream.Event
// call's output). A trailing incomplete event is an error.
func (e *ResponsesEncoder) Events(dst, events []byte) ([]byte, error) {
	for len(events) > 0 {
		n := bytes.Index(events, []byte("\n\n"))
		if n < 0 {
			return dst, fmt.Errorf("encode responses stream: %w: incomplete event", providers.ErrMalformed)
		}
		var err error
		if dst, err = e.Event(dst, events[:n+2]); err != nil {
			return dst, err
		}
		events = events[n+2:]
	}
	return dst, nil
}

// Event translates one chat SSE event. "[DONE]" writes the closing events;
// a chat error event becomes an error event.
func (e *ResponsesEncoder) Event(dst, ev []byte) ([]byte, error) {
	var data []byte
	_, data, e.scratch = sse.Parse(ev, e.scratch)
	if len(data) == 0 || e.closed {
		return dst, nil
	}
	if string(data) == "[DONE]" {
		return e.Finish(dst), nil
	}
	if !providers.ValidJSON(data) {
		return dst, fmt.Errorf("encode responses stream: %w: event is not JSON", providers.ErrMalformed)
	}
	var errObj, usage, choices string
	rawjson.EachMember(bytesString(data), func(k, v string, _ int) bool {
		switch rawjson.KeyName(k) {
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
		return e.Fail(dst, "upstream_error", gjson.Get(errObj, "message").String()), nil
	}
	if len(usage) > 0 && usage[0] == '{' {
		e.u = ParseUsage(usage)
	}
	if !e.started {
		dst = e.start(dst)
	}
	var choice string
	rawjson.EachElem(choices, func(_ int, c string) bool {
		choice = c
		return false
	})
	if choice == "" {
		return dst, nil
	}
	var delta, finish string
	rawjson.EachMember(choice, func(k, v string, _ int) bool {
		switch rawjson.KeyName(k) {
		case "delta":
			delta = v
		case "finish_reason":
			finish = v
		}
		return true
	})
	var content, refusal, calls string
	rawjson.EachMember(delta, func(k, v string, _ int) bool {
		switch rawjson.KeyName(k) {
		case "content":
			content = v
		case "refusal":
			refusal = v
		case "tool_calls":
			calls = v
		}
		return true
	})
	for _, t := range [...]string{content, refusal} {
		if rawjson.IsString(t) && len(t) > 2 {
			dst = e.textDelta(dst, rawjson.Inner(t))
		}
	}
	rawjson.EachElem(calls, func(_ int, tc string) bool {
		dst = e.toolCall(dst, tc)
		return true
	})
	if rawjson.IsString(finish) {
		e.finish = rawjson.Inner(finish)
		dst = e.closeItem(dst)
	}
	return dst, nil
}

// Finish writes the closing events (closing the open item first) unless
// they were written; use it when the upstream completed without "[DONE]".
func (e *ResponsesEncoder) Finish(dst []byte) []byte {
	if e.closed {
		return dst
	}
	if !e.started {
		dst = e.start(dst)
	}
	dst = e.closeItem(dst)
	e.closed = true
	status, reason := statusOf(e.finish)
	typ := "response.completed"
	if status == "incomplete" {
		typ = "response.incomplete"
	}
	dst = e.head(dst, typ)
	dst = append(dst, `,"response":`...)
	dst = appendResponseObject(dst, e.id, e.model, e.created, status, reason, e.output, &e.u)
	return append(dst, "}\n\n"...)
}

// Fail writes an error event for a failure after the stream started, in
// the shape of the gateway's own Responses error events; nothing is
// written after it.
func (e *ResponsesEncoder) Fail(dst []byte, code, message string) []byte {
	e.closed = true
	dst = append(dst, "event: error\ndata: {\"type\":\"error\",\"code\":"...)
	dst = rawjson.AppendString(dst, code)
	dst = append(dst, `,"message":`...)
	dst = rawjson.AppendString(dst, message)
	dst = append(dst, `,"param":null,"sequence_number":`...)
	dst = strconv.AppendInt(dst, e.seq, 10)
	e.seq++
	return append(dst, "}\n\n"...)
}

// NextSequence returns the sequence number the next event would carry.
func (e *ResponsesEncoder) NextSequence() int64 { return e.seq }

// head appends an event's name line and its data up to the sequence
// number; the caller appends the rest of the object and "}\n\n".
func (e *ResponsesEncoder) head(dst []byte, typ string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, typ...)
	dst = append(dst, `","sequence_number":`...)
	dst = strconv.AppendInt(dst, e.seq, 10)
	e.seq++
	return dst
}

// start writes response.created and response.in_progress.
func (e *ResponsesEncoder) start(dst []byte) []byte {
	e.started = true
	for _, typ := range [...]string{"response.created", "response.in_progress"} {
		dst = e.head(dst, typ)
		dst = append(dst, `,"response":`...)
		dst = appendResponseObject(dst, e.id, e.model, e.created, "in_progress", "", nil, nil)
		dst = append(dst, "}\n\n"...)
	}
	return dst
}

// address appends the open item's item_id and output_index members.
func (e *ResponsesEncoder) address(dst []byte) []byte {
	dst = append(dst, `,"item_id":"`...)
	dst = e.itemID(dst)
	dst = append(dst, `","output_index":`...)
	return strconv.AppendInt(dst, int64(e.items-1), 10)
}

// itemID appends the open item's id.
func (e *ResponsesEncoder) itemID(dst []byte) []byte {
	prefix := "msg_"
	if e.kind == itemCall {
		prefix = "fc_"
	}
	return appendItemID(dst, prefix, e.id, e.items-1)
}

// appendItemID appends an output item's id: prefix, the response's id and
// the item's index.
func appendItemID(dst []byte, prefix, id string, index int) []byte {
	dst = append(dst, prefix...)
	dst = rawjson.AppendStringBody(dst, id)
	dst = append(dst, '_')
	return strconv.AppendInt(dst, int64(index), 10)
}

// open starts an item of kind k: response.output_item.added.
func (e *ResponsesEncoder) open(dst []byte, k itemKind) []byte {
	e.kind = k
	e.items++
	dst = e.head(dst, "response.output_item.added")
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(e.items-1), 10)
	dst = append(dst, `,"item":`...)
	dst = e.appendItem(dst, "in_progress")
	return append(dst, "}\n\n"...)
}

// appendItem appends the open item as it stands, with status.
func (e *ResponsesEncoder) appendItem(dst []byte, status string) []byte {
	dst = append(dst, `{"id":"`...)
	dst = e.itemID(dst)
	if e.kind == itemCall {
		dst = append(dst, `","type":"function_call","status":"`...)
		dst = append(dst, status...)
		dst = append(dst, `","arguments":"`...)
		if status != "in_progress" {
			dst = append(dst, e.args...)
		}
		dst = append(dst, `","call_id":"`...)
		dst = append(dst, e.callID...)
		dst = append(dst, `","name":"`...)
		dst = append(dst, e.name...)
		return append(dst, `"}`...)
	}
	dst = append(dst, `","type":"message","status":"`...)
	dst = append(dst, status...)
	dst = append(dst, `","role":"assistant","content":[`...)
	if status != "in_progress" {
		dst = appendTextPart(dst, e.text)
	}
	return append(dst, "]}"...)
}

// appendTextPart appends an output_text part of text (escaped).
func appendTextPart(dst, text []byte) []byte {
	dst = append(dst, `{"type":"output_text","annotations":[],"logprobs":[],"text":"`...)
	dst = append(dst, text...)
	return append(dst, `"}`...)
}

// textDelta writes a text delta (raw: escaped JSON string text), opening a
// message item and its part when needed.
func (e *ResponsesEncoder) textDelta(dst []byte, raw string) []byte {
	if e.kind != itemMessage {
		dst = e.closeItem(dst)
		dst = e.open(dst, itemMessage)
		dst = e.head(dst, "response.content_part.added")
		dst = e.address(dst)
		dst = append(dst, `,"content_index":0,"part":`...)
		dst = appendTextPart(dst, nil)
		dst = append(dst, "}\n\n"...)
	}
	e.text = append(e.text, raw...)
	dst = e.head(dst, "response.output_text.delta")
	dst = e.address(dst)
	dst = append(dst, `,"content_index":0,"delta":"`...)
	dst = append(dst, raw...)
	return append(dst, `","logprobs":[]}`+"\n\n"...)
}

// toolCall writes one tool_calls element: a new call opens a function_call
// item, argument fragments become response.function_call_arguments.delta.
func (e *ResponsesEncoder) toolCall(dst []byte, tc string) []byte {
	idx, _ := providers.Count(rawjson.Member(tc, "index")) // a bad index is 0
	id := rawjson.Member(tc, "id")
	fn := rawjson.Member(tc, "function")
	newID := rawjson.IsString(id) && len(id) > 2 && rawjson.Inner(id) != string(e.callID)
	if e.kind != itemCall || idx != e.callIdx || newID {
		dst = e.closeItem(dst)
		e.callIdx = idx
		e.callID = e.callID[:0]
		if rawjson.IsString(id) && len(id) > 2 {
			e.callID = append(e.callID, rawjson.Inner(id)...)
		} else {
			e.callID = append(e.callID, "call_"...)
			e.callID = strconv.AppendUint(e.callID, idx, 10)
		}
		e.name = append(e.name[:0], rawjson.Inner(rawjson.Member(fn, "name"))...)
		e.args = e.args[:0]
		dst = e.open(dst, itemCall)
	}
	args := rawjson.Member(fn, "arguments")
	if !rawjson.IsString(args) || len(args) == 2 {
		return dst
	}
	e.args = append(e.args, rawjson.Inner(args)...)
	dst = e.head(dst, "response.function_call_arguments.delta")
	dst = e.address(dst)
	dst = append(dst, `,"delta":`...)
	dst = append(dst, args...)
	return append(dst, "}\n\n"...)
}

// closeItem writes the closing events of the open item, if any, and adds
// it to the output.
func (e *ResponsesEncoder) closeItem(dst []byte) []byte {
	switch e.kind {
	case itemNone:
		return dst
	case itemMessage:
		dst = e.head(dst, "response.output_text.done")
		dst = e.address(dst)
		dst = append(dst, `,"content_index":0,"text":"`...)
		dst = append(dst, e.text...)
		dst = append(dst, `","logprobs":[]}`+"\n\n"...)
		dst = e.head(dst, "response.content_part.done")
		dst = e.address(dst)
		dst = append(dst, `,"content_index":0,"part":`...)
		dst = appendTextPart(dst, e.text)
		dst = append(dst, "}\n\n"...)
	case itemCall:
		if len(e.args) == 0 {
			e.args = append(e.args, "{}"...)
		}
		dst = e.head(dst, "response.function_call_arguments.done")
		dst = e.address(dst)
		dst = append(dst, `,"name":"`...)
		dst = append(dst, e.name...)
		dst = append(dst, `","arguments":"`...)
		dst = append(dst, e.args...)
		dst = append(dst, `"}`+"\n\n"...)
	}
	dst = e.head(dst, "response.output_item.done")
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(e.items-1), 10)
	dst = append(dst, `,"item":`...)
	n := len(dst)
	dst = e.appendItem(dst, "completed")
	if len(e.output) > 0 {
		e.output = append(e.output, ',')
	}
	e.output = append(e.output, dst[n:]...)
	dst = append(dst, "}\n\n"...)
	e.kind = itemNone
	e.text = e.text[:0]
	return dst
}

// statusOf maps a chat finish reason to the response's status and, when
// incomplete, the reason.
func statusOf(finish string) (status, reason string) {
	switch finish {
	case "length":
		return "incomplete", "max_output_tokens"
	case "content_filter":
		return "incomplete", "content_filter"
	}
	return "completed", ""
}

// appendResponseObject appends a response object: output is its items,
// comma separated, u its usage (nil: null).
func appendResponseObject(dst []byte, id, model string, created int64, status, reason string, output []byte, u *providers.Usage) []byte {
	dst = appendResponseHead(dst, id, model, created, status, reason)
	dst = append(dst, output...)
	return appendResponseTail(dst, u)
}

// appendResponseHead appends a response object up to the opening of its
// output array.
func appendResponseHead(dst []byte, id, model string, created int64, status, reason string) []byte {
	dst = append(dst, `{"id":"resp_`...)
	dst = rawjson.AppendStringBody(dst, id)
	dst = append(dst, `","object":"response","created_at":`...)
	dst = strconv.AppendInt(dst, created, 10)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, status...)
	dst = append(dst, `","background":false,"error":null,"incomplete_details":`...)
	if reason != "" {
		dst = append(dst, `{"reason":"`...)
		dst = append(dst, reason...)
		dst = append(dst, `"}`...)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"instructions":null,"max_output_tokens":null,"model":`...)
	dst = rawjson.AppendString(dst, model)
	return append(dst, `,"output":[`...)
}

// appendResponseTail closes the output array and the response object,
// with usage u (nil: null).
func appendResponseTail(dst []byte, u *providers.Usage) []byte {
	dst = append(dst, `],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":null,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":null,"truncation":"disabled","usage":`...)
	if u == nil || !u.Reported {
		dst = append(dst, "null"...)
	} else {
		dst = appendResponsesUsage(dst, *u)
	}
	return append(dst, `,"user":null,"metadata":{}}`...)
}

// appendResponsesUsage appends a Responses usage object.
func appendResponsesUsage(dst []byte, u providers.Usage) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendUint(dst, u.Prompt, 10)
	dst = append(dst, `,"input_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendUint(dst, min(u.Cached, u.Prompt), 10)
	dst = append(dst, `},"output_tokens":`...)
	dst = strconv.AppendUint(dst, u.Completion, 10)
	dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":`...)
	dst = strconv.AppendUint(dst, min(u.Reasoning, u.Completion), 10)
	dst = append(dst, `},"total_tokens":`...)
	dst = strconv.AppendUint(dst, u.Prompt+u.Completion, 10)
	return append(dst, '}')
}

// ResponseFromChat converts a chat.completion body (a translated target's
// answer, in the OpenAI format) into a Responses API response object,
// appended to dst: the text (content, else a refusal) as a message item,
// each tool call as a function_call item; reasoning is dropped. u is the
// usage the gateway bills, reported as the response's usage. A body that
// is not a chat.completion returns an error wrapping providers.ErrMalformed.
func ResponseFromChat(dst, body []byte, model, requestID string, created int64, u providers.Usage) ([]byte, error) {
	if !providers.ValidJSON(body) {
		return dst, fmt.Errorf("read chat completion: %w: body is not JSON", providers.ErrMalformed)
	}
	choice := gjson.GetBytes(body, "choices.0")
	if !choice.IsObject() {
		return dst, fmt.Errorf("read chat completion: %w: no choices", providers.ErrMalformed)
	}
	if cap(dst)-len(dst) < len(body)+1024 {
		dst = append(make([]byte, 0, len(dst)+len(body)+1024), dst...)
	}
	id := trimRespPrefix(requestID)
	msg := choice.Get("message")
	calls := msg.Get("tool_calls")
	hasCalls := calls.IsArray() && calls.Get("0").Exists()
	status, reason := statusOf(choice.Get("finish_reason").Str)
	out := appendResponseHead(dst, id, model, created, status, reason)
	// The message item, taken back out when it has no text and calls follow.
	mark := len(out)
	out = append(out, `{"id":"`...)
	out = appendItemID(out, "msg_", id, 0)
	out = append(out, `","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"`...)
	start := len(out)
	switch c := msg.Get("content"); {
	case c.Type == gjson.String:
		out = append(out, rawjson.Inner(c.Raw)...)
	case c.IsArray():
		c.ForEach(func(_, p gjson.Result) bool {
			if t := p.Get("text"); p.Get("type").Str == "text" && t.Type == gjson.String {
				out = append(out, rawjson.Inner(t.Raw)...)
			}
			return true
		})
	}
	if r := msg.Get("refusal"); len(out) == start && r.Type == gjson.String {
		out = append(out, rawjson.Inner(r.Raw)...)
	}
	n := 1
	if len(out) == start && hasCalls {
		out, n = out[:mark], 0
	} else {
		out = append(out, `"}]}`...)
	}
	calls.ForEach(func(_, tc gjson.Result) bool {
		if !tc.IsObject() {
			return true
		}
		if n > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"id":"`...)
		out = appendItemID(out, "fc_", id, n)
		out = append(out, `","type":"function_call","status":"completed","arguments":`...)
		args := tc.Get("function.arguments")
		if args.Type != gjson.String || strings.TrimSpace(rawjson.Inner(args.Raw)) == "" {
			out = append(out, `"{}"`...)
		} else {
			out = append(out, args.Raw...)
		}
		out = append(out, `,"call_id":`...)
		if cid := tc.Get("id"); cid.Type == gjson.String && cid.Str != "" {
			out = append(out, cid.Raw...)
		} else {
			out = append(out, `"call_`...)
			out = strconv.AppendInt(out, int64(n), 10)
			out = append(out, '"')
		}
		out = append(out, `,"name":`...)
		out = rawjson.AppendString(out, tc.Get("function.name").Str)
		out = append(out, '}')
		n++
		return true
	})
	return appendResponseTail(out, &u), nil
}
