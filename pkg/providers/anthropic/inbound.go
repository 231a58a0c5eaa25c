package anthropic

import (
	"fmt"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
)

// This file translates the gateway's inbound Anthropic format (POST
// /v1/messages from Claude Code and the Anthropic SDKs) to the OpenAI
// format every provider speaks, and answers back. The rules are in the
// package documentation.

// messagesRequest holds the top-level members of a Messages request.
type messagesRequest struct {
	model, maxTokens, system, messages, stream       gjson.Result
	stop, temperature, topP, tools, choice, metadata gjson.Result
	mcpServers, mock, thinking, outputConfig         gjson.Result
}

// RequestToOpenAI converts an Anthropic Messages request body into an
// OpenAI chat request body, appended to dst. It returns the model name and
// the stream flag too. A streamed request asks for the usage chunk. Input
// that cannot be expressed returns a *providers.ParamError; a body that is
// not a JSON object returns an error wrapping providers.ErrMalformed.
func RequestToOpenAI(dst, body []byte) (out []byte, model string, stream bool, err error) {
	if !providers.ValidJSON(body) {
		return dst, "", false, fmt.Errorf("read messages request: %w: body is not valid JSON", providers.ErrMalformed)
	}
	root := gjson.Parse(bytesString(body))
	if !root.IsObject() {
		return dst, "", false, fmt.Errorf("read messages request: %w: body is not a JSON object", providers.ErrMalformed)
	}
	var r messagesRequest
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "model":
			r.model = v
		case "max_tokens":
			r.maxTokens = v
		case "system":
			r.system = v
		case "messages":
			r.messages = v
		case "stream":
			r.stream = v
		case "stop_sequences":
			r.stop = v
		case "temperature":
			r.temperature = v
		case "top_p":
			r.topP = v
		case "tools":
			r.tools = v
		case "tool_choice":
			r.choice = v
		case "metadata":
			r.metadata = v
		case "mcp_servers":
			r.mcpServers = v
		case "mock":
			r.mock = v
		case "thinking":
			r.thinking = v
		case "output_config":
			r.outputConfig = v
		}
		return true
	})
	switch {
	case r.model.Type != gjson.String || r.model.Str == "":
		return dst, "", false, paramErr("model", "a model name is required")
	case !r.messages.IsArray():
		return dst, "", false, paramErr("messages", "must be an array")
	case r.mcpServers.IsArray() && r.mcpServers.Get("0").Exists():
		return dst, "", false, paramErr("mcp_servers", "MCP servers are not supported by this gateway")
	}
	stream = r.stream.Type == gjson.True
	out = append(dst, `{"model":`...)
	out = rawjson.AppendRawString(out, r.model.Raw)
	out = append(out, `,"messages":[`...)
	effort, err := reasoningEffort(r.thinking, r.outputConfig.Get("effort"))
	if err != nil {
		return out, "", false, err
	}
	w := oaMessages{dst: out}
	if err = w.system(r.system, r.messages); err == nil {
		err = w.messages(r.messages)
	}
	out = append(w.dst, ']')
	if err != nil {
		return out, "", false, err
	}
	if r.maxTokens.Type == gjson.Number {
		out = append(out, `,"max_tokens":`...)
		out = append(out, r.maxTokens.Raw...)
	}
	if stream {
		out = append(out, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	for _, f := range [...]struct {
		key string
		v   gjson.Result
	}{{"temperature", r.temperature}, {"top_p", r.topP}} {
		if f.v.Type == gjson.Number {
			out = append(out, ',', '"')
			out = append(out, f.key...)
			out = append(out, '"', ':')
			out = append(out, f.v.Raw...)
		}
	}
	if out, err = appendStop(out, r.stop); err != nil {
		return out, "", false, err
	}
	if out, err = appendOpenAITools(out, r.tools, r.choice); err != nil {
		return out, "", false, err
	}
	if u := r.metadata.Get("user_id"); u.Type == gjson.String && u.Str != "" {
		out = append(out, `,"user":`...)
		out = rawjson.AppendRawString(out, u.Raw)
	}
	if out, err = appendResponseFormat(out, r.outputConfig.Get("format")); err != nil {
		return out, "", false, err
	}
	if r.mock.IsObject() {
		out = append(out, `,"mock":`...)
		out = rawjson.AppendRaw(out, r.mock.Raw)
	}
	if effort != "" { // last, for DropReasoningEffort
		out = append(out, effortKey...)
		out = append(out, effort...)
		out = append(out, '"')
	}
	return append(out, '}'), r.model.Str, stream, nil
}

// effortKey opens the reasoning_effort member RequestToOpenAI writes last.
const effortKey = `,"reasoning_effort":"`

// reasoningEffort picks the OpenAI reasoning_effort for a Messages
// request's thinking and output_config.effort: the effort when given (max
// becomes high, OpenAI's highest common level), else for thinking enabled
// with a budget, the level whose budget the outbound translation uses
// (below 4096 low, below 16384 medium, else high). Adaptive thinking
// without an effort, disabled thinking and no thinking without an effort
// give "" (no reasoning_effort: the target's default).
func reasoningEffort(thinking, effort gjson.Result) (string, error) {
	typ := ""
	if thinking.Exists() && thinking.Type != gjson.Null {
		if !thinking.IsObject() {
			return "", paramErr("thinking", "must be an object")
		}
		switch typ = thinking.Get("type").Str; typ {
		case "enabled", "adaptive", "disabled":
		default:
			return "", paramErr("thinking.type", "must be enabled, adaptive or disabled, not %q", typ)
		}
	}
	level := ""
	if effort.Exists() && effort.Type != gjson.Null {
		switch effort.Str {
		case "low", "medium", "high":
			level = effort.Str
		case "max":
			level = "high"
		default:
			return "", paramErr("output_config.effort", "must be low, medium, high or max, not %s", effort.Raw)
		}
	}
	switch {
	case typ == "disabled":
		return "", nil
	case level != "" || typ != "enabled":
		return level, nil
	}
	switch b := thinking.Get("budget_tokens").Int(); {
	case b < 4096:
		return "low", nil
	case b < 16384:
		return "medium", nil
	}
	return "high", nil
}

// DropReasoningEffort appends to dst a translation RequestToOpenAI wrote
// without its reasoning_effort member, for a target kind that has no
// reasoning effort (registry.Kind.ReasoningEffort). ok is false, and dst
// returned unchanged, when oa has none.
func DropReasoningEffort(dst, oa []byte) (out []byte, ok bool) {
	for _, level := range [...]string{"low", "medium", "high"} {
		n := len(oa) - len(effortKey) - len(level) - 2 // `"}` closes it
		if n > 0 && string(oa[n:n+len(effortKey)]) == effortKey && string(oa[n+len(effortKey):len(oa)-2]) == level && string(oa[len(oa)-2:]) == `"}` {
			return append(append(dst, oa[:n]...), '}'), true
		}
	}
	return dst, false
}

// appendResponseFormat maps output_config.format (structured outputs) to
// response_format json_schema.
func appendResponseFormat(dst []byte, format gjson.Result) ([]byte, error) {
	if !format.Exists() || format.Type == gjson.Null {
		return dst, nil
	}
	s := format.Get("schema")
	if format.Get("type").Str != "json_schema" || !s.IsObject() {
		return dst, paramErr("output_config.format", "must be a json_schema format with a schema object")
	}
	dst = append(dst, `,"response_format":{"type":"json_schema","json_schema":{"name":"output","strict":true,"schema":`...)
	dst = rawjson.AppendRaw(dst, s.Raw)
	return append(dst, "}}"...), nil
}

// oaMessages writes OpenAI messages.
type oaMessages struct {
	dst []byte
	n   int
}

// begin starts a message object with its role, ready for more members.
func (w *oaMessages) begin(role string) {
	if w.n > 0 {
		w.dst = append(w.dst, ',')
	}
	w.n++
	w.dst = append(w.dst, `{"role":"`...)
	w.dst = append(w.dst, role...)
	w.dst = append(w.dst, '"')
}

// system writes one system message: the system prompt (a string or text
// blocks), then the system-role messages of the conversation, in order,
// joined by blank lines. OpenAI-compatible servers whose chat templates
// take a system message only first accept it so.
func (w *oaMessages) system(sys, msgs gjson.Result) error {
	j := sysJoin{w: w}
	switch {
	case !sys.Exists() || sys.Type == gjson.Null:
	case sys.Type == gjson.String:
		j.add(sys)
	case sys.IsArray():
		if err := j.blocks(sys, "system"); err != nil {
			return err
		}
	default:
		return paramErr("system", "must be a string or an array of text blocks")
	}
	var err error
	i := -1
	msgs.ForEach(func(_, m gjson.Result) bool {
		i++
		if m.Get("role").Str != "system" {
			return true
		}
		switch c := m.Get("content"); {
		case c.Type == gjson.String:
			j.add(c)
		case c.IsArray():
			err = j.blocks(c, fmt.Sprintf("messages[%d].content", i))
		default:
			err = paramErr(fmt.Sprintf("messages[%d].content", i), "must be a string or an array of text blocks")
		}
		return err == nil
	})
	if j.n > 0 {
		w.dst = append(w.dst, `"}`...)
	}
	return err
}

// sysJoin joins texts into one system message.
type sysJoin struct {
	w *oaMessages
	n int
}

// add appends one text (a JSON string); empty texts are skipped.
func (j *sysJoin) add(t gjson.Result) {
	if t.Type != gjson.String || t.Raw == `""` {
		return
	}
	if j.n == 0 {
		j.w.begin("system")
		j.w.dst = append(j.w.dst, `,"content":"`...)
	} else {
		j.w.dst = append(j.w.dst, `\n\n`...)
	}
	j.n++
	j.w.dst = rawjson.AppendRawBody(j.w.dst, inner(t.Raw))
}

// blocks adds the text blocks of a block list named param; other blocks
// are refused.
func (j *sysJoin) blocks(list gjson.Result, param string) error {
	var err error
	k := -1
	list.ForEach(func(_, b gjson.Result) bool {
		k++
		if b.Get("type").Str != "text" {
			err = paramErr(fmt.Sprintf("%s[%d]", param, k), "only text blocks are supported in the system prompt")
			return false
		}
		j.add(b.Get("text"))
		return true
	})
	return err
}

// messages writes the conversation.
func (w *oaMessages) messages(msgs gjson.Result) error {
	var err error
	i := -1
	msgs.ForEach(func(_, m gjson.Result) bool {
		i++
		switch role := m.Get("role").Str; role {
		case "user":
			err = w.user(m.Get("content"), i)
		case "assistant":
			err = w.assistant(m.Get("content"), i)
		case "system": // folded into the system message
		default:
			err = paramErr(fmt.Sprintf("messages[%d].role", i), "role must be user, assistant or system, not %q", role)
		}
		return err == nil
	})
	return err
}

// user writes a user turn: its tool_result blocks first, as tool messages
// (OpenAI wants them right after the assistant's tool calls), then one user
// message with the images of those results and the other blocks.
func (w *oaMessages) user(content gjson.Result, i int) error {
	if content.Type == gjson.String {
		w.begin("user")
		w.dst = append(w.dst, `,"content":`...)
		w.dst = rawjson.AppendRawString(w.dst, content.Raw)
		w.dst = append(w.dst, '}')
		return nil
	}
	if !content.IsArray() {
		return paramErr(fmt.Sprintf("messages[%d].content", i), "must be a string or an array of blocks")
	}
	var err error
	j := -1
	content.ForEach(func(_, b gjson.Result) bool {
		j++
		if b.Get("type").Str == "tool_result" {
			err = w.toolResult(b, loc{i, j, -1})
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	parts := 0
	part := func() {
		if parts == 0 {
			w.begin("user")
			w.dst = append(w.dst, `,"content":[`...)
		} else {
			w.dst = append(w.dst, ',')
		}
		parts++
	}
	j = -1
	content.ForEach(func(_, b gjson.Result) bool {
		j++
		if b.Get("type").Str != "tool_result" {
			err = w.userBlock(b, loc{i, j, -1}, part)
			return err == nil
		}
		k := -1
		b.Get("content").ForEach(func(_, cb gjson.Result) bool {
			k++
			if cb.Get("type").Str == "image" {
				part()
				w.dst, err = appendImagePart(w.dst, cb, loc{i, j, k})
			}
			return err == nil
		})
		return err == nil
	})
	if err != nil {
		return err
	}
	if parts > 0 {
		w.dst = append(w.dst, "]}"...)
	}
	return nil
}

// userBlock writes one user content block as an OpenAI part; part opens it.
func (w *oaMessages) userBlock(b gjson.Result, at loc, part func()) error {
	var err error
	switch typ := b.Get("type").Str; typ {
	case "text":
		part()
		w.dst = append(w.dst, `{"type":"text","text":`...)
		w.dst = rawjson.AppendRawString(w.dst, b.Get("text").Raw)
		w.dst = append(w.dst, '}')
	case "image":
		part()
		w.dst, err = appendImagePart(w.dst, b, at)
	case "document":
		src := b.Get("source")
		switch src.Get("type").Str {
		case "base64":
			if mt := src.Get("media_type").Str; mt != "application/pdf" {
				return paramErr(at.param(""), "document media type %q is not supported", mt)
			}
			part()
			w.dst = append(w.dst, `{"type":"file","file":{"filename":"document.pdf","file_data":"data:application/pdf;base64,`...)
			w.dst = rawjson.AppendRawBody(w.dst, inner(src.Get("data").Raw))
			w.dst = append(w.dst, `"}}`...)
		case "text":
			part()
			w.dst = append(w.dst, `{"type":"text","text":`...)
			w.dst = rawjson.AppendRawString(w.dst, src.Get("data").Raw)
			w.dst = append(w.dst, '}')
		default:
			return paramErr(at.param(""), "only base64 PDF and text documents are supported")
		}
	default:
		return paramErr(at.param(""), "content block type %q is not supported by this gateway", typ)
	}
	return err
}

// loc locates a block for error messages: block j of message i's content,
// and block k of that tool result's content when k >= 0.
type loc struct{ i, j, k int }

// param names the located block, with suffix appended.
func (l loc) param(suffix string) string {
	p := fmt.Sprintf("messages[%d].content[%d]", l.i, l.j)
	if l.k >= 0 {
		p += fmt.Sprintf(".content[%d]", l.k)
	}
	return p + suffix
}

// appendImagePart appends an image_url part for an image block.
func appendImagePart(dst []byte, b gjson.Result, at loc) ([]byte, error) {
	src := b.Get("source")
	switch src.Get("type").Str {
	case "base64":
		dst = append(dst, `{"type":"image_url","image_url":{"url":"data:`...)
		dst = rawjson.AppendRawBody(dst, inner(src.Get("media_type").Raw))
		dst = append(dst, ";base64,"...)
		dst = rawjson.AppendRawBody(dst, inner(src.Get("data").Raw))
		return append(dst, `"}}`...), nil
	case "url":
		dst = append(dst, `{"type":"image_url","image_url":{"url":`...)
		dst = rawjson.AppendRawString(dst, src.Get("url").Raw)
		return append(dst, "}}"...), nil
	}
	return dst, paramErr(at.param(".source"), "only base64 and url image sources are supported")
}

// toolResult writes a tool_result block as a tool message whose content is
// the result's text (text blocks joined by newlines); its images go to the
// user message that follows.
func (w *oaMessages) toolResult(b gjson.Result, at loc) error {
	id := b.Get("tool_use_id")
	if id.Type != gjson.String || id.Str == "" {
		return paramErr(at.param(".tool_use_id"), "a tool result needs a tool_use_id")
	}
	w.begin("tool")
	w.dst = append(w.dst, `,"tool_call_id":`...)
	w.dst = rawjson.AppendRawString(w.dst, id.Raw)
	w.dst = append(w.dst, `,"content":"`...)
	c := b.Get("content")
	var err error
	switch {
	case c.Type == gjson.String:
		w.dst = rawjson.AppendRawBody(w.dst, inner(c.Raw))
	case c.IsArray():
		n, k := 0, -1
		c.ForEach(func(_, cb gjson.Result) bool {
			k++
			switch typ := cb.Get("type").Str; typ {
			case "text":
				if n > 0 {
					w.dst = append(w.dst, `\n`...)
				}
				n++
				w.dst = rawjson.AppendRawBody(w.dst, inner(cb.Get("text").Raw))
			case "image":
			default:
				err = paramErr(loc{at.i, at.j, k}.param(""), "tool result block type %q is not supported", typ)
			}
			return err == nil
		})
	}
	w.dst = append(w.dst, `"}`...)
	return err
}

// assistant writes an assistant turn: text blocks joined as content,
// tool_use blocks as tool_calls; thinking blocks are dropped.
func (w *oaMessages) assistant(content gjson.Result, i int) error {
	w.begin("assistant")
	if content.Type == gjson.String {
		w.dst = append(w.dst, `,"content":`...)
		w.dst = rawjson.AppendRawString(w.dst, content.Raw)
		w.dst = append(w.dst, '}')
		return nil
	}
	if !content.IsArray() {
		return paramErr(fmt.Sprintf("messages[%d].content", i), "must be a string or an array of blocks")
	}
	var err error
	texts, j := 0, -1
	content.ForEach(func(_, b gjson.Result) bool {
		j++
		switch typ := b.Get("type").Str; typ {
		case "text":
			if texts == 0 {
				w.dst = append(w.dst, `,"content":"`...)
			}
			texts++
			w.dst = rawjson.AppendRawBody(w.dst, inner(b.Get("text").Raw))
		case "tool_use", "thinking", "redacted_thinking":
		default:
			err = paramErr(fmt.Sprintf("messages[%d].content[%d]", i, j), "assistant block type %q is not supported by this gateway", typ)
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	if texts > 0 {
		w.dst = append(w.dst, '"')
	} else {
		w.dst = append(w.dst, `,"content":null`...)
	}
	calls := 0
	content.ForEach(func(_, b gjson.Result) bool {
		if b.Get("type").Str != "tool_use" {
			return true
		}
		if calls == 0 {
			w.dst = append(w.dst, `,"tool_calls":[`...)
		} else {
			w.dst = append(w.dst, ',')
		}
		calls++
		w.dst = append(w.dst, `{"id":`...)
		w.dst = rawjson.AppendRawString(w.dst, b.Get("id").Raw)
		w.dst = append(w.dst, `,"type":"function","function":{"name":`...)
		w.dst = rawjson.AppendRawString(w.dst, b.Get("name").Raw)
		w.dst = append(w.dst, `,"arguments":`...)
		input := b.Get("input").Raw
		if input == "" {
			input = "{}"
		}
		w.dst = rawjson.AppendString(w.dst, input)
		w.dst = append(w.dst, "}}"...)
		return true
	})
	if calls > 0 {
		w.dst = append(w.dst, ']')
	}
	w.dst = append(w.dst, '}')
	return nil
}

// appendStop maps stop_sequences to stop.
func appendStop(dst []byte, stop gjson.Result) ([]byte, error) {
	if !stop.Exists() || stop.Type == gjson.Null {
		return dst, nil
	}
	if !stop.IsArray() {
		return dst, paramErr("stop_sequences", "must be an array of strings")
	}
	var err error
	n := 0
	stop.ForEach(func(_, s gjson.Result) bool {
		if s.Type != gjson.String {
			err = paramErr("stop_sequences", "must be an array of strings")
			return false
		}
		if n == 0 {
			dst = append(dst, `,"stop":[`...)
		} else {
			dst = append(dst, ',')
		}
		n++
		dst = rawjson.AppendRawString(dst, s.Raw)
		return true
	})
	if n > 0 {
		dst = append(dst, ']')
	}
	return dst, err
}

// appendOpenAITools maps tools (client tools only) and tool_choice.
func appendOpenAITools(dst []byte, tools, choice gjson.Result) ([]byte, error) {
	if !tools.IsArray() || !tools.Get("0").Exists() {
		return dst, nil
	}
	var err error
	i := -1
	dst = append(dst, `,"tools":[`...)
	tools.ForEach(func(_, t gjson.Result) bool {
		i++
		if typ := t.Get("type"); typ.Exists() && typ.Str != "custom" {
			err = paramErr(fmt.Sprintf("tools[%d]", i), "server tool %q is not supported by this gateway", typ.Str)
			return false
		}
		name := t.Get("name")
		if name.Type != gjson.String || name.Str == "" {
			err = paramErr(fmt.Sprintf("tools[%d].name", i), "a tool needs a name")
			return false
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"type":"function","function":{"name":`...)
		dst = rawjson.AppendRawString(dst, name.Raw)
		if d := t.Get("description"); d.Type == gjson.String {
			dst = append(dst, `,"description":`...)
			dst = rawjson.AppendRawString(dst, d.Raw)
		}
		dst = append(dst, `,"parameters":`...)
		if s := t.Get("input_schema"); s.IsObject() {
			dst = rawjson.AppendRaw(dst, s.Raw)
		} else {
			dst = append(dst, defaultSchema...)
		}
		dst = append(dst, "}}"...)
		return true
	})
	if err != nil {
		return dst, err
	}
	dst = append(dst, ']')
	if !choice.IsObject() {
		return dst, nil
	}
	switch typ := choice.Get("type").Str; typ {
	case "auto":
		dst = append(dst, `,"tool_choice":"auto"`...)
	case "any":
		dst = append(dst, `,"tool_choice":"required"`...)
	case "none":
		dst = append(dst, `,"tool_choice":"none"`...)
	case "tool":
		name := choice.Get("name")
		if name.Type != gjson.String || name.Str == "" {
			return dst, paramErr("tool_choice.name", "must name a tool")
		}
		dst = append(dst, `,"tool_choice":{"type":"function","function":{"name":`...)
		dst = rawjson.AppendRawString(dst, name.Raw)
		dst = append(dst, "}}"...)
	default:
		return dst, paramErr("tool_choice.type", "unknown tool choice %q", typ)
	}
	if choice.Get("disable_parallel_tool_use").Type == gjson.True && choice.Get("type").Str != "none" {
		dst = append(dst, `,"parallel_tool_calls":false`...)
	}
	return dst, nil
}

// stopReason maps an OpenAI finish reason to an Anthropic stop reason.
func stopReason(finish string) string {
	switch finish {
	case "length":
		return "max_tokens"
	case "tool_calls", "function_call":
		return "tool_use"
	case "content_filter":
		return "refusal"
	}
	return "end_turn"
}

// messageID derives a message id from an OpenAI completion id.
func appendMessageID(dst []byte, openaiID string) []byte {
	dst = append(dst, "msg_"...)
	return rawjson.AppendRawBody(dst, strings.TrimPrefix(openaiID, "chatcmpl-"))
}

// ResponseFromOpenAI converts an OpenAI chat.completion body into an
// Anthropic message body named model, appended to dst. Text becomes a text
// block (a refusal too), tool calls tool_use blocks; reasoning is dropped.
// A body that is not a chat.completion, or a tool call whose arguments are
// not a JSON object, returns an error wrapping providers.ErrMalformed.
func ResponseFromOpenAI(dst, body []byte, model string) ([]byte, error) {
	if !providers.ValidJSON(body) {
		return dst, fmt.Errorf("read chat completion: %w: body is not JSON", providers.ErrMalformed)
	}
	s := bytesString(body)
	choice := gjson.Get(s, "choices.0")
	if !choice.IsObject() {
		return dst, fmt.Errorf("read chat completion: %w: no choices", providers.ErrMalformed)
	}
	msg := choice.Get("message")
	out := append(dst, `{"id":`...)
	out = append(out, '"')
	out = appendMessageID(out, inner(gjson.Get(s, "id").Raw))
	out = append(out, `","type":"message","role":"assistant","model":`...)
	out = rawjson.AppendString(out, model)
	out = append(out, `,"content":[`...)
	n := 0
	text := func(raw string) {
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = append(out, `{"type":"text","text":`...)
		out = rawjson.AppendRawString(out, raw)
		out = append(out, '}')
	}
	switch c := msg.Get("content"); {
	case c.Type == gjson.String && c.Raw != `""`:
		text(c.Raw)
	case c.IsArray():
		c.ForEach(func(_, p gjson.Result) bool {
			if t := p.Get("text"); p.Get("type").Str == "text" && t.Type == gjson.String && t.Raw != `""` {
				text(t.Raw)
			}
			return true
		})
	}
	if r := msg.Get("refusal"); n == 0 && r.Type == gjson.String && r.Raw != `""` {
		text(r.Raw)
	}
	var err error
	calls := 0
	msg.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
		if !tc.IsObject() {
			return true // "tool_calls": null
		}
		input := strings.TrimSpace(tc.Get("function.arguments").Str)
		if input == "" {
			input = "{}"
		}
		if !isObject(input) {
			err = fmt.Errorf("read chat completion: %w: tool call arguments are not a JSON object", providers.ErrMalformed)
			return false
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		calls++
		out = append(out, `{"type":"tool_use","id":`...)
		out = rawjson.AppendRawString(out, tc.Get("id").Raw)
		out = append(out, `,"name":`...)
		out = rawjson.AppendRawString(out, tc.Get("function.name").Raw)
		out = append(out, `,"input":`...)
		out = rawjson.AppendRaw(out, input)
		out = append(out, '}')
		return true
	})
	if err != nil {
		return dst, err
	}
	reason := stopReason(choice.Get("finish_reason").Str)
	if calls > 0 && reason == "end_turn" {
		reason = "tool_use"
	}
	out = append(out, `],"stop_reason":"`...)
	out = append(out, reason...)
	out = append(out, `","stop_sequence":null,"usage":`...)
	out = appendAnthropicUsage(out, openAIUsage(gjson.Get(s, "usage")))
	return append(out, '}'), nil
}

// openAIUsage reads an OpenAI usage object.
func openAIUsage(u gjson.Result) providers.Usage {
	if !u.IsObject() {
		return providers.Usage{}
	}
	return providers.Usage{
		Prompt:     u.Get("prompt_tokens").Uint(),
		Completion: u.Get("completion_tokens").Uint(),
		Cached:     u.Get("prompt_tokens_details.cached_tokens").Uint(),
		Reasoning:  u.Get("completion_tokens_details.reasoning_tokens").Uint(),
		Reported:   true,
	}
}

// appendAnthropicUsage appends an Anthropic usage object: cached prompt
// tokens are reported as cache reads, apart from input_tokens.
func appendAnthropicUsage(dst []byte, u providers.Usage) []byte {
	cached := min(u.Cached, u.Prompt)
	dst = append(dst, `{"input_tokens":`...)
	dst = appendUint(dst, u.Prompt-cached)
	dst = append(dst, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":`...)
	dst = appendUint(dst, cached)
	dst = append(dst, `,"output_tokens":`...)
	dst = appendUint(dst, u.Completion)
	return append(dst, '}')
}
