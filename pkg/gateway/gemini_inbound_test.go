package gateway

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
)

// geminiTools declares two functions as Gemini CLI does
// (parametersJsonSchema), one of them in the older parameters form with
// Gemini's upper-case types.
const geminiTools = `"tools":[{"functionDeclarations":[` +
	`{"name":"read_file","description":"Reads a file.","parametersJsonSchema":{"type":"object","properties":{"file_path":{"type":"string"}},"required":["file_path"]}},` +
	`{"name":"list_directory","description":"Lists a directory.","parameters":{"type":"OBJECT","properties":{"dir_path":{"type":"STRING"}}}}]}]`

// geminiBody is a generateContent request with the prompt, as Gemini CLI
// sends one (system instruction, tools, generationConfig with topK and
// thinkingConfig).
func geminiBody(prompt string) string {
	return `{"contents":[{"role":"user","parts":[{"text":` + jsonQuote(prompt) + `}]}],` +
		`"systemInstruction":{"parts":[{"text":"You are a careful agent."}]},` + geminiTools + `,` +
		`"generationConfig":{"temperature":1,"topP":0.95,"topK":64,"maxOutputTokens":8192,"thinkingConfig":{"includeThoughts":true,"thinkingBudget":8192}}}`
}

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// geminiModels are served natively (gemini-mock) and by translation on
// each other kind.
var geminiModels = []string{"gemini-mock", "mock-gpt", "claude-mock", "bedrock-mock"}

// TestGeminiEndpoint sends the Gemini API's generateContent,
// streamGenerateContent (alt=sse and the JSON array form) and countTokens
// to a model on each kind (issue #46): natively to a gemini provider, by
// translation to the others. Answers are GenerateContentResponses, the
// token comes in x-goog-api-key or Authorization, and each request's usage
// event carries the provider's counts, equal to the usageMetadata the
// client got.
func TestGeminiEndpoint(t *testing.T) {
	up, _ := newRecordingUpstream(t)
	a := sdkRigAt(t, "http://"+up.addr)
	jwt := a.token(nil)
	key, _ := a.createKey(t, apikey.Key{Subject: "alice", Dept: "research", Team: "nlp", Name: "gemini"})
	for _, model := range geminiModels {
		native := model == "gemini-mock"
		t.Run(model, func(t *testing.T) {
			base := "/v1beta/models/" + model
			// Unary, the API key in x-goog-api-key.
			resp := a.post(base+":generateContent", "", geminiBody("Say hello."), "x-goog-api-key", key,
				"x-goog-api-client", "google-genai-sdk/1.30.0 gl-node/v20.20.2")
			body := readBody(t, resp)
			if resp.StatusCode != 200 {
				t.Fatalf("generateContent: %d %s", resp.StatusCode, body)
			}
			header, sent := up.lastRequest(t)
			checkUpstream(t, header, sent, native, model+":generateContent")
			res := gjson.ParseBytes(body)
			if res.Get("candidates.0.content.role").Str != "model" || res.Get("candidates.0.content.parts.0.text").Str == "" ||
				res.Get("candidates.0.finishReason").Str != "STOP" {
				t.Fatalf("answer %s", body)
			}
			checkGeminiUsage(t, a, resp.Header.Get("x-request-id"), model, geminiGeneratePath, res.Get("usageMetadata"))

			// Streamed, alt=sse, the JWT as a bearer token; the prompt
			// names read_file, so the answer calls it.
			resp = a.post(base+":streamGenerateContent?alt=sse", jwt, geminiBody("Use read_file to open notes.txt."))
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("stream: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), readBody(t, resp))
			}
			id := resp.Header.Get("x-request-id")
			var chunks []gjson.Result
			for _, ev := range readEvents(t, resp.Body) {
				chunks = append(chunks, gjson.Parse(ev.data))
			}
			resp.Body.Close()
			calls, last := geminiSequence(t, chunks)
			if len(calls) != 1 || calls[0].Get("name").Str != "read_file" || calls[0].Get("args.file_path").Str == "" {
				t.Fatalf("function calls %v, want one read_file call with a file_path", calls)
			}
			checkGeminiUsage(t, a, id, model, geminiStreamPath, last.Get("usageMetadata"))

			// The function's result goes back; the answer quotes it.
			const result = "the notes say 42"
			next := geminiTurn(t, geminiBody("Use read_file to open notes.txt."), calls[0], result)
			resp = a.post(base+":streamGenerateContent?alt=sse", jwt, next)
			if resp.StatusCode != 200 {
				t.Fatalf("second turn: %d %s", resp.StatusCode, readBody(t, resp))
			}
			id = resp.Header.Get("x-request-id")
			chunks = chunks[:0]
			var text strings.Builder
			for _, ev := range readEvents(t, resp.Body) {
				c := gjson.Parse(ev.data)
				chunks = append(chunks, c)
				c.Get("candidates.0.content.parts.#.text").ForEach(func(_, t gjson.Result) bool {
					text.WriteString(t.Str)
					return true
				})
			}
			resp.Body.Close()
			if calls, last = geminiSequence(t, chunks); len(calls) != 0 || !strings.Contains(text.String(), result) {
				t.Fatalf("final answer %q (calls %v), want text quoting %q", text.String(), calls, result)
			}
			checkGeminiUsage(t, a, id, model, geminiStreamPath, last.Get("usageMetadata"))

			// The JSON array form (no alt=sse).
			resp = a.post(base+":streamGenerateContent", jwt, geminiBody("Say hello."))
			body = readBody(t, resp)
			arr := gjson.ParseBytes(body)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || !gjson.ValidBytes(body) || !arr.IsArray() || len(arr.Array()) < 2 {
				t.Fatalf("array stream: %d %s", resp.StatusCode, body)
			}
			if _, last = geminiSequence(t, arr.Array()); last.Get("usageMetadata.totalTokenCount").Int() == 0 {
				t.Fatalf("array stream's last chunk %s", last.Raw)
			}

			// countTokens: the provider's count natively, else the
			// gateway's estimate; free, recorded.
			resp = a.post(base+":countTokens", "", `{"contents":[{"role":"user","parts":[{"text":"count these five words"}]}]}`, "x-goog-api-key", jwt)
			body = readBody(t, resp)
			if resp.StatusCode != 200 || gjson.GetBytes(body, "totalTokens").Int() <= 0 {
				t.Fatalf("countTokens: %d %s", resp.StatusCode, body)
			}
			if est := resp.Header.Get("x-tollgate-estimated") == "true"; est == native {
				t.Errorf("x-tollgate-estimated %v on a model served natively: %v", est, native)
			}
			if native {
				if h, _ := up.lastRequest(t); !strings.HasPrefix(h, "POST /v1beta/models/gemini-mock:countTokens ") {
					t.Errorf("count went upstream as %.80q", h)
				}
			}
			ev := a.eventOf(t, resp.Header.Get("x-request-id"))
			if ev.Endpoint != geminiCountPath || ev.StatusCode != 200 || ev.CostNanoUsd != 0 || ev.RequestedModel != model {
				t.Errorf("count event endpoint %s status %d cost %d model %s", ev.Endpoint, ev.StatusCode, ev.CostNanoUsd, ev.RequestedModel)
			}
		})
	}
}

