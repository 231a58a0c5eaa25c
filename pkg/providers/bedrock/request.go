package bedrock

import (
	"fmt"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"math"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
)

// chatRequest holds the top-level members of an OpenAI chat body that the
// translation maps (see Policy). Its values point into the body.
type chatRequest struct {
	messages, maxTokens, maxCompletionTokens gjson.Result
	temperature, topP, stop                  gjson.Result
	tools, toolChoice                        gjson.Result
}

// paramError refuses param; the message leads with it, since the gateway
// shows only the message ("provider X cannot honour <message>").
func paramError(param, reason string) error {
	return &providers.ParamError{Param: param, Message: param + ": " + reason}
}

// readRequest reads the members of c's chat request that Policy maps, and
// refuses those it refuses.
func readRequest(c *providers.Call) (chatRequest, error) {
	var in providers.ChatRequest
	if err := Policy.Read(&in, c); err != nil {
		return chatRequest{}, err
	}
	get := func(p providers.ChatParam) gjson.Result { return gjson.Parse(in.Raw(p)) }
	return chatRequest{
		messages: get(providers.ParamMessages), maxTokens: get(providers.ParamMaxTokens),
		maxCompletionTokens: get(providers.ParamMaxCompletionTokens), temperature: get(providers.ParamTemperature),
		topP: get(providers.ParamTopP), stop: get(providers.ParamStop),
		tools: get(providers.ParamTools), toolChoice: get(providers.ParamToolChoice),
	}, nil
}

func hasMembers(v gjson.Result) bool {
	n := 0
	v.ForEach(func(_, _ gjson.Result) bool { n++; return false })
	return n > 0
}

// msgParam names a member of message i; partParam one of its content part j.
// They run on error paths only.
func msgParam(i int, member string) string { return fmt.Sprintf("messages[%d]%s", i, member) }
func partParam(i, j int, member string) string {
	return fmt.Sprintf("messages[%d].content[%d]%s", i, j, member)
}

// convWriter appends the Converse messages array. Consecutive messages of
// one role are merged (Converse requires alternating roles; parallel tool
// results must share one user message), and a message is opened only when
// its first block is written, so no message has empty content.
type convWriter struct {
	dst        []byte
	role       string // role of the open message; "" before the first
	blocks     int    // blocks in the open message
	messages   int
	toolBlocks bool // the conversation holds toolUse or toolResult blocks
}

// block prepares dst for one more content block of a role's message.
func (w *convWriter) block(role string) {
	if role != w.role {
		if w.role != "" {
			w.dst = append(w.dst, "]}"...)
		}
		if w.messages > 0 {
			w.dst = append(w.dst, ',')
		}
		w.dst = append(w.dst, `{"role":"`...)
		w.dst = append(w.dst, role...)
		w.dst = append(w.dst, `","content":[`...)
		w.role, w.blocks = role, 0
		w.messages++
	}
	if w.blocks > 0 {
		w.dst = append(w.dst, ',')
	}
	w.blocks++
}

// text appends a text block for a raw JSON string; empty text (which
// Converse refuses) is skipped.
func (w *convWriter) text(role, raw string) {
	if raw == `""` {
		return
	}
	w.block(role)
	w.dst = append(w.dst, `{"text":`...)
	w.dst = rawjson.AppendRaw(w.dst, raw)
	w.dst = append(w.dst, '}')
}

// appendConverse translates the OpenAI chat body of c into a Converse
// request body appended to dst.
func appendConverse(dst []byte, c *providers.Call) ([]byte, error) {
	r, err := readRequest(c)
	if err != nil {
		return dst, err
	}
	if !r.messages.IsArray() {
		return dst, paramError("messages", "messages must be an array")
	}
	w := convWriter{dst: append(dst, `{"messages":[`...)}
	if err := w.conversation(r.messages); err != nil {
		return w.dst, err
	}
	if w.messages == 0 {
		return w.dst, paramError("messages", "Bedrock Converse needs at least one user or assistant message")
	}
	w.dst = append(w.dst, "]}]"...)
	if w.dst, err = appendSystem(w.dst, r.messages); err != nil {
		return w.dst, err
	}
	if w.dst, err = appendInference(w.dst, &r, c); err != nil {
		return w.dst, err
	}
	if w.dst, err = appendToolConfig(w.dst, &r, w.toolBlocks); err != nil {
		return w.dst, err
	}
	return append(w.dst, '}'), nil
}

