package gemini

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/valyala/fasthttp"
)

const simpleChat = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

func TestBuildRequestLine(t *testing.T) {
	tests := []struct {
		name    string
		o       Options
		model   string
		ep      providers.Endpoint
		stream  bool
		wantURI string
		headers map[string]string
	}{
		{"default base", Options{APIKey: "k"}, "gemini-2.5-flash", providers.Chat, false,
			"https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent",
			map[string]string{"x-goog-api-key": "k", "Content-Type": "application/json", "Authorization": ""}},
		{"stream", Options{APIKey: "k"}, "gemini-2.5-flash", providers.Chat, true,
			"https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", nil},
		{"embeddings", Options{BaseURL: "http://127.0.0.1:9"}, "gemini-embedding-001", providers.Embeddings, false,
			"http://127.0.0.1:9/v1beta/models/gemini-embedding-001:batchEmbedContents", map[string]string{"x-goog-api-key": ""}},
		{"version in base url", Options{BaseURL: "https://proxy.example/gemini/v1/"}, "m", providers.Chat, false,
			"https://proxy.example/gemini/v1/models/m:generateContent", nil},
		{"api version", Options{BaseURL: "https://proxy.example/gemini", APIVersion: "v1alpha"}, "m", providers.Chat, false,
			"https://proxy.example/gemini/v1alpha/models/m:generateContent", nil},
		{"tuned model resource", Options{}, "tunedModels/my-model", providers.Chat, false,
			"https://generativelanguage.googleapis.com/v1beta/tunedModels/my-model:generateContent", nil},
		{"extra header", Options{Headers: map[string]string{"X-Team": "a"}}, "m", providers.Chat, false,
			"https://generativelanguage.googleapis.com/v1beta/models/m:generateContent", map[string]string{"X-Team": "a", "X-Request-Id": "req-1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Name = "t"
			p, err := New(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			body := simpleChat
			if tc.ep == providers.Embeddings {
				body = `{"model":"m","input":"x"}`
			}
			c := &providers.Call{Endpoint: tc.ep, Body: []byte(body), Model: tc.model, Stream: tc.stream, RequestID: []byte("req-1")}
			var req fasthttp.Request
			if err := p.Build(&req, c); err != nil {
				t.Fatal(err)
			}
			if got := req.URI().String(); got != tc.wantURI {
				t.Errorf("URI = %s, want %s", got, tc.wantURI)
			}
			if m := string(req.Header.Method()); m != "POST" {
				t.Errorf("method %s", m)
			}
			for h, want := range tc.headers {
				if got := string(req.Header.Peek(h)); got != want {
					t.Errorf("%s = %q, want %q", h, got, want)
				}
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	for name, o := range map[string]Options{
		"ftp":         {BaseURL: "ftp://x"},
		"no host":     {BaseURL: "https://"},
		"bad version": {APIVersion: "v1/../x"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(o); err == nil {
				t.Errorf("New(%+v) accepted", o)
			}
		})
	}
}

func TestBuildParamErrors(t *testing.T) {
	p := newTestProvider(t, "")
	user := `{"role":"user","content":"hi"}`
	tests := []struct {
		name, body string
		ep         providers.Endpoint
		stream     bool
		param      string
	}{
		{"not json", `{"model":`, providers.Chat, false, "body"},
		{"not object", `[1]`, providers.Chat, false, "body"},
		{"no messages", `{"model":"m"}`, providers.Chat, false, "messages"},
		{"n in stream", `{"messages":[` + user + `],"n":2}`, providers.Chat, true, "n"},
		{"n zero", `{"messages":[` + user + `],"n":0}`, providers.Chat, false, "n"},
		{"logprobs", `{"messages":[` + user + `],"logprobs":true}`, providers.Chat, false, "logprobs"},
		{"top_logprobs", `{"messages":[` + user + `],"top_logprobs":3}`, providers.Chat, false, "top_logprobs"},
		{"logit_bias", `{"messages":[` + user + `],"logit_bias":{"50256":-100}}`, providers.Chat, false, "logit_bias"},
		{"functions", `{"messages":[` + user + `],"functions":[{"name":"f"}]}`, providers.Chat, false, "functions"},
		{"audio out", `{"messages":[` + user + `],"modalities":["text","audio"]}`, providers.Chat, false, "modalities"},
		{"image out", `{"messages":[` + user + `],"modalities":["text","image"]}`, providers.Chat, false, "modalities"},
		{"prediction", `{"messages":[` + user + `],"prediction":{"type":"content","content":"x"}}`, providers.Chat, false, "prediction"},
		{"bad role", `{"messages":[{"role":"critic","content":"x"}]}`, providers.Chat, false, "messages[0].role"},
		{"image url without extension", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x.example/img?id=3"}}]}]}`, providers.Chat, false, "messages[0].content[0].image_url.url"},
		{"ftp image", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"ftp://x/a.png"}}]}]}`, providers.Chat, false, "messages[0].content[0].image_url.url"},
		{"data url not base64", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png,abc"}}]}]}`, providers.Chat, false, "messages[0].content[0].image_url.url"},
		{"file id", `{"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"f1"}}]}]}`, providers.Chat, false, "messages[0].content[0].file.file_id"},
		{"unknown part", `{"messages":[{"role":"user","content":[{"type":"video","video":{}}]}]}`, providers.Chat, false, "messages[0].content[0].type"},
		{"unknown tool call id", `{"messages":[` + user + `,{"role":"tool","tool_call_id":"nope","content":"x"}]}`, providers.Chat, false, "messages[1].tool_call_id"},
		{"arguments not object", `{"messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}`, providers.Chat, false, "messages[0].tool_calls[0].function.arguments"},
		{"tool type", `{"messages":[` + user + `],"tools":[{"type":"web_search"}]}`, providers.Chat, false, "tools[0].type"},
		{"tool choice", `{"messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes"}`, providers.Chat, false, "tool_choice"},
		{"recursive schema", `{"messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"n":{"$ref":"#/$defs/N"}},"$defs":{"N":{"type":"object","properties":{"next":{"$ref":"#/$defs/N"}}}}}}}]}`, providers.Chat, false, "tools[0].function.parameters"},
		{"remote ref", `{"messages":[` + user + `],"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object","properties":{"a":{"$ref":"https://x/s.json"}}}}}}`, providers.Chat, false, "response_format.json_schema.schema"},
		{"type union", `{"messages":[` + user + `],"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object","properties":{"a":{"type":["string","number"]}}}}}}`, providers.Chat, false, "response_format.json_schema.schema"},
		{"allOf key twice", `{"messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"allOf":[{"type":"string"},{"type":"number"}]}}}}}]}`, providers.Chat, false, "tools[0].function.parameters"},
		{"response format", `{"messages":[` + user + `],"response_format":{"type":"yaml"}}`, providers.Chat, false, "response_format.type"},
		{"reasoning effort", `{"messages":[` + user + `],"reasoning_effort":"max"}`, providers.Chat, false, "reasoning_effort"},
		{"temperature type", `{"messages":[` + user + `],"temperature":"hot"}`, providers.Chat, false, "temperature"},
		{"stop type", `{"messages":[` + user + `],"stop":[1]}`, providers.Chat, false, "stop"},
		{"completions endpoint", `{"prompt":"x"}`, providers.Completions, false, "model"},
		{"token input", `{"input":[[1,2,3]]}`, providers.Embeddings, false, "input"},
		{"empty input", `{"input":[]}`, providers.Embeddings, false, "input"},
		{"encoding format", `{"input":"x","encoding_format":"int8"}`, providers.Embeddings, false, "encoding_format"},
		{"dimensions", `{"input":"x","dimensions":0}`, providers.Embeddings, false, "dimensions"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var req fasthttp.Request
			c := &providers.Call{Endpoint: tc.ep, Body: []byte(tc.body), Model: "m", Stream: tc.stream}
			err := p.Build(&req, c)
			var pe *providers.ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a ParamError", err)
			}
			if pe.Param != tc.param {
				t.Errorf("param = %q, want %q (%v)", pe.Param, tc.param, pe)
			}
			if pe.Message == "" {
				t.Error("empty message")
			}
		})
	}
}

