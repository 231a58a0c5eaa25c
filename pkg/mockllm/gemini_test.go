package mockllm_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/mockllm"
)

const (
	geminiPath   = "/v1beta/models/gemini-test:generateContent"
	geminiStream = "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
	// geminiBody has 3 + 2 words in two contents and 2 in systemInstruction.
	geminiBody = `{"contents":[{"role":"user","parts":[{"text":"hello  there\nworld"}]},{"role":"model","parts":[{"text":"hi you"}]}],` +
		`"systemInstruction":{"parts":[{"text":"Be terse."}]}`
	geminiPrompt = 3 + 2 + 2 + 3*3
	geminiTools  = `,"tools":[{"functionDeclarations":[{"name":"first"},{"name":"second"}]}]`
)

func geminiWith(extra string) string { return geminiBody + extra + "}" }

// geminiResponse is the subset of GenerateContentResponse the tests read.
type geminiResponse struct {
	Candidates []struct {
		Content struct {
			Role  string `json:"role"`
			Parts []struct {
				Text         *string `json:"text"`
				FunctionCall *struct {
					Name string            `json:"name"`
					Args map[string]string `json:"args"`
				} `json:"functionCall"`
			} `json:"parts"`
		} `json:"content"`
		FinishReason string `json:"finishReason"`
		Index        int    `json:"index"`
	} `json:"candidates"`
	UsageMetadata *struct {
		PromptTokenCount     int `json:"promptTokenCount"`
		CandidatesTokenCount int `json:"candidatesTokenCount"`
		TotalTokenCount      int `json:"totalTokenCount"`
	} `json:"usageMetadata"`
	ModelVersion string `json:"modelVersion"`
	ResponseID   string `json:"responseId"`
	Error        *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
	} `json:"error"`
}

func TestGeminiGenerate(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, body string
		headers    []string
		text, tool string
		words      int
		usage      bool
	}{
		{name: "text", body: geminiWith(""), text: "Tollgate mock answer alpha bravo charlie delta echo", words: 8, usage: true},
		{name: "words", body: geminiWith(`,"mock":{"words":2}`), text: "Tollgate mock", words: 2, usage: true},
		{name: "no usage", body: geminiWith(""), headers: []string{"X-Mock-No-Usage", "1", "X-Mock-Words", "1"}, text: "Tollgate", words: 1},
		{name: "tools without ANY", body: geminiWith(geminiTools + `,"toolConfig":{"functionCallingConfig":{"mode":"AUTO"}},"mock":{"words":1}`), text: "Tollgate", words: 1, usage: true},
		{name: "mode ANY", body: geminiWith(geminiTools + `,"toolConfig":{"functionCallingConfig":{"mode":"ANY"}},"mock":{"words":3}`), tool: "first", text: "Tollgate mock answer", words: 3, usage: true},
		{name: "allowed name", body: geminiWith(geminiTools + `,"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["second"]}},"mock":{"words":1}`), tool: "second", text: "Tollgate", words: 1, usage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r geminiResponse
			ts.postJSON(t, geminiPath, tt.body, &r, tt.headers...)
			if len(r.Candidates) != 1 || r.ModelVersion != "gemini-test" || len(r.ResponseID) != 16 {
				t.Fatalf("unexpected response %+v", r)
			}
			c := r.Candidates[0]
			if c.FinishReason != "STOP" || c.Content.Role != "model" || len(c.Content.Parts) != 1 {
				t.Fatalf("candidate %+v", c)
			}
			part := c.Content.Parts[0]
			if tt.tool == "" {
				if part.Text == nil || *part.Text != tt.text {
					t.Errorf("text %v, want %q", part.Text, tt.text)
				}
			} else if part.FunctionCall == nil || part.FunctionCall.Name != tt.tool || part.FunctionCall.Args["input"] != tt.text {
				t.Errorf("function call %+v, want %s(%q)", part.FunctionCall, tt.tool, tt.text)
			}
			if !tt.usage {
				if r.UsageMetadata != nil {
					t.Errorf("usage %+v", r.UsageMetadata)
				}
				return
			}
			if u := r.UsageMetadata; u == nil || u.PromptTokenCount != geminiPrompt || u.CandidatesTokenCount != tt.words || u.TotalTokenCount != geminiPrompt+tt.words {
				t.Errorf("usage %+v, want prompt %d candidates %d", u, geminiPrompt, tt.words)
			}
		})
	}
}