// conversation appends every user, assistant and tool message; system and
// developer messages go to appendSystem.
func (w *convWriter) conversation(messages gjson.Result) error {
	var err error
	i := -1
	messages.ForEach(func(_, m gjson.Result) bool {
		i++
		switch role := m.Get("role").Str; role {
		case "system", "developer":
		case "user":
			err = w.content("user", m.Get("content"), i)
		case "assistant":
			err = w.assistant(m, i)
		case "tool":
			err = w.toolResult(m, i)
		default:
			err = paramError(msgParam(i, ".role"), fmt.Sprintf("role %q is not supported", role))
		}
		return err == nil
	})
	return err
}

// content appends the blocks of a user or assistant message's content: a
// string, or an array of text, image_url (user) and refusal (assistant)
// parts.
func (w *convWriter) content(role string, content gjson.Result, i int) error {
	switch {
	case content.Type == gjson.String:
		w.text(role, content.Raw)
		return nil
	case content.Type == gjson.Null || !content.Exists():
		return nil
	case !content.IsArray():
		return paramError(msgParam(i, ".content"), "content must be a string or an array of parts")
	}
	var err error
	j := -1
	content.ForEach(func(_, part gjson.Result) bool {
		j++
		switch typ := part.Get("type").Str; {
		case typ == "text":
			err = w.textPart(role, part.Get("text"), i, j, ".text")
		case typ == "refusal" && role == "assistant":
			err = w.textPart(role, part.Get("refusal"), i, j, ".refusal")
		case typ == "image_url" && role == "user":
			w.block(role)
			w.dst, err = appendImage(w.dst, part.Get("image_url"), i, j)
		default:
			err = paramError(partParam(i, j, ".type"), fmt.Sprintf("content parts of type %q are not supported", typ))
		}
		return err == nil
	})
	return err
}

func (w *convWriter) textPart(role string, text gjson.Result, i, j int, member string) error {
	if text.Type != gjson.String {
		return paramError(partParam(i, j, member), "must be a string")
	}
	w.text(role, text.Raw)
	return nil
}

// assistant appends an assistant message: its text, then a toolUse block
// per tool call.
func (w *convWriter) assistant(m gjson.Result, i int) error {
	if fc := m.Get("function_call"); fc.Exists() && fc.Type != gjson.Null {
		return paramError(msgParam(i, ".function_call"), "legacy function calls are not supported; use tool_calls")
	}
	if err := w.content("assistant", m.Get("content"), i); err != nil {
		return err
	}
	var err error
	j := -1
	m.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
		j++
		err = w.toolUse(tc, i, j)
		return err == nil
	})
	return err
}

// toolUse appends a toolUse block for one OpenAI tool call. Converse takes
// the input as a JSON document, OpenAI the arguments as a string holding
// JSON; empty arguments become {}.
func (w *convWriter) toolUse(tc gjson.Result, i, j int) error {
	param := func(member string) string { return fmt.Sprintf("messages[%d].tool_calls[%d]%s", i, j, member) }
	if t := tc.Get("type"); t.Exists() && t.Str != "function" {
		return paramError(param(".type"), "only function tool calls are supported")
	}
	id, fn := tc.Get("id"), tc.Get("function")
	name, args := fn.Get("name"), fn.Get("arguments")
	if id.Type != gjson.String || id.Str == "" {
		return paramError(param(".id"), "a tool call needs an id")
	}
	if name.Type != gjson.String || name.Str == "" {
		return paramError(param(".function.name"), "a tool call needs a function name")
	}
	input := "{}"
	switch {
	case args.Type == gjson.String && strings.TrimSpace(args.Str) != "":
		input = args.String()
		if !providers.ValidJSON([]byte(input)) {
			return paramError(param(".function.arguments"), "arguments must be JSON")
		}
	case args.IsObject():
		input = args.Raw
	}
	w.block("assistant")
	w.toolBlocks = true
	w.dst = append(w.dst, `{"toolUse":{"toolUseId":`...)
	w.dst = rawjson.AppendString(w.dst, id.Str)
	w.dst = append(w.dst, `,"name":`...)
	w.dst = rawjson.AppendString(w.dst, name.Str)
	w.dst = append(w.dst, `,"input":`...)
	w.dst = rawjson.AppendRaw(w.dst, strings.TrimSpace(input))
	w.dst = append(w.dst, "}}"...)
	return nil
}

