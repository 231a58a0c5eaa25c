package anthropic

import (
	"fmt"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
)

// chatRequest holds the top-level members of an OpenAI chat request that
// the translation maps (see Policy). Values point into the body.
type chatRequest struct {
	messages, tools, toolChoice, parallel, stop gjson.Result
	temperature, topP, topK, responseFormat     gjson.Result
	user, reasoningEffort, thinking             gjson.Result
	maxTokens, maxCompletionTokens, mock        gjson.Result
}

// jsonModeInstruction is the system text added for response_format
// json_object, which Anthropic has no switch for.
const jsonModeInstruction = "Respond with a single valid JSON object and nothing else."

// defaultSchema is the input_schema of a function declared without
// parameters.
const defaultSchema = `{"type":"object","properties":{}}`

// effortBudget returns the thinking budget for a reasoning_effort.
func effortBudget(effort string) (int64, bool) {
	switch effort {
	case "low":
		return 1024, true
	case "medium":
		return 4096, true
	case "high":
		return 16384, true
	}
	return 0, false
}

// contentParam names part j of message i's content (the whole content
// when j < 0), for errors.
func contentParam(i, j int) string {
	if j < 0 {
		return fmt.Sprintf("messages[%d].content", i)
	}
	return fmt.Sprintf("messages[%d].content[%d]", i, j)
}

func paramErr(param, format string, args ...any) error {
	return &providers.ParamError{Param: param, Message: fmt.Sprintf(format, args...)}
}

// parseChat reads the members of c's chat request that Policy maps, and
// refuses those it refuses.
func parseChat(c *providers.Call) (chatRequest, error) {
	var in providers.ChatRequest
	if err := Policy.Read(&in, c); err != nil {
		return chatRequest{}, err
	}
	get := func(p providers.ChatParam) gjson.Result { return gjson.Parse(in.Raw(p)) }
	r := chatRequest{
		messages: get(providers.ParamMessages), tools: get(providers.ParamTools),
		toolChoice: get(providers.ParamToolChoice), parallel: get(providers.ParamParallelToolCalls),
		stop: get(providers.ParamStop), temperature: get(providers.ParamTemperature),
		topP: get(providers.ParamTopP), topK: get(providers.ParamTopK),
		responseFormat: get(providers.ParamResponseFormat), user: get(providers.ParamUser),
		reasoningEffort: get(providers.ParamReasoningEffort), thinking: get(providers.ParamThinking),
		maxTokens: get(providers.ParamMaxTokens), maxCompletionTokens: get(providers.ParamMaxCompletionTokens),
		mock: get(providers.ParamMock),
	}
	if !r.messages.IsArray() {
		return r, paramErr("messages", "must be an array")
	}
	return r, nil
}

// appendRequest appends the Messages request body for c.
func (p *Provider) appendRequest(dst []byte, c *providers.Call) ([]byte, error) {
	r, err := parseChat(c)
	if err != nil {
		return dst, err
	}
	maxTokens := p.maxTokensFor(c, &r)
	dst = append(dst, `{"model":`...)
	dst = rawjson.AppendString(dst, c.Model)
	dst = append(dst, `,"max_tokens":`...)
	dst = appendUint(dst, uint64(maxTokens))
	jsonMode, err := responseFormat(r.responseFormat)
	if err != nil {
		return dst, err
	}
	if dst, err = appendSystem(dst, r.messages, jsonMode); err != nil {
		return dst, err
	}
	if dst, err = appendMessages(dst, r.messages); err != nil {
		return dst, err
	}
	if dst, err = appendTools(dst, &r); err != nil {
		return dst, err
	}
	if dst, err = appendSampling(dst, &r); err != nil {
		return dst, err
	}
	if r.user.Type == gjson.String && r.user.Str != "" {
		dst = append(dst, `,"metadata":{"user_id":`...)
		dst = rawjson.AppendRawString(dst, r.user.Raw)
		dst = append(dst, '}')
	}
	if dst, err = appendThinking(dst, &r, maxTokens); err != nil {
		return dst, err
	}
	if c.Stream {
		dst = append(dst, `,"stream":true`...)
	}
	return appendMock(dst, r.mock), nil
}