// geminiEvents reads a Gemini SSE body: CRLF-terminated data events, no
// terminator.
func geminiEvents(t *testing.T, resp *http.Response) (raw string, events []geminiResponse) {
	t.Helper()
	b, _ := io.ReadAll(resp.Body)
	raw = string(b)
	for _, ev := range strings.Split(raw, "\r\n\r\n") {
		if ev == "" {
			continue
		}
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok {
			events = append(events, geminiResponse{ResponseID: "RAW:" + ev})
			continue
		}
		var r geminiResponse
		if err := json.Unmarshal([]byte(data), &r); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		events = append(events, r)
	}
	return raw, events
}

func TestGeminiStream(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, body string
		headers    []string
		events     int
		text, tool string
		usage      bool
		finished   bool
		errorEvent bool
	}{
		{name: "text", body: geminiWith(`,"mock":{"chunks":4}`), events: 4, text: "Tollgate mock answer alpha", usage: true, finished: true},
		{name: "no usage", body: geminiWith(`,"mock":{"chunks":2,"no_usage":true}`), events: 2, text: "Tollgate mock", finished: true},
		{name: "zero chunks", body: geminiWith(`,"mock":{"chunks":0}`), events: 1, usage: true, finished: true},
		{name: "tool call is one event", body: geminiWith(geminiTools + `,"toolConfig":{"functionCallingConfig":{"mode":"ANY"}},"mock":{"chunks":3}`), events: 1, tool: "first", text: "Tollgate mock answer", usage: true, finished: true},
		{name: "cut", body: geminiWith(`,"mock":{"chunks":5,"cut_after":2}`), events: 2, text: "Tollgate mock", usage: true},
		{name: "error event", body: geminiWith(`,"mock":{"chunks":5,"error_event_after":1}`), events: 2, text: "Tollgate", usage: true, errorEvent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.post(t, geminiStream, tt.body, tt.headers...)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			raw, events := geminiEvents(t, resp)
			if len(events) != tt.events {
				t.Fatalf("%d events, want %d: %q", len(events), tt.events, raw)
			}
			if strings.Contains(raw, "[DONE]") {
				t.Error("a Gemini stream has no [DONE]")
			}
			var text strings.Builder
			finishes := 0
			for i, ev := range events {
				if ev.Error != nil {
					if !tt.errorEvent || i != len(events)-1 || ev.Error.Code != 500 || ev.Error.Status != "INTERNAL" {
						t.Errorf("unexpected error event %+v", ev.Error)
					}
					continue
				}
				if len(ev.Candidates) != 1 || ev.ModelVersion != "gemini-test" || ev.ResponseID != events[0].ResponseID {
					t.Fatalf("event %d: %+v", i, ev)
				}
				c := ev.Candidates[0]
				if c.FinishReason != "" {
					finishes++
					if c.FinishReason != "STOP" || i != len(events)-1 {
						t.Errorf("event %d finish %q", i, c.FinishReason)
					}
				}
				for _, p := range c.Content.Parts {
					switch {
					case p.Text != nil:
						text.WriteString(*p.Text)
					case p.FunctionCall != nil:
						if p.FunctionCall.Name != tt.tool {
							t.Errorf("call %s, want %s", p.FunctionCall.Name, tt.tool)
						}
						text.WriteString(p.FunctionCall.Args["input"])
					}
				}
				if u := ev.UsageMetadata; tt.usage != (u != nil) || u != nil && (u.PromptTokenCount != geminiPrompt || u.TotalTokenCount != u.PromptTokenCount+u.CandidatesTokenCount) {
					t.Errorf("event %d usage %+v", i, u)
				}
			}
			if text.String() != tt.text {
				t.Errorf("text %q, want %q", text.String(), tt.text)
			}
			if (finishes == 1) != tt.finished || finishes > 1 {
				t.Errorf("%d finish reasons", finishes)
			}
		})
	}
}

