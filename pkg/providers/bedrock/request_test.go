package bedrock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/valyala/fasthttp"
)

// TestBuildGolden translates each OpenAI body in testdata/request/*.json and
// compares the Converse body with its .converse.json golden.
func TestBuildGolden(t *testing.T) {
	p := testProvider(t, "")
	files, err := filepath.Glob("testdata/request/*.json")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, in := range files {
		if strings.HasSuffix(in, ".converse.json") {
			continue
		}
		n++
		name := strings.TrimSuffix(filepath.Base(in), ".json")
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			var req fasthttp.Request
			if err := p.Build(&req, chatCall(string(body))); err != nil {
				t.Fatalf("build: %v", err)
			}
			golden(t, strings.TrimSuffix(in, ".json")+".converse.json", indent(t, req.Body()))
		})
	}
	if n == 0 {
		t.Fatal("no request fixtures")
	}
}

func TestBuildRequestLine(t *testing.T) {
	tests := []struct {
		name, base, model string
		stream            bool
		wantURI, wantHost string
	}{
		{"default endpoint", "", "anthropic.claude-3-haiku-20240307-v1:0", false,
			"https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse", "bedrock-runtime.us-east-1.amazonaws.com"},
		{"stream", "", "amazon.nova-lite-v1:0", true,
			"https://bedrock-runtime.us-east-1.amazonaws.com/model/amazon.nova-lite-v1%3A0/converse-stream", "bedrock-runtime.us-east-1.amazonaws.com"},
		{"arn model id", "https://vpce.example.com:443/prefix/", "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-5-sonnet", false,
			"https://vpce.example.com/prefix/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-3-5-sonnet/converse", "vpce.example.com"},
		{"loopback with port", "http://127.0.0.1:8099", "m", true, "http://127.0.0.1:8099/model/m/converse-stream", "127.0.0.1:8099"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := testProvider(t, tc.base)
			c := chatCall(`{"model":"x","messages":[{"role":"user","content":"hi"}]}`)
			c.Model, c.Stream = tc.model, tc.stream
			var req fasthttp.Request
			if err := p.Build(&req, c); err != nil {
				t.Fatal(err)
			}
			u := req.URI()
			if got := string(u.Scheme()) + "://" + string(u.Host()) + string(u.PathOriginal()); got != tc.wantURI {
				t.Errorf("URI = %s, want %s", got, tc.wantURI)
			}
			if got := string(req.URI().Host()); got != tc.wantHost {
				t.Errorf("host = %s, want %s", got, tc.wantHost)
			}
			if m := string(req.Header.Method()); m != "POST" {
				t.Errorf("method %s", m)
			}
			if ct := string(req.Header.ContentType()); ct != "application/json" {
				t.Errorf("content type %s", ct)
			}
			auth := string(req.Header.Peek("Authorization"))
			if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20240501/us-east-1/bedrock/aws4_request, SignedHeaders=content-length;content-type;host;x-amz-date, Signature=") {
				t.Errorf("authorization %q", auth)
			}
			if d := string(req.Header.Peek("X-Amz-Date")); d != "20240501T120000Z" {
				t.Errorf("x-amz-date %q", d)
			}
			if id := string(req.Header.Peek("X-Request-Id")); id != "req_test" {
				t.Errorf("x-request-id %q", id)
			}
		})
	}
}

func TestBuildParamErrors(t *testing.T) {
	p := testProvider(t, "")
	user := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, body, param string
		endpoint          providers.Endpoint
	}{
		{"embeddings", `{"model":"m","input":"x"}`, "model", providers.Embeddings},
		{"completions", `{"model":"m","prompt":"x"}`, "model", providers.Completions},
		{"not json", `{"model":`, "body", providers.Chat},
		{"hostile nesting", `{"messages":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`, "body", providers.Chat},
		{"no messages", `{"model":"m"}`, "messages", providers.Chat},
		{"only system", `{"messages":[{"role":"system","content":"x"}]}`, "messages", providers.Chat},
		{"n", `{` + user + `,"n":2}`, "n", providers.Chat},
		{"json mode", `{` + user + `,"response_format":{"type":"json_object"}}`, "response_format", providers.Chat},
		{"json schema", `{` + user + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}}}`, "response_format", providers.Chat},
		{"logprobs", `{` + user + `,"logprobs":true}`, "logprobs", providers.Chat},
		{"presence penalty", `{` + user + `,"presence_penalty":0.5}`, "presence_penalty", providers.Chat},
		{"logit bias", `{` + user + `,"logit_bias":{"50256":-100}}`, "logit_bias", providers.Chat},
		{"audio modality", `{` + user + `,"modalities":["text","audio"]}`, "modalities", providers.Chat},
		{"reasoning effort", `{` + user + `,"reasoning_effort":"high"}`, "reasoning_effort", providers.Chat},
		{"max tokens zero", `{` + user + `,"max_tokens":0}`, "max_tokens", providers.Chat},
		{"max tokens fraction", `{` + user + `,"max_completion_tokens":1.5}`, "max_completion_tokens", providers.Chat},
		{"temperature string", `{` + user + `,"temperature":"hot"}`, "temperature", providers.Chat},
		{"stop number", `{` + user + `,"stop":[1]}`, "stop", providers.Chat},
		{"http image", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`,
			"messages[0].content[0].image_url.url", providers.Chat},
		{"bmp data url", `{"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"data:image/bmp;base64,Qk0="}}]}]}`,
			"messages[0].content[1].image_url.url", providers.Chat},
		{"not base64", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png,%89PNG"}}]}]}`,
			"messages[0].content[0].image_url.url", providers.Chat},
		{"audio part", `{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"x","format":"wav"}}]}]}`,
			"messages[0].content[0].type", providers.Chat},
		{"unknown role", `{"messages":[{"role":"function","content":"x","name":"f"}]}`, "messages[0].role", providers.Chat},
		{"tool without id", `{"messages":[{"role":"user","content":"x"},{"role":"tool","content":"y"}]}`, "messages[1].tool_call_id", providers.Chat},
		{"bad arguments", `{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{oops"}}]}]}`,
			"messages[1].tool_calls[0].function.arguments", providers.Chat},
		{"forced tool without tools", `{` + user + `,"tool_choice":"required"}`, "tool_choice", providers.Chat},
		{"none with tool history", `{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"1"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"}`,
			"tool_choice", providers.Chat},
		{"custom tool", `{` + user + `,"tools":[{"type":"custom","custom":{"name":"x"}}]}`, "tools[0].type", providers.Chat},
		{"legacy functions", `{` + user + `,"functions":[{"name":"f"}]}`, "functions", providers.Chat},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := chatCall(tc.body)
			c.Endpoint = tc.endpoint
			var req fasthttp.Request
			err := p.Build(&req, c)
			var pe *providers.ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a ParamError", err)
			}
			if pe.Param != tc.param {
				t.Errorf("param = %q, want %q (%s)", pe.Param, tc.param, pe.Message)
			}
			if !strings.HasPrefix(pe.Message, tc.param+": ") {
				t.Errorf("message %q does not lead with the parameter", pe.Message)
			}
		})
	}
}