// appendMock passes the test mock's per-request "mock" object through
// (see package mockllm) and closes the body.
func appendMock(dst []byte, mock gjson.Result) []byte {
	if mock.IsObject() {
		dst = append(dst, `,"mock":`...)
		dst = rawjson.AppendRaw(dst, mock.Raw)
	}
	return append(dst, '}')
}

// maxTokensFor picks max_tokens: the budget clamp, else the request's,
// else the provider's default.
func (p *Provider) maxTokensFor(c *providers.Call, r *chatRequest) int64 {
	switch {
	case c.ClampMaxTokens > 0:
		return c.ClampMaxTokens
	case c.MaxTokens > 0:
		return c.MaxTokens
	case r.maxCompletionTokens.Type == gjson.Number && r.maxCompletionTokens.Int() > 0:
		return r.maxCompletionTokens.Int()
	case r.maxTokens.Type == gjson.Number && r.maxTokens.Int() > 0:
		return r.maxTokens.Int()
	}
	return p.maxTokens
}

// responseFormat reports whether the request asks for JSON mode; it
// refuses json_schema (Anthropic has no native structured output).
func responseFormat(rf gjson.Result) (jsonMode bool, err error) {
	if !rf.Exists() || rf.Type == gjson.Null {
		return false, nil
	}
	switch t := rf.Get("type").Str; t {
	case "text":
		return false, nil
	case "json_object":
		return true, nil
	case "json_schema":
		return false, paramErr("response_format", "json_schema is not supported by the Anthropic API; use json_object or a tool")
	default:
		return false, paramErr("response_format", "unknown type %q", t)
	}
}

// appendSystem appends every system and developer message, in order, as
// the top-level system blocks, and the JSON mode instruction.
func appendSystem(dst []byte, messages gjson.Result, jsonMode bool) ([]byte, error) {
	n := 0
	block := func(textRaw string) {
		if n == 0 {
			dst = append(dst, `,"system":[`...)
		} else {
			dst = append(dst, ',')
		}
		n++
		dst = append(dst, `{"type":"text","text":`...)
		dst = rawjson.AppendRawString(dst, textRaw)
		dst = append(dst, '}')
	}
	var err error
	i := -1
	messages.ForEach(func(_, m gjson.Result) bool {
		i++
		if role := m.Get("role").Str; role != "system" && role != "developer" {
			return true
		}
		err = forEachText(m.Get("content"), i, block)
		return err == nil
	})
	if err != nil {
		return dst, err
	}
	if jsonMode {
		block(`"` + jsonModeInstruction + `"`)
	}
	if n > 0 {
		dst = append(dst, ']')
	}
	return dst, nil
}

// forEachText calls f with the raw token of each non-empty text of a
// string content or an array of text parts (message i's). Other parts are
// refused.
func forEachText(content gjson.Result, i int, f func(textRaw string)) error {
	switch {
	case content.Type == gjson.String:
		if content.Raw != `""` {
			f(content.Raw)
		}
		return nil
	case content.Type == gjson.Null || !content.Exists():
		return nil
	case !content.IsArray():
		return paramErr(contentParam(i, -1), "must be a string or an array of text parts")
	}
	var err error
	j := -1
	content.ForEach(func(_, part gjson.Result) bool {
		j++
		if t := part.Get("type").Str; t != "text" {
			err = paramErr(contentParam(i, j), "only text parts are allowed here, not %q", t)
			return false
		}
		if t := part.Get("text"); t.Type == gjson.String && t.Raw != `""` {
			f(t.Raw)
		}
		return true
	})
	return err
}

// turns writes the messages array, merging consecutive blocks of the same
// role into one turn, as Anthropic requires alternating roles.
type turns struct {
	dst   []byte
	role  string // role of the open turn; "" before the first
	n     int    // blocks in the open turn
	count int
}