// toolResult appends a role "tool" message as a toolResult block of a user
// message.
func (w *convWriter) toolResult(m gjson.Result, i int) error {
	id := m.Get("tool_call_id")
	if id.Type != gjson.String || id.Str == "" {
		return paramError(msgParam(i, ".tool_call_id"), "a tool message needs tool_call_id")
	}
	w.block("user")
	w.toolBlocks = true
	w.dst = append(w.dst, `{"toolResult":{"toolUseId":`...)
	w.dst = rawjson.AppendString(w.dst, id.Str)
	w.dst = append(w.dst, `,"content":[`...)
	content := m.Get("content")
	var err error
	switch {
	case content.Type == gjson.String:
		w.dst = append(w.dst, `{"text":`...)
		w.dst = rawjson.AppendRaw(w.dst, content.Raw)
		w.dst = append(w.dst, '}')
	case content.IsArray():
		j := -1
		content.ForEach(func(_, part gjson.Result) bool {
			j++
			if j > 0 {
				w.dst = append(w.dst, ',')
			}
			switch typ := part.Get("type").Str; typ {
			case "text":
				text := part.Get("text")
				if text.Type != gjson.String {
					err = paramError(partParam(i, j, ".text"), "must be a string")
					break
				}
				w.dst = append(w.dst, `{"text":`...)
				w.dst = rawjson.AppendRaw(w.dst, text.Raw)
				w.dst = append(w.dst, '}')
			case "image_url":
				w.dst, err = appendImage(w.dst, part.Get("image_url"), i, j)
			default:
				err = paramError(partParam(i, j, ".type"), fmt.Sprintf("content parts of type %q are not supported", typ))
			}
			return err == nil
		})
	case content.Type != gjson.Null && content.Exists():
		err = paramError(msgParam(i, ".content"), "content must be a string or an array of parts")
	}
	w.dst = append(w.dst, "]}}"...)
	return err
}

// imageFormats maps image media types and file extensions to Converse
// image formats.
var imageFormats = map[string]string{
	"image/png": "png", "image/jpeg": "jpeg", "image/jpg": "jpeg", "image/gif": "gif", "image/webp": "webp",
	".png": "png", ".jpeg": "jpeg", ".jpg": "jpeg", ".gif": "gif", ".webp": "webp",
}

// appendImage appends an image block for an OpenAI image_url value (an
// object with url, or the URL string): a base64 data URL becomes bytes, an
// s3:// URL an s3Location. Converse cannot take http URLs, and the gateway
// never fetches them.
func appendImage(dst []byte, v gjson.Result, i, j int) ([]byte, error) {
	u := v
	member := ".image_url"
	if v.IsObject() {
		u = v.Get("url")
		member = ".image_url.url"
	}
	param := func() string { return partParam(i, j, member) }
	if u.Type != gjson.String {
		return dst, paramError(param(), "an image needs a URL")
	}
	url := u.Str
	switch {
	case strings.HasPrefix(url, "data:"):
		meta, data, ok := strings.Cut(url[len("data:"):], ",")
		mime, isBase64 := strings.CutSuffix(meta, ";base64")
		format := imageFormats[strings.ToLower(mime)]
		if !ok || !isBase64 || format == "" || !isBase64Text(data) {
			return dst, paramError(param(), "Bedrock Converse takes base64 data URLs of PNG, JPEG, GIF or WebP images")
		}
		dst = append(dst, `{"image":{"format":"`...)
		dst = append(dst, format...)
		dst = append(dst, `","source":{"bytes":"`...)
		dst = append(dst, data...)
		return append(dst, `"}}}`...), nil
	case strings.HasPrefix(url, "s3://"):
		ext := url[strings.LastIndexByte(url, '.')+1:]
		format := imageFormats["."+strings.ToLower(ext)]
		if format == "" {
			return dst, paramError(param(), "an s3:// image URL must end in .png, .jpg, .jpeg, .gif or .webp")
		}
		dst = append(dst, `{"image":{"format":"`...)
		dst = append(dst, format...)
		dst = append(dst, `","source":{"s3Location":{"uri":`...)
		dst = rawjson.AppendString(dst, url)
		return append(dst, "}}}}"...), nil
	}
	return dst, paramError(param(), "Bedrock Converse takes images as base64 data URLs or s3:// URLs, not http URLs (the gateway does not fetch them)")
}

