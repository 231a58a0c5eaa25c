package gemini

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/rawjson"
)

// This file translates the gateway's inbound Gemini format (POST
// /v1beta/models/{model}:generateContent and :streamGenerateContent, as
// Gemini CLI and Google's SDKs send them) to the OpenAI chat format every
// provider speaks, and the answers back. The per-kind parameter policy in
// docs/ lists what maps to what and what is refused or dropped.
//
// Request (Gemini -> OpenAI):
//
//   - systemInstruction (a Content, or a string) -> one system message, its
//     text parts joined by newlines.
//   - contents: role "user" (or none) -> user messages, "model" -> assistant
//     messages. Parts: text; inlineData -> image_url (image/*), file (a PDF)
//     or input_audio (audio/wav, audio/mp3), as data URLs; fileData ->
//     image_url with the URI for images; functionCall -> tool_calls, id
//     from functionCall.id else "call_<n>" numbered over the conversation;
//     functionResponse -> a tool message (its response object as the
//     content) answering the call with its id, else the latest call of its
//     name. Thought parts and thoughtSignature are dropped.
//   - tools[].functionDeclarations (parametersJsonSchema, or parameters with
//     Gemini's upper-case OpenAPI types lowered) -> tools; other tools
//     (googleSearch, codeExecution, ...) are refused.
//   - toolConfig.functionCallingConfig.mode: AUTO -> auto, NONE -> none,
//     ANY -> required, or the named function when allowedFunctionNames has
//     one name.
//   - generationConfig: temperature, topP -> top_p, maxOutputTokens ->
//     max_tokens, stopSequences -> stop, presencePenalty,
//     frequencyPenalty, seed; responseMimeType application/json ->
//     response_format json_object, with responseSchema or
//     responseJsonSchema -> json_schema; thinkingConfig -> reasoning_effort
//     (thinkingLevel, or thinkingBudget: below 4096 low, below 16384
//     medium, else high; 0 and -1 leave the target's default), written last
//     so that a kind without reasoning effort gets it removed.
//     candidateCount above 1 and responseLogprobs are refused, as is
//     cachedContent (the target has not got the cache); topK,
//     includeThoughts, safetySettings and labels are dropped.
//
// Answers: the text of the OpenAI answer is one text part, each tool call
// a functionCall part (args the parsed arguments, id the call's id);
// finish_reason stop -> STOP, length -> MAX_TOKENS, content_filter ->
// SAFETY, tool_calls -> STOP; usage -> usageMetadata (promptTokenCount,
// candidatesTokenCount = completion minus reasoning, thoughtsTokenCount,
// cachedContentTokenCount, totalTokenCount).

// inboundRequest holds the top-level members of a Gemini request.
type inboundRequest struct {
	contents, system, tools, toolConfig, genConfig, cached, mock gjson.Result
}

// effortKey opens the reasoning_effort member RequestToOpenAI writes last
// (the same form the Messages translation writes, so that the gateway
// removes it the same way for kinds without reasoning effort).
const effortKey = `,"reasoning_effort":"`