// block opens a block of role: it starts a new turn when the role changes
// and writes the separator.
func (t *turns) block(role string) {
	if role != t.role {
		if t.role != "" {
			t.dst = append(t.dst, "]}"...)
		}
		if t.count > 0 {
			t.dst = append(t.dst, ',')
		}
		t.dst = append(t.dst, `{"role":"`...)
		t.dst = append(t.dst, role...)
		t.dst = append(t.dst, `","content":[`...)
		t.role, t.n = role, 0
		t.count++
	}
	if t.n > 0 {
		t.dst = append(t.dst, ',')
	}
	t.n++
}

func (t *turns) text(role, textRaw string) {
	t.block(role)
	t.dst = append(t.dst, `{"type":"text","text":`...)
	t.dst = rawjson.AppendRawString(t.dst, textRaw)
	t.dst = append(t.dst, '}')
}

// appendMessages appends the conversation without its system messages.
func appendMessages(dst []byte, messages gjson.Result) ([]byte, error) {
	t := turns{dst: append(dst, `,"messages":[`...)}
	var err error
	i := -1
	messages.ForEach(func(_, m gjson.Result) bool {
		i++
		switch role := m.Get("role").Str; role {
		case "system", "developer":
		case "user":
			err = t.user(m.Get("content"), i)
		case "assistant":
			err = t.assistant(m, i)
		case "tool":
			err = t.tool(m, i)
		default:
			err = paramErr(fmt.Sprintf("messages[%d].role", i), "role %q is not supported", role)
		}
		return err == nil
	})
	if t.role != "" {
		t.dst = append(t.dst, "]}"...)
	}
	return append(t.dst, ']'), err
}

// user writes a user message's content blocks.
func (t *turns) user(content gjson.Result, i int) error {
	if content.Type == gjson.String {
		if content.Raw != `""` {
			t.text("user", content.Raw)
		}
		return nil
	}
	if !content.IsArray() {
		return paramErr(contentParam(i, -1), "must be a string or an array of parts")
	}
	var err error
	j := -1
	content.ForEach(func(_, part gjson.Result) bool {
		j++
		switch typ := part.Get("type").Str; typ {
		case "text":
			if tx := part.Get("text"); tx.Type == gjson.String && tx.Raw != `""` {
				t.text("user", tx.Raw)
			}
		case "image_url":
			u := part.Get("image_url")
			if u.IsObject() {
				u = u.Get("url")
			}
			t.block("user")
			t.dst, err = appendImage(t.dst, u.Str, i, j)
		case "file":
			t.block("user")
			t.dst, err = appendFile(t.dst, part.Get("file"), i, j)
		default:
			err = paramErr(contentParam(i, j), "content part type %q is not supported by the Anthropic API", typ)
		}
		return err == nil
	})
	return err
}

// imageTypes are the media types Anthropic accepts in image blocks.
var imageTypes = [...]string{"image/jpeg", "image/png", "image/gif", "image/webp"}

// appendImage appends an image block for a data URL (base64 source) or an
// http(s) URL (url source; never fetched here).
func appendImage(dst []byte, u string, i, j int) ([]byte, error) {
	if strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") {
		dst = append(dst, `{"type":"image","source":{"type":"url","url":`...)
		dst = rawjson.AppendString(dst, u)
		return append(dst, "}}"...), nil
	}
	mt, data, ok := parseDataURL(u)
	if !ok {
		return dst, paramErr(contentParam(i, j), "the image must be an http(s) URL or a base64 data URL")
	}
	if mt == "image/jpg" { // a common misspelling of the registered type
		mt = "image/jpeg"
	}
	known := false
	for _, t := range imageTypes {
		known = known || mt == t
	}
	if !known {
		return dst, paramErr(contentParam(i, j), "image type %q is not supported by the Anthropic API (jpeg, png, gif, webp)", mt)
	}
	dst = append(dst, `{"type":"image","source":{"type":"base64","media_type":`...)
	dst = rawjson.AppendString(dst, mt)
	dst = append(dst, `,"data":`...)
	dst = rawjson.AppendString(dst, data)
	return append(dst, "}}"...), nil
}

