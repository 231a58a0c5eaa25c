package anthropic

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
)

func TestRequestToOpenAIGolden(t *testing.T) {
	tests := []struct {
		name   string
		stream bool
	}{
		{"system_string", false},
		{"system_blocks_stream", true},
		{"images", false},
		{"tool_round_trip", false},
		{"tool_choice_tool", false},
		{"tool_choice_none", false},
		{"claude_code", true},
		{"tool_round_trip_system", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := readFile(t, filepath.Join("testdata", "inbound", tt.name+".json"))
			out, model, stream, err := RequestToOpenAI([]byte("keep"), body)
			if err != nil {
				t.Fatal(err)
			}
			if string(out[:4]) != "keep" {
				t.Fatalf("dst not appended to: %q", out)
			}
			if model != "claude-sonnet-4-5" || stream != tt.stream {
				t.Errorf("model %q stream %v", model, stream)
			}
			goldenJSON(t, filepath.Join("testdata", "inbound", tt.name+".golden.json"), out[4:])
		})
	}
}

func TestRequestToOpenAIRejects(t *testing.T) {
	const user = `{"role":"user","content":"hi"}`
	tests := []struct {
		name, body, param string
		malformed         bool
	}{
		{name: "not JSON", body: `{"model":`, malformed: true},
		{name: "array body", body: `[]`, malformed: true},
		{name: "no model", body: `{"max_tokens":1,"messages":[` + user + `]}`, param: "model"},
		{name: "no messages", body: `{"model":"m","max_tokens":1}`, param: "messages"},
		{name: "tool role", body: `{"model":"m","messages":[{"role":"tool","content":"x"}]}`, param: "messages[0].role"},
		{name: "system role image", body: `{"model":"m","messages":[{"role":"system","content":[{"type":"image","source":{}}]},` + user + `]}`, param: "messages[0].content[0]"},
		{name: "thinking type", body: `{"model":"m","messages":[` + user + `],"thinking":{"type":"sometimes"}}`, param: "thinking.type"},
		{name: "effort", body: `{"model":"m","messages":[` + user + `],"output_config":{"effort":"extreme"}}`, param: "output_config.effort"},
		{name: "output format", body: `{"model":"m","messages":[` + user + `],"output_config":{"format":{"type":"json_object"}}}`, param: "output_config.format"},
		{name: "system image", body: `{"model":"m","system":[{"type":"image","source":{}}],"messages":[` + user + `]}`, param: "system[0]"},
		{name: "server tool", body: `{"model":"m","messages":[` + user + `],"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, param: "tools[0]"},
		{name: "file image", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f"}}]}]}`, param: "messages[0].content[0].source"},
		{name: "unknown block", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"search_result"}]}]}`, param: "messages[0].content[0]"},
		{name: "tool result without id", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`, param: "messages[0].content[0].tool_use_id"},
		{name: "server tool use", body: `{"model":"m","messages":[` + user + `,{"role":"assistant","content":[{"type":"server_tool_use","id":"s","name":"web_search","input":{}}]}]}`, param: "messages[1].content[0]"},
		{name: "mcp servers", body: `{"model":"m","messages":[` + user + `],"mcp_servers":[{"type":"url","url":"https://x"}]}`, param: "mcp_servers"},
		{name: "bad tool choice", body: `{"model":"m","messages":[` + user + `],"tools":[{"name":"t","input_schema":{}}],"tool_choice":{"type":"tool"}}`, param: "tool_choice.name"},
		{name: "bad stop", body: `{"model":"m","messages":[` + user + `],"stop_sequences":"x"}`, param: "stop_sequences"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, _, err := RequestToOpenAI(nil, []byte(tt.body))
			if tt.malformed {
				if !errors.Is(err, providers.ErrMalformed) {
					t.Errorf("err %v, want ErrMalformed", err)
				}
				return
			}
			var pe *providers.ParamError
			if !errors.As(err, &pe) || pe.Param != tt.param {
				t.Errorf("err %v, want a ParamError for %s", err, tt.param)
			}
		})
	}
}