// checkUpstream checks the last upstream request: a native one goes to
// Gemini's path with the provider's key and the body as the client sent
// it; no client credential or Google client header reaches any upstream.
// header "" skips the check.
func checkUpstream(t *testing.T, header, sent string, native bool, method string) {
	t.Helper()
	if header == "" {
		return
	}
	if strings.Contains(header, "tg-") || strings.Contains(header, "eyJ") || strings.Contains(strings.ToLower(header), "x-goog-api-client") {
		t.Errorf("a client credential reached the upstream:\n%s", header)
	}
	if native {
		if !strings.HasPrefix(header, "POST /v1beta/models/"+method+" ") || !strings.Contains(header, testProvKey) {
			t.Errorf("native request %.200q", header)
		}
		if !strings.Contains(sent, `"topK":64`) {
			t.Errorf("native body changed: %.200s", sent)
		}
		return
	}
	if strings.Contains(sent, "topK") || strings.Contains(sent, "functionDeclarations") && !strings.Contains(header, "/v1beta/") {
		t.Errorf("Gemini fields reached a translated upstream: %.300s", sent)
	}
}

// geminiSequence checks a Gemini stream's chunks: each a
// GenerateContentResponse of one candidate, only the last with a
// finishReason and usageMetadata. It returns the function calls and the
// last chunk.
func geminiSequence(t *testing.T, chunks []gjson.Result) (calls []gjson.Result, last gjson.Result) {
	t.Helper()
	if len(chunks) == 0 {
		t.Fatal("no chunks")
	}
	for i, c := range chunks {
		if c.Get("error").Exists() || c.Get("candidates.0.content.role").Str != "model" {
			t.Fatalf("chunk %d: %s", i, c.Raw)
		}
		final := c.Get("candidates.0.finishReason").Exists()
		if final != (i == len(chunks)-1) {
			t.Fatalf("chunk %d of %d has finishReason %v: %s", i, len(chunks), final, c.Raw)
		}
		c.Get("candidates.0.content.parts.#.functionCall").ForEach(func(_, fc gjson.Result) bool {
			calls = append(calls, fc)
			return true
		})
	}
	last = chunks[len(chunks)-1]
	if u := last.Get("usageMetadata"); u.Get("promptTokenCount").Int() == 0 || u.Get("totalTokenCount").Int() == 0 {
		t.Fatalf("last chunk's usage: %s", last.Raw)
	}
	return calls, last
}

