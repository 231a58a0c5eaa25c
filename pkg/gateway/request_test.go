package gateway

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/providers/openai"
	"github.com/valyala/fasthttp"
)

// TestParseRequest covers what the one-pass scan reads and refuses, and
// checks that the byte-level edits made from its positions are the ones a
// search of the body makes.
func TestParseRequest(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name string
		ep   endpoint
		body string
		code string // the refusal's code, "" when accepted
		msg  string // part of the refusal's message
		want func(t *testing.T, info reqInfo)
	}{
		{name: "fields", ep: epChat, body: `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":64,` + msgs + `}`,
			want: func(t *testing.T, info reqInfo) {
				if info.model != "m" || info.modelRaw != `"m"` || info.modelIdx != 9 || !info.stream || !info.includeUsage || info.maxTokens != 64 ||
					info.includeUsageAt != (providers.Member{Raw: "true", Idx: 61}) || info.maxAt[0] != (providers.Member{Raw: "64", Idx: 80}) {
					t.Errorf("%+v", info)
				}
			}},
		{name: "escaped model key is the model", ep: epChat, body: `{"mod\u0065l":"m",` + msgs + `}`,
			want: func(t *testing.T, info reqInfo) {
				if info.model != "m" || info.modelIdx != 14 {
					t.Errorf("%+v", info)
				}
			}},
		{name: "escaped model value", ep: epChat, body: `{"model":"mock\u002dgpt",` + msgs + `}`,
			want: func(t *testing.T, info reqInfo) {
				if info.model != "mock-gpt" || info.modelRaw != `"mock\u002dgpt"` {
					t.Errorf("%+v", info)
				}
			}},
		{name: "escaped stream key", ep: epChat, body: `{"model":"m","str\u0065am":true,` + msgs + `}`,
			want: func(t *testing.T, info reqInfo) {
				if !info.stream {
					t.Errorf("%+v", info)
				}
			}},
		// The larger of the two limits, wherever it is: a server reads one
		// or the other (issue #41; it was the later one).
		{name: "larger max field wins", ep: epChat, body: `{"model":"m","max_completion_tokens":9,"max_tokens":7,` + msgs + `}`,
			want: func(t *testing.T, info reqInfo) {
				if info.maxTokens != 9 || info.maxAt[1].Raw != "9" || info.maxAt[0].Raw != "7" {
					t.Errorf("%+v", info)
				}
			}},
		{name: "n and best_of", ep: epCompletions, body: `{"model":"m","n":2,"best_of":5,"prompt":"x"}`,
			want: func(t *testing.T, info reqInfo) {
				if info.choices != 5 {
					t.Errorf("%+v", info)
				}
			}},
		{name: "null stream_options is located", ep: epChat, body: `{"model":"m","stream":true,"stream_options":null,` + msgs + `}`,
			want: func(t *testing.T, info reqInfo) {
				if info.streamOpts != "null" || info.streamOptIdx != 44 || info.includeUsage {
					t.Errorf("%+v", info)
				}
			}},
		{name: "stream_options not an object", ep: epChat, body: `{"model":"m","stream":true,"stream_options":"x",` + msgs + `}`, code: "invalid_type", msg: "stream_options must be an object"},
		{name: "responses reads max_output_tokens", ep: epResponses, body: `{"model":"m","max_tokens":7,"max_output_tokens":300,"input":"x"}`,
			want: func(t *testing.T, info reqInfo) {
				if info.maxTokens != 300 || info.maxAt[2] != (providers.Member{Raw: "300", Idx: 48}) {
					t.Errorf("%+v", info)
				}
			}},
		{name: "messages with spaces", ep: epChat, body: `{"model":"m","messages":[ ]}`, code: "missing_field", msg: "non-empty array"},
		{name: "null prompt", ep: epCompletions, body: `{"model":"m","prompt":null}`, code: "missing_field", msg: "prompt"},
		{name: "duplicate key", ep: epChat, body: `{"model":"m","stream":true,` + msgs + `,"stream":false}`, code: "duplicate_key", msg: `"stream"`},
		{name: "duplicate escaped key", ep: epChat, body: `{"model":"m",` + msgs + `,"\u006dodel":"x"}`, code: "duplicate_key", msg: `"model"`},
		{name: "duplicate include_usage", ep: epChat, body: `{"model":"m","stream":true,"stream_options":{"include_usage":false,"include_\u0075sage":true},` + msgs + `}`,
			code: "duplicate_key", msg: "stream_options.include_usage"},
		{name: "model not a string before a duplicate", ep: epChat, body: `{"model":1,"model":"m",` + msgs + `}`, code: "invalid_type", msg: "string"},
		{name: "duplicate before model not a string", ep: epChat, body: `{"input":1,"input":2,"model":null,` + msgs + `}`, code: "duplicate_key", msg: `"input"`},
		{name: "invalid UTF-8 offset", ep: epChat, body: "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"é\xe9t\xe9\"}]}", code: "invalid_json", msg: "byte offset 53"},
		{name: "deep nesting", ep: epChat, body: `{"model":"m",` + msgs + `,"x":` + strings.Repeat("[", 128) + strings.Repeat("]", 128) + `}`, code: "invalid_json", msg: "deeper than 128"},
		{name: "deep nesting after a syntax error", ep: epChat, body: `{"model":"m",` + msgs + `,"y":tru,"x":` + strings.Repeat("[", 200) + `}`, code: "invalid_json", msg: "deeper than 128"},
		{name: "trailing comma", ep: epChat, body: `{"model":"m",` + msgs + `,}`, code: "invalid_json", msg: "not valid JSON"},
		{name: "control character in a string", ep: epChat, body: "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\tb\"}]}", code: "invalid_json", msg: "not valid JSON"},
		{name: "not an object", ep: epChat, body: `"model"`, code: "invalid_json", msg: "must be a JSON object"},
		{name: "spaces only", ep: epChat, body: " \n\t", code: "invalid_json", msg: "empty"},
	}
	prov, err := openai.New(openai.Options{Name: "t", BaseURL: "http://127.0.0.1:1/v1", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var info reqInfo
			aerr := parseRequest([]byte(tc.body), tc.ep, &info)
			if tc.code != "" {
				if aerr == nil || aerr.Status != 400 || aerr.Code != tc.code || !strings.Contains(aerr.Message, tc.msg) {
					t.Fatalf("parseRequest = %+v, want %s (%s)", aerr, tc.code, tc.msg)
				}
				return
			}
			if aerr != nil {
				t.Fatalf("parseRequest = %+v", aerr)
			}
			tc.want(t, info)
			// The edits from the scan's positions equal those from a search.
			var scanned, searched fasthttp.Request
			call := providers.Call{Endpoint: tc.ep, Body: []byte(tc.body), Model: "up", ModelJSON: []byte(`"up"`), ClampMaxTokens: 5}
			info.fill(&call)
			if err := prov.Build(&scanned, &call); err != nil {
				t.Fatal(err)
			}
			call.Scanned, call.IncludeUsageAt, call.MaxTokensAt, call.MaxCompletionTokensAt, call.MaxOutputTokensAt = false, providers.Member{}, providers.Member{}, providers.Member{}, providers.Member{}
			if err := prov.Build(&searched, &call); err != nil {
				t.Fatal(err)
			}
			if string(scanned.Body()) != string(searched.Body()) {
				t.Errorf("edited from the scan: %s\nfrom a search: %s", scanned.Body(), searched.Body())
			}
		})
	}
}