// isBase64Text reports whether s is non-empty standard base64 text.
func isBase64Text(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '=') {
			return false
		}
	}
	return true
}

// appendSystem appends the system member: a text block per system or
// developer message, wherever it sits in the conversation.
func appendSystem(dst []byte, messages gjson.Result) ([]byte, error) {
	n := 0
	add := func(raw string) {
		if raw == `""` {
			return
		}
		if n == 0 {
			dst = append(dst, `,"system":[`...)
		} else {
			dst = append(dst, ',')
		}
		n++
		dst = append(dst, `{"text":`...)
		dst = rawjson.AppendRaw(dst, raw)
		dst = append(dst, '}')
	}
	var err error
	i := -1
	messages.ForEach(func(_, m gjson.Result) bool {
		i++
		if role := m.Get("role").Str; role != "system" && role != "developer" {
			return true
		}
		content := m.Get("content")
		switch {
		case content.Type == gjson.String:
			add(content.Raw)
		case content.IsArray():
			j := -1
			content.ForEach(func(_, part gjson.Result) bool {
				j++
				text := part.Get("text")
				if part.Get("type").Str != "text" || text.Type != gjson.String {
					err = paramError(partParam(i, j, ""), "system messages take text parts only")
					return false
				}
				add(text.Raw)
				return true
			})
		default:
			err = paramError(msgParam(i, ".content"), "content must be a string or an array of text parts")
		}
		return err == nil
	})
	if n > 0 {
		dst = append(dst, ']')
	}
	return dst, err
}

// appendInference appends inferenceConfig (maxTokens, temperature, topP,
// stopSequences) when any of them is set.
func appendInference(dst []byte, r *chatRequest, c *providers.Call) ([]byte, error) {
	maxTokens := c.MaxTokens
	for _, f := range [...]struct {
		name string
		v    gjson.Result
	}{{"max_tokens", r.maxTokens}, {"max_completion_tokens", r.maxCompletionTokens}} {
		if !f.v.Exists() || f.v.Type == gjson.Null {
			continue
		}
		if f.v.Type != gjson.Number || f.v.Num < 1 || f.v.Num != math.Trunc(f.v.Num) || f.v.Num > math.MaxInt32 {
			return dst, paramError(f.name, "must be a positive integer")
		}
		maxTokens = f.v.Int()
	}
	if c.ClampMaxTokens > 0 {
		maxTokens = c.ClampMaxTokens
	}
	start := len(dst)
	dst = append(dst, `,"inferenceConfig":{`...)
	empty := len(dst)
	if maxTokens > 0 {
		dst = append(dst, `"maxTokens":`...)
		dst = appendInt(dst, maxTokens)
	}
	for _, f := range [...]struct {
		name, key string
		v         gjson.Result
	}{{"temperature", "temperature", r.temperature}, {"top_p", "topP", r.topP}} {
		switch f.v.Type {
		case gjson.Null:
		case gjson.Number:
			dst = appendKey(dst, empty, f.key)
			dst = append(dst, f.v.Raw...)
		default:
			return dst, paramError(f.name, "must be a number")
		}
	}
	dst, err := appendStop(dst, empty, r.stop)
	if err != nil {
		return dst, err
	}
	if len(dst) == empty {
		return dst[:start], nil
	}
	return append(dst, '}'), nil
}

// appendKey appends `"key":` to an object opened at empty, comma first
// unless it is the first member.
func appendKey(dst []byte, empty int, key string) []byte {
	if len(dst) > empty {
		dst = append(dst, ',')
	}
	dst = append(dst, '"')
	dst = append(dst, key...)
	return append(dst, `":`...)
}

// appendStop appends stopSequences for an OpenAI stop (a string or an
// array of strings) to an object opened at empty.
func appendStop(dst []byte, empty int, stop gjson.Result) ([]byte, error) {
	switch {
	case stop.Type == gjson.Null:
		return dst, nil
	case stop.Type == gjson.String:
		dst = appendKey(dst, empty, "stopSequences")
		dst = append(dst, '[')
		dst = rawjson.AppendRaw(dst, stop.Raw)
		return append(dst, ']'), nil
	case !stop.IsArray():
		return dst, paramError("stop", "must be a string or an array of strings")
	}
	n := 0
	var err error
	stop.ForEach(func(_, s gjson.Result) bool {
		if s.Type != gjson.String {
			err = paramError("stop", "must be a string or an array of strings")
			return false
		}
		if n == 0 {
			dst = appendKey(dst, empty, "stopSequences")
			dst = append(dst, '[')
		} else {
			dst = append(dst, ',')
		}
		n++
		dst = rawjson.AppendRaw(dst, s.Raw)
		return true
	})
	if n > 0 {
		dst = append(dst, ']')
	}
	return dst, err
}