func TestBuildMaxTokens(t *testing.T) {
	p := testProvider(t, "")
	tests := []struct {
		name, body string
		callMax    int64
		clamp      int64
		want       string // inferenceConfig.maxTokens raw, "" for absent
	}{
		{"absent", `{"messages":[{"role":"user","content":"x"}]}`, 0, 0, ""},
		{"max_tokens", `{"messages":[{"role":"user","content":"x"}],"max_tokens":300}`, 300, 0, "300"},
		{"max_completion_tokens", `{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":70}`, 70, 0, "70"},
		{"clamp overrides", `{"messages":[{"role":"user","content":"x"}],"max_tokens":4000}`, 4000, 100, "100"},
		{"clamp without a limit", `{"messages":[{"role":"user","content":"x"}]}`, 0, 50, "50"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := chatCall(tc.body)
			c.MaxTokens, c.ClampMaxTokens = tc.callMax, tc.clamp
			var req fasthttp.Request
			if err := p.Build(&req, c); err != nil {
				t.Fatal(err)
			}
			body := string(req.Body())
			if !gjson.Valid(body) {
				t.Fatalf("invalid JSON %s", body)
			}
			if got := gjson.Get(body, "inferenceConfig.maxTokens").Raw; got != tc.want {
				t.Errorf("maxTokens = %q, want %q in %s", got, tc.want, body)
			}
			if tc.want == "" && gjson.Get(body, "inferenceConfig").Exists() {
				t.Errorf("empty inferenceConfig sent: %s", body)
			}
		})
	}
}

func TestBuildInvalidUTF8(t *testing.T) {
	p := testProvider(t, "")
	var req fasthttp.Request
	if err := p.Build(&req, chatCall("{\"messages\":[{\"role\":\"user\",\"content\":\"a\xffb\"}]}")); err != nil {
		t.Fatal(err)
	}
	if got := gjson.GetBytes(req.Body(), "messages.0.content.0.text").String(); got != "a\ufffdb" {
		t.Errorf("text = %q, want the invalid byte replaced", got)
	}
}

func TestBuildBearerKey(t *testing.T) {
	p, err := New(Options{Name: "k", Region: "eu-west-1", APIKey: "bedrock-api-key"})
	if err != nil {
		t.Fatal(err)
	}
	var req fasthttp.Request
	if err := p.Build(&req, chatCall(`{"messages":[{"role":"user","content":"x"}]}`)); err != nil {
		t.Fatal(err)
	}
	if got := string(req.Header.Peek("Authorization")); got != "Bearer bedrock-api-key" {
		t.Errorf("authorization %q", got)
	}
	if d := req.Header.Peek("X-Amz-Date"); len(d) != 0 {
		t.Errorf("signed a bearer request: %s", d)
	}
	if got := req.URI().String(); !strings.HasPrefix(got, "https://bedrock-runtime.eu-west-1.amazonaws.com/model/") {
		t.Errorf("URI %s", got)
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		o       Options
		wantErr bool
		region  string
	}{
		{"region", Options{Region: "us-west-2"}, false, "us-west-2"},
		{"region from base url", Options{BaseURL: "https://bedrock-runtime.ap-south-1.amazonaws.com"}, false, "ap-south-1"},
		{"fips base url", Options{BaseURL: "https://bedrock-runtime-fips.us-east-1.amazonaws.com"}, false, "us-east-1"},
		{"nothing", Options{}, true, ""},
		{"custom base without region", Options{BaseURL: "http://127.0.0.1:9000"}, true, ""},
		{"bad scheme", Options{BaseURL: "ftp://x", Region: "us-east-1"}, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.o)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && p.signer.region != tc.region {
				t.Errorf("region = %q, want %q", p.signer.region, tc.region)
			}
		})
	}
}