// geminiTurn returns body with the model's functionCall and the user's
// functionResponse appended, as Gemini CLI sends its next request.
func geminiTurn(t *testing.T, body string, call gjson.Result, result string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	var fc any
	if err := json.Unmarshal([]byte(call.Raw), &fc); err != nil {
		t.Fatal(err)
	}
	resp := map[string]any{"name": call.Get("name").Str, "response": map[string]any{"output": result}}
	if id := call.Get("id").Str; id != "" {
		resp["id"] = id
	}
	m["contents"] = append(m["contents"].([]any),
		map[string]any{"role": "model", "parts": []any{map[string]any{"functionCall": fc}}},
		map[string]any{"role": "user", "parts": []any{map[string]any{"functionResponse": resp}}})
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// checkGeminiUsage checks the usage event of request id: the
// provider's counts, as the client's usageMetadata reported them.
func checkGeminiUsage(t *testing.T, a *acctRig, id, model, endpoint string, um gjson.Result) {
	t.Helper()
	ev := a.eventOf(t, id)
	completion := um.Get("candidatesTokenCount").Uint() + um.Get("thoughtsTokenCount").Uint()
	if ev.RequestedModel != model || ev.Endpoint != endpoint || ev.StatusCode != 200 || ev.Estimated ||
		ev.PromptTokens == 0 || ev.PromptTokens != um.Get("promptTokenCount").Uint() || ev.CompletionTokens != completion {
		t.Fatalf("usage event model %s endpoint %s status %d estimated %v tokens %d/%d; client's usageMetadata %s",
			ev.RequestedModel, ev.Endpoint, ev.StatusCode, ev.Estimated, ev.PromptTokens, ev.CompletionTokens, um.Raw)
	}
}

// geminiErrorShape checks a Gemini error body and returns its message.
func geminiErrorShape(t *testing.T, body []byte, code int, status string) string {
	t.Helper()
	e := gjson.GetBytes(body, "error")
	if e.Get("code").Int() != int64(code) || e.Get("status").Str != status || e.Get("message").Str == "" {
		t.Fatalf("error body %s, want code %d status %s", body, code, status)
	}
	return e.Get("message").Str
}

// TestGeminiErrors: every refusal on the Gemini endpoints is a Gemini
// error body with the right status.
func TestGeminiErrors(t *testing.T) {
	a := sdkRig(t)
	tok := a.token(nil)
	broke := a.token(func(o *auth.MintOptions) {
		o.Budgets = []auth.BudgetClaim{{Scope: "dept", AmountUSD: 0.000000001, Period: "day"}}
	})
	for _, tt := range []struct {
		name, path, token, body string
		code                    int
		status                  string
	}{
		{"no credentials", "/v1beta/models/mock-gpt:generateContent", "", geminiBody("hi"), 401, "UNAUTHENTICATED"},
		{"bad token", "/v1beta/models/mock-gpt:generateContent", "not-a-token", geminiBody("hi"), 401, "UNAUTHENTICATED"},
		{"unknown model", "/v1beta/models/no-such-model:generateContent", tok, geminiBody("hi"), 404, "NOT_FOUND"},
		{"unknown method", "/v1beta/models/mock-gpt:predict", tok, geminiBody("hi"), 404, "NOT_FOUND"},
		{"not json", "/v1beta/models/mock-gpt:generateContent", tok, `{"contents":`, 400, "INVALID_ARGUMENT"},
		{"no contents", "/v1beta/models/mock-gpt:generateContent", tok, `{}`, 400, "INVALID_ARGUMENT"},
		{"two candidates", "/v1beta/models/mock-gpt:generateContent", tok,
			`{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"candidateCount":2}}`, 400, "INVALID_ARGUMENT"},
		{"built-in tool translated", "/v1beta/models/claude-mock:generateContent", tok,
			`{"contents":[{"parts":[{"text":"hi"}]}],"tools":[{"googleSearch":{}}]}`, 400, "INVALID_ARGUMENT"},
		{"over budget", "/v1beta/models/mock-gpt:streamGenerateContent?alt=sse", broke, geminiBody("hi"), 429, "RESOURCE_EXHAUSTED"},
		{"embeddings model", "/v1beta/models/mock-embed:generateContent", tok, geminiBody("hi"), 400, "INVALID_ARGUMENT"},
		{"body too large", "/v1beta/models/mock-gpt:generateContent", tok, geminiBody(strings.Repeat("a", 70000)), 413, "INVALID_ARGUMENT"},
		{"generationConfig twice", "/v1beta/models/gemini-mock:generateContent", tok,
			`{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":5},"generation_config":{"max_output_tokens":99999}}`, 400, "INVALID_ARGUMENT"},
		{"not allowed", "/v1beta/models/claude-mock:generateContent", a.token(func(o *auth.MintOptions) { o.Models = []string{"mock-gpt"} }), geminiBody("hi"), 403, "PERMISSION_DENIED"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := a.post(tt.path, tt.token, tt.body)
			body := readBody(t, resp)
			if resp.StatusCode != tt.code {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.code, body)
			}
			geminiErrorShape(t, body, tt.code, tt.status)
		})
	}
}

