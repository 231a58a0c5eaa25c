package mockllm_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/tollgate/tollgate/pkg/mockllm"
)

// Two tools with parameter schemas, in each format's declaration.
const (
	weatherSchema = `{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},` +
		`"days":{"type":"integer","minimum":3,"maximum":7}},"required":["city","unit"],"additionalProperties":false}`
	timeSchema = `{"type":"object","properties":{"zones":{"type":"array","items":{"type":"string"},"minItems":2},"exact":{"type":"boolean"}},"required":["zones"]}`

	schemaTools = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":` + weatherSchema + `}},` +
		`{"type":"function","function":{"name":"get_time","parameters":` + timeSchema + `}}]`
	anthropicSchemaTools = `"tools":[{"name":"get_weather","input_schema":` + weatherSchema + `},{"name":"get_time","input_schema":` + timeSchema + `}]`
	geminiSchemaTools    = `"tools":[{"functionDeclarations":[{"name":"get_weather","parametersJsonSchema":` + weatherSchema + `},` +
		`{"name":"get_time","parameters":{"type":"OBJECT","properties":{"zones":{"type":"ARRAY","items":{"type":"STRING"},"minItems":2}},"required":["zones"]}}]}]`
	bedrockSchemaTools = `"toolConfig":{"tools":[{"toolSpec":{"name":"get_weather","inputSchema":{"json":` + weatherSchema + `}}},` +
		`{"toolSpec":{"name":"get_time","inputSchema":{"json":` + timeSchema + `}}}]`
)

var toolSchemas = map[string]string{"get_weather": weatherSchema, "get_time": timeSchema}

// toolAnswer is what a non-stream answer says in any format: its calls
// (name and arguments) and its text.
type toolAnswer struct {
	names []string
	args  []string
	text  string
}

func parseToolAnswer(t *testing.T, format string, body []byte) toolAnswer {
	t.Helper()
	var a toolAnswer
	root := gjson.ParseBytes(body)
	add := func(name, args gjson.Result) {
		a.names = append(a.names, name.Str)
		if args.Type == gjson.String {
			a.args = append(a.args, args.Str)
		} else {
			a.args = append(a.args, args.Raw)
		}
	}
	switch format {
	case "openai":
		m := root.Get("choices.0.message")
		a.text = m.Get("content").Str
		m.Get("tool_calls").ForEach(func(_, c gjson.Result) bool {
			add(c.Get("function.name"), c.Get("function.arguments"))
			return true
		})
	case "anthropic", "bedrock":
		blocks := root.Get("content")
		if format == "bedrock" {
			blocks = root.Get("output.message.content")
		}
		blocks.ForEach(func(_, b gjson.Result) bool {
			if tu := b.Get("toolUse"); tu.Exists() {
				add(tu.Get("name"), tu.Get("input"))
			} else if b.Get("type").Str == "tool_use" {
				add(b.Get("name"), b.Get("input"))
			} else {
				a.text += b.Get("text").Str
			}
			return true
		})
	case "gemini":
		root.Get("candidates.0.content.parts").ForEach(func(_, p gjson.Result) bool {
			if fc := p.Get("functionCall"); fc.Exists() {
				add(fc.Get("name"), fc.Get("args"))
			} else {
				a.text += p.Get("text").Str
			}
			return true
		})
	}
	return a
}

// checkCalls checks the calls' names and that each one's arguments are
// valid against its tool's schema.
func checkCalls(t *testing.T, a toolAnswer, want []string) {
	t.Helper()
	if strings.Join(a.names, ",") != strings.Join(want, ",") {
		t.Fatalf("calls %v, want %v (text %q)", a.names, want, a.text)
	}
	for i, name := range a.names {
		if err := mockllm.ValidateSchema(t, []byte(toolSchemas[name]), []byte(a.args[i])); err != nil {
			t.Errorf("call %d %s: %v", i, name, err)
		}
	}
}

const (
	askWeather = `"messages":[{"role":"user","content":"What is the weather in Paris? Use get_weather."}]`
	askBoth    = `"messages":[{"role":"user","content":"Call GET_WEATHER and get_time, please."}]`
	askNothing = `"messages":[{"role":"user","content":"What is the weather in Paris?"}]`
	// toolResult is a finished call whose result the answer must quote.
	toolResult = `"messages":[{"role":"user","content":"Weather in Paris? Use get_weather."},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"18 C and\nsunny"}]`
	anthropicToolResult = `"messages":[{"role":"user","content":"Weather in Paris? Use get_weather."},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"18 C and sunny"}]}]}]`
	geminiToolResult = `"contents":[{"role":"user","parts":[{"text":"Weather in Paris? Use get_weather."}]},` +
		`{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}}]},` +
		`{"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"forecast":"sunny"}}}]}]`
)