func TestGeminiErrors(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, path, body string
		headers          []string
		status           int
		rpc              string
		retryAfter       bool
	}{
		{name: "injected 429", path: geminiPath, body: geminiWith(""), headers: []string{"X-Mock-Status", "429"}, status: 429, rpc: "RESOURCE_EXHAUSTED", retryAfter: true},
		{name: "injected 503 stream", path: geminiStream, body: geminiWith(`,"mock":{"status":503}`), status: 503, rpc: "UNAVAILABLE", retryAfter: true},
		{name: "injected 401", path: geminiPath, body: geminiWith(`,"mock":{"status":401}`), status: 401, rpc: "UNAUTHENTICATED"},
		{name: "injected embed 500", path: "/v1beta/models/e:embedContent", body: `{"content":{"parts":[{"text":"x"}]},"mock":{"status":500}}`, status: 500, rpc: "INTERNAL"},
		{name: "bad json", path: geminiPath, body: `{"contents":`, status: 400, rpc: "INVALID_ARGUMENT"},
		{name: "no contents", path: geminiPath, body: `{"contents":[]}`, status: 400, rpc: "INVALID_ARGUMENT"},
		{name: "stream without alt=sse", path: "/v1beta/models/m:streamGenerateContent", body: geminiWith(""), status: 400, rpc: "INVALID_ARGUMENT"},
		{name: "unknown method", path: "/v1beta/models/m:predict", body: geminiWith(""), status: 404, rpc: "NOT_FOUND"},
		{name: "no method", path: "/v1beta/models/m", body: geminiWith(""), status: 404, rpc: "NOT_FOUND"},
		{name: "batch without requests", path: "/v1beta/models/e:batchEmbedContents", body: `{}`, status: 400, rpc: "INVALID_ARGUMENT"},
		{name: "bad dimensions", path: "/v1beta/models/e:embedContent", body: `{"content":{"parts":[{"text":"x"}]},"outputDimensionality":0}`, status: 400, rpc: "INVALID_ARGUMENT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.post(t, tt.path, tt.body, tt.headers...)
			var r geminiResponse
			raw, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatalf("decode %s: %v", raw, err)
			}
			if resp.StatusCode != tt.status || r.Error == nil || r.Error.Code != tt.status || r.Error.Status != tt.rpc || r.Error.Message == "" {
				t.Errorf("status %d body %s, want %d %s", resp.StatusCode, raw, tt.status, tt.rpc)
			}
			if got := resp.Header.Get("Retry-After") != ""; got != tt.retryAfter {
				t.Errorf("Retry-After present = %v", got)
			}
		})
	}
	t.Run("garbage", func(t *testing.T) {
		resp := ts.post(t, geminiPath, geminiWith(`,"mock":{"garbage":true}`))
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || json.Valid(raw) {
			t.Errorf("status %d body %s", resp.StatusCode, raw)
		}
	})
	t.Run("garbage stream", func(t *testing.T) {
		resp := ts.post(t, geminiStream, geminiWith(`,"mock":{"garbage":true,"cut_after":1}`))
		raw, _ := io.ReadAll(resp.Body)
		if !strings.HasPrefix(string(raw), "data: {") || !strings.Contains(string(raw), "mock garbage") || strings.Contains(string(raw), "finishReason") {
			t.Errorf("body %q", raw)
		}
	})
}