// TestGeminiModels lists the chat models the token allows in the Gemini
// API's shape, and one by name.
func TestGeminiModels(t *testing.T) {
	a := sdkRig(t)
	only := a.token(func(o *auth.MintOptions) { o.Models = []string{"gemini-*", "mock-gpt", "mock-embed"} })
	get := func(path, key string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodGet, a.url+path, nil)
		req.Header.Set("x-goog-api-key", key)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, readBody(t, resp)
	}
	resp, body := get("/v1beta/models", only)
	var names []string
	gjson.GetBytes(body, "models.#.name").ForEach(func(_, v gjson.Result) bool { names = append(names, v.Str); return true })
	if resp.StatusCode != 200 || strings.Join(names, ",") != "models/mock-gpt,models/gemini-mock" {
		t.Fatalf("models %d %v: %s", resp.StatusCode, names, body)
	}
	if m := gjson.GetBytes(body, "models.0.supportedGenerationMethods").String(); !strings.Contains(m, "streamGenerateContent") {
		t.Errorf("methods %s", m)
	}
	if resp, body = get("/v1beta/models/gemini-mock", only); resp.StatusCode != 200 || gjson.GetBytes(body, "name").Str != "models/gemini-mock" {
		t.Errorf("one model: %d %s", resp.StatusCode, body)
	}
	for _, m := range []string{"claude-mock", "nope"} { // not allowed, unknown
		resp, body = get("/v1beta/models/"+m, only)
		if resp.StatusCode != 404 {
			t.Fatalf("%s: %d %s", m, resp.StatusCode, body)
		}
		geminiErrorShape(t, body, 404, "NOT_FOUND")
	}
	resp, body = get("/v1beta/models", "")
	if resp.StatusCode != 401 {
		t.Fatalf("no key: %d", resp.StatusCode)
	}
	geminiErrorShape(t, body, 401, "UNAUTHENTICATED")
}

// TestGeminiQueryKey: a key in the "key" query parameter is refused unless
// auth.allow_query_key is set, and is never logged either way.
func TestGeminiQueryKey(t *testing.T) {
	for _, allow := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "allowed"}[allow], func(t *testing.T) {
			a := newAcctRig(t, func(c *config.Config) { c.Auth.AllowQueryKey = allow })
			key, _ := a.createKey(t, apikey.Key{Subject: "alice", Dept: "research", Team: "nlp", Name: "query"})
			for _, path := range []string{"/v1beta/models/mock-gpt:generateContent?key=", "/v1beta/models/mock-gpt:streamGenerateContent?alt=sse&key="} {
				resp := a.post(path+key, "", geminiBody("hi"))
				body := readBody(t, resp)
				switch {
				case !allow && resp.StatusCode != 401:
					t.Fatalf("%s: status %d, want 401: %s", path, resp.StatusCode, body)
				case !allow:
					if msg := geminiErrorShape(t, body, 401, "UNAUTHENTICATED"); !strings.Contains(msg, "x-goog-api-key") {
						t.Errorf("message %q does not say where the key goes", msg)
					}
				case resp.StatusCode != 200:
					t.Fatalf("%s: status %d, want 200: %s", path, resp.StatusCode, body)
				}
				if strings.Contains(string(body), key) {
					t.Errorf("the answer quotes the key: %s", body)
				}
			}
			if logs := a.logs.String(); strings.Contains(logs, key) || strings.Contains(logs, key[len(key)-12:]) || !strings.Contains(logs, geminiGeneratePath) {
				t.Errorf("logs hold the key, or no Gemini request line:\n%s", logs)
			}
		})
	}
}

