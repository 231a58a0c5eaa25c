package gemini

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
)

// cliRequest is the shape of Gemini CLI's first request: system
// instruction, two user text parts, function declarations with
// parametersJsonSchema, and a generationConfig with topK and
// thinkingConfig.
const cliRequest = `{"contents":[{"role":"user","parts":[{"text":"<session_context>\nctx"},{"text":"Say \"hi\"."}]}],` +
	`"systemInstruction":{"role":"user","parts":[{"text":"You are Gemini CLI."}]},` +
	`"tools":[{"functionDeclarations":[{"name":"read_file","description":"Reads.","parametersJsonSchema":{"type":"object","properties":{"file_path":{"type":"string"}}}},` +
	`{"name":"ls","parameters":{"type":"OBJECT","properties":{"dir":{"type":"STRING","description":"type"}},"required":["dir"]}}]}],` +
	`"generationConfig":{"temperature":1,"topP":0.95,"topK":64,"thinkingConfig":{"includeThoughts":true,"thinkingBudget":8192}}}`

func TestRequestToOpenAI(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		stream     bool
		// want maps gjson paths of the OpenAI body to their raw values;
		// a value "-" wants the path absent.
		want map[string]string
		// param names a ParamError's parameter, when one is wanted.
		param string
	}{
		{name: "cli first request", body: cliRequest, stream: true, want: map[string]string{
			"model":                       `"m"`,
			"messages.0":                  `{"role":"system","content":"You are Gemini CLI."}`,
			"messages.1.content.1":        `{"type":"text","text":"Say \"hi\"."}`,
			"stream_options":              `{"include_usage":true}`,
			"tools.0.function.name":       `"read_file"`,
			"tools.1.function.parameters": `{"type":"object","properties":{"dir":{"type":"string","description":"type"}},"required":["dir"]}`,
			"temperature":                 `1`,
			"top_p":                       `0.95`,
			"top_k":                       "-",
			"reasoning_effort":            `"medium"`,
		}},
		{name: "tool round trip", body: `{"contents":[{"role":"user","parts":[{"text":"read it"}]},` +
			`{"role":"model","parts":[{"text":"ok","thought":true},{"functionCall":{"name":"read_file","args":{"file_path":"a"}},"thoughtSignature":"sig"}]},` +
			`{"role":"user","parts":[{"functionResponse":{"name":"read_file","response":{"output":"42"}}},{"text":"and?"}]}],` +
			`"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["read_file"]}},` + `"tools":[{"functionDeclarations":[{"name":"read_file"}]}]}`,
			want: map[string]string{
				"messages.1":  `{"role":"assistant","content":null,"tool_calls":[{"id":"call_0","type":"function","function":{"name":"read_file","arguments":"{\"file_path\":\"a\"}"}}]}`,
				"messages.2":  `{"role":"tool","tool_call_id":"call_0","content":"{\"output\":\"42\"}"}`,
				"messages.3":  `{"role":"user","content":[{"type":"text","text":"and?"}]}`,
				"tool_choice": `{"type":"function","function":{"name":"read_file"}}`,
				"stream":      "-",
			}},
		{name: "inline image and json schema", body: `{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"iVBO"}}]}],` +
			`"generationConfig":{"maxOutputTokens":100,"stopSequences":["END"],"candidateCount":1,"responseMimeType":"application/json","responseSchema":{"type":"OBJECT","properties":{"a":{"type":"INTEGER"}}},"thinkingConfig":{"thinkingLevel":"HIGH"}}}`,
			want: map[string]string{
				"messages.0.content.0.image_url.url": `"data:image/png;base64,iVBO"`,
				"max_tokens":                         `100`,
				"stop":                               `["END"]`,
				"response_format.json_schema.schema.properties": `{"a":{"type":"integer"}}`,
				"reasoning_effort": `"high"`,
			}},
		{name: "two candidates", body: `{"contents":[],"generationConfig":{"candidateCount":2}}`, param: "generationConfig.candidateCount"},
		{name: "built-in tool", body: `{"contents":[],"tools":[{"googleSearch":{}}]}`, param: "tools[0]"},
		{name: "cached content", body: `{"contents":[],"cachedContent":"cachedContents/x"}`, param: "cachedContent"},
		{name: "no contents", body: `{}`, param: "contents"},
		{name: "bad role", body: `{"contents":[{"role":"system","parts":[{"text":"x"}]}]}`, param: "contents[0].role"},
		{name: "orphan response", body: `{"contents":[{"parts":[{"functionResponse":{"name":"f","response":{}}}]}]}`, param: "contents[0].parts[0].functionResponse"},
		{name: "logprobs", body: `{"contents":[],"generationConfig":{"responseLogprobs":true}}`, param: "generationConfig.responseLogprobs"},
		{name: "video", body: `{"contents":[{"parts":[{"inlineData":{"mimeType":"video/mp4","data":"AA"}}]}]}`, param: "contents[0].parts[0].inlineData.mimeType"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := RequestToOpenAI(nil, []byte(tt.body), "m", tt.stream)
			if tt.param != "" {
				var pe *providers.ParamError
				if !errors.As(err, &pe) || pe.Param != tt.param {
					t.Fatalf("error %v, want a ParamError for %s", err, tt.param)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(out) {
				t.Fatalf("not JSON: %s", out)
			}
			for path, want := range tt.want {
				got := gjson.GetBytes(out, path)
				if want == "-" {
					if got.Exists() {
						t.Errorf("%s = %s, want absent", path, got.Raw)
					}
				} else if got.Raw != want {
					t.Errorf("%s = %s, want %s\nbody %s", path, got.Raw, want, out)
				}
			}
		})
	}
}