func TestToolUse(t *testing.T) {
	ts := start(t, mockllm.Config{})
	const sig = "AWS4-HMAC-SHA256 Credential=AKID/20240501/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=00"
	tests := []struct {
		name, format, path, body string
		headers                  []string
		calls                    []string // the tools called; none: a text answer
		text                     string   // the text answer holds this
	}{
		{name: "auto: the user names a tool", format: "openai", body: `{"model":"m",` + askWeather + `,` + schemaTools + `}`, calls: []string{"get_weather"}},
		{name: "auto: names any case, two tools", format: "openai", body: `{"model":"m",` + askBoth + `,` + schemaTools + `,"tool_choice":"auto"}`, calls: []string{"get_weather", "get_time"}},
		{name: "auto: no tool named answers text", format: "openai", body: `{"model":"m",` + askNothing + `,` + schemaTools + `}`, text: "Tollgate mock answer alpha"},
		{name: "auto: the tool_calls option calls", format: "openai", body: `{"model":"m",` + askNothing + `,` + schemaTools + `,"mock":{"tool_calls":1}}`, calls: []string{"get_weather"}},
		{name: "none: text even when named", format: "openai", body: `{"model":"m",` + askWeather + `,` + schemaTools + `,"tool_choice":"none"}`, text: "Tollgate"},
		{name: "required: two parallel calls", format: "openai", body: `{"model":"m",` + askNothing + `,` + schemaTools + `,"tool_choice":"required"}`,
			headers: []string{"X-Mock-Tool-Calls", "2"}, calls: []string{"get_weather", "get_time"}},
		{name: "required: parallel calls disallowed", format: "openai", body: `{"model":"m",` + askBoth + `,` + schemaTools + `,"tool_choice":"required","parallel_tool_calls":false}`,
			headers: []string{"X-Mock-Tool-Calls", "3"}, calls: []string{"get_weather"}},
		{name: "named: the named tool", format: "openai", body: `{"model":"m",` + askWeather + `,` + schemaTools + `,"tool_choice":{"type":"function","function":{"name":"get_time"}}}`, calls: []string{"get_time"}},
		{name: "a tool result is quoted", format: "openai", body: `{"model":"m",` + toolResult + `,` + schemaTools + `}`, text: "Tollgate mock answer (tool result: 18 C and sunny) bravo"},
		{name: "a tool result with a forced choice still calls", format: "openai", body: `{"model":"m",` + toolResult + `,` + schemaTools + `,"tool_choice":"required"}`, calls: []string{"get_weather"}},

		{name: "anthropic auto", format: "anthropic", path: "/v1/messages", body: `{"model":"c","max_tokens":50,` + askWeather + `,` + anthropicSchemaTools + `}`, calls: []string{"get_weather"}},
		{name: "anthropic auto, a system-role message last", format: "anthropic", path: "/v1/messages",
			body: `{"model":"c","max_tokens":50,"messages":[{"role":"user","content":"What is the weather in Paris? Use get_weather."},` +
				`{"role":"system","content":"Answer briefly."}],` + anthropicSchemaTools + `}`, calls: []string{"get_weather"}},
		{name: "anthropic any, parallel disabled", format: "anthropic", path: "/v1/messages",
			body: `{"model":"c","max_tokens":50,` + askBoth + `,` + anthropicSchemaTools + `,"tool_choice":{"type":"any","disable_parallel_tool_use":true}}`, calls: []string{"get_weather"}},
		{name: "anthropic two calls", format: "anthropic", path: "/v1/messages", body: `{"model":"c","max_tokens":50,` + askBoth + `,` + anthropicSchemaTools + `}`, calls: []string{"get_weather", "get_time"}},
		{name: "anthropic tool result", format: "anthropic", path: "/v1/messages", body: `{"model":"c","max_tokens":50,` + anthropicToolResult + `,` + anthropicSchemaTools + `}`,
			text: "(tool result: 18 C and sunny)"},

		{name: "gemini auto", format: "gemini", path: "/v1beta/models/g:generateContent",
			body: `{"contents":[{"role":"user","parts":[{"text":"Use get_weather for Paris"}]}],` + geminiSchemaTools + `}`, calls: []string{"get_weather"}},
		{name: "gemini ANY, upper-case schema", format: "gemini", path: "/v1beta/models/g:generateContent",
			body: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],` + geminiSchemaTools + `,"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["get_time"]}}}`, calls: []string{"get_time"}},
		{name: "gemini function response", format: "gemini", path: "/v1beta/models/g:generateContent", body: `{` + geminiToolResult + `,` + geminiSchemaTools + `}`,
			text: `(tool result: {"forecast":"sunny"})`},

		{name: "bedrock auto", format: "bedrock", path: "/model/m/converse", body: `{"messages":[{"role":"user","content":[{"text":"get_weather in Paris"}]}],` + bedrockSchemaTools + `}}`,
			headers: []string{"Authorization", sig}, calls: []string{"get_weather"}},
		{name: "bedrock tool result", format: "bedrock", path: "/model/m/converse", body: bedrockWith(bedrockSchemaTools + `}`),
			headers: []string{"Authorization", sig}, text: "Tollgate mock answer (tool result: sunny) bravo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.path
			if path == "" {
				path = "/v1/chat/completions"
			}
			resp := ts.post(t, path, tt.body, tt.headers...)
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d %s: %v", resp.StatusCode, body, err)
			}
			a := parseToolAnswer(t, tt.format, body)
			checkCalls(t, a, tt.calls)
			if !strings.Contains(a.text, tt.text) {
				t.Errorf("text %q, want it to hold %q", a.text, tt.text)
			}
		})
	}
}