func TestResponseFromOpenAIGolden(t *testing.T) {
	for _, name := range []string{"text", "tool_calls", "length_no_usage", "refusal"} {
		t.Run(name, func(t *testing.T) {
			body := readFile(t, filepath.Join("testdata", "inbound_response", name+".json"))
			out, err := ResponseFromOpenAI(nil, body, "claude-sonnet-4-5")
			if err != nil {
				t.Fatal(err)
			}
			goldenJSON(t, filepath.Join("testdata", "inbound_response", name+".golden.json"), out)
		})
	}
}

func TestResponseFromOpenAIMalformed(t *testing.T) {
	for _, body := range []string{`{`, `{"choices":[]}`, `{"choices":[{"message":{"tool_calls":[{"id":"c","function":{"name":"f","arguments":"{bad"}}]}}]}`} {
		if _, err := ResponseFromOpenAI(nil, []byte(body), "m"); !errors.Is(err, providers.ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", body, err)
		}
	}
}

func TestErrorBodyAndType(t *testing.T) {
	tests := []struct {
		status int
		want   string
	}{
		{400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
		{404, "not_found_error"}, {413, "request_too_large"}, {422, "invalid_request_error"},
		{429, "rate_limit_error"}, {500, "api_error"}, {502, "api_error"}, {503, "overloaded_error"},
		{504, "api_error"}, {529, "overloaded_error"},
	}
	for _, tt := range tests {
		if got := ErrorType(tt.status); got != tt.want {
			t.Errorf("ErrorType(%d) = %s, want %s", tt.status, got, tt.want)
		}
	}
	got := string(ErrorBody(ErrRateLimit, `budget "team" exceeded`))
	want := `{"type":"error","error":{"type":"rate_limit_error","message":"budget \"team\" exceeded"}}`
	if got != want {
		t.Errorf("ErrorBody = %s, want %s", got, want)
	}
}

// TestReasoningEffort: thinking and output_config.effort become one
// reasoning_effort, written last so that a kind without one gets the
// translation without it (DropReasoningEffort).
func TestReasoningEffort(t *testing.T) {
	const head = `{"model":"m","messages":[{"role":"user","content":"hi"}]`
	tests := []struct{ name, extra, want string }{
		{"none", ``, ``},
		{"effort alone", `,"output_config":{"effort":"medium"}`, `medium`},
		{"effort max", `,"output_config":{"effort":"max"}`, `high`},
		{"adaptive without effort", `,"thinking":{"type":"adaptive"}`, ``},
		{"adaptive with effort", `,"thinking":{"type":"adaptive","display":"omitted"},"output_config":{"effort":"low"}`, `low`},
		{"disabled drops effort", `,"thinking":{"type":"disabled"},"output_config":{"effort":"high"}`, ``},
		{"small budget", `,"thinking":{"type":"enabled","budget_tokens":2048}`, `low`},
		{"medium budget", `,"thinking":{"type":"enabled","budget_tokens":4096}`, `medium`},
		{"large budget", `,"thinking":{"type":"enabled","budget_tokens":20000}`, `high`},
		{"effort wins over budget", `,"thinking":{"type":"enabled","budget_tokens":20000},"output_config":{"effort":"low"}`, `low`},
		{"after mock", `,"mock":{"chunks":2},"output_config":{"effort":"high"}`, `high`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, _, err := RequestToOpenAI(nil, []byte(head+tt.extra+"}"))
			if err != nil {
				t.Fatal(err)
			}
			if got := gjson.GetBytes(out, "reasoning_effort").Str; got != tt.want {
				t.Errorf("reasoning_effort %q, want %q in %s", got, tt.want, out)
			}
			plain, ok := DropReasoningEffort([]byte("keep"), out)
			if ok != (tt.want != "") {
				t.Fatalf("DropReasoningEffort ok %v for %s", ok, out)
			}
			if !ok {
				return
			}
			if !gjson.ValidBytes(plain[4:]) || gjson.GetBytes(plain[4:], "reasoning_effort").Exists() || string(plain[:4]) != "keep" {
				t.Errorf("without effort: %s", plain)
			}
			if gjson.GetBytes(plain[4:], "messages").Raw != gjson.GetBytes(out, "messages").Raw {
				t.Errorf("without effort the messages changed: %s", plain)
			}
		})
	}
}
