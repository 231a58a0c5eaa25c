package gemini

import (
	"fmt"
	"path"
	"strings"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/rawjson"
)

// bufPool holds request body buffers.
var bufPool = sync.Pool{New: func() any {
	b := make([]byte, 0, 4096)
	return &b
}}

// signaturePlaceholder is Google's documented stand-in thought signature for
// function calls whose real signature is not available.
const signaturePlaceholder = "skip_thought_signature_validator"

// chatRequest holds the top-level members of an OpenAI chat body that
// shape the Gemini request (see Policy).
type chatRequest struct {
	messages, tools, toolChoice, responseFormat, stop    gjson.Result
	maxTokens, maxCompletionTokens, temperature, topP, n gjson.Result
	presence, frequency, seed, reasoning                 gjson.Result
}

func paramErr(param, format string, args ...any) error {
	return &providers.ParamError{Param: param, Message: fmt.Sprintf(format, args...)}
}

// readChat reads the members of c's chat request that Policy maps, and
// refuses those it refuses.
func readChat(c *providers.Call) (chatRequest, error) {
	var in providers.ChatRequest
	if err := Policy.Read(&in, c); err != nil {
		return chatRequest{}, err
	}
	get := func(p providers.ChatParam) gjson.Result { return gjson.Parse(in.Raw(p)) }
	return chatRequest{
		messages: get(providers.ParamMessages), tools: get(providers.ParamTools),
		toolChoice: get(providers.ParamToolChoice), responseFormat: get(providers.ParamResponseFormat),
		stop: get(providers.ParamStop), maxTokens: get(providers.ParamMaxTokens),
		maxCompletionTokens: get(providers.ParamMaxCompletionTokens), temperature: get(providers.ParamTemperature),
		topP: get(providers.ParamTopP), n: get(providers.ParamN),
		presence: get(providers.ParamPresencePenalty), frequency: get(providers.ParamFrequencyPenalty),
		seed: get(providers.ParamSeed), reasoning: get(providers.ParamReasoningEffort),
	}, nil
}

// buildChat appends the generateContent request for c's OpenAI chat body.
func buildChat(dst []byte, c *providers.Call) ([]byte, error) {
	r, err := readChat(c)
	if err != nil {
		return dst, err
	}
	if !r.messages.IsArray() {
		return dst, paramErr("messages", "messages must be an array")
	}
	dst = append(dst, `{"contents":[`...)
	if dst, err = appendContents(dst, r.messages); err != nil {
		return dst, err
	}
	dst = append(dst, ']')
	if dst, err = appendSystem(dst, r.messages); err != nil {
		return dst, err
	}
	if dst, err = appendTools(dst, r.tools, r.toolChoice); err != nil {
		return dst, err
	}
	if dst, err = appendGenerationConfig(dst, &r, c); err != nil {
		return dst, err
	}
	return append(dst, '}'), nil
}

// contentWriter appends Gemini contents, opening a new content when the
// kind of message changes so consecutive messages of one kind share it.
type contentWriter struct {
	dst      []byte
	kind     byte // 0 before the first part, 'u' user, 'm' model, 't' tool results
	contents int
}

// part starts a part of the given kind, opening a content when needed.
func (w *contentWriter) part(kind byte) {
	if w.kind == kind {
		w.dst = append(w.dst, ',')
		return
	}
	if w.kind != 0 {
		w.dst = append(w.dst, "]},"...)
	}
	if kind == 'm' {
		w.dst = append(w.dst, `{"role":"model","parts":[`...)
	} else {
		w.dst = append(w.dst, `{"role":"user","parts":[`...)
	}
	w.kind = kind
	w.contents++
}

func (w *contentWriter) close() {
	if w.kind != 0 {
		w.dst = append(w.dst, "]}"...)
	}
}