// appendFile appends a document block for a PDF given as file_data.
func appendFile(dst []byte, f gjson.Result, i, j int) ([]byte, error) {
	mt, data, ok := parseDataURL(f.Get("file_data").Str)
	if !ok || mt != "application/pdf" {
		return dst, paramErr(contentParam(i, j), "only PDF files given as base64 file_data are supported by the Anthropic API")
	}
	dst = append(dst, `{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":`...)
	dst = rawjson.AppendString(dst, data)
	return append(dst, "}}"...), nil
}

// parseDataURL splits "data:<media type>;base64,<data>".
func parseDataURL(u string) (mediaType, data string, ok bool) {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return "", "", false
	}
	head, data, ok := strings.Cut(rest, ",")
	if !ok {
		return "", "", false
	}
	mediaType, ok = strings.CutSuffix(head, ";base64")
	if i := strings.IndexByte(mediaType, ';'); i >= 0 { // parameters such as charset
		mediaType = mediaType[:i]
	}
	return strings.ToLower(mediaType), data, ok && mediaType != ""
}

// assistant writes an assistant message: its text, then its tool calls as
// tool_use blocks.
func (t *turns) assistant(m gjson.Result, i int) error {
	var err error
	content := m.Get("content")
	if content.IsArray() {
		j := -1
		content.ForEach(func(_, part gjson.Result) bool {
			j++
			var tx gjson.Result
			switch typ := part.Get("type").Str; typ {
			case "text":
				tx = part.Get("text")
			case "refusal":
				tx = part.Get("refusal")
			default:
				err = paramErr(contentParam(i, j), "assistant content part type %q is not supported", typ)
				return false
			}
			if tx.Type == gjson.String && tx.Raw != `""` {
				t.text("assistant", tx.Raw)
			}
			return true
		})
	} else if content.Type == gjson.String && content.Raw != `""` {
		t.text("assistant", content.Raw)
	}
	if err != nil {
		return err
	}
	if fc := m.Get("function_call"); fc.Exists() && fc.Type != gjson.Null {
		return paramErr(fmt.Sprintf("messages[%d].function_call", i), "is not supported; use tool_calls")
	}
	calls := m.Get("tool_calls")
	switch {
	case calls.Type == gjson.Null || !calls.Exists():
		return nil
	case !calls.IsArray():
		return paramErr(fmt.Sprintf("messages[%d].tool_calls", i), "must be an array")
	}
	j := -1
	calls.ForEach(func(_, tc gjson.Result) bool {
		j++
		err = t.toolUse(tc, i, j)
		return err == nil
	})
	return err
}

// toolUse writes tool call j of message i as a tool_use block.
func (t *turns) toolUse(tc gjson.Result, i, j int) error {
	param := func(field string) string { return fmt.Sprintf("messages[%d].tool_calls[%d].%s", i, j, field) }
	id := tc.Get("id")
	if id.Type != gjson.String || id.Str == "" {
		return paramErr(param("id"), "a tool call needs an id")
	}
	name := tc.Get("function.name")
	if name.Type != gjson.String || name.Str == "" {
		return paramErr(param("function.name"), "a tool call needs a function name")
	}
	args := tc.Get("function.arguments")
	input := args.Raw
	switch args.Type {
	case gjson.String:
		input = strings.TrimSpace(args.Str)
		if input == "" {
			input = "{}"
		}
	case gjson.JSON:
	default:
		input = "{}"
	}
	if !isObject(input) {
		return paramErr(param("function.arguments"), "must be a JSON object")
	}
	t.block("assistant")
	t.dst = append(t.dst, `{"type":"tool_use","id":`...)
	t.dst = appendID(t.dst, id.Str)
	t.dst = append(t.dst, `,"name":`...)
	t.dst = rawjson.AppendRawString(t.dst, name.Raw)
	t.dst = append(t.dst, `,"input":`...)
	t.dst = rawjson.AppendRaw(t.dst, input)
	t.dst = append(t.dst, '}')
	return nil
}