// TestToolUseDeterministic: the same request gets the same arguments.
func TestToolUseDeterministic(t *testing.T) {
	ts := start(t, mockllm.Config{})
	body := `{"model":"m",` + askBoth + `,` + schemaTools + `}`
	var first []string
	for range 3 {
		resp := ts.post(t, "/v1/chat/completions", body)
		raw, _ := io.ReadAll(resp.Body)
		a := parseToolAnswer(t, "openai", raw)
		if first == nil {
			first = a.args
		} else if strings.Join(a.args, "|") != strings.Join(first, "|") {
			t.Fatalf("arguments %v, then %v", first, a.args)
		}
	}
}

// TestToolUseStream reassembles streamed calls in each format that splits
// them: each call's arguments come in several deltas, are valid against
// its schema, and the usage counts the chunks.
func TestToolUseStream(t *testing.T) {
	ts := start(t, mockllm.Config{})
	const chunks = 5
	tests := []struct {
		name, path, body string
	}{
		{"openai", "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},` + askBoth + `,` + schemaTools + `}`},
		{"anthropic", "/v1/messages", `{"model":"c","max_tokens":50,"stream":true,` + askBoth + `,` + anthropicSchemaTools + `}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.post(t, tt.path, tt.body, "X-Mock-Chunks", "5")
			events, err := readEvents(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			var a toolAnswer
			deltas := map[int]int{}
			usage := int64(-1)
			for _, ev := range events {
				d := gjson.Parse(ev.data)
				switch tt.name {
				case "openai":
					d.Get("choices.0.delta.tool_calls").ForEach(func(_, c gjson.Result) bool {
						i := int(c.Get("index").Int())
						if name := c.Get("function.name"); name.Exists() {
							a.names, a.args = append(a.names, name.Str), append(a.args, "")
						}
						if frag := c.Get("function.arguments").Str; frag != "" || !c.Get("id").Exists() {
							a.args[i] += frag
							deltas[i]++
						}
						return true
					})
					if u := d.Get("usage.completion_tokens"); u.Exists() {
						usage = u.Int()
					}
				case "anthropic":
					i := int(d.Get("index").Int())
					switch d.Get("type").Str {
					case "content_block_start":
						a.names, a.args = append(a.names, d.Get("content_block.name").Str), append(a.args, "")
					case "content_block_delta":
						a.args[i] += d.Get("delta.partial_json").Str
						deltas[i]++
					case "message_delta":
						usage = d.Get("usage.output_tokens").Int()
					}
				}
			}
			checkCalls(t, a, []string{"get_weather", "get_time"})
			for i := range a.names {
				if deltas[i] < 2 {
					t.Errorf("call %d came in %d deltas", i, deltas[i])
				}
			}
			if usage != chunks {
				t.Errorf("completion tokens %d, want %d", usage, chunks)
			}
		})
	}
}

// TestToolUseBedrockStream reassembles a streamed Bedrock toolUse.
func TestToolUseBedrockStream(t *testing.T) {
	ts := start(t, mockllm.Config{})
	resp := ts.bedrockPost(t, "/model/m/converse-stream", `{"messages":[{"role":"user","content":[{"text":"use get_time"}]}],`+bedrockSchemaTools+`}}`, "X-Mock-Chunks", "3")
	frames, err := readFrames(t, resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var a toolAnswer
	var input bytes.Buffer
	deltas := 0
	for _, f := range frames {
		d := gjson.ParseBytes(f.raw)
		switch f.typ {
		case "contentBlockStart":
			a.names = append(a.names, d.Get("start.toolUse.name").Str)
		case "contentBlockDelta":
			input.WriteString(d.Get("delta.toolUse.input").Str)
			deltas++
		}
	}
	a.args = []string{input.String()}
	checkCalls(t, a, []string{"get_time"})
	if deltas < 3 {
		t.Errorf("input came in %d deltas", deltas)
	}
}