// TestEffortLast: the reasoning effort is the body's last member, in the
// form the gateway removes for kinds without one.
func TestEffortLast(t *testing.T) {
	out, err := RequestToOpenAI(nil, []byte(cliRequest), "m", false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(out), effortKey+`medium"}`) {
		t.Errorf("body ends %q", out[len(out)-40:])
	}
}

func TestResponseFromOpenAI(t *testing.T) {
	oa := `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi \"there\"",` +
		`"tool_calls":[{"id":"c1","type":"function","function":{"name":"read_file","arguments":"{\"file_path\":\"a\"}"}}]},"finish_reason":"tool_calls"}],` +
		`"usage":{"prompt_tokens":10,"completion_tokens":7,"total_tokens":17,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":3}}}`
	out, err := ResponseFromOpenAI(nil, []byte(oa), "m")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"candidates":[{"content":{"role":"model","parts":[{"text":"Hi \"there\""},{"functionCall":{"name":"read_file","args":{"file_path":"a"},"id":"c1"}}]},"finishReason":"STOP","index":0}],` +
		`"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":4,"totalTokenCount":17,"cachedContentTokenCount":4,"thoughtsTokenCount":3},"modelVersion":"m","responseId":"chatcmpl-1"}`
	if string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	for _, bad := range []string{`{}`, `not json`, `{"choices":[{"message":{"tool_calls":[{"function":{"name":"f","arguments":"[1]"}}]}}]}`} {
		if _, err := ResponseFromOpenAI(nil, []byte(bad), "m"); !errors.Is(err, providers.ErrMalformed) {
			t.Errorf("%s: error %v, want ErrMalformed", bad, err)
		}
	}
}

// openAIStream is an OpenAI stream with text, a tool call in fragments,
// the finish chunk, the usage chunk and [DONE].
const openAIStream = `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n" +
	`data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}` + "\n\n" +
	`data: {"choices":[{"index":0,"delta":{"content":"lo\n"}}]}` + "\n\n" +
	`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"read_file","arguments":""}}]}}]}` + "\n\n" +
	`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"file_pa"}}]}}]}` + "\n\n" +
	`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":\"a\"}"}}]}}]}` + "\n\n" +
	`data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\n" +
	`data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":6,"total_tokens":11}}` + "\n\n" +
	"data: [DONE]\n\n"

