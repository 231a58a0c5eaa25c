package openai

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/rawjson"
)

// This file translates a Responses API request (POST /v1/responses) into a
// chat completions request for a target whose server does not speak the
// Responses API (anthropic, gemini, bedrock, and the OpenAI-compatible
// presets without it): each kind's own chat translation then applies. The
// answer comes back through ResponseFromChat and ResponsesEncoder. The
// rules are in the package documentation (doc.go).

// responsesRequest holds the top-level members of a Responses request.
type responsesRequest struct {
	model, instructions, input, stream, tools, choice, parallel gjson.Result
	maxOutput, temperature, topP, reasoning, text, metadata     gjson.Result
	user, safetyID, store, previous, conversation, prompt, mock gjson.Result
}

// RequestFromResponses converts a Responses API request body, valid JSON
// and UTF-8 (the gateway checked it), into an OpenAI chat completions body
// appended to dst. A streamed request asks for the usage chunk. The
// reasoning effort, when there is one, is the body's last member, written
// from effortAt on: out[:effortAt] + "}" is the translation without it,
// for kinds that have none (effortAt is -1 when there is none). Input that
// cannot be expressed, and the stateful parameters a translated target
// cannot keep, return a *providers.ParamError naming the parameter.
func RequestFromResponses(dst, body []byte) (out []byte, effortAt int, err error) {
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return dst, -1, paramErr("body", "must be a JSON object")
	}
	var r responsesRequest
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "model":
			r.model = v
		case "instructions":
			r.instructions = v
		case "input":
			r.input = v
		case "stream":
			r.stream = v
		case "tools":
			r.tools = v
		case "tool_choice":
			r.choice = v
		case "parallel_tool_calls":
			r.parallel = v
		case "max_output_tokens":
			r.maxOutput = v
		case "temperature":
			r.temperature = v
		case "top_p":
			r.topP = v
		case "reasoning":
			r.reasoning = v
		case "text":
			r.text = v
		case "metadata":
			r.metadata = v
		case "user":
			r.user = v
		case "safety_identifier":
			r.safetyID = v
		case "store":
			r.store = v
		case "previous_response_id":
			r.previous = v
		case "conversation":
			r.conversation = v
		case "prompt":
			r.prompt = v
		case "mock":
			r.mock = v
		}
		return true
	})
	if err := checkStateless(&r); err != nil {
		return dst, -1, err
	}
	if r.model.Type != gjson.String || r.model.Str == "" {
		return dst, -1, paramErr("model", "a model name is required")
	}
	effort, err := responsesEffort(r.reasoning)
	if err != nil {
		return dst, -1, err
	}
	out = append(dst, `{"model":`...)
	out = append(out, r.model.Raw...)
	out = append(out, `,"messages":[`...)
	w := chatWriter{dst: out}
	if err := w.system(r.instructions, r.input); err != nil {
		return w.dst, -1, err
	}
	if err := w.items(r.input); err != nil {
		return w.dst, -1, err
	}
	out = append(w.dst, ']')
	if w.n == 0 {
		return out, -1, paramErr("input", "the request has no input")
	}
	if isNumber(r.maxOutput) {
		out = append(out, `,"max_tokens":`...)
		out = append(out, r.maxOutput.Raw...)
	}
	if r.stream.Type == gjson.True {
		out = append(out, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	if isNumber(r.temperature) {
		out = append(out, `,"temperature":`...)
		out = append(out, r.temperature.Raw...)
	}
	if isNumber(r.topP) {
		out = append(out, `,"top_p":`...)
		out = append(out, r.topP.Raw...)
	}
	if out, err = appendChatTools(out, r.tools, r.choice, r.parallel); err != nil {
		return out, -1, err
	}
	if out, err = appendTextFormat(out, r.text.Get("format")); err != nil {
		return out, -1, err
	}
	if r.metadata.IsObject() {
		out = append(out, `,"metadata":`...)
		out = append(out, r.metadata.Raw...)
	}
	if u := r.user; u.Type == gjson.String && u.Str != "" {
		out = append(out, `,"user":`...)
		out = append(out, u.Raw...)
	} else if u := r.safetyID; u.Type == gjson.String && u.Str != "" {
		out = append(out, `,"user":`...)
		out = append(out, u.Raw...)
	}
	if r.mock.IsObject() {
		out = append(out, `,"mock":`...)
		out = append(out, r.mock.Raw...)
	}
	effortAt = -1
	if effort != "" { // last, so that it can be cut off
		effortAt = len(out)
		out = append(out, `,"reasoning_effort":"`...)
		out = append(out, effort...)
		out = append(out, '"')
	}
	return append(out, '}'), effortAt, nil
}

// checkStateless refuses what needs the provider's storage of responses
// and conversations, which a translated target does not have.
func checkStateless(r *responsesRequest) error {
	switch {
	case r.store.Type == gjson.True:
		return paramErr("store", "this model is served by translation to chat completions, which cannot store responses; send store: false (or leave it out) and keep the conversation on the client")
	case present(r.previous):
		return paramErr("previous_response_id", "this model is served by translation to chat completions, which keeps no earlier responses; send the whole conversation as input items instead")
	case present(r.conversation):
		return paramErr("conversation", "this model is served by translation to chat completions, which keeps no conversations; send the whole conversation as input items instead")
	case present(r.prompt):
		return paramErr("prompt", "this model is served by translation to chat completions, which has no stored prompts; send instructions and input instead")
	}
	return nil
}

// present reports whether a member is set to something other than null.
func present(v gjson.Result) bool { return v.Exists() && v.Type != gjson.Null }

// isNumber reports whether v is a JSON number.
func isNumber(v gjson.Result) bool { return v.Type == gjson.Number }

func paramErr(param, format string, args ...any) error {
	return &providers.ParamError{Param: param, Message: fmt.Sprintf(format, args...)}
}

// responsesEffort maps reasoning.effort to a chat reasoning_effort: none,
// minimal, low, medium and high as they are, xhigh to high (the highest
// level the chat translations know); null or absent is the target's
// default. reasoning.summary and generate_summary are dropped: reasoning
// text is not returned by translated targets.
func responsesEffort(reasoning gjson.Result) (string, error) {
	if !present(reasoning) {
		return "", nil
	}
	if !reasoning.IsObject() {
		return "", paramErr("reasoning", "must be an object")
	}
	e := reasoning.Get("effort")
	if !present(e) {
		return "", nil
	}
	switch e.Str {
	case "none", "minimal", "low", "medium", "high":
		return e.Str, nil
	case "xhigh":
		return "high", nil
	}
	return "", paramErr("reasoning.effort", "must be none, minimal, low, medium, high or xhigh, not %s", e.Raw)
}

// chatWriter writes chat messages. An assistant turn is written as items
// arrive: its text (assistant messages) and tool calls (function_call
// items) gather until an item of another kind ends it.
type chatWriter struct {
	dst   []byte
	n     int    // messages written
	text  []byte // the open assistant turn's text, escaped
	calls []byte // its tool calls, comma separated
	open  bool   // an assistant turn is open
}

// begin starts a message with its role, ready for more members.
func (w *chatWriter) begin(role string) {
	if w.n > 0 {
		w.dst = append(w.dst, ',')
	}
	w.n++
	w.dst = append(w.dst, `{"role":"`...)
	w.dst = append(w.dst, role...)
	w.dst = append(w.dst, '"')
}

// system writes one system message first: instructions, then the text of
// every system and developer message of the input, in order, joined by
// blank lines (chat templates of OpenAI-compatible servers take a system
// message only first; each kind folds it into its own instruction).
func (w *chatWriter) system(instructions, input gjson.Result) error {
	n := 0
	add := func(raw string) {
		if !rawjson.IsString(raw) || raw == `""` {
			return
		}
		if n == 0 {
			w.begin("system")
			w.dst = append(w.dst, `,"content":"`...)
		} else {
			w.dst = append(w.dst, `\n\n`...)
		}
		n++
		w.dst = append(w.dst, rawjson.Inner(raw)...)
	}
	switch {
	case !present(instructions):
	case instructions.Type == gjson.String:
		add(instructions.Raw)
	default:
		return paramErr("instructions", "must be a string")
	}
	var err error
	if input.IsArray() {
		i := -1
		input.ForEach(func(_, item gjson.Result) bool {
			i++
			if role := item.Get("role").Str; itemType(item) != "message" || role != "system" && role != "developer" {
				return true
			}
			err = eachText(item.Get("content"), i, add)
			return err == nil
		})
	}
	if n > 0 {
		w.dst = append(w.dst, `"}`...)
	}
	return err
}

// eachText calls add with each text of the content of system message i (a
// string, or input_text parts); other parts are refused.
func eachText(content gjson.Result, i int, add func(raw string)) error {
	if content.Type == gjson.String {
		add(content.Raw)
		return nil
	}
	if !content.IsArray() {
		return paramErr(fmt.Sprintf("input[%d].content", i), "must be a string or an array of content parts")
	}
	var err error
	j := -1
	content.ForEach(func(_, p gjson.Result) bool {
		j++
		switch p.Get("type").Str {
		case "input_text", "text", "output_text":
			add(rawjson.Member(p.Raw, "text"))
		default:
			err = paramErr(fmt.Sprintf("input[%d].content[%d]", i, j), "only text parts are supported in system and developer messages")
		}
		return err == nil
	})
	return err
}

// itemType is an input item's type; an item with a role and no type is a
// message (the easy input message form).
func itemType(item gjson.Result) string {
	if t := item.Get("type"); t.Exists() {
		return t.Str
	}
	if item.Get("role").Exists() {
		return "message"
	}
	return ""
}

// items writes the conversation: a string input is one user message.
func (w *chatWriter) items(input gjson.Result) error {
	switch {
	case input.Type == gjson.String:
		w.begin("user")
		w.dst = append(w.dst, `,"content":`...)
		w.dst = append(w.dst, input.Raw...)
		w.dst = append(w.dst, '}')
		return nil
	case !present(input):
		return paramErr("input", "input is required")
	case !input.IsArray():
		return paramErr("input", "must be a string or an array of input items")
	}
	var err error
	i := -1
	input.ForEach(func(_, item gjson.Result) bool {
		i++
		err = w.item(item, i)
		return err == nil
	})
	w.closeAssistant()
	return err
}

// item writes input item i.
func (w *chatWriter) item(item gjson.Result, i int) error {
	if !item.IsObject() {
		return paramErr(fmt.Sprintf("input[%d]", i), "must be an object")
	}
	switch typ := itemType(item); typ {
	case "message":
		switch role := item.Get("role").Str; role {
		case "system", "developer": // in the system message
			return nil
		case "user":
			w.closeAssistant()
			return w.user(item.Get("content"), i)
		case "assistant":
			return w.assistantText(item.Get("content"), i)
		default:
			return paramErr(fmt.Sprintf("input[%d].role", i), "role must be user, assistant, system or developer, not %q", role)
		}
	case "function_call":
		return w.functionCall(item, i)
	case "function_call_output":
		w.closeAssistant()
		return w.functionOutput(item, i)
	case "reasoning": // dropped: a translated target cannot read another model's reasoning
		return nil
	case "item_reference":
		return paramErr(fmt.Sprintf("input[%d]", i), "item references need stored responses, which a model served by translation does not have; send the item itself")
	default:
		return paramErr(fmt.Sprintf("input[%d].type", i), "input item type %q is not supported on a model served by translation", typ)
	}
}

// user writes a user message: a string, or input_text, input_image and
// input_file parts.
func (w *chatWriter) user(content gjson.Result, i int) error {
	w.begin("user")
	w.dst = append(w.dst, `,"content":`...)
	if content.Type == gjson.String {
		w.dst = append(w.dst, content.Raw...)
		w.dst = append(w.dst, '}')
		return nil
	}
	if !content.IsArray() {
		return paramErr(fmt.Sprintf("input[%d].content", i), "must be a string or an array of content parts")
	}
	w.dst = append(w.dst, '[')
	var err error
	j := -1
	content.ForEach(func(_, p gjson.Result) bool {
		j++
		if j > 0 {
			w.dst = append(w.dst, ',')
		}
		err = w.part(p, i, j)
		return err == nil
	})
	w.dst = append(w.dst, "]}"...)
	return err
}

// part writes part j of user message i's content as a chat part. Texts
// are read as written (gjson would unescape them).
func (w *chatWriter) part(p gjson.Result, i, j int) error {
	param := func() string { return fmt.Sprintf("input[%d].content[%d]", i, j) }
	switch typ := p.Get("type").Str; typ {
	case "input_text", "text", "output_text":
		t := rawjson.Member(p.Raw, "text")
		if !rawjson.IsString(t) {
			return paramErr(param()+".text", "must be a string")
		}
		w.dst = append(w.dst, `{"type":"text","text":`...)
		w.dst = append(w.dst, t...)
		w.dst = append(w.dst, '}')
	case "input_image":
		u := p.Get("image_url")
		if u.Type != gjson.String || u.Str == "" {
			return paramErr(param(), "only images given by image_url (a data: or https: URL) are supported on a model served by translation, not file_id")
		}
		w.dst = append(w.dst, `{"type":"image_url","image_url":{"url":`...)
		w.dst = append(w.dst, u.Raw...)
		if d := p.Get("detail"); d.Type == gjson.String && d.Str != "" {
			w.dst = append(w.dst, `,"detail":`...)
			w.dst = append(w.dst, d.Raw...)
		}
		w.dst = append(w.dst, "}}"...)
	case "input_file":
		data := p.Get("file_data")
		if data.Type != gjson.String || data.Str == "" {
			return paramErr(param(), "only files given inline by file_data are supported on a model served by translation, not file_id or file_url")
		}
		w.dst = append(w.dst, `{"type":"file","file":{"file_data":`...)
		w.dst = append(w.dst, data.Raw...)
		if f := p.Get("filename"); f.Type == gjson.String {
			w.dst = append(w.dst, `,"filename":`...)
			w.dst = append(w.dst, f.Raw...)
		}
		w.dst = append(w.dst, "}}"...)
	default:
		return paramErr(param()+".type", "content part type %q is not supported on a model served by translation", typ)
	}
	return nil
}

// assistantText adds an assistant message's text (a string, or
// output_text and refusal parts) to the open assistant turn.
func (w *chatWriter) assistantText(content gjson.Result, i int) error {
	w.open = true
	add := func(raw string) {
		if rawjson.IsString(raw) {
			w.text = append(w.text, rawjson.Inner(raw)...)
		}
	}
	if content.Type == gjson.String {
		add(content.Raw)
		return nil
	}
	if !content.IsArray() {
		return paramErr(fmt.Sprintf("input[%d].content", i), "must be a string or an array of content parts")
	}
	var err error
	j := -1
	content.ForEach(func(_, p gjson.Result) bool {
		j++
		switch typ := p.Get("type").Str; typ {
		case "output_text", "input_text", "text":
			add(rawjson.Member(p.Raw, "text"))
		case "refusal":
			add(p.Get("refusal").Raw)
		default:
			err = paramErr(fmt.Sprintf("input[%d].content[%d].type", i, j), "assistant content part type %q is not supported", typ)
		}
		return err == nil
	})
	return err
}

// functionCall adds a function_call item to the open assistant turn as a
// tool call (a namespaced call keeps its name alone).
func (w *chatWriter) functionCall(item gjson.Result, i int) error {
	id, name := item.Get("call_id"), item.Get("name")
	args := rawjson.Member(item.Raw, "arguments") // as written: gjson would unescape it
	switch {
	case id.Type != gjson.String || id.Str == "":
		return paramErr(fmt.Sprintf("input[%d].call_id", i), "a function call needs a call_id")
	case name.Type != gjson.String || name.Str == "":
		return paramErr(fmt.Sprintf("input[%d].name", i), "a function call needs a name")
	case args != "" && args != "null" && !rawjson.IsString(args):
		return paramErr(fmt.Sprintf("input[%d].arguments", i), "must be a string")
	}
	w.open = true
	if len(w.calls) > 0 {
		w.calls = append(w.calls, ',')
	}
	w.calls = append(w.calls, `{"id":`...)
	w.calls = append(w.calls, id.Raw...)
	w.calls = append(w.calls, `,"type":"function","function":{"name":`...)
	w.calls = append(w.calls, name.Raw...)
	w.calls = append(w.calls, `,"arguments":`...)
	if len(args) <= 2 || args == "null" {
		w.calls = append(w.calls, `"{}"`...)
	} else {
		w.calls = append(w.calls, args...)
	}
	w.calls = append(w.calls, "}}"...)
	return nil
}

// closeAssistant writes the open assistant turn, if any.
func (w *chatWriter) closeAssistant() {
	if !w.open {
		return
	}
	w.begin("assistant")
	if len(w.text) > 0 {
		w.dst = append(w.dst, `,"content":"`...)
		w.dst = append(w.dst, w.text...)
		w.dst = append(w.dst, '"')
	} else {
		w.dst = append(w.dst, `,"content":null`...)
	}
	if len(w.calls) > 0 {
		w.dst = append(w.dst, `,"tool_calls":[`...)
		w.dst = append(w.dst, w.calls...)
		w.dst = append(w.dst, ']')
	}
	w.dst = append(w.dst, '}')
	w.open, w.text, w.calls = false, w.text[:0], w.calls[:0]
}

// functionOutput writes a function_call_output item as a tool message: its
// output string, or the text of its input_text parts joined by newlines
// (chat tool messages carry text only).
func (w *chatWriter) functionOutput(item gjson.Result, i int) error {
	id := item.Get("call_id")
	if id.Type != gjson.String || id.Str == "" {
		return paramErr(fmt.Sprintf("input[%d].call_id", i), "a function call output needs a call_id")
	}
	w.begin("tool")
	w.dst = append(w.dst, `,"tool_call_id":`...)
	w.dst = append(w.dst, id.Raw...)
	w.dst = append(w.dst, `,"content":`...)
	out := rawjson.Member(item.Raw, "output") // as written: gjson would unescape it
	switch {
	case rawjson.IsString(out):
		w.dst = append(w.dst, out...)
	case len(out) > 0 && out[0] == '[':
		w.dst = append(w.dst, '"')
		var err error
		n, j := 0, -1
		gjson.Parse(out).ForEach(func(_, p gjson.Result) bool {
			j++
			switch typ := p.Get("type").Str; typ {
			case "input_text", "output_text", "text":
				if n > 0 {
					w.dst = append(w.dst, `\n`...)
				}
				n++
				w.dst = append(w.dst, rawjson.Inner(rawjson.Member(p.Raw, "text"))...)
			default:
				err = paramErr(fmt.Sprintf("input[%d].output[%d].type", i, j), "only text parts are supported in a function call output on a model served by translation, not %q", typ)
			}
			return err == nil
		})
		w.dst = append(w.dst, '"')
		if err != nil {
			return err
		}
	default:
		return paramErr(fmt.Sprintf("input[%d].output", i), "must be a string or an array of content parts")
	}
	w.dst = append(w.dst, '}')
	return nil
}

// appendChatTools maps function tools, tool_choice and parallel_tool_calls.
// Tool groups (type namespace) are dropped; built-in tools (web_search,
// file_search, code_interpreter, ...) run on OpenAI's servers only and are
// refused.
func appendChatTools(dst []byte, tools, choice, parallel gjson.Result) ([]byte, error) {
	if present(tools) && !tools.IsArray() {
		return dst, paramErr("tools", "must be an array")
	}
	var err error
	n, i := 0, -1
	tools.ForEach(func(_, t gjson.Result) bool {
		i++
		switch typ := t.Get("type").Str; typ {
		case "function":
		case "namespace":
			return true
		default:
			err = paramErr(fmt.Sprintf("tools[%d].type", i), "the built-in tool %q runs on OpenAI's servers only and is not available on a model served by translation; declare function tools only", typ)
			return false
		}
		name := t.Get("name")
		if name.Type != gjson.String || name.Str == "" {
			err = paramErr(fmt.Sprintf("tools[%d].name", i), "a function tool needs a name")
			return false
		}
		if n == 0 {
			dst = append(dst, `,"tools":[`...)
		} else {
			dst = append(dst, ',')
		}
		n++
		dst = append(dst, `{"type":"function","function":{"name":`...)
		dst = append(dst, name.Raw...)
		if d := t.Get("description"); d.Type == gjson.String {
			dst = append(dst, `,"description":`...)
			dst = append(dst, d.Raw...)
		}
		if p := t.Get("parameters"); p.IsObject() {
			dst = append(dst, `,"parameters":`...)
			dst = append(dst, p.Raw...)
		}
		if s := t.Get("strict"); s.Type == gjson.True {
			dst = append(dst, `,"strict":true`...)
		}
		dst = append(dst, "}}"...)
		return true
	})
	if err != nil || n == 0 {
		return dst, err
	}
	dst = append(dst, ']')
	switch {
	case !present(choice):
	case choice.Type == gjson.String:
		switch choice.Str {
		case "auto", "none", "required":
			dst = append(dst, `,"tool_choice":`...)
			dst = append(dst, choice.Raw...)
		default:
			return dst, paramErr("tool_choice", "must be auto, none, required or a function, not %s", choice.Raw)
		}
	case choice.IsObject() && choice.Get("type").Str == "function":
		name := choice.Get("name")
		if name.Type != gjson.String || name.Str == "" {
			return dst, paramErr("tool_choice.name", "must name a function")
		}
		dst = append(dst, `,"tool_choice":{"type":"function","function":{"name":`...)
		dst = append(dst, name.Raw...)
		dst = append(dst, "}}"...)
	default:
		return dst, paramErr("tool_choice", "only auto, none, required and a function are supported on a model served by translation")
	}
	if parallel.Type == gjson.False {
		dst = append(dst, `,"parallel_tool_calls":false`...)
	}
	return dst, nil
}

// appendTextFormat maps text.format to response_format: json_schema (name,
// schema, strict) and json_object as they are; text is the default.
func appendTextFormat(dst []byte, format gjson.Result) ([]byte, error) {
	if !present(format) {
		return dst, nil
	}
	switch typ := format.Get("type").Str; typ {
	case "text":
		return dst, nil
	case "json_object":
		return append(dst, `,"response_format":{"type":"json_object"}`...), nil
	case "json_schema":
		s := format.Get("schema")
		if !s.IsObject() {
			return dst, paramErr("text.format.schema", "a json_schema format needs a schema object")
		}
		dst = append(dst, `,"response_format":{"type":"json_schema","json_schema":{"name":`...)
		if n := format.Get("name"); n.Type == gjson.String && n.Str != "" {
			dst = append(dst, n.Raw...)
		} else {
			dst = append(dst, `"output"`...)
		}
		if d := format.Get("description"); d.Type == gjson.String {
			dst = append(dst, `,"description":`...)
			dst = append(dst, d.Raw...)
		}
		if st := format.Get("strict"); st.Type == gjson.True || st.Type == gjson.False {
			dst = append(dst, `,"strict":`...)
			dst = append(dst, st.Raw...)
		}
		dst = append(dst, `,"schema":`...)
		dst = append(dst, s.Raw...)
		return append(dst, "}}"...), nil
	default:
		return dst, paramErr("text.format.type", "must be text, json_object or json_schema, not %q", typ)
	}
}

// trimRespPrefix strips the gateway's request id prefix for item ids.
func trimRespPrefix(id string) string { return strings.TrimPrefix(id, "req_") }

// ResponsesParam names, in the Responses API request, the member a chat
// parameter of its translation came from, for the errors of a target that
// refuses the translation: response_format is text.format, max_tokens
// max_output_tokens, reasoning_effort reasoning.effort, a message (and
// anything inside one) input, a tool tools (the translation drops tool
// groups, so indexes differ); other names are the same in both.
func ResponsesParam(chat string) string {
	name, _, _ := strings.Cut(chat, ".")
	name, _, _ = strings.Cut(name, "[")
	switch name {
	case "response_format":
		return "text.format"
	case "max_tokens", "max_completion_tokens":
		return "max_output_tokens"
	case "reasoning_effort":
		return "reasoning.effort"
	case "messages":
		return "input"
	case "tools":
		return "tools"
	}
	return chat
}