func TestBuildMaxTokens(t *testing.T) {
	p := newTestProvider(t, "")
	tests := []struct {
		name, extra string
		clamp       int64
		want        string
	}{
		{"none", ``, 0, ""},
		{"max_tokens", `,"max_tokens":50`, 0, "50"},
		{"max_completion_tokens wins", `,"max_tokens":50,"max_completion_tokens":70`, 0, "70"},
		{"clamp overrides", `,"max_tokens":5000`, 100, "100"},
		{"clamp without a limit", ``, 100, "100"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"model":"m","messages":[{"role":"user","content":"hi"}]` + tc.extra + `}`
			var req fasthttp.Request
			c := &providers.Call{Endpoint: providers.Chat, Body: []byte(body), Model: "m", ClampMaxTokens: tc.clamp}
			if err := p.Build(&req, c); err != nil {
				t.Fatal(err)
			}
			if got := gjson.GetBytes(req.Body(), "generationConfig.maxOutputTokens").Raw; got != tc.want {
				t.Errorf("maxOutputTokens = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestResponseMalformed(t *testing.T) {
	p := newTestProvider(t, "")
	tests := map[string]struct {
		body string
		ep   providers.Endpoint
	}{
		"not json":          {`{"candidates":[`, providers.Chat},
		"deep":              {strings.Repeat("[", 300), providers.Chat},
		"array":             {`[]`, providers.Chat},
		"no candidates":     {`{"usageMetadata":{}}`, providers.Chat},
		"no embeddings":     {`{"embedding":{"values":[1]}}`, providers.Embeddings},
		"embedding strings": {`{"embeddings":[{"values":["a"]}]}`, providers.Embeddings},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := &providers.Call{Endpoint: tc.ep, Model: "m", Body: []byte(`{"encoding_format":"base64"}`)}
			_, _, err := p.Response(nil, []byte(tc.body), c)
			if !errors.Is(err, providers.ErrMalformed) {
				t.Errorf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestEmbeddingsBase64(t *testing.T) {
	p := newTestProvider(t, "")
	body := `{"embeddings":[{"values":[0.5,-1.25,3e-8]}]}`
	c := &providers.Call{Endpoint: providers.Embeddings, Model: "m", Body: []byte(`{"input":"x","encoding_format":"base64"}`)}
	out, _, err := p.Response(nil, []byte(body), c)
	if err != nil {
		t.Fatal(err)
	}
	got := decodeBase64Floats(t, gjson.GetBytes(out, "data.0.embedding").String())
	want := []float32{0.5, -1.25, 3e-8}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("value %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestStreamFailures(t *testing.T) {
	p := newTestProvider(t, "")
	tests := []struct {
		name, ev string
		upstream bool
	}{
		{"bad json", "data: {bad\n\n", false},
		{"deep nesting", "data: " + strings.Repeat("[", 200) + "\n\n", false},
		{"not object", "data: [1,2]\n\n", false},
		{"error object", "data: {\"error\":{\"code\":500,\"message\":\"boom\",\"status\":\"INTERNAL\"}}\n\n", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := p.Stream(&providers.Call{Model: "m"})
			defer s.Close()
			out, st, err := s.Event(nil, []byte(tc.ev))
			if st != providers.Failed || err == nil || len(out) != 0 {
				t.Fatalf("state %v err %v out %q", st, err, out)
			}
			var ue *providers.UpstreamError
			if errors.As(err, &ue) != tc.upstream {
				t.Errorf("upstream error = %v, want %v (%v)", !tc.upstream, tc.upstream, err)
			}
			if !tc.upstream && !errors.Is(err, providers.ErrMalformed) {
				t.Errorf("err = %v, want ErrMalformed", err)
			}
			if s.Complete() {
				t.Error("a failed stream is complete")
			}
		})
	}
}

func TestStreamReuseResets(t *testing.T) {
	p := newTestProvider(t, "")
	ev := []byte(`data: {"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":{}}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1},"responseId":"a"}` + "\n\n")
	for i := range 3 {
		s := p.Stream(&providers.Call{Model: "m"})
		out, st, err := s.Event(nil, ev)
		if err != nil || st != providers.Done || !s.Complete() {
			t.Fatalf("round %d: state %v err %v", i, st, err)
		}
		if !strings.Contains(string(out), `"index":0,"id":"call_0"`) {
			t.Errorf("round %d: tool call index not reset: %s", i, out)
		}
		s.Close()
		s = p.Stream(&providers.Call{Model: "m"})
		if s.Complete() || s.Usage().Reported {
			t.Errorf("round %d: a fresh stream carries old state", i)
		}
		s.Close()
	}
}

func TestErrorMessage(t *testing.T) {
	p := newTestProvider(t, "")
	tests := map[string]string{
		`{"error":{"code":400,"message":"API key not valid.","status":"INVALID_ARGUMENT"}}`: "API key not valid.",
		`[{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED"}}]`:          "quota",
		`{"message":"plain"}`: "plain",
		`not json`:            "",
		`{}`:                  "",
	}
	for body, want := range tests {
		if got := p.ErrorMessage([]byte(body)); got != want {
			t.Errorf("ErrorMessage(%s) = %q, want %q", body, got, want)
		}
	}
}

// TestUsageGarbage: usage metadata with a count that is not one, or counts
// summing past 2^64-1, reports no usage (the gateway estimates it) instead
// of the 0 or the wrapped sum it would otherwise bill.
func TestUsageGarbage(t *testing.T) {
	good := parseUsage(`{"promptTokenCount":10,"toolUsePromptTokenCount":2,"candidatesTokenCount":5,"thoughtsTokenCount":3,"cachedContentTokenCount":4}`)
	if want := (providers.Usage{Prompt: 12, Completion: 8, Cached: 4, Reasoning: 3, Reported: true}); good != want {
		t.Fatalf("good usage = %+v, want %+v", good, want)
	}
	for _, u := range []string{
		`{"promptTokenCount":-10,"candidatesTokenCount":5}`,
		`{"promptTokenCount":10,"candidatesTokenCount":5.5}`,
		`{"promptTokenCount":10,"candidatesTokenCount":"5"}`,
		`{"promptTokenCount":18446744073709551615,"toolUsePromptTokenCount":2}`,
		`{"candidatesTokenCount":18446744073709551615,"thoughtsTokenCount":1}`,
		`{"promptTokenCount":99999999999999999999}`,
	} {
		if got := parseUsage(u); got != (providers.Usage{}) {
			t.Errorf("parseUsage(%s) = %+v, want no usage", u, got)
		}
	}
}