func TestEncoder(t *testing.T) {
	wantChunks := []string{
		`{"candidates":[{"content":{"role":"model","parts":[{"text":"Hel"}]},"index":0}],"modelVersion":"m","responseId":"r1"}`,
		`{"candidates":[{"content":{"role":"model","parts":[{"text":"lo\n"}]},"index":0}],"modelVersion":"m","responseId":"r1"}`,
		`{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"read_file","args":{"file_path":"a"},"id":"c1"}}]},"finishReason":"STOP","index":0}],` +
			`"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":6,"totalTokenCount":11},"modelVersion":"m","responseId":"r1"}`,
	}
	t.Run("sse", func(t *testing.T) {
		e := NewEncoder("m", "r1", false)
		defer e.Release()
		// Event by event, as a relay hands them over.
		var out []byte
		for ev := range strings.SplitAfterSeq(openAIStream, "\n\n") {
			var err error
			if out, err = e.Events(out, []byte(ev)); err != nil {
				t.Fatal(err)
			}
		}
		want := ""
		for _, c := range wantChunks {
			want += "data: " + c + "\r\n\r\n"
		}
		if string(out) != want || !e.Closed() {
			t.Errorf("got\n%s\nwant\n%s", out, want)
		}
		if more := e.Finish(nil); len(more) != 0 {
			t.Errorf("Finish after [DONE] wrote %s", more)
		}
	})
	t.Run("array", func(t *testing.T) {
		e := NewEncoder("m", "r1", true)
		defer e.Release()
		out, err := e.Events(nil, []byte(openAIStream))
		if err != nil {
			t.Fatal(err)
		}
		if want := "[" + strings.Join(wantChunks, ",\r\n") + "]"; string(out) != want {
			t.Errorf("got\n%s\nwant\n%s", out, want)
		}
	})
	t.Run("failure", func(t *testing.T) {
		for _, array := range []bool{false, true} {
			e := NewEncoder("m", "r1", array)
			out, _ := e.Events(nil, []byte(`data: {"choices":[{"index":0,"delta":{"content":"x"}}]}`+"\n\n"))
			out = e.Fail(out, 504, "provider p sent nothing")
			e.Release()
			text := string(out)
			if array {
				if !json.Valid(out) || gjson.Get(text, "1.error.status").Str != "DEADLINE_EXCEEDED" {
					t.Errorf("array failure %s", out)
				}
			} else if !strings.HasSuffix(text, `data: {"error":{"code":504,"message":"provider p sent nothing","status":"DEADLINE_EXCEEDED"}}`+"\r\n\r\n") {
				t.Errorf("sse failure %s", out)
			}
		}
	})
	t.Run("cut without done", func(t *testing.T) {
		e := NewEncoder("m", "r1", false)
		defer e.Release()
		out, _ := e.Events(nil, []byte(`data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"length"}]}`+"\n\n"))
		out = e.Finish(out)
		if !strings.Contains(string(out), `"finishReason":"MAX_TOKENS"`) {
			t.Errorf("finish %s", out)
		}
	})
}

// TestPassthrough: a native stream goes out unchanged as SSE, or as the
// JSON array form closed by the chunk with a finishReason.
func TestPassthrough(t *testing.T) {
	evs := "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}]}\r\n\r\n" +
		"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"b\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":2}}\r\n\r\n"
	e := NewPassthrough(false)
	out, err := e.Events(nil, []byte(evs))
	e.Release()
	if err != nil || string(out) != evs {
		t.Errorf("sse: %v %q", err, out)
	}
	e = NewPassthrough(true)
	out, err = e.Events(nil, []byte(evs))
	out = e.Finish(out) // nothing more: the array is closed
	e.Release()
	if err != nil || !json.Valid(out) || gjson.GetBytes(out, "1.candidates.0.finishReason").Str != "STOP" || gjson.GetBytes(out, "#").Int() != 2 {
		t.Errorf("array: %v %s", err, out)
	}
}

// TestNativeStream: Gemini events pass through unchanged; usage, text
// and completion are read on the way, an error event fails the stream.
func TestNativeStream(t *testing.T) {
	p, err := New(Options{Name: "g"})
	if err != nil {
		t.Fatal(err)
	}
	s := p.NativeStream()
	defer s.Close()
	ev1 := "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"x\",\"thought\":true},{\"text\":\"Hi \\\"a\\\"\"}]}}],\"usageMetadata\":{\"promptTokenCount\":3}}\r\n\r\n"
	out, st, err := s.Event(nil, []byte(ev1))
	if err != nil || st != providers.More || string(out) != ev1 || s.(providers.ContentStream).LastContent() != `Hi \"a\"` {
		t.Fatalf("event 1: %v %v %q %q", err, st, out, s.(providers.ContentStream).LastContent())
	}
	ev2 := `data: {"candidates":[{"content":{"parts":[{"text":"!"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":4,"thoughtsTokenCount":2}}` + "\n\n"
	if _, st, err = s.Event(nil, []byte(ev2)); err != nil || st != providers.Done || !s.Complete() {
		t.Fatalf("event 2: %v %v", err, st)
	}
	if u := s.Usage(); u != (providers.Usage{Reported: true, Prompt: 3, Completion: 6, Reasoning: 2}) {
		t.Errorf("usage %+v", u)
	}
	s2 := p.NativeStream()
	defer s2.Close()
	var ue *providers.UpstreamError
	if _, st, err := s2.Event(nil, []byte(`data: {"error":{"code":429,"message":"quota"}}`+"\n\n")); st != providers.Failed || !errors.As(err, &ue) || ue.Message != "quota" {
		t.Errorf("error event: %v %v", st, err)
	}
}

