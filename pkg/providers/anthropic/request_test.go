package anthropic

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/valyala/fasthttp"
)

// chatCall reads the fields the gateway would from an OpenAI body.
func chatCall(body []byte) *providers.Call {
	s := string(body)
	c := &providers.Call{Endpoint: providers.Chat, Body: body, Model: "claude-sonnet-4-5",
		Stream: gjson.Get(s, "stream").Bool(), IncludeUsage: gjson.Get(s, "stream_options.include_usage").Bool()}
	m := gjson.Get(s, "model")
	c.ModelRaw, c.ModelIdx = m.Raw, m.Index
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if v := gjson.Get(s, k); v.Exists() {
			c.MaxTokens = v.Int()
		}
	}
	return c
}

func TestBuildGolden(t *testing.T) {
	p := testProvider(t, "")
	tests := []struct {
		name  string
		clamp int64
	}{
		{name: "basic"},
		{name: "multi_turn"},
		{name: "images"},
		{name: "tools"},
		{name: "tool_choice_named"},
		{name: "tool_choice_none"},
		{name: "tool_choice_without_tools"},
		{name: "json_mode"},
		{name: "stream_clamp", clamp: 100},
		{name: "reasoning"},
		{name: "thinking_passthrough"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := chatCall(readFile(t, filepath.Join("testdata", "request", tt.name+".json")))
			c.ClampMaxTokens = tt.clamp
			var req fasthttp.Request
			if err := p.Build(&req, c); err != nil {
				t.Fatal(err)
			}
			goldenJSON(t, filepath.Join("testdata", "request", tt.name+".golden.json"), req.Body())
		})
	}
}

func TestBuildRejects(t *testing.T) {
	p := testProvider(t, "")
	const user = `{"role":"user","content":"hi"}`
	tests := []struct {
		name, body, param string
	}{
		{"n 2", `{"messages":[` + user + `],"n":2}`, "n"},
		{"json schema", `{"messages":[` + user + `],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}}}`, "response_format"},
		{"temperature above 1", `{"messages":[` + user + `],"temperature":1.5}`, "temperature"},
		{"logprobs", `{"messages":[` + user + `],"logprobs":true}`, "logprobs"},
		{"audio out", `{"messages":[` + user + `],"modalities":["text","audio"]}`, "modalities"},
		{"modalities not a list", `{"messages":[` + user + `],"modalities":"text"}`, "modalities"},
		{"functions", `{"messages":[` + user + `],"functions":[{"name":"f"}]}`, "functions"},
		{"presence penalty", `{"messages":[` + user + `],"presence_penalty":0.5}`, "presence_penalty"},
		{"frequency penalty", `{"messages":[` + user + `],"frequency_penalty":-1}`, "frequency_penalty"},
		{"logit bias", `{"messages":[` + user + `],"logit_bias":{"50256":-100}}`, "logit_bias"},
		{"prediction", `{"messages":[` + user + `],"prediction":{"type":"content","content":"x"}}`, "prediction"},
		{"top_logprobs", `{"messages":[` + user + `],"top_logprobs":2}`, "top_logprobs"},
		{"escaped member name", `{"messages":[` + user + `],"logit\u005fbias":{"1":1}}`, "logit_bias"},
		{"not an object", `[1]`, "body"},
		{"no messages", `{"model":"m"}`, "messages"},
		{"audio part", `{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"x","format":"wav"}}]}]}`, "messages[0].content[0]"},
		{"ftp image", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"ftp://x/y.png"}}]}]}`, "messages[0].content[0]"},
		{"svg image", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/svg+xml;base64,PHN2Zz4="}}]}]}`, "messages[0].content[0]"},
		{"file id", `{"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-1"}}]}]}`, "messages[0].content[0]"},
		{"bad arguments", `{"messages":[` + user + `,{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}`, "messages[1].tool_calls[0].function.arguments"},
		{"call without id", `{"messages":[` + user + `,{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}]}`, "messages[1].tool_calls[0].id"},
		{"tool without id", `{"messages":[` + user + `,{"role":"tool","content":"x"}]}`, "messages[1].tool_call_id"},
		{"function role", `{"messages":[{"role":"function","name":"f","content":"x"}]}`, "messages[0].role"},
		{"custom tool", `{"messages":[` + user + `],"tools":[{"type":"custom","custom":{"name":"x"}}]}`, "tools[0].type"},
		{"bad tool choice", `{"messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes"}`, "tool_choice"},
		{"system image", `{"messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"https://x"}}]}]}`, "messages[0].content[0]"},
		{"effort too large for max_tokens", `{"messages":[` + user + `],"reasoning_effort":"low","max_tokens":500}`, "reasoning_effort"},
		{"not JSON", `{"messages":[`, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req fasthttp.Request
			err := p.Build(&req, chatCall([]byte(tt.body)))
			var pe *providers.ParamError
			if !errors.As(err, &pe) || pe.Param != tt.param {
				t.Errorf("err %v, want a ParamError for %s", err, tt.param)
			}
		})
	}
	t.Run("embeddings endpoint", func(t *testing.T) {
		var req fasthttp.Request
		c := chatCall([]byte(`{"input":"x"}`))
		c.Endpoint = providers.Embeddings
		var pe *providers.ParamError
		if err := p.Build(&req, c); !errors.As(err, &pe) {
			t.Errorf("err %v, want a ParamError", err)
		}
	})
}

func TestBuildRequestLine(t *testing.T) {
	client := &fasthttp.RequestHeader{}
	client.Set("anthropic-beta", "prompt-caching-2024-07-31")
	client.Set("anthropic-version", "2099-01-01")
	tests := []struct {
		name    string
		o       Options
		header  *fasthttp.RequestHeader
		wantURI string
		want    map[string]string
	}{
		{"defaults", Options{APIKey: "k"}, nil, "https://api.anthropic.com/v1/messages",
			map[string]string{"x-api-key": "k", "anthropic-version": "2023-06-01", "Content-Type": "application/json", "anthropic-beta": ""}},
		{"base with v1", Options{BaseURL: "http://127.0.0.1:9/proxy/v1/", Version: "2024-01-01"}, client, "http://127.0.0.1:9/proxy/v1/messages",
			map[string]string{"anthropic-version": "2024-01-01", "anthropic-beta": "prompt-caching-2024-07-31", "x-api-key": ""}},
		{"extra header", Options{Headers: map[string]string{"X-Org": "acme"}}, nil, "https://api.anthropic.com/v1/messages", map[string]string{"X-Org": "acme"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.o)
			if err != nil {
				t.Fatal(err)
			}
			c := chatCall([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
			c.Header = tt.header
			var req fasthttp.Request
			if err := p.Build(&req, c); err != nil {
				t.Fatal(err)
			}
			if got := req.URI().String(); got != tt.wantURI {
				t.Errorf("URI %s, want %s", got, tt.wantURI)
			}
			if m := string(req.Header.Method()); m != "POST" {
				t.Errorf("method %s", m)
			}
			for k, v := range tt.want {
				if got := string(req.Header.Peek(k)); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if strings.Contains(req.Header.String(), "Authorization") {
				t.Errorf("Authorization header sent: %s", req.Header.String())
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	for _, base := range []string{"ftp://x", "http://", "::"} {
		if _, err := New(Options{BaseURL: base}); err == nil {
			t.Errorf("New accepted base_url %q", base)
		}
	}
}