func TestGeminiEmbed(t *testing.T) {
	ts := start(t, mockllm.Config{Dims: 4})
	var openai struct {
		Data []struct {
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	ts.postJSON(t, "/v1/embeddings", `{"model":"e","input":["a b","c"],"dimensions":3}`, &openai)
	t.Run("batch", func(t *testing.T) {
		var r struct {
			Embeddings []struct {
				Values []float32 `json:"values"`
			} `json:"embeddings"`
		}
		ts.postJSON(t, "/v1beta/models/e:batchEmbedContents", `{"requests":[`+
			`{"model":"models/e","content":{"parts":[{"text":"a b"}]},"outputDimensionality":3},`+
			`{"model":"models/e","content":{"parts":[{"text":"c"}]},"outputDimensionality":3}]}`, &r)
		if len(r.Embeddings) != 2 {
			t.Fatalf("%d embeddings", len(r.Embeddings))
		}
		for i, e := range r.Embeddings {
			if !equalFloats(e.Values, openai.Data[i].Embedding) {
				t.Errorf("embedding %d = %v, OpenAI format gives %v", i, e.Values, openai.Data[i].Embedding)
			}
		}
	})
	t.Run("single", func(t *testing.T) {
		var r struct {
			Embedding struct {
				Values []float32 `json:"values"`
			} `json:"embedding"`
		}
		ts.postJSON(t, "/v1beta/models/e:embedContent", `{"content":{"parts":[{"text":"a b"}]},"outputDimensionality":3}`, &r)
		if !equalFloats(r.Embedding.Values, openai.Data[0].Embedding) {
			t.Errorf("embedding %v, OpenAI format gives %v", r.Embedding.Values, openai.Data[0].Embedding)
		}
	})
	t.Run("default and mock dims", func(t *testing.T) {
		var r struct {
			Embedding struct {
				Values []float32 `json:"values"`
			} `json:"embedding"`
		}
		ts.postJSON(t, "/v1beta/models/e:embedContent", `{"content":{"parts":[{"text":"a"}]}}`, &r)
		if len(r.Embedding.Values) != 4 {
			t.Errorf("%d values, want the default 4", len(r.Embedding.Values))
		}
		ts.postJSON(t, "/v1beta/models/e:embedContent", `{"content":{"parts":[{"text":"a"}]},"outputDimensionality":3}`, &r, "X-Mock-Dims", "6")
		if len(r.Embedding.Values) != 6 {
			t.Errorf("%d values, want the mock's 6", len(r.Embedding.Values))
		}
	})
}

func equalFloats(a, b []float32) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var geminiResponseID = regexp.MustCompile(`"responseId":"[0-9a-f]{16}"`)

func TestGeminiGoldenTranscripts(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct{ name, body string }{
		{"gemini_stream", geminiWith(`,"mock":{"chunks":3}`)},
		{"gemini_stream_tool_call", geminiWith(geminiTools + `,"toolConfig":{"functionCallingConfig":{"mode":"ANY"}},"mock":{"chunks":2}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.post(t, geminiStream, tt.body)
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			got := geminiResponseID.ReplaceAllString(string(raw), `"responseId":"ID"`)
			path := filepath.Join("testdata", tt.name+".sse")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden (run with -update to create): %v", err)
			}
			if got != string(want) {
				t.Errorf("transcript differs from %s:\n got: %q\nwant: %q", path, got, want)
			}
		})
	}
}

// TestGeminiCountTokens: countTokens counts as promptTokenCount does, over
// contents or over generateContentRequest's.
func TestGeminiCountTokens(t *testing.T) {
	ts := start(t, mockllm.Config{})
	resp := ts.post(t, geminiPath, geminiWith(""))
	var r geminiResponse
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &r); err != nil || r.UsageMetadata == nil || r.UsageMetadata.PromptTokenCount == 0 {
		t.Fatalf("generate: %s %v", raw, err)
	}
	for _, body := range []string{geminiWith(""), `{"generateContentRequest":` + geminiWith("") + `}`} {
		resp := ts.post(t, "/v1beta/models/gemini-test:countTokens", body)
		raw, _ := io.ReadAll(resp.Body)
		var c struct {
			TotalTokens int `json:"totalTokens"`
		}
		if err := json.Unmarshal(raw, &c); err != nil || resp.StatusCode != 200 || c.TotalTokens != r.UsageMetadata.PromptTokenCount {
			t.Errorf("count %d %s, want totalTokens %d", resp.StatusCode, raw, r.UsageMetadata.PromptTokenCount)
		}
	}
}