func TestClampOutput(t *testing.T) {
	for _, tt := range []struct{ body, want string }{
		{`{"contents":[]}`, `{"generationConfig":{"maxOutputTokens":50},"contents":[]}`},
		{`{}`, `{"generationConfig":{"maxOutputTokens":50}}`},
		{`{"generationConfig":{}}`, `{"generationConfig":{"maxOutputTokens":50}}`},
		{`{"generationConfig":{"topK":3}}`, `{"generationConfig":{"maxOutputTokens":50,"topK":3}}`},
		{`{"generationConfig":{"maxOutputTokens":900,"topK":3}}`, `{"generationConfig":{"maxOutputTokens":50,"topK":3}}`},
		{`{"generationConfig":{"maxOutputTokens":20}}`, `{"generationConfig":{"maxOutputTokens":20}}`},
		{`{"generationConfig":{"maxOutputTokens":"lots"}}`, `{"generationConfig":{"maxOutputTokens":50}}`},
		{`{"generation_config":{"max_output_tokens":70}, "contents":[]}`, `{"generation_config":{"max_output_tokens":50}, "contents":[]}`},
		{` { "contents" : [ ] } `, ` {"generationConfig":{"maxOutputTokens":50}, "contents" : [ ] } `},
	} {
		out, err := ClampOutput(nil, []byte(tt.body), 50)
		if err != nil || string(out) != tt.want {
			t.Errorf("%s: %v %s, want %s", tt.body, err, out, tt.want)
		}
	}
	for _, bad := range []string{`{"generationConfig":[]}`, `{"generationConfig":{"maxOutputTokens":1,"max_output_tokens":900}}`,
		`{"generationConfig":{},"generation_config":{}}`, `[]`} {
		if out, err := ClampOutput(nil, []byte(bad), 50); err == nil {
			t.Errorf("%s was clamped: %s", bad, out)
		}
	}
}

// FuzzRequestToOpenAI: any body either fails or becomes valid JSON.
func FuzzRequestToOpenAI(f *testing.F) {
	f.Add([]byte(cliRequest))
	f.Add([]byte(`{"contents":[{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]},{"parts":[{"functionResponse":{"name":"f","response":"x"}}]}]}`))
	f.Add([]byte(`{"contents":[],"generationConfig":{"responseMimeType":"application/json","responseSchema":{"type":"ARRAY","items":{"type":"STRING"}}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		out, err := RequestToOpenAI(nil, body, "m", true)
		if err == nil && !json.Valid(out) {
			t.Fatalf("invalid JSON from %s:\n%s", body, out)
		}
	})
}

// FuzzEncoder: any OpenAI events either fail or give chunks that are each
// valid JSON.
func FuzzEncoder(f *testing.F) {
	f.Add([]byte(openAIStream))
	f.Fuzz(func(t *testing.T, evs []byte) {
		e := NewEncoder("m", "r", true)
		defer e.Release()
		out, err := e.Events(nil, evs)
		if err != nil {
			return
		}
		out = e.Finish(out)
		if !json.Valid(out) {
			t.Fatalf("invalid JSON from %q:\n%s", evs, out)
		}
	})
}

// BenchmarkEncoder translates a streamed answer; expect a few allocs per
// event (gjson reads), none per byte.
func BenchmarkEncoder(b *testing.B) {
	evs := []byte(openAIStream)
	var out []byte
	b.ReportAllocs()
	b.SetBytes(int64(len(evs)))
	for b.Loop() {
		e := NewEncoder("m", "r1", false)
		out, _ = e.Events(out[:0], evs)
		e.Release()
	}
}

// BenchmarkRequestToOpenAI translates Gemini CLI's first request.
func BenchmarkRequestToOpenAI(b *testing.B) {
	body := []byte(cliRequest)
	var out []byte
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		out, _ = RequestToOpenAI(out[:0], body, "m", true)
	}
}