// isObject reports whether s is a valid JSON object.
func isObject(s string) bool {
	return len(s) > 0 && s[0] == '{' && providers.ValidJSON(stringBytes(s))
}

// tool writes a tool result as a tool_result block of a user turn, so
// consecutive results (parallel tool calls) share one turn.
func (t *turns) tool(m gjson.Result, i int) error {
	id := m.Get("tool_call_id")
	if id.Type != gjson.String || id.Str == "" {
		return paramErr(fmt.Sprintf("messages[%d].tool_call_id", i), "a tool message needs a tool_call_id")
	}
	content := m.Get("content")
	t.block("user")
	t.dst = append(t.dst, `{"type":"tool_result","tool_use_id":`...)
	t.dst = appendID(t.dst, id.Str)
	switch {
	case content.Type == gjson.String:
		if content.Raw != `""` {
			t.dst = append(t.dst, `,"content":`...)
			t.dst = rawjson.AppendRawString(t.dst, content.Raw)
		}
	case content.IsArray():
		n := 0
		err := forEachText(content, i, func(textRaw string) {
			if n == 0 {
				t.dst = append(t.dst, `,"content":[`...)
			} else {
				t.dst = append(t.dst, ',')
			}
			n++
			t.dst = append(t.dst, `{"type":"text","text":`...)
			t.dst = rawjson.AppendRawString(t.dst, textRaw)
			t.dst = append(t.dst, '}')
		})
		if err != nil {
			return err
		}
		if n > 0 {
			t.dst = append(t.dst, ']')
		}
	}
	t.dst = append(t.dst, '}')
	return nil
}

// appendID appends a tool call id with every byte outside [A-Za-z0-9_-]
// replaced by '_', the pattern Anthropic requires; the same id maps the
// same way in tool_use and tool_result blocks.
func appendID(dst []byte, id string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			dst = append(dst, c)
		} else {
			dst = append(dst, '_')
		}
	}
	return append(dst, '"')
}