// TestScanMessages: the Messages endpoints' one pass over the body reads
// what the gjson lookups it replaced read, and refuses what they refused.
func TestScanMessages(t *testing.T) {
	tests := []struct {
		name, body string
		model      string // model.Str; "" when absent or not a string
		isString   bool
		stream     bool
		maxTokens  int64
		code, msg  string // the refusal, "" when none
	}{
		{name: "fields", body: `{"max_tokens":256,"messages":[],"model":"claude-mock","stream":true}`, model: "claude-mock", isString: true, stream: true, maxTokens: 256},
		{name: "escaped key", body: `{"mod\u0065l":"a\u00e9","stream":false}`, model: "aé", isString: true},
		{name: "first of repeated keys", body: `{"model":"a","model":"b"}`, model: "a", isString: true},
		{name: "model not a string", body: `{"model":7}`},
		{name: "max_tokens as a string", body: `{"model":"m","max_tokens":"100"}`, model: "m", isString: true, maxTokens: 100},
		{name: "not an object", body: `[{"model":"m"}]`},
		{name: "empty", body: ``, code: "invalid_json", msg: "not valid JSON"},
		{name: "broken", body: `{"model":"m",}`, code: "invalid_json", msg: "not valid JSON"},
		{name: "too deep", body: `{"model":"m","x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`, code: "invalid_json", msg: "not valid JSON"},
		{name: "not UTF-8", body: "{\"model\":\"m\",\"system\":\"\xff\"}", code: "invalid_json", msg: "byte offset 23"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, aerr := scanMessages([]byte(tc.body))
			if tc.code != "" {
				if aerr == nil || aerr.Code != tc.code || !strings.Contains(aerr.Message, tc.msg) {
					t.Fatalf("scanMessages(%q) = %+v, want %s (%s)", tc.body, aerr, tc.code, tc.msg)
				}
				return
			}
			if aerr != nil {
				t.Fatalf("scanMessages(%q) = %+v", tc.body, aerr)
			}
			if f.model.Str != tc.model || (f.model.Type == gjson.String) != tc.isString || f.stream != tc.stream || f.maxTokens != tc.maxTokens {
				t.Errorf("scanMessages(%q) = %+v", tc.body, f)
			}
			if f.model.Raw != "" && tc.body[f.model.Index:f.model.Index+len(f.model.Raw)] != f.model.Raw {
				t.Errorf("model %q is not at %d", f.model.Raw, f.model.Index)
			}
		})
	}
}