// TestGeminiNativeClamp: near its budget, a native request's
// maxOutputTokens is lowered to what the headroom affords, as chat's
// max_tokens is, so that the reservation bounds what the provider may
// generate; a translated one gets the clamp through the translation.
func TestGeminiNativeClamp(t *testing.T) {
	up, _ := newRecordingUpstream(t)
	a := newAcctRig(t, func(c *config.Config) {
		c.Providers[0].BaseURL = "http://" + up.addr + "/v1"
		c.Providers = append(c.Providers, config.Provider{Name: "gem", Kind: config.KindGemini, BaseURL: "http://" + up.addr,
			APIKey: testProvKey, Timeouts: c.Providers[0].Timeouts})
		// A priced name (the rig prices by the embedded table).
		c.Models = append(c.Models, config.Model{Name: "gemini-2.5-flash", Type: "chat", Targets: []config.Target{{Provider: "gem"}}})
		// 0.0001 USD buys the prompt and some 100 output tokens of mock-gpt, 10 of gemini-2.5-flash.
		c.Budgets = []config.BudgetLimit{{Scope: "team", Value: "*", AmountUSD: "0.0001", Period: "day"}}
	})
	for _, tt := range []struct{ model, path string }{
		{"gemini-2.5-flash", "generationConfig.maxOutputTokens"},
		{"mock-gpt", "max_tokens"},
	} {
		t.Run(tt.model, func(t *testing.T) {
			tok := a.token(func(o *auth.MintOptions) { o.Team = tt.model }) // a team, and its budget, of its own
			resp := a.post("/v1beta/models/"+tt.model+":generateContent", tok, geminiBody("Say hello."))
			body := readBody(t, resp)
			clamp := resp.Header.Get("x-tollgate-max-tokens-clamped")
			if resp.StatusCode != 200 || clamp == "" {
				t.Fatalf("status %d clamp %q: %s", resp.StatusCode, clamp, body)
			}
			_, sent := up.lastRequest(t)
			if got := gjson.Get(sent, tt.path).String(); got != clamp {
				t.Errorf("upstream %s = %q, want the clamp %s: %.300s", tt.path, got, clamp, sent)
			}
		})
	}
}

// TestGeminiClientAbort: a client leaving a Gemini stream is billed as on
// chat: the prompt and the text delivered (estimated unless the provider
// reported usage on the way), recorded as 499.
func TestGeminiClientAbort(t *testing.T) {
	a := newAcctRig(t, func(c *config.Config) {
		c.Providers = append(c.Providers, config.Provider{Name: "gem", Kind: config.KindGemini,
			BaseURL: strings.TrimSuffix(c.Providers[0].BaseURL, "/v1"), APIKey: testProvKey, Timeouts: c.Providers[0].Timeouts})
		c.Models = append(c.Models, config.Model{Name: "gemini-2.5-flash", Type: "chat", Targets: []config.Target{{Provider: "gem"}}})
	})
	body := `{"contents":[{"parts":[{"text":"tell me a long story"}]}],"mock":{"chunks":200,"chunk_delay_ms":20}}`
	for _, model := range []string{"gemini-2.5-flash", "mock-gpt"} {
		t.Run(model, func(t *testing.T) {
			resp := a.post("/v1beta/models/"+model+":streamGenerateContent?alt=sse", a.token(nil), body)
			id := resp.Header.Get("x-request-id")
			br := bufio.NewReader(resp.Body)
			for seen := 0; seen < 5; {
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(line, "data: ") {
					seen++
				}
			}
			resp.Body.Close()
			ev := a.eventOf(t, id)
			if !ev.ClientAborted || ev.StatusCode != StatusClientClosed || ev.Endpoint != geminiStreamPath {
				t.Fatalf("event aborted %v status %d endpoint %s", ev.ClientAborted, ev.StatusCode, ev.Endpoint)
			}
			if ev.PromptTokens == 0 || ev.CompletionTokens < 3 || ev.CompletionTokens > 150 || ev.CostNanoUsd <= 0 {
				t.Errorf("estimated %v prompt %d completion %d cost %d", ev.Estimated, ev.PromptTokens, ev.CompletionTokens, ev.CostNanoUsd)
			}
		})
	}
}