// appendToolConfig appends toolConfig for the request's tools and
// tool_choice. Converse has no "none": such a request is sent without
// tools, which Converse allows only when the conversation holds no tool
// calls or results.
func appendToolConfig(dst []byte, r *chatRequest, toolBlocks bool) ([]byte, error) {
	choice, name, err := readToolChoice(r.toolChoice)
	if err != nil {
		return dst, err
	}
	hasTools := r.tools.IsArray() && hasMembers(r.tools)
	switch {
	case !hasTools && (choice == "any" || choice == "tool"):
		return dst, paramError("tool_choice", "a forced tool choice needs tools")
	case !hasTools && r.tools.Exists() && r.tools.Type != gjson.Null && !r.tools.IsArray():
		return dst, paramError("tools", "must be an array")
	case !hasTools:
		return dst, nil
	case choice == "none" && toolBlocks:
		return dst, paramError("tool_choice", `"none" cannot be expressed in Bedrock Converse when the conversation holds tool calls`)
	case choice == "none":
		return dst, nil
	}
	dst = append(dst, `,"toolConfig":{"tools":[`...)
	i := -1
	r.tools.ForEach(func(_, t gjson.Result) bool {
		i++
		if i > 0 {
			dst = append(dst, ',')
		}
		dst, err = appendToolSpec(dst, t, i)
		return err == nil
	})
	if err != nil {
		return dst, err
	}
	dst = append(dst, ']')
	switch choice {
	case "any":
		dst = append(dst, `,"toolChoice":{"any":{}}`...)
	case "tool":
		dst = append(dst, `,"toolChoice":{"tool":{"name":`...)
		dst = rawjson.AppendString(dst, name)
		dst = append(dst, "}}"...)
	}
	return append(dst, '}'), nil
}

// readToolChoice returns "auto", "none", "any" (required) or "tool" with
// the forced function's name.
func readToolChoice(v gjson.Result) (choice, name string, err error) {
	switch {
	case !v.Exists() || v.Type == gjson.Null:
		return "auto", "", nil
	case v.Type == gjson.String:
		switch v.Str {
		case "auto", "none":
			return v.Str, "", nil
		case "required":
			return "any", "", nil
		}
	case v.IsObject() && v.Get("type").Str == "function":
		if n := v.Get("function.name"); n.Type == gjson.String && n.Str != "" {
			return "tool", n.Str, nil
		}
		return "", "", paramError("tool_choice.function.name", "a forced function needs a name")
	}
	return "", "", paramError("tool_choice", "must be auto, none, required or a function")
}

// appendToolSpec appends the toolSpec of one OpenAI function tool; a tool
// without parameters takes an empty object schema.
func appendToolSpec(dst []byte, t gjson.Result, i int) ([]byte, error) {
	param := func(member string) string { return fmt.Sprintf("tools[%d]%s", i, member) }
	if t.Get("type").Str != "function" {
		return dst, paramError(param(".type"), "only function tools are supported")
	}
	fn := t.Get("function")
	name := fn.Get("name")
	if name.Type != gjson.String || name.Str == "" {
		return dst, paramError(param(".function.name"), "a tool needs a name")
	}
	dst = append(dst, `{"toolSpec":{"name":`...)
	dst = rawjson.AppendRaw(dst, name.Raw)
	if d := fn.Get("description"); d.Type == gjson.String && d.Raw != `""` {
		dst = append(dst, `,"description":`...)
		dst = rawjson.AppendRaw(dst, d.Raw)
	}
	dst = append(dst, `,"inputSchema":{"json":`...)
	switch p := fn.Get("parameters"); {
	case p.IsObject():
		dst = rawjson.AppendRaw(dst, p.Raw)
	case !p.Exists() || p.Type == gjson.Null:
		dst = append(dst, `{"type":"object","properties":{}}`...)
	default:
		return dst, paramError(param(".function.parameters"), "must be a JSON schema object")
	}
	return append(dst, "}}}"...), nil
}