// appendTools appends the tools, tool_choice and parallel tool call
// setting; without tools the other two are dropped.
func appendTools(dst []byte, r *chatRequest) ([]byte, error) {
	if !r.tools.IsArray() || !r.tools.Get("0").Exists() {
		return dst, nil
	}
	dst = append(dst, `,"tools":[`...)
	var err error
	i := -1
	r.tools.ForEach(func(_, tool gjson.Result) bool {
		i++
		if typ := tool.Get("type").Str; typ != "function" {
			err = paramErr(fmt.Sprintf("tools[%d].type", i), "only function tools are supported, not %q", typ)
			return false
		}
		fn := tool.Get("function")
		name := fn.Get("name")
		if name.Type != gjson.String || name.Str == "" {
			err = paramErr(fmt.Sprintf("tools[%d].function.name", i), "a function needs a name")
			return false
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"name":`...)
		dst = rawjson.AppendRawString(dst, name.Raw)
		if d := fn.Get("description"); d.Type == gjson.String {
			dst = append(dst, `,"description":`...)
			dst = rawjson.AppendRawString(dst, d.Raw)
		}
		dst = append(dst, `,"input_schema":`...)
		if ps := fn.Get("parameters"); ps.IsObject() {
			dst = rawjson.AppendRaw(dst, ps.Raw)
		} else {
			dst = append(dst, defaultSchema...)
		}
		dst = append(dst, '}')
		return true
	})
	if err != nil {
		return dst, err
	}
	dst = append(dst, ']')
	return appendToolChoice(dst, r)
}

// appendToolChoice maps tool_choice: auto -> auto, none -> none,
// required -> any, a named function -> tool; parallel_tool_calls false
// sets disable_parallel_tool_use.
func appendToolChoice(dst []byte, r *chatRequest) ([]byte, error) {
	tc := r.toolChoice
	serial := r.parallel.Type == gjson.False
	var name string
	typ := "auto"
	switch {
	case !tc.Exists() || tc.Type == gjson.Null:
		if !serial {
			return dst, nil
		}
	case tc.Type == gjson.String:
		switch tc.Str {
		case "auto":
		case "none":
			typ = "none"
		case "required":
			typ = "any"
		default:
			return dst, paramErr("tool_choice", "unknown value %q", tc.Str)
		}
	case tc.IsObject():
		n := tc.Get("function.name")
		if tc.Get("type").Str != "function" || n.Type != gjson.String || n.Str == "" {
			return dst, paramErr("tool_choice", "must name a function")
		}
		typ, name = "tool", n.Raw
	default:
		return dst, paramErr("tool_choice", "must be a string or an object")
	}
	dst = append(dst, `,"tool_choice":{"type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, '"')
	if name != "" {
		dst = append(dst, `,"name":`...)
		dst = rawjson.AppendRawString(dst, name)
	}
	if serial && typ != "none" {
		dst = append(dst, `,"disable_parallel_tool_use":true`...)
	}
	return append(dst, '}'), nil
}

// appendSampling appends stop_sequences, temperature, top_p and top_k.
func appendSampling(dst []byte, r *chatRequest) ([]byte, error) {
	switch {
	case r.stop.Type == gjson.String:
		if r.stop.Str != "" {
			dst = append(dst, `,"stop_sequences":[`...)
			dst = rawjson.AppendRawString(dst, r.stop.Raw)
			dst = append(dst, ']')
		}
	case r.stop.IsArray():
		n := 0
		var err error
		r.stop.ForEach(func(_, s gjson.Result) bool {
			if s.Type != gjson.String {
				err = paramErr("stop", "must be a string or an array of strings")
				return false
			}
			if s.Str == "" {
				return true
			}
			if n == 0 {
				dst = append(dst, `,"stop_sequences":[`...)
			} else {
				dst = append(dst, ',')
			}
			n++
			dst = rawjson.AppendRawString(dst, s.Raw)
			return true
		})
		if err != nil {
			return dst, err
		}
		if n > 0 {
			dst = append(dst, ']')
		}
	case r.stop.Exists() && r.stop.Type != gjson.Null:
		return dst, paramErr("stop", "must be a string or an array of strings")
	}
	for _, f := range [...]struct {
		key string
		v   gjson.Result
		max float64
	}{{"temperature", r.temperature, 1}, {"top_p", r.topP, 1}, {"top_k", r.topK, 1 << 31}} {
		switch {
		case !f.v.Exists() || f.v.Type == gjson.Null:
			continue
		case f.v.Type != gjson.Number || f.v.Num < 0:
			return dst, paramErr(f.key, "must be a non-negative number")
		case f.v.Num > f.max:
			return dst, paramErr(f.key, "must be at most %g for Anthropic models", f.max)
		}
		dst = append(dst, ',', '"')
		dst = append(dst, f.key...)
		dst = append(dst, '"', ':')
		dst = append(dst, f.v.Raw...)
	}
	return dst, nil
}

// appendThinking passes a client's Anthropic "thinking" object through, or
// maps reasoning_effort (low, medium, high) to a thinking budget below
// max_tokens.
func appendThinking(dst []byte, r *chatRequest, maxTokens int64) ([]byte, error) {
	if r.thinking.IsObject() {
		dst = append(dst, `,"thinking":`...)
		return rawjson.AppendRaw(dst, r.thinking.Raw), nil
	}
	if !r.reasoningEffort.Exists() || r.reasoningEffort.Type == gjson.Null {
		return dst, nil
	}
	e := r.reasoningEffort.Str
	if e == "none" || e == "minimal" {
		return dst, nil
	}
	budget, ok := effortBudget(e)
	if !ok {
		return dst, paramErr("reasoning_effort", "unknown value %q", e)
	}
	budget = min(budget, maxTokens-1)
	if budget < 1024 {
		return dst, paramErr("reasoning_effort", "needs max_tokens above 1024 on Anthropic models")
	}
	dst = append(dst, `,"thinking":{"type":"enabled","budget_tokens":`...)
	dst = appendUint(dst, uint64(budget))
	return append(dst, '}'), nil
}