// appendContents appends the conversation (every message but system and
// developer ones) as Gemini contents.
func appendContents(dst []byte, messages gjson.Result) ([]byte, error) {
	w := contentWriter{dst: dst}
	var names map[string]string // tool call id -> function name
	var err error
	i := -1
	messages.ForEach(func(_, m gjson.Result) bool {
		i++
		if !m.IsObject() {
			err = paramErr(fmt.Sprintf("messages[%d]", i), "a message must be an object")
			return false
		}
		role := m.Get("role")
		switch role.Str {
		case "system", "developer":
		case "user":
			err = appendUserParts(&w, m.Get("content"), i)
		case "assistant":
			if names == nil {
				names = make(map[string]string)
			}
			err = appendAssistantParts(&w, m, i, names)
		case "tool":
			err = appendToolResult(&w, m, i, names)
		default:
			err = paramErr(fmt.Sprintf("messages[%d].role", i), "the role %q is not supported by Gemini", role.String())
		}
		return err == nil
	})
	w.close()
	return w.dst, err
}

// appendSystem appends systemInstruction from the system and developer
// messages, in order.
func appendSystem(dst []byte, messages gjson.Result) ([]byte, error) {
	n := 0
	var err error
	i := -1
	messages.ForEach(func(_, m gjson.Result) bool {
		i++
		role := m.Get("role").Str
		if role != "system" && role != "developer" {
			return true
		}
		err = forEachText(m.Get("content"), fmt.Sprintf("messages[%d].content", i), func(text gjson.Result) {
			if n == 0 {
				dst = append(dst, `,"systemInstruction":{"parts":[`...)
			} else {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"text":`...)
			dst = append(dst, text.Raw...)
			dst = append(dst, '}')
			n++
		})
		return err == nil
	})
	if n > 0 {
		dst = append(dst, "]}"...)
	}
	return dst, err
}

// forEachText calls f with each text of a content that may hold only text:
// a string, or an array of text parts. A null content holds none.
func forEachText(content gjson.Result, param string, f func(text gjson.Result)) error {
	switch {
	case content.Type == gjson.String:
		f(content)
		return nil
	case !content.Exists() || content.Type == gjson.Null:
		return nil
	case !content.IsArray():
		return paramErr(param, "content must be a string or an array of parts")
	}
	var err error
	j := -1
	content.ForEach(func(_, part gjson.Result) bool {
		j++
		text := part.Get("text")
		if typ := part.Get("type").Str; typ != "text" || text.Type != gjson.String {
			err = paramErr(fmt.Sprintf("%s[%d]", param, j), "only text parts are accepted here")
			return false
		}
		f(text)
		return true
	})
	return err
}

// appendUserParts appends the parts of a user message's content.
func appendUserParts(w *contentWriter, content gjson.Result, i int) error {
	switch {
	case content.Type == gjson.String:
		w.part('u')
		w.dst = appendTextPart(w.dst, content)
		return nil
	case !content.Exists() || content.Type == gjson.Null:
		return nil
	case !content.IsArray():
		return paramErr(fmt.Sprintf("messages[%d].content", i), "content must be a string or an array of parts")
	}
	var err error
	j := -1
	content.ForEach(func(_, part gjson.Result) bool {
		j++
		err = appendUserPart(w, part, i, j)
		return err == nil
	})
	return err
}

func appendTextPart(dst []byte, text gjson.Result) []byte {
	dst = append(dst, `{"text":`...)
	dst = append(dst, text.Raw...)
	return append(dst, '}')
}

// appendUserPart appends one content part of a user message.
func appendUserPart(w *contentWriter, part gjson.Result, i, j int) error {
	param := func(suffix string) string { return fmt.Sprintf("messages[%d].content[%d]%s", i, j, suffix) }
	switch typ := part.Get("type").Str; typ {
	case "text":
		text := part.Get("text")
		if text.Type != gjson.String {
			return paramErr(param(".text"), "text must be a string")
		}
		w.part('u')
		w.dst = appendTextPart(w.dst, text)
	case "image_url":
		u := part.Get("image_url")
		if u.IsObject() {
			u = u.Get("url")
		}
		if u.Type != gjson.String {
			return paramErr(param(".image_url.url"), "the image URL must be a string")
		}
		w.part('u')
		return appendMedia(w, u.String(), param(".image_url.url"), true)
	case "input_audio":
		data, format := part.Get("input_audio.data"), part.Get("input_audio.format").Str
		if data.Type != gjson.String || format == "" || strings.Trim(format, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
			return paramErr(param(".input_audio"), "input_audio needs base64 data and a format such as wav or mp3")
		}
		w.part('u')
		w.dst = appendInline(w.dst, "audio/"+format, data.String())
	case "file":
		f := part.Get("file")
		if f.Get("file_id").Exists() {
			return paramErr(param(".file.file_id"), "uploaded file references are not supported by Gemini: send file_data")
		}
		data := f.Get("file_data")
		if data.Type != gjson.String || !strings.HasPrefix(data.Str, "data:") {
			return paramErr(param(".file.file_data"), "file_data must be a base64 data URL")
		}
		w.part('u')
		return appendMedia(w, data.String(), param(".file.file_data"), false)
	default:
		return paramErr(param(".type"), "the content part type %q is not supported by Gemini", typ)
	}
	return nil
}

// appendMedia appends an inlineData part for a base64 data URL, or a
// fileData part for an http(s) URL when allowed, with the MIME type taken
// from the file extension.
func appendMedia(w *contentWriter, u, param string, urls bool) error {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		meta, data, ok := strings.Cut(rest, ",")
		mime, params, _ := strings.Cut(meta, ";")
		if !ok || mime == "" || !strings.HasSuffix(params, "base64") {
			return paramErr(param, "a data URL must have a MIME type and base64 data")
		}
		w.dst = appendInline(w.dst, mime, data)
		return nil
	}
	lower := strings.ToLower(u)
	if !urls || !(strings.HasPrefix(lower, "https://") || strings.HasPrefix(lower, "http://")) {
		return paramErr(param, "must be a base64 data URL or an http(s) URL")
	}
	mime := mimeFromURL(lower)
	if mime == "" {
		return paramErr(param, "cannot tell the file type of this URL from its extension (png, jpg, jpeg, webp, heic, heif, pdf): send a base64 data URL")
	}
	w.dst = append(w.dst, `{"fileData":{"mimeType":"`...)
	w.dst = append(w.dst, mime...)
	w.dst = append(w.dst, `","fileUri":`...)
	w.dst = rawjson.AppendString(w.dst, u)
	w.dst = append(w.dst, "}}"...)
	return nil
}

func appendInline(dst []byte, mime, data string) []byte {
	dst = append(dst, `{"inlineData":{"mimeType":`...)
	dst = rawjson.AppendString(dst, mime)
	dst = append(dst, `,"data":`...)
	dst = rawjson.AppendString(dst, data)
	return append(dst, "}}"...)
}

// mimeFromURL guesses the MIME type of a lowercased URL from the extension
// of its path; "" when unknown.
func mimeFromURL(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		u = u[:i]
	}
	switch path.Ext(u) {
	case ".png":
		return "image/png"
	case ".jpg", ".jpeg":
		return "image/jpeg"
	case ".webp":
		return "image/webp"
	case ".heic":
		return "image/heic"
	case ".heif":
		return "image/heif"
	case ".pdf":
		return "application/pdf"
	}
	return ""
}

// appendAssistantParts appends an assistant message as model parts: its
// text, then its tool calls as functionCall parts. names records each tool
// call's function name by id.
func appendAssistantParts(w *contentWriter, m gjson.Result, i int, names map[string]string) error {
	content := m.Get("content")
	switch {
	case content.Type == gjson.String:
		if content.Str != "" {
			w.part('m')
			w.dst = appendTextPart(w.dst, content)
		}
	case content.IsArray():
		var err error
		j := -1
		content.ForEach(func(_, part gjson.Result) bool {
			j++
			text := part.Get("text")
			if part.Get("type").Str == "refusal" {
				text = part.Get("refusal")
			}
			if text.Type != gjson.String {
				err = paramErr(fmt.Sprintf("messages[%d].content[%d]", i, j), "assistant content parts must be text or refusal")
				return false
			}
			w.part('m')
			w.dst = appendTextPart(w.dst, text)
			return true
		})
		if err != nil {
			return err
		}
	case content.Exists() && content.Type != gjson.Null:
		return paramErr(fmt.Sprintf("messages[%d].content", i), "content must be a string or an array of parts")
	}
	calls := m.Get("tool_calls")
	if !calls.IsArray() {
		return nil
	}
	signed := false
	calls.ForEach(func(_, call gjson.Result) bool {
		signed = call.Get("extra_content.google.thought_signature").Type == gjson.String
		return !signed
	})
	var err error
	j := -1
	calls.ForEach(func(_, call gjson.Result) bool {
		j++
		err = appendFunctionCall(w, call, fmt.Sprintf("messages[%d].tool_calls[%d]", i, j), j == 0 && !signed, names)
		return err == nil
	})
	return err
}

// appendFunctionCall appends one OpenAI tool call as a functionCall part.
func appendFunctionCall(w *contentWriter, call gjson.Result, param string, placeholder bool, names map[string]string) error {
	if t := call.Get("type"); t.Exists() && t.Str != "function" {
		return paramErr(param+".type", "only function tool calls are supported by Gemini")
	}
	name := call.Get("function.name")
	if name.Type != gjson.String || name.Str == "" {
		return paramErr(param+".function.name", "a tool call needs a function name")
	}
	args := strings.TrimSpace(call.Get("function.arguments").String())
	if args == "" {
		args = "{}"
	}
	if args[0] != '{' || !providers.ValidJSON([]byte(args)) {
		return paramErr(param+".function.arguments", "the arguments must be a JSON object")
	}
	if id := call.Get("id"); id.Type == gjson.String {
		names[id.Str] = name.String()
	}
	w.part('m')
	w.dst = append(w.dst, `{"functionCall":{"name":`...)
	w.dst = append(w.dst, name.Raw...)
	w.dst = append(w.dst, `,"args":`...)
	w.dst = append(w.dst, args...)
	w.dst = append(w.dst, '}')
	if sig := call.Get("extra_content.google.thought_signature"); sig.Type == gjson.String {
		w.dst = append(w.dst, `,"thoughtSignature":`...)
		w.dst = append(w.dst, sig.Raw...)
	} else if placeholder {
		w.dst = append(w.dst, `,"thoughtSignature":"`+signaturePlaceholder+`"`...)
	}
	w.dst = append(w.dst, '}')
	return nil
}

// appendToolResult appends a tool message as a functionResponse part.
func appendToolResult(w *contentWriter, m gjson.Result, i int, names map[string]string) error {
	id := m.Get("tool_call_id")
	name, ok := names[id.Str]
	if id.Type != gjson.String || !ok {
		return paramErr(fmt.Sprintf("messages[%d].tool_call_id", i), "does not match a tool call of an earlier assistant message")
	}
	var text strings.Builder
	err := forEachText(m.Get("content"), fmt.Sprintf("messages[%d].content", i), func(t gjson.Result) {
		text.WriteString(t.String())
	})
	if err != nil {
		return err
	}
	w.part('t')
	w.dst = append(w.dst, `{"functionResponse":{"name":`...)
	w.dst = rawjson.AppendString(w.dst, name)
	w.dst = append(w.dst, `,"response":`...)
	if s := strings.TrimSpace(text.String()); strings.HasPrefix(s, "{") && providers.ValidJSON([]byte(s)) {
		w.dst = append(w.dst, s...)
	} else {
		w.dst = append(w.dst, `{"content":`...)
		w.dst = rawjson.AppendString(w.dst, text.String())
		w.dst = append(w.dst, '}')
	}
	w.dst = append(w.dst, "}}"...)
	return nil
}

// appendTools appends tools and toolConfig.
func appendTools(dst []byte, tools, choice gjson.Result) ([]byte, error) {
	if !tools.IsArray() {
		if tools.Exists() && tools.Type != gjson.Null {
			return dst, paramErr("tools", "tools must be an array")
		}
		return dst, nil
	}
	mode, allowed, err := readToolChoice(choice)
	if err != nil {
		return dst, err
	}
	n := 0
	k := -1
	tools.ForEach(func(_, tool gjson.Result) bool {
		k++
		if tool.Get("type").Str != "function" {
			err = paramErr(fmt.Sprintf("tools[%d].type", k), "only function tools are supported by Gemini")
			return false
		}
		fn := tool.Get("function")
		name := fn.Get("name")
		if name.Type != gjson.String || name.Str == "" {
			err = paramErr(fmt.Sprintf("tools[%d].function.name", k), "a function needs a name")
			return false
		}
		if allowed != nil && !allowed[name.Str] {
			return true
		}
		if n == 0 {
			dst = append(dst, `,"tools":[{"functionDeclarations":[`...)
		} else {
			dst = append(dst, ',')
		}
		n++
		dst = append(dst, `{"name":`...)
		dst = append(dst, name.Raw...)
		if d := fn.Get("description"); d.Type == gjson.String {
			dst = append(dst, `,"description":`...)
			dst = append(dst, d.Raw...)
		}
		if params := fn.Get("parameters"); params.IsObject() && hasProperties(params) {
			dst = append(dst, `,"parameters":`...)
			sc := schemaCleaner{root: params}
			dst, err = sc.append(dst, params, fmt.Sprintf("tools[%d].function.parameters", k), 0)
		}
		dst = append(dst, '}')
		return err == nil
	})
	if err != nil || n == 0 {
		return dst, err
	}
	dst = append(dst, "]}]"...)
	if mode == "" {
		return dst, nil
	}
	dst = append(dst, `,"toolConfig":{"functionCallingConfig":{"mode":"`...)
	dst = append(dst, mode...)
	dst = append(dst, '"')
	if c := choice.Get("function.name"); choice.Get("type").Str == "function" {
		dst = append(dst, `,"allowedFunctionNames":[`...)
		dst = append(dst, c.Raw...)
		dst = append(dst, ']')
	}
	return append(dst, "}}"...), nil
}

// hasProperties reports whether an object schema declares any property
// (directly or through a $ref): Gemini refuses an OBJECT with none.
func hasProperties(schema gjson.Result) bool {
	if schema.Get("$ref").Exists() || schema.Get("anyOf").Exists() || schema.Get("oneOf").Exists() || schema.Get("allOf").Exists() {
		return true
	}
	props := schema.Get("properties")
	return props.IsObject() && strings.TrimSpace(props.Raw[1:len(props.Raw)-1]) != ""
}

// readToolChoice returns the function calling mode ("" when the client set
// none) and, for allowed_tools, the set of functions to declare.
func readToolChoice(choice gjson.Result) (string, map[string]bool, error) {
	switch {
	case !choice.Exists() || choice.Type == gjson.Null:
		return "", nil, nil
	case choice.Type == gjson.String:
		switch choice.Str {
		case "auto":
			return "AUTO", nil, nil
		case "none":
			return "NONE", nil, nil
		case "required":
			return "ANY", nil, nil
		}
	case choice.IsObject():
		switch choice.Get("type").Str {
		case "function":
			if n := choice.Get("function.name"); n.Type != gjson.String || n.Str == "" {
				return "", nil, paramErr("tool_choice.function.name", "a named tool choice needs a function name")
			}
			return "ANY", nil, nil
		case "allowed_tools":
			mode := "AUTO"
			switch choice.Get("allowed_tools.mode").Str {
			case "required":
				mode = "ANY"
			case "auto", "":
			default:
				return "", nil, paramErr("tool_choice.allowed_tools.mode", "mode must be auto or required")
			}
			allowed := make(map[string]bool)
			choice.Get("allowed_tools.tools").ForEach(func(_, t gjson.Result) bool {
				allowed[t.Get("function.name").String()] = true
				return true
			})
			return mode, allowed, nil
		}
	}
	return "", nil, paramErr("tool_choice", "tool_choice must be auto, none, required, a named function or allowed_tools")
}

// configWriter appends generationConfig members, opening the object at the
// first one.
type configWriter struct {
	dst []byte
	n   int
}

func (g *configWriter) key(k string) {
	if g.n == 0 {
		g.dst = append(g.dst, `,"generationConfig":{`...)
	} else {
		g.dst = append(g.dst, ',')
	}
	g.n++
	g.dst = append(g.dst, '"')
	g.dst = append(g.dst, k...)
	g.dst = append(g.dst, `":`...)
}

// number appends a numeric parameter under key k; null and absent values
// are skipped.
func (g *configWriter) number(k, param string, v gjson.Result) error {
	switch v.Type {
	case gjson.Null:
		return nil
	case gjson.Number:
		g.key(k)
		g.dst = append(g.dst, v.Raw...)
		return nil
	}
	return paramErr(param, "%s must be a number", param)
}

// appendGenerationConfig appends generationConfig from the sampling,
// length, stop, candidate, format and reasoning parameters.
func appendGenerationConfig(dst []byte, r *chatRequest, c *providers.Call) ([]byte, error) {
	g := configWriter{dst: dst}
	if err := appendStop(&g, r.stop); err != nil {
		return g.dst, err
	}
	switch {
	case c.ClampMaxTokens > 0:
		g.key("maxOutputTokens")
		g.dst = appendUint(g.dst, uint64(c.ClampMaxTokens))
	case r.maxCompletionTokens.Exists() && r.maxCompletionTokens.Type != gjson.Null:
		if err := g.number("maxOutputTokens", "max_completion_tokens", r.maxCompletionTokens); err != nil {
			return g.dst, err
		}
	default:
		if err := g.number("maxOutputTokens", "max_tokens", r.maxTokens); err != nil {
			return g.dst, err
		}
	}
	for _, f := range [...]struct {
		key, param string
		v          gjson.Result
	}{
		{"temperature", "temperature", r.temperature},
		{"topP", "top_p", r.topP},
		{"presencePenalty", "presence_penalty", r.presence},
		{"frequencyPenalty", "frequency_penalty", r.frequency},
		{"seed", "seed", r.seed},
	} {
		if err := g.number(f.key, f.param, f.v); err != nil {
			return g.dst, err
		}
	}
	if r.n.Exists() && r.n.Type != gjson.Null {
		n := r.n.Int()
		switch {
		case r.n.Type != gjson.Number || n < 1 || float64(n) != r.n.Num:
			return g.dst, paramErr("n", "n must be a positive integer")
		case n > 1 && c.Stream:
			return g.dst, paramErr("n", "Gemini streams one candidate only: n must be 1 with stream")
		case n > 1:
			g.key("candidateCount")
			g.dst = append(g.dst, r.n.Raw...)
		}
	}
	if err := appendResponseFormat(&g, r.responseFormat); err != nil {
		return g.dst, err
	}
	if err := appendThinking(&g, r.reasoning, c.Model); err != nil {
		return g.dst, err
	}
	if g.n > 0 {
		g.dst = append(g.dst, '}')
	}
	return g.dst, nil
}

// appendStop appends stopSequences from a string or an array of strings.
func appendStop(g *configWriter, stop gjson.Result) error {
	switch {
	case stop.Type == gjson.String:
		g.key("stopSequences")
		g.dst = append(g.dst, '[')
		g.dst = append(g.dst, stop.Raw...)
		g.dst = append(g.dst, ']')
	case stop.IsArray():
		n := 0
		var err error
		stop.ForEach(func(_, s gjson.Result) bool {
			if s.Type != gjson.String {
				err = paramErr("stop", "stop must be a string or an array of strings")
				return false
			}
			if n == 0 {
				g.key("stopSequences")
				g.dst = append(g.dst, '[')
			} else {
				g.dst = append(g.dst, ',')
			}
			n++
			g.dst = append(g.dst, s.Raw...)
			return true
		})
		if n > 0 {
			g.dst = append(g.dst, ']')
		}
		return err
	case stop.Exists() && stop.Type != gjson.Null:
		return paramErr("stop", "stop must be a string or an array of strings")
	}
	return nil
}

// appendResponseFormat maps response_format to responseMimeType and
// responseSchema.
func appendResponseFormat(g *configWriter, rf gjson.Result) error {
	if !rf.Exists() || rf.Type == gjson.Null {
		return nil
	}
	switch typ := rf.Get("type").Str; typ {
	case "text":
		return nil
	case "json_object":
		g.key("responseMimeType")
		g.dst = append(g.dst, `"application/json"`...)
		return nil
	case "json_schema":
		g.key("responseMimeType")
		g.dst = append(g.dst, `"application/json"`...)
		schema := rf.Get("json_schema.schema")
		if !schema.IsObject() {
			return nil
		}
		g.key("responseSchema")
		sc := schemaCleaner{root: schema, order: true}
		var err error
		g.dst, err = sc.append(g.dst, schema, "response_format.json_schema.schema", 0)
		return err
	default:
		return paramErr("response_format.type", "the response format %q is not supported by Gemini", typ)
	}
}

// thinkingBudgets maps reasoning_effort to a thinkingBudget for models
// before Gemini 3.
var thinkingBudgets = map[string]string{"none": "0", "minimal": "512", "low": "1024", "medium": "8192", "high": "24576"}

// appendThinking maps reasoning_effort to thinkingConfig: a thinkingLevel
// for gemini-3 models, a thinkingBudget otherwise.
func appendThinking(g *configWriter, effort gjson.Result, model string) error {
	if !effort.Exists() || effort.Type == gjson.Null {
		return nil
	}
	budget, ok := thinkingBudgets[effort.Str]
	if effort.Type != gjson.String || !ok {
		return paramErr("reasoning_effort", "reasoning_effort must be none, minimal, low, medium or high")
	}
	g.key("thinkingConfig")
	if strings.Contains(model, "gemini-3") {
		level := effort.Str
		if level == "none" {
			level = "minimal"
		}
		g.dst = append(g.dst, `{"thinkingLevel":"`...)
		g.dst = append(g.dst, level...)
		g.dst = append(g.dst, `"}`...)
		return nil
	}
	g.dst = append(g.dst, `{"thinkingBudget":`...)
	g.dst = append(g.dst, budget...)
	g.dst = append(g.dst, '}')
	return nil
}

// buildEmbeddings appends the batchEmbedContents request: one request per
// input string.
func buildEmbeddings(dst []byte, c *providers.Call) ([]byte, error) {
	if !c.Scanned && !providers.ValidJSON(c.Body) {
		return dst, paramErr("body", "the request body is not valid JSON")
	}
	root := gjson.Parse(bytesString(c.Body))
	if !root.IsObject() {
		return dst, paramErr("body", "the request body must be a JSON object")
	}
	model := c.Model
	input := root.Get("input")
	dims := root.Get("dimensions")
	if dims.Exists() && dims.Type != gjson.Null && (dims.Type != gjson.Number || dims.Num < 1 || dims.Num != float64(dims.Int())) {
		return dst, paramErr("dimensions", "dimensions must be a positive integer")
	}
	switch f := root.Get("encoding_format"); {
	case !f.Exists() || f.Type == gjson.Null || f.Str == "float" || f.Str == "base64":
	default:
		return dst, paramErr("encoding_format", "encoding_format must be float or base64")
	}
	resource := modelResource(model)
	n := 0
	add := func(text gjson.Result) {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = append(dst, `{"model":`...)
		dst = rawjson.AppendString(dst, resource)
		dst = append(dst, `,"content":{"parts":[{"text":`...)
		dst = append(dst, text.Raw...)
		dst = append(dst, `}]}`...)
		if dims.Type == gjson.Number {
			dst = append(dst, `,"outputDimensionality":`...)
			dst = append(dst, dims.Raw...)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `{"requests":[`...)
	switch {
	case input.Type == gjson.String:
		add(input)
	case input.IsArray():
		var err error
		input.ForEach(func(_, v gjson.Result) bool {
			if v.Type != gjson.String {
				err = paramErr("input", "Gemini embeds strings only: token arrays are not supported")
				return false
			}
			add(v)
			return true
		})
		if err != nil {
			return dst, err
		}
	default:
		return dst, paramErr("input", "input must be a string or an array of strings")
	}
	if n == 0 {
		return dst, paramErr("input", "input must not be empty")
	}
	return append(dst, "]}"...), nil
}