// RequestToOpenAI converts a Gemini generateContent request body into an
// OpenAI chat request body for model (the model of the URL path),
// appended to dst; stream asks for a stream with its usage chunk. Input
// that cannot be expressed returns a *providers.ParamError; a body that is
// not a JSON object returns an error wrapping providers.ErrMalformed.
func RequestToOpenAI(dst, body []byte, model string, stream bool) ([]byte, error) {
	if !providers.ValidJSON(body) {
		return dst, fmt.Errorf("read gemini request: %w: body is not valid JSON", providers.ErrMalformed)
	}
	root := gjson.Parse(bytesString(body))
	if !root.IsObject() {
		return dst, fmt.Errorf("read gemini request: %w: body is not a JSON object", providers.ErrMalformed)
	}
	var r inboundRequest
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "contents":
			r.contents = v
		case "systemInstruction", "system_instruction":
			r.system = v
		case "tools":
			r.tools = v
		case "toolConfig", "tool_config":
			r.toolConfig = v
		case "generationConfig", "generation_config":
			r.genConfig = v
		case "cachedContent", "cached_content":
			r.cached = v
		case "mock":
			r.mock = v
		}
		return true
	})
	switch {
	case !r.contents.IsArray():
		return dst, paramErr("contents", "must be an array of contents")
	case r.cached.Type == gjson.String && r.cached.Str != "":
		return dst, paramErr("cachedContent", "cached contents are kept by Gemini itself and cannot be used through this gateway")
	}
	out := append(dst, `{"model":`...)
	out = rawjson.AppendString(out, model)
	out = append(out, `,"messages":[`...)
	w := inMessages{dst: out}
	if err := w.system(r.system); err != nil {
		return w.dst, err
	}
	if err := w.contents(r.contents); err != nil {
		return w.dst, err
	}
	out = append(w.dst, ']')
	if stream {
		out = append(out, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	var err error
	if out, err = appendInboundTools(out, r.tools, r.toolConfig); err != nil {
		return out, err
	}
	effort := ""
	if out, effort, err = appendInboundConfig(out, r.genConfig); err != nil {
		return out, err
	}
	if r.mock.IsObject() {
		out = append(out, `,"mock":`...)
		out = append(out, r.mock.Raw...)
	}
	if effort != "" { // last, so that it can be removed
		out = append(out, effortKey...)
		out = append(out, effort...)
		out = append(out, '"')
	}
	return append(out, '}'), nil
}

// inMessages writes OpenAI messages from Gemini contents.
type inMessages struct {
	dst   []byte
	n     int      // messages written
	calls int      // function calls seen, for ids
	names []string // the id of the latest call of each name: name, id pairs
}

// begin starts a message with its role.
func (w *inMessages) begin(role string) {
	if w.n > 0 {
		w.dst = append(w.dst, ',')
	}
	w.n++
	w.dst = append(w.dst, `{"role":"`...)
	w.dst = append(w.dst, role...)
	w.dst = append(w.dst, '"')
}

// system writes the system instruction as one system message.
func (w *inMessages) system(sys gjson.Result) error {
	switch {
	case !sys.Exists() || sys.Type == gjson.Null:
		return nil
	case sys.Type == gjson.String:
		w.begin("system")
		w.dst = append(w.dst, `,"content":`...)
		w.dst = append(w.dst, sys.Raw...)
		w.dst = append(w.dst, '}')
		return nil
	case !sys.IsObject():
		return paramErr("systemInstruction", "must be a content with text parts")
	}
	n := 0
	var err error
	sys.Get("parts").ForEach(func(k, p gjson.Result) bool {
		t := p.Get("text")
		if t.Type != gjson.String {
			err = paramErr(fmt.Sprintf("systemInstruction.parts[%d]", k.Int()), "only text parts are supported in the system instruction")
			return false
		}
		if n == 0 {
			w.begin("system")
			w.dst = append(w.dst, `,"content":"`...)
		} else {
			w.dst = append(w.dst, `\n`...)
		}
		n++
		w.dst = append(w.dst, rawInner(t)...)
		return true
	})
	if n > 0 {
		w.dst = append(w.dst, `"}`...)
	}
	return err
}

// contents writes the conversation.
func (w *inMessages) contents(cs gjson.Result) error {
	var err error
	i := -1
	cs.ForEach(func(_, c gjson.Result) bool {
		i++
		if !c.IsObject() {
			err = paramErr(fmt.Sprintf("contents[%d]", i), "must be an object")
			return false
		}
		parts := c.Get("parts")
		if !parts.IsArray() {
			err = paramErr(fmt.Sprintf("contents[%d].parts", i), "must be an array of parts")
			return false
		}
		switch role := c.Get("role").Str; role {
		case "", "user":
			err = w.user(parts, i)
		case "model":
			err = w.model(parts, i)
		default:
			err = paramErr(fmt.Sprintf("contents[%d].role", i), "role must be user or model, not %q", role)
		}
		return err == nil
	})
	return err
}

// user writes a user content: its functionResponse parts as tool
// messages, then one user message with the other parts.
func (w *inMessages) user(parts gjson.Result, i int) error {
	var err error
	j := -1
	parts.ForEach(func(_, p gjson.Result) bool {
		j++
		if fr := p.Get("functionResponse"); fr.Exists() {
			err = w.toolResult(fr, i, j)
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	n := 0
	j = -1
	parts.ForEach(func(_, p gjson.Result) bool {
		j++
		if p.Get("functionResponse").Exists() || p.Get("thought").Type == gjson.True {
			return true
		}
		if n == 0 {
			w.begin("user")
			w.dst = append(w.dst, `,"content":[`...)
		} else {
			w.dst = append(w.dst, ',')
		}
		n++
		w.dst, err = appendInboundPart(w.dst, p, i, j)
		return err == nil
	})
	if n > 0 {
		w.dst = append(w.dst, "]}"...)
	}
	return err
}

// appendUserPart writes one user part as an OpenAI content part.
func appendInboundPart(dst []byte, p gjson.Result, i, j int) ([]byte, error) {
	param := fmt.Sprintf("contents[%d].parts[%d]", i, j)
	if t := p.Get("text"); t.Type == gjson.String {
		dst = append(dst, `{"type":"text","text":`...)
		dst = append(dst, t.Raw...)
		return append(dst, '}'), nil
	}
	if d := p.Get("inlineData"); d.IsObject() || p.Get("inline_data").IsObject() {
		if !d.IsObject() {
			d = p.Get("inline_data")
		}
		mt := d.Get("mimeType").Str
		if mt == "" {
			mt = d.Get("mime_type").Str
		}
		data := d.Get("data")
		if data.Type != gjson.String {
			return dst, paramErr(param+".inlineData.data", "must be base64 data")
		}
		switch {
		case strings.HasPrefix(mt, "image/"):
			dst = append(dst, `{"type":"image_url","image_url":{"url":"data:`...)
			dst = rawjson.AppendStringBody(dst, mt)
			dst = append(dst, ";base64,"...)
			dst = append(dst, rawInner(data)...)
			return append(dst, `"}}`...), nil
		case mt == "application/pdf":
			dst = append(dst, `{"type":"file","file":{"filename":"document.pdf","file_data":"data:application/pdf;base64,`...)
			dst = append(dst, rawInner(data)...)
			return append(dst, `"}}`...), nil
		case mt == "audio/wav" || mt == "audio/mp3" || mt == "audio/mpeg":
			format := "wav"
			if mt != "audio/wav" {
				format = "mp3"
			}
			dst = append(dst, `{"type":"input_audio","input_audio":{"data":`...)
			dst = append(dst, data.Raw...)
			dst = append(dst, `,"format":"`...)
			dst = append(dst, format...)
			return append(dst, `"}}`...), nil
		}
		return dst, paramErr(param+".inlineData.mimeType", "MIME type %q is not supported by this gateway", mt)
	}
	if f := p.Get("fileData"); f.IsObject() {
		mt, uri := f.Get("mimeType").Str, f.Get("fileUri")
		if !strings.HasPrefix(mt, "image/") || uri.Type != gjson.String || !(strings.HasPrefix(uri.Str, "https://") || strings.HasPrefix(uri.Str, "http://")) {
			return dst, paramErr(param+".fileData", "only images at http(s) URLs are supported by this gateway")
		}
		dst = append(dst, `{"type":"image_url","image_url":{"url":`...)
		dst = append(dst, uri.Raw...)
		return append(dst, "}}"...), nil
	}
	return dst, paramErr(param, "this part is not supported by this gateway (text, inlineData, fileData, functionCall and functionResponse are)")
}

// toolResult writes a functionResponse as a tool message.
func (w *inMessages) toolResult(fr gjson.Result, i, j int) error {
	param := fmt.Sprintf("contents[%d].parts[%d].functionResponse", i, j)
	name := fr.Get("name")
	if name.Type != gjson.String || name.Str == "" {
		return paramErr(param+".name", "a function response needs the function's name")
	}
	id := fr.Get("id").Str
	if id == "" {
		for k := len(w.names) - 2; k >= 0; k -= 2 {
			if w.names[k] == name.Str {
				id = w.names[k+1]
				break
			}
		}
	}
	if id == "" {
		return paramErr(param, "the response to %q answers no earlier function call", name.Str)
	}
	w.begin("tool")
	w.dst = append(w.dst, `,"tool_call_id":`...)
	w.dst = rawjson.AppendString(w.dst, id)
	w.dst = append(w.dst, `,"content":"`...)
	resp := fr.Get("response")
	if resp.Raw == "" {
		resp.Raw = "{}"
	}
	w.dst = rawjson.AppendStringBody(w.dst, resp.Raw)
	w.dst = append(w.dst, `"}`...)
	return nil
}

// model writes a model content: text parts as the content, functionCall
// parts as tool calls; thought parts are dropped.
func (w *inMessages) model(parts gjson.Result, i int) error {
	var err error
	texts, calls, j := 0, 0, -1
	parts.ForEach(func(_, p gjson.Result) bool {
		j++
		switch {
		case p.Get("thought").Type == gjson.True:
		case p.Get("text").Type == gjson.String:
			texts++
		case p.Get("functionCall").IsObject():
			calls++
		default:
			err = paramErr(fmt.Sprintf("contents[%d].parts[%d]", i, j), "a model part must be text or a functionCall")
		}
		return err == nil
	})
	if err != nil || texts+calls == 0 {
		return err
	}
	w.begin("assistant")
	if texts == 0 {
		w.dst = append(w.dst, `,"content":null`...)
	} else {
		w.dst = append(w.dst, `,"content":"`...)
		parts.ForEach(func(_, p gjson.Result) bool {
			if t := p.Get("text"); t.Type == gjson.String && p.Get("thought").Type != gjson.True {
				w.dst = append(w.dst, rawInner(t)...)
			}
			return true
		})
		w.dst = append(w.dst, '"')
	}
	if calls > 0 {
		w.dst = append(w.dst, `,"tool_calls":[`...)
		k := 0
		j = -1
		parts.ForEach(func(_, p gjson.Result) bool {
			j++
			fc := p.Get("functionCall")
			if !fc.IsObject() || p.Get("thought").Type == gjson.True {
				return true
			}
			name := fc.Get("name")
			if name.Type != gjson.String || name.Str == "" {
				err = paramErr(fmt.Sprintf("contents[%d].parts[%d].functionCall.name", i, j), "a function call needs a name")
				return false
			}
			args := fc.Get("args")
			if args.Exists() && !args.IsObject() {
				err = paramErr(fmt.Sprintf("contents[%d].parts[%d].functionCall.args", i, j), "must be an object")
				return false
			}
			id := fc.Get("id").Str
			if id == "" {
				id = "call_" + strconv.Itoa(w.calls)
			}
			w.calls++
			w.names = append(w.names, name.Str, id)
			if k > 0 {
				w.dst = append(w.dst, ',')
			}
			k++
			w.dst = append(w.dst, `{"id":`...)
			w.dst = rawjson.AppendString(w.dst, id)
			w.dst = append(w.dst, `,"type":"function","function":{"name":`...)
			w.dst = append(w.dst, name.Raw...)
			w.dst = append(w.dst, `,"arguments":"`...)
			w.dst = appendArgs(w.dst, args.Raw)
			w.dst = append(w.dst, `"}}`...)
			return true
		})
		w.dst = append(w.dst, ']')
	}
	w.dst = append(w.dst, '}')
	return err
}

// appendInboundTools maps functionDeclarations and the function calling
// config.
func appendInboundTools(dst []byte, tools, config gjson.Result) ([]byte, error) {
	if !tools.Exists() || tools.Type == gjson.Null {
		return dst, nil
	}
	if !tools.IsArray() {
		return dst, paramErr("tools", "must be an array of tools")
	}
	var err error
	n, i := 0, -1
	tools.ForEach(func(_, t gjson.Result) bool {
		i++
		decls := t.Get("functionDeclarations")
		if !decls.Exists() {
			decls = t.Get("function_declarations")
		}
		other := false
		t.ForEach(func(k, _ gjson.Result) bool {
			other = k.Str != "functionDeclarations" && k.Str != "function_declarations"
			return !other
		})
		if other || !decls.IsArray() {
			err = paramErr(fmt.Sprintf("tools[%d]", i), "only functionDeclarations are supported on models served by translation")
			return false
		}
		j := -1
		decls.ForEach(func(_, d gjson.Result) bool {
			j++
			name := d.Get("name")
			if name.Type != gjson.String || name.Str == "" {
				err = paramErr(fmt.Sprintf("tools[%d].functionDeclarations[%d].name", i, j), "a function needs a name")
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
			if desc := d.Get("description"); desc.Type == gjson.String {
				dst = append(dst, `,"description":`...)
				dst = append(dst, desc.Raw...)
			}
			dst = append(dst, `,"parameters":`...)
			switch s, ps := d.Get("parametersJsonSchema"), d.Get("parameters"); {
			case s.IsObject():
				dst = append(dst, s.Raw...)
			case ps.IsObject():
				dst = appendLowerTypes(dst, ps)
			default:
				dst = append(dst, `{"type":"object","properties":{}}`...)
			}
			dst = append(dst, "}}"...)
			return true
		})
		return err == nil
	})
	if err != nil {
		return dst, err
	}
	if n == 0 {
		return dst, nil
	}
	dst = append(dst, ']')
	fc := config.Get("functionCallingConfig")
	if !fc.IsObject() {
		return dst, nil
	}
	switch mode := fc.Get("mode").Str; mode {
	case "", "MODE_UNSPECIFIED", "AUTO", "VALIDATED":
		dst = append(dst, `,"tool_choice":"auto"`...)
	case "NONE":
		dst = append(dst, `,"tool_choice":"none"`...)
	case "ANY":
		names := fc.Get("allowedFunctionNames").Array()
		if len(names) == 1 && names[0].Type == gjson.String {
			dst = append(dst, `,"tool_choice":{"type":"function","function":{"name":`...)
			dst = append(dst, names[0].Raw...)
			dst = append(dst, "}}"...)
		} else {
			dst = append(dst, `,"tool_choice":"required"`...)
		}
	default:
		return dst, paramErr("toolConfig.functionCallingConfig.mode", "unknown mode %q", mode)
	}
	return dst, nil
}

// appendLowerTypes copies a Gemini Schema, lowering its upper-case type
// names (OBJECT, STRING, ...) to JSON Schema's.
func appendLowerTypes(dst []byte, s gjson.Result) []byte {
	switch {
	case s.IsObject():
		dst = append(dst, '{')
		n := 0
		s.ForEach(func(k, v gjson.Result) bool {
			if n > 0 {
				dst = append(dst, ',')
			}
			n++
			dst = append(dst, k.Raw...)
			dst = append(dst, ':')
			if k.Str == "type" && v.Type == gjson.String {
				dst = rawjson.AppendString(dst, strings.ToLower(v.Str))
			} else {
				dst = appendLowerTypes(dst, v)
			}
			return true
		})
		return append(dst, '}')
	case s.IsArray():
		dst = append(dst, '[')
		n := 0
		s.ForEach(func(_, v gjson.Result) bool {
			if n > 0 {
				dst = append(dst, ',')
			}
			n++
			dst = appendLowerTypes(dst, v)
			return true
		})
		return append(dst, ']')
	}
	return append(dst, s.Raw...)
}

// appendInboundConfig maps generationConfig and returns the reasoning
// effort its thinkingConfig asks for ("" for the target's default).
func appendInboundConfig(dst []byte, gc gjson.Result) ([]byte, string, error) {
	if !gc.Exists() || gc.Type == gjson.Null {
		return dst, "", nil
	}
	if !gc.IsObject() {
		return dst, "", paramErr("generationConfig", "must be an object")
	}
	var err error
	effort := ""
	var mime, schema gjson.Result
	gc.ForEach(func(k, v gjson.Result) bool {
		key := ""
		switch k.Str {
		case "temperature":
			key = "temperature"
		case "topP", "top_p":
			key = "top_p"
		case "maxOutputTokens", "max_output_tokens":
			key = "max_tokens"
		case "presencePenalty", "presence_penalty":
			key = "presence_penalty"
		case "frequencyPenalty", "frequency_penalty":
			key = "frequency_penalty"
		case "seed":
			key = "seed"
		case "stopSequences", "stop_sequences":
			if v.Type == gjson.Null {
				return true
			}
			ok := v.IsArray()
			v.ForEach(func(_, s gjson.Result) bool {
				ok = ok && s.Type == gjson.String
				return ok
			})
			if !ok {
				err = paramErr("generationConfig.stopSequences", "must be an array of strings")
				return false
			}
			if len(v.Array()) > 0 {
				dst = append(dst, `,"stop":`...)
				dst = append(dst, v.Raw...)
			}
			return true
		case "candidateCount", "candidate_count":
			if v.Type != gjson.Null && v.Int() > 1 {
				err = paramErr("generationConfig.candidateCount", "only one candidate is supported by this gateway")
				return false
			}
			return true
		case "responseLogprobs", "response_logprobs", "logprobs":
			if v.Type == gjson.True || v.Type == gjson.Number && v.Int() > 0 {
				err = paramErr("generationConfig."+k.Str, "log probabilities are not supported by this gateway")
				return false
			}
			return true
		case "responseMimeType", "response_mime_type":
			mime = v
			return true
		case "responseSchema", "response_schema", "responseJsonSchema", "response_json_schema", "_responseJsonSchema":
			schema = v
			return true
		case "thinkingConfig", "thinking_config":
			effort, err = thinkingEffort(v)
			return err == nil
		default: // topK, responseModalities, mediaResolution, ...: dropped
			return true
		}
		if v.Type == gjson.Null {
			return true
		}
		if v.Type != gjson.Number {
			err = paramErr("generationConfig."+k.Str, "must be a number")
			return false
		}
		dst = append(dst, ',', '"')
		dst = append(dst, key...)
		dst = append(dst, '"', ':')
		dst = append(dst, v.Raw...)
		return true
	})
	if err != nil {
		return dst, "", err
	}
	switch m := mime.Str; {
	case m == "" || m == "text/plain":
		if schema.IsObject() {
			return dst, "", paramErr("generationConfig.responseSchema", "needs responseMimeType application/json")
		}
	case m == "application/json" && schema.IsObject():
		dst = append(dst, `,"response_format":{"type":"json_schema","json_schema":{"name":"output","schema":`...)
		dst = appendLowerTypes(dst, schema)
		dst = append(dst, "}}"...)
	case m == "application/json":
		dst = append(dst, `,"response_format":{"type":"json_object"}`...)
	default:
		return dst, "", paramErr("generationConfig.responseMimeType", "%q is not supported by this gateway (text/plain and application/json are)", m)
	}
	return dst, effort, nil
}

// thinkingEffort maps a thinkingConfig to an OpenAI reasoning effort.
func thinkingEffort(tc gjson.Result) (string, error) {
	if !tc.IsObject() {
		return "", nil
	}
	if l := tc.Get("thinkingLevel"); l.Exists() && l.Type != gjson.Null {
		switch strings.ToLower(l.Str) {
		case "minimal", "low":
			return "low", nil
		case "medium":
			return "medium", nil
		case "high":
			return "high", nil
		case "thinking_level_unspecified":
			return "", nil
		}
		return "", paramErr("generationConfig.thinkingConfig.thinkingLevel", "must be minimal, low, medium or high, not %s", l.Raw)
	}
	b := tc.Get("thinkingBudget")
	if !b.Exists() || b.Type == gjson.Null {
		return "", nil
	}
	if b.Type != gjson.Number {
		return "", paramErr("generationConfig.thinkingConfig.thinkingBudget", "must be a number")
	}
	switch n := b.Int(); {
	case n <= 0:
		return "", nil
	case n < 4096:
		return "low", nil
	case n < 16384:
		return "medium", nil
	}
	return "high", nil
}

// finishFromOpenAI maps an OpenAI finish reason to a Gemini finishReason.
func finishFromOpenAI(reason string) string {
	switch reason {
	case "length":
		return "MAX_TOKENS"
	case "content_filter":
		return "SAFETY"
	}
	return "STOP"
}

// appendUsageMetadata writes a Gemini usageMetadata member from usage.
func appendUsageMetadata(dst []byte, u providers.Usage) []byte {
	cand := u.Completion
	if u.Reasoning <= cand {
		cand -= u.Reasoning
	}
	dst = append(dst, `"usageMetadata":{"promptTokenCount":`...)
	dst = appendUint(dst, u.Prompt)
	dst = append(dst, `,"candidatesTokenCount":`...)
	dst = appendUint(dst, cand)
	dst = append(dst, `,"totalTokenCount":`...)
	dst = appendUint(dst, u.Prompt+u.Completion)
	if u.Cached > 0 {
		dst = append(dst, `,"cachedContentTokenCount":`...)
		dst = appendUint(dst, u.Cached)
	}
	if u.Reasoning > 0 {
		dst = append(dst, `,"thoughtsTokenCount":`...)
		dst = appendUint(dst, u.Reasoning)
	}
	return append(dst, '}')
}

// openAIUsage reads an OpenAI usage object.
func openAIUsage(u gjson.Result) providers.Usage {
	if !u.IsObject() {
		return providers.Usage{}
	}
	return providers.Usage{Reported: true, Prompt: u.Get("prompt_tokens").Uint(), Completion: u.Get("completion_tokens").Uint(),
		Cached: u.Get("prompt_tokens_details.cached_tokens").Uint(), Reasoning: u.Get("completion_tokens_details.reasoning_tokens").Uint()}
}

// appendCallPart writes a functionCall part from a tool call's id, name
// and arguments (a JSON string's text, decoded); arguments that are not a
// JSON object are an error.
func appendCallPart(dst []byte, id, name, args string) ([]byte, error) {
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	if !gjson.Valid(args) || !gjson.Parse(args).IsObject() {
		return dst, fmt.Errorf("translate tool call %s: %w: arguments are not a JSON object", name, providers.ErrMalformed)
	}
	dst = append(dst, `{"functionCall":{"name":`...)
	dst = rawjson.AppendString(dst, name)
	dst = append(dst, `,"args":`...)
	dst = append(dst, args...)
	if id != "" {
		dst = append(dst, `,"id":`...)
		dst = rawjson.AppendString(dst, id)
	}
	return append(dst, "}}"...), nil
}

// ResponseFromOpenAI converts an OpenAI chat.completion body into a
// GenerateContentResponse for model, appended to dst. A body that is not a
// chat.completion, or a tool call whose arguments are not a JSON object,
// returns an error wrapping providers.ErrMalformed.
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
	dst = append(dst, `{"candidates":[{"content":{"role":"model","parts":[`...)
	n := 0
	if c := msg.Get("content"); c.Type == gjson.String && c.Str != "" {
		dst = append(dst, `{"text":`...)
		dst = append(dst, c.Raw...)
		dst = append(dst, '}')
		n++
	} else if r := msg.Get("refusal"); r.Type == gjson.String && r.Str != "" {
		dst = append(dst, `{"text":`...)
		dst = append(dst, r.Raw...)
		dst = append(dst, '}')
		n++
	}
	var err error
	msg.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst, err = appendCallPart(dst, tc.Get("id").Str, tc.Get("function.name").Str, tc.Get("function.arguments").Str)
		return err == nil
	})
	if err != nil {
		return dst, err
	}
	if n == 0 {
		dst = append(dst, `{"text":""}`...)
	}
	dst = append(dst, `]},"finishReason":"`...)
	dst = append(dst, finishFromOpenAI(choice.Get("finish_reason").Str)...)
	dst = append(dst, `","index":0}]`...)
	if u := openAIUsage(gjson.Get(s, "usage")); u.Reported {
		dst = append(dst, ',')
		dst = appendUsageMetadata(dst, u)
	}
	dst = append(dst, `,"modelVersion":`...)
	dst = rawjson.AppendString(dst, model)
	if id := gjson.Get(s, "id"); id.Type == gjson.String && id.Str != "" {
		dst = append(dst, `,"responseId":`...)
		dst = append(dst, id.Raw...)
	}
	return append(dst, '}'), nil
}

// Status returns the google.rpc status name Gemini answers with an HTTP
// status code.
func Status(code int) string {
	switch code {
	case 400, 413:
		return "INVALID_ARGUMENT"
	case 401:
		return "UNAUTHENTICATED"
	case 403:
		return "PERMISSION_DENIED"
	case 404:
		return "NOT_FOUND"
	case 409:
		return "ABORTED"
	case 429:
		return "RESOURCE_EXHAUSTED"
	case 499:
		return "CANCELLED"
	case 501:
		return "UNIMPLEMENTED"
	case 503:
		return "UNAVAILABLE"
	case 504:
		return "DEADLINE_EXCEEDED"
	}
	if code >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}

// AppendErrorBody appends a Gemini error body
// {"error":{"code","message","status"}} for an HTTP status code.
func AppendErrorBody(dst []byte, code int, message string) []byte {
	dst = append(dst, `{"error":{"code":`...)
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = append(dst, `,"message":`...)
	dst = rawjson.AppendString(dst, message)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, Status(code)...)
	return append(dst, `"}}`...)
}
