package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/tokenize"
	"github.com/valyala/fasthttp"
)

// passConfig adds the pass-through models and the files provider to the
// rig's config: mock-image, mock-whisper, mock-tts (priced in the embedded
// table), a moderation model, an alias served under another name, and a
// model on an anthropic provider, which has no such endpoints.
func passConfig(c *config.Config) {
	mock := c.Providers[0]
	claude := config.Provider{Name: "claude", Kind: config.KindAnthropic, BaseURL: mock.BaseURL, APIKey: "x", Timeouts: mock.Timeouts}
	c.Providers = append(c.Providers, claude)
	c.FilesProvider = "mock"
	c.Models[0].Batch = true // mock-gpt runs in batches
	for _, m := range []config.Model{
		{Name: "mock-image", Type: config.ModelTypeImage, Targets: []config.Target{{Provider: "mock"}}},
		{Name: "mock-whisper", Type: config.ModelTypeTranscription, Targets: []config.Target{{Provider: "mock"}}},
		{Name: "mock-tts", Type: config.ModelTypeSpeech, Targets: []config.Target{{Provider: "mock"}}},
		{Name: "omni-moderation-latest", Type: config.ModelTypeModeration, Targets: []config.Target{{Provider: "mock"}}},
		{Name: "alias-moderation", Type: config.ModelTypeModeration, Targets: []config.Target{{Provider: "mock", Model: "omni-moderation-latest"}}},
		{Name: "alias-whisper", Type: config.ModelTypeTranscription, Targets: []config.Target{{Provider: "mock", Model: "mock-whisper"}}},
		{Name: "claude-image", Type: config.ModelTypeImage, Targets: []config.Target{{Provider: "claude"}}},
	} {
		c.Models = append(c.Models, m)
	}
}

// form builds a multipart body from fields (in order) and one file part.
func form(t testing.TB, fields [][2]string, file []byte) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for _, f := range fields {
		if f[0] == "file" {
			fw, err := w.CreateFormFile("file", "audio.wav")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = fw.Write(file)
			continue
		}
		_ = w.WriteField(f[0], f[1])
	}
	_ = w.Close()
	return w.FormDataContentType(), b.Bytes()
}

// send makes one request with a bearer token and the given content type.
func (r *rig) send(method, path, token, contentType string, body io.Reader, size int64, headers ...string) *http.Response {
	r.t.Helper()
	req, err := http.NewRequest(method, r.url+path, body)
	if err != nil {
		r.t.Fatal(err)
	}
	req.ContentLength = size
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	return resp
}

func TestPassthroughBilled(t *testing.T) {
	a := newAcctRig(t, passConfig)
	tok := a.token(nil)
	audio := bytes.Repeat([]byte{7}, 32_000) // 2 s at the mock's 16000 bytes per second
	verboseCT, verbose := form(t, [][2]string{{"model", "mock-whisper"}, {"response_format", "verbose_json"}, {"file", ""}}, audio)
	plainCT, plain := form(t, [][2]string{{"response_format", "json"}, {"model", "alias-whisper"}, {"file", ""}}, audio)
	lineBody := `{"model":"mock-gpt","messages":[{"role":"user","content":"hello there"}],"max_tokens":5}`
	line := `{"custom_id":"1","method":"POST","url":"/v1/chat/completions","body":` + lineBody + "}\n"
	fileCT, fileForm := form(t, [][2]string{{"purpose", "batch"}, {"file", ""}}, []byte(line))
	// A batch is billed at its estimate: the prompt counted, max_tokens out.
	batchCost := int64(tokenize.New().ChatPrompt([]byte(lineBody)))*150 + 5*600
	tests := []struct {
		name, method, path, ct string
		body                   []byte
		wantStatus             int
		wantBody               string // a substring of the answer
		wantLen                int    // answer length, when set
		endpoint, model        string
		units                  uint64
		unit                   string
		cost                   int64
	}{
		{name: "images n=3", method: "POST", path: "/v1/images/generations", ct: "application/json",
			body: []byte(`{"model":"mock-image","prompt":"a cat","n":3}`), wantStatus: 200, wantBody: `images/2.png`,
			endpoint: "/v1/images/generations", model: "mock-image", units: 3, unit: "image", cost: 3 * 40_000_000},
		{name: "images refused upstream cost nothing", method: "POST", path: "/v1/images/generations", ct: "application/json",
			body: []byte(`{"model":"mock-image","prompt":"a cat","n":11}`), wantStatus: 400, wantBody: `upstream_rejected`,
			endpoint: "/v1/images/generations", model: "mock-image"},
		{name: "speech", method: "POST", path: "/v1/audio/speech", ct: "application/json",
			body: []byte(`{"model":"mock-tts","input":"héllo world","voice":"alloy"}`), wantStatus: 200, wantLen: 11 * 16,
			endpoint: "/v1/audio/speech", model: "mock-tts", units: 11, unit: "character", cost: 165_000},
		{name: "moderation free", method: "POST", path: "/v1/moderations", ct: "application/json",
			body: []byte(`{"model":"omni-moderation-latest","input":"hi"}`), wantStatus: 200, wantBody: `"flagged":false`,
			endpoint: "/v1/moderations", model: "omni-moderation-latest"},
		{name: "moderation renamed", method: "POST", path: "/v1/moderations", ct: "application/json",
			body: []byte(`{"model":"alias-moderation","input":"hi"}`), wantStatus: 200, wantBody: `"model":"omni-moderation-latest"`,
			endpoint: "/v1/moderations", model: "alias-moderation"},
		{name: "escaped key and model are read as decoded and renamed", method: "POST", path: "/v1/moderations", ct: "application/json",
			body: []byte(`{"mod\u0065l":"alias-moder\u0061tion","input":"hi"}`), wantStatus: 200, wantBody: `"model":"omni-moderation-latest"`,
			endpoint: "/v1/moderations", model: "alias-moderation"},
		{name: "speech input with escapes counts decoded characters", method: "POST", path: "/v1/audio/speech", ct: "application/json",
			body: []byte(`{"model":"mock-tts","input":"h\u00e9llo world"}`), wantStatus: 200, wantLen: 11 * 16,
			endpoint: "/v1/audio/speech", model: "mock-tts", units: 11, unit: "character", cost: 165_000},
		{name: "transcription with duration", method: "POST", path: "/v1/audio/transcriptions", ct: verboseCT, body: verbose,
			wantStatus: 200, wantBody: `"duration":2.000`,
			endpoint: "/v1/audio/transcriptions", model: "mock-whisper", units: 2000, unit: "audio_ms", cost: 200_000},
		{name: "translation, json with usage.seconds", method: "POST", path: "/v1/audio/translations", ct: plainCT, body: plain,
			wantStatus: 200, wantBody: `{"text":`, endpoint: "/v1/audio/translations", model: "alias-whisper", units: 2000, unit: "audio_ms", cost: 200_000},
		{name: "file upload", method: "POST", path: "/v1/files", ct: fileCT, body: fileForm, wantStatus: 200,
			wantBody: `"id":"file-mock1"`, endpoint: "/v1/files", units: uint64(len(fileForm)), unit: "byte"},
		{name: "file list", method: "GET", path: "/v1/files", wantStatus: 200, wantBody: `"purpose":"batch"`, endpoint: "GET /v1/files"},
		{name: "file get", method: "GET", path: "/v1/files/file-mock1", wantStatus: 200, wantBody: fmt.Sprintf(`"bytes":%d`, len(line)), endpoint: "GET /v1/files/{id}"},
		{name: "file content", method: "GET", path: "/v1/files/file-mock1/content", wantStatus: 200, wantBody: `{"custom_id":"1",`,
			endpoint: "GET /v1/files/{id}/content"},
		{name: "batch create", method: "POST", path: "/v1/batches", ct: "application/json",
			body:       []byte(`{"input_file_id":"file-mock1","endpoint":"/v1/chat/completions","completion_window":"24h"}`),
			wantStatus: 200, wantBody: `"status":"validating"`, endpoint: "/v1/batches", model: "mock-gpt", cost: batchCost},
		{name: "batch list", method: "GET", path: "/v1/batches?limit=5", wantStatus: 200, wantBody: `"batch_mock2"`, endpoint: "GET /v1/batches"},
		{name: "batch get", method: "GET", path: "/v1/batches/batch_mock2", wantStatus: 200, wantBody: `"input_file_id":"file-mock1"`,
			endpoint: "GET /v1/batches/{id}"},
		{name: "batch cancel", method: "POST", path: "/v1/batches/batch_mock2/cancel", wantStatus: 200, wantBody: `"status":"cancelled"`,
			endpoint: "/v1/batches/{id}/cancel"},
		{name: "file delete", method: "DELETE", path: "/v1/files/file-mock1", wantStatus: 200, wantBody: `"deleted":true`,
			endpoint: "DELETE /v1/files/{id}"},
		// Its owner record went with it: 404 from the gateway, no call.
		{name: "file gone", method: "GET", path: "/v1/files/file-mock1", wantStatus: 404, wantBody: `"code":"not_found"`,
			endpoint: "GET /v1/files/{id}"},
	}
	ids := map[string]int{}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := a.send(tt.method, tt.path, tok, tt.ct, bytes.NewReader(tt.body), int64(len(tt.body)))
			ids[resp.Header.Get("X-Request-Id")] = i
			got := readBody(t, resp)
			if resp.StatusCode != tt.wantStatus || !bytes.Contains(got, []byte(tt.wantBody)) {
				t.Fatalf("status %d, body %.300s; want %d with %q", resp.StatusCode, got, tt.wantStatus, tt.wantBody)
			}
			if tt.wantLen > 0 && len(got) != tt.wantLen {
				t.Errorf("answer is %d bytes, want %d", len(got), tt.wantLen)
			}
			if resp.Header.Get("x-tollgate-provider") != "mock" && tt.wantStatus != 404 {
				t.Errorf("x-tollgate-provider = %q", resp.Header.Get("x-tollgate-provider"))
			}
		})
	}
	for _, ev := range a.events(t, len(tests)) {
		i, ok := ids[ev.RequestId]
		if !ok {
			t.Errorf("event for unknown request %q", ev.RequestId)
			continue
		}
		tt := tests[i]
		got := fmt.Sprintf("%s %s %d %d %s %d %s", ev.Endpoint, ev.RequestedModel, ev.StatusCode, ev.Units, ev.Unit, ev.CostNanoUsd, ev.Provider)
		want := fmt.Sprintf("%s %s %d %d %s %d %s", tt.endpoint, tt.model, tt.wantStatus, tt.units, tt.unit, tt.cost, "mock")
		if got != want {
			t.Errorf("%s: event %q, want %q", tt.name, got, want)
		}
		if ev.Subject != "alice" || ev.Dept != "research" || ev.Estimated != (tt.endpoint == "/v1/batches") {
			t.Errorf("%s: event principal %s/%s estimated %v", tt.name, ev.Subject, ev.Dept, ev.Estimated)
		}
	}
}

// TestPassthroughLimits checks budgets and rate limits apply: the budget
// (0.10 USD a day) admits two images and refuses the third request's
// worst case before the call; the token's rpm refuses the fourth call.
func TestPassthroughLimits(t *testing.T) {
	a := newAcctRig(t, func(c *config.Config) {
		passConfig(c)
		c.Budgets = []config.BudgetLimit{{Scope: "dept", Value: "research", AmountUSD: "0.10", Period: "day"}}
	})
	tok := a.token(func(o *auth.MintOptions) { o.RPM = 3 })
	tests := []struct {
		name, body string
		status     int
		code       string
	}{
		{"two images fit", `{"model":"mock-image","n":2}`, 200, ""},
		{"three more do not", `{"model":"mock-image","n":3}`, 429, "budget_exceeded"},
		{"a free moderation does", `{"model":"omni-moderation-latest","input":"x"}`, 200, ""},
		{"rpm reached", `{"model":"omni-moderation-latest","input":"x"}`, 429, "rate_limit_exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := "/v1/images/generations"
			if strings.Contains(tt.body, "moderation") {
				path = "/v1/moderations"
			}
			resp := a.post(path, tok, tt.body)
			body := readBody(t, resp)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if tt.code != "" {
				typ := typeBudget
				if tt.code == "rate_limit_exceeded" {
					typ = typeRateLimit
				}
				errorShape(t, body, typ, tt.code)
			}
		})
	}
	for _, ev := range a.events(t, len(tests)) {
		if ev.Endpoint == "/v1/images/generations" && len(ev.Budgets) != 1 {
			t.Errorf("image event (status %d) lists %d budgets checked, want the dept limit", ev.StatusCode, len(ev.Budgets))
		}
	}
}

// TestPassthroughBillsWhatWasServed is issue 41, finding 10, as an
// attacker tries it: a chat model (priced for tokens, so every image
// would cost 0) on the image, speech and transcription endpoints, an
// image model on chat, HD images at the standard price, a duplicate size,
// a transcription asked as text (no duration in the answer) and image
// models without an image price. Each gets a refusal before any upstream
// call, or is billed by the endpoint's unit.
func TestPassthroughBillsWhatWasServed(t *testing.T) {
	a := newAcctRig(t, func(c *config.Config) {
		passConfig(c)
		c.Usage.UnpricedModel = config.UnpricedRefuse
		c.Models = append(c.Models,
			config.Model{Name: "tts-as-image", Type: config.ModelTypeImage, Targets: []config.Target{{Provider: "mock", Model: "mock-tts"}}})
	})
	tok := a.token(nil)
	audio := bytes.Repeat([]byte{7}, 32_000) // 2 s at the mock's 16000 bytes per second
	textCT, text := form(t, [][2]string{{"model", "mock-whisper"}, {"response_format", "text"}, {"file", ""}}, audio)
	textMs := uint64(len(text)) * 1000 / estimateBytesPerSecond
	chatCT, chatForm := form(t, [][2]string{{"model", "mock-gpt"}, {"file", ""}}, []byte("RIFF"))
	tests := []struct {
		name, path, ct, body string
		status               int
		code                 string // error code, or a substring of the answer
		upstream             bool   // the mock got the request
		units                uint64
		cost                 int64
		estimated            bool
	}{
		{name: "chat model on images", path: "/v1/images/generations", body: `{"model":"mock-gpt","prompt":"x","n":10}`,
			status: 400, code: "wrong_endpoint"},
		{name: "chat model on speech", path: "/v1/audio/speech", body: `{"model":"mock-gpt","input":"hello","voice":"alloy"}`,
			status: 400, code: "wrong_endpoint"},
		{name: "chat model on transcriptions", path: "/v1/audio/transcriptions", ct: chatCT, body: string(chatForm),
			status: 400, code: "wrong_endpoint"},
		{name: "speech model on images", path: "/v1/images/generations", body: `{"model":"mock-tts","prompt":"x"}`,
			status: 400, code: "wrong_endpoint"},
		{name: "image model on chat", path: "/v1/chat/completions", body: `{"model":"mock-image","messages":[{"role":"user","content":"hi"}]}`,
			status: 400, code: "wrong_endpoint"},
		{name: "duplicate size", path: "/v1/images/generations", body: `{"model":"mock-image","size":"1024x1024","size":"1024x1792"}`,
			status: 400, code: "duplicate_key"},
		{name: "size not a string", path: "/v1/images/generations", body: `{"model":"mock-image","size":1024}`,
			status: 400, code: "invalid_type"},
		{name: "hd tall images at their price", path: "/v1/images/generations", body: `{"model":"mock-image","n":2,"quality":"HD","size":"1024x1792"}`,
			status: 200, code: "images/1.png", upstream: true, units: 2, cost: 2 * 120_000_000},
		{name: "tall standard image", path: "/v1/images/generations", body: `{"model":"mock-image","size":"1024x1792"}`,
			status: 200, code: "images/0.png", upstream: true, units: 1, cost: 80_000_000},
		{name: "transcription as text is billed the estimate", path: "/v1/audio/transcriptions", ct: textCT, body: string(text),
			status: 200, code: "quick brown fox", upstream: true, units: textMs, cost: int64(textMs) * 100, estimated: true}, // $0.0001 a second
		{name: "image model without an image price", path: "/v1/images/generations", body: `{"model":"tts-as-image","prompt":"x"}`,
			status: 400, code: "model_not_priced"},
	}
	ids := map[string]int{}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("kind-%d", i)
			ids[id] = i
			ct := tt.ct
			if ct == "" {
				ct = "application/json"
			}
			before := a.mock.Stats().Requests
			resp := a.send("POST", tt.path, tok, ct, strings.NewReader(tt.body), int64(len(tt.body)), "X-Request-Id", id)
			body := readBody(t, resp)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if tt.status != 200 {
				errorShape(t, body, typeInvalidRequest, tt.code)
			} else if !strings.Contains(string(body), tt.code) {
				t.Errorf("answer %.200s, want %q in it", body, tt.code)
			}
			if called := a.mock.Stats().Requests > before; called != tt.upstream {
				t.Errorf("upstream called: %v, want %v", called, tt.upstream)
			}
		})
	}
	for _, ev := range a.events(t, len(tests)) {
		i, ok := ids[ev.RequestId]
		if !ok {
			continue
		}
		tt := tests[i]
		if ev.Units != tt.units || ev.CostNanoUsd != tt.cost || ev.Estimated != tt.estimated {
			t.Errorf("%s: event units %d cost %d estimated %v, want %d, %d, %v",
				tt.name, ev.Units, ev.CostNanoUsd, ev.Estimated, tt.units, tt.cost, tt.estimated)
		}
	}
}

func TestPassthroughRefused(t *testing.T) {
	r := newRig(t, passConfig)
	noFiles := newRig(t, nil)
	tok := r.token(nil)
	onlyChat := r.token(func(o *auth.MintOptions) { o.Models = []string{"mock-gpt"} })
	ct, fileFirst := form(t, [][2]string{{"file", ""}, {"model", "mock-whisper"}}, []byte("RIFF"))
	noModelCT, noModel := form(t, [][2]string{{"response_format", "json"}}, nil)
	okCT, ok := form(t, [][2]string{{"model", "mock-whisper"}, {"file", ""}}, []byte("RIFF"))
	tests := []struct {
		name, path, token, ct, body string
		rig                         *rig
		status                      int
		typ, code                   string
	}{
		{"no token", "/v1/images/generations", "", "application/json", `{"model":"mock-image","prompt":"x"}`, r, 401, typeAuthentication, "missing_token"},
		{"model not allowed", "/v1/images/generations", onlyChat, "application/json", `{"model":"mock-image","prompt":"x"}`, r, 403, typePermission, "model_not_allowed"},
		{"audio model not allowed", "/v1/audio/transcriptions", onlyChat, okCT, string(ok), r, 403, typePermission, "model_not_allowed"},
		{"unknown model", "/v1/moderations", tok, "application/json", `{"model":"nope","input":"x"}`, r, 404, typeInvalidRequest, "model_not_found"},
		{"provider does not speak it", "/v1/images/generations", tok, "application/json", `{"model":"claude-image","prompt":"x"}`, r, 400, typeInvalidRequest, "unsupported_endpoint"},
		{"missing model", "/v1/moderations", tok, "application/json", `{"input":"x"}`, r, 400, typeInvalidRequest, "missing_field"},
		{"model not a string", "/v1/moderations", tok, "application/json", `{"model":5}`, r, 400, typeInvalidRequest, "invalid_type"},
		{"bad n", "/v1/images/generations", tok, "application/json", `{"model":"mock-image","n":1.5}`, r, 400, typeInvalidRequest, "invalid_type"},
		{"speech without input", "/v1/audio/speech", tok, "application/json", `{"model":"mock-tts"}`, r, 400, typeInvalidRequest, "missing_field"},
		{"invalid json", "/v1/images/generations", tok, "application/json", `{"model":`, r, 400, typeInvalidRequest, "invalid_json"},
		{"repeated model", "/v1/images/generations", tok, "application/json", `{"model":"mock-image","model":"dall-e-3"}`, r, 400, typeInvalidRequest, "duplicate_key"},
		{"repeated n", "/v1/images/generations", tok, "application/json", `{"model":"mock-image","n":1,"n":9}`, r, 400, typeInvalidRequest, "duplicate_key"},
		{"not UTF-8", "/v1/moderations", tok, "application/json", "{\"model\":\"omni-moderation-latest\",\"input\":\"\xff\"}", r, 400, typeInvalidRequest, "invalid_json"},
		{"not an object", "/v1/moderations", tok, "application/json", `["omni-moderation-latest"]`, r, 400, typeInvalidRequest, "invalid_json"},
		{"model after file", "/v1/audio/transcriptions", tok, ct, string(fileFirst), r, 400, typeInvalidRequest, "model_after_file"},
		{"multipart without model", "/v1/audio/translations", tok, noModelCT, string(noModel), r, 400, typeInvalidRequest, "missing_field"},
		{"not multipart", "/v1/audio/transcriptions", tok, "application/json", `{}`, r, 400, typeInvalidRequest, "invalid_content_type"},
		{"files not configured", "/v1/batches", noFiles.token(nil), "application/json", `{}`, noFiles, 400, typeInvalidRequest, "files_not_configured"},
		// A files or batches JSON body is refused as the other endpoints refuse theirs.
		{"batch body invalid", "/v1/batches", tok, "application/json", `{"input_file_id":`, r, 400, typeInvalidRequest, "invalid_json"},
		{"batch body not an object", "/v1/batches", tok, "application/json", `["file-mock1"]`, r, 400, typeInvalidRequest, "invalid_json"},
		{"batch body not UTF-8", "/v1/batches", tok, "application/json", "{\"input_file_id\":\"file-\xff\"}", r, 400, typeInvalidRequest, "invalid_json"},
		{"batch body too deep", "/v1/batches", tok, "application/json", `{"metadata":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`, r, 400, typeInvalidRequest, "invalid_json"},
		{"upstream rejects", "/v1/images/generations", tok, "application/json", `{"model":"mock-image","n":11}`, r, 400, typeInvalidRequest, "upstream_rejected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := tt.rig.send("POST", tt.path, tt.token, tt.ct, strings.NewReader(tt.body), int64(len(tt.body)))
			body := readBody(t, resp)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			errorShape(t, body, tt.typ, tt.code)
			if resp.Header.Get("x-request-id") == "" {
				t.Error("no x-request-id")
			}
		})
	}
}

func TestPassthroughBodyLimit(t *testing.T) {
	r := newRig(t, passConfig)
	tok := r.token(nil)
	big := `{"model":"mock-image","prompt":"` + strings.Repeat("x", 70_000) + `"}` // body_limit is 65536
	chat := `{"model":"mock-gpt","messages":[{"role":"user","content":"` + strings.Repeat("y ", 1000) + `"}]}`
	tests := []struct {
		name, path, body string
		chunked          bool
		status           int
	}{
		{"json endpoint with length", "/v1/images/generations", big, false, 413},
		{"json endpoint chunked", "/v1/images/generations", big, true, 413},
		{"chat chunked over the limit", "/v1/chat/completions", strings.Replace(big, "mock-image", "mock-gpt", 1), true, 413},
		{"chat chunked under the limit", "/v1/chat/completions", chat, true, 200},
		{"chat with length under the limit", "/v1/chat/completions", chat, false, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(tt.body)
			size := int64(len(tt.body))
			if tt.chunked {
				body, size = io.MultiReader(body), -1 // hides the length: chunked
			}
			resp := r.send("POST", tt.path, tok, "application/json", body, size)
			got := readBody(t, resp)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %.300s", resp.StatusCode, tt.status, got)
			}
			if tt.status == 413 {
				errorShape(t, got, typeInvalidRequest, "request_too_large")
			}
		})
	}
}

// bigForm streams a multipart form with one file of n generated bytes:
// it returns the content type, the body, its length and the file's sha256.
func bigForm(t testing.TB, fields [][2]string, n int64) (string, io.Reader, int64, string) {
	t.Helper()
	var head, tail bytes.Buffer
	w := multipart.NewWriter(&head)
	for _, f := range fields {
		_ = w.WriteField(f[0], f[1])
	}
	if _, err := w.CreateFormFile("file", "big.wav"); err != nil {
		t.Fatal(err)
	}
	ct := w.FormDataContentType()
	tw := multipart.NewWriter(&tail)
	_ = tw.SetBoundary(w.Boundary())
	_ = tw.Close()
	closing := tail.Bytes() // "\r\n--boundary--\r\n"
	h := sha256.New()
	_, _ = io.Copy(h, &genReader{left: n})
	body := io.MultiReader(bytes.NewReader(head.Bytes()), &genReader{left: n}, bytes.NewReader(closing))
	return ct, body, int64(head.Len()) + n + int64(len(closing)), hex.EncodeToString(h.Sum(nil))
}

// genReader yields n bytes of a fixed pattern (period 253) without
// holding them.
type genReader struct{ left, off int64 }

// genPattern is the pattern, long enough that a read copies from it at any
// phase.
var genPattern = func() []byte {
	b := make([]byte, 253+64<<10)
	for i := range b {
		b[i] = byte(i * 7 % 253)
	}
	return b
}()

func (g *genReader) Read(p []byte) (int, error) {
	if g.left <= 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), g.left, 64<<10))
	copy(p[:n], genPattern[g.off%253:])
	g.off += int64(n)
	g.left -= int64(n)
	return n, nil
}

// TestPassthroughLargeUpload sends 64 MiB through the gateway, with a
// length and chunked, and checks the upstream got every byte while the
// process allocated far less than the upload (the body is never held).
func TestPassthroughLargeUpload(t *testing.T) {
	r := newRig(t, func(c *config.Config) {
		passConfig(c)
		// The provider without the rig's 2 s total timeout: 64 MiB take
		// longer than that under the race detector.
		c.FilesProvider = "renamed"
		c.Models = append(c.Models, config.Model{Name: "big-whisper", Type: config.ModelTypeTranscription, Targets: []config.Target{{Provider: "renamed", Model: "mock-whisper"}}})
	})
	tok := r.token(nil)
	tests := []struct {
		name, path string
		fields     [][2]string
		n          int64
		chunked    bool
		want       func(body []byte, sum string) bool
	}{
		{"file of 64 MiB with length", "/v1/files", [][2]string{{"purpose", "batch"}}, 64 << 20, false,
			func(b []byte, sum string) bool { return bytes.Contains(b, []byte(`"sha256":"`+sum+`"`)) }},
		{"file chunked", "/v1/files", [][2]string{{"purpose", "batch"}}, 16 << 20, true,
			func(b []byte, sum string) bool { return bytes.Contains(b, []byte(`"sha256":"`+sum+`"`)) }},
		{"transcription chunked", "/v1/audio/transcriptions", [][2]string{{"model", "big-whisper"}, {"response_format", "verbose_json"}}, 16 << 20, true,
			func(b []byte, _ string) bool { return bytes.Contains(b, []byte(`"duration":1048.576`)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := tt.n
			ct, body, size, sum := bigForm(t, tt.fields, n)
			if tt.chunked {
				size = -1
			}
			r.mock.ResetStats()
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			resp := r.send("POST", tt.path, tok, ct, body, size)
			got := readBody(t, resp)
			runtime.ReadMemStats(&after)
			if resp.StatusCode != 200 || !tt.want(got, sum) {
				t.Fatalf("status %d: %.300s", resp.StatusCode, got)
			}
			if up := r.mock.Stats().UploadBytes; up != n {
				t.Errorf("upstream received %d file bytes, want %d", up, n)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("allocated %.1f MiB in the process for a %d MiB upload", float64(alloc)/(1<<20), n>>20)
			if alloc > uint64(n/2) {
				t.Errorf("allocated %d bytes for a %d-byte upload: the body was held", alloc, n)
			}
		})
	}
}

func TestPassthroughSpeechStreams(t *testing.T) {
	r := newRig(t, passConfig)
	const n = 16 << 20
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp := r.send("POST", "/v1/audio/speech", r.token(nil), "application/json",
		strings.NewReader(fmt.Sprintf(`{"model":"mock-tts","input":"hi","voice":"alloy","mock":{"audio_bytes":%d}}`, n)), -1)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "audio/mpeg" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	buf := make([]byte, 64<<10)
	var off int64
	for {
		k, err := resp.Body.Read(buf)
		for i := range buf[:k] {
			if buf[i] != mockllm.PatternByte(off+int64(i)) {
				t.Fatalf("byte %d differs", off+int64(i))
			}
		}
		off += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if off != n {
		t.Fatalf("got %d bytes, want %d", off, n)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %.1f MiB in the process for a %d MiB answer", float64(alloc)/(1<<20), n>>20)
	if alloc > n/2 {
		t.Errorf("allocated %d bytes for a %d-byte answer: it was held", alloc, n)
	}
}

func TestMultipartModelRename(t *testing.T) {
	tests := []struct {
		name   string
		fields [][2]string
		want   string
	}{
		{"model first", [][2]string{{"model", "alias-whisper"}, {"file", ""}}, "whisper-1"},
		{"fields before model", [][2]string{{"language", "en"}, {"prompt", `name="model"`}, {"model", "alias-whisper"}, {"file", ""}}, "whisper-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ct, body := form(t, tt.fields, []byte("some audio"))
			boundary := ct[strings.Index(ct, "boundary=")+len("boundary="):]
			rest := body
			// Split as readMultipartHead would: the head is what was read.
			at := bytes.Index(body, []byte("alias-whisper"))
			cut := at + len("alias-whisper") + 100
			head, rest := body[:cut], rest[cut:]
			h := &multipartHead{prefix: head, model: "alias-whisper", boundary: []byte(boundary),
				rest: bytes.NewReader(rest), size: len(body)}
			h.valueAt = findModelValue(h.prefix, h.boundary, h.model)
			if h.valueAt != at {
				t.Fatalf("model value at %d, want %d", h.valueAt, at)
			}
			pc := &passCall{rt: &route{upstreamModel: tt.want}}
			if aerr := pc.streamMultipart(h, "alias-whisper"); aerr != nil {
				t.Fatal(aerr)
			}
			out, _ := io.ReadAll(pc.upload)
			if len(out) != pc.size {
				t.Errorf("size %d, body %d bytes", pc.size, len(out))
			}
			mr := multipart.NewReader(bytes.NewReader(out), boundary)
			f, err := mr.ReadForm(1 << 20)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Value["model"]; len(got) != 1 || got[0] != tt.want {
				t.Errorf("model = %v, want %s", got, tt.want)
			}
			if len(f.File["file"]) != 1 {
				t.Error("file part lost")
			}
		})
	}
}

func TestPassTargetURL(t *testing.T) {
	tests := []struct {
		name, kind, base, model, sub, id, query, want string
		wantErr                                       string // the refused parameter
	}{
		{name: "openai per model", kind: config.KindOpenAI, base: "https://api.example.com/v1", model: "dall-e-3", sub: "/images/generations",
			want: "https://api.example.com/v1/images/generations"},
		{name: "openai files with query", kind: config.KindOpenAI, base: "https://api.example.com/v1/", sub: "/files", query: "limit=2",
			want: "https://api.example.com/v1/files?limit=2"},
		{name: "azure deployment", kind: config.KindAzure, base: "https://res.openai.azure.com", model: "my whisper", sub: "/audio/transcriptions",
			want: "https://res.openai.azure.com/openai/deployments/my%20whisper/audio/transcriptions?api-version=2024-10-21"},
		{name: "azure files", kind: config.KindAzure, base: "https://res.openai.azure.com", sub: "/files/:id/content", id: "file-1",
			want: "https://res.openai.azure.com/openai/files/file-1/content?api-version=2024-10-21"},
		// Client values are escaped as one segment or one query value
		// (issue #17): none adds a segment, a parameter or a fragment.
		{name: "id with slashes and dots", kind: config.KindOpenAI, base: "https://api.example.com/v1", sub: "/files/:id/content", id: "../../models",
			want: "https://api.example.com/v1/files/..%2F..%2Fmodels/content"},
		{name: "id with query and fragment", kind: config.KindOpenAI, base: "https://api.example.com/v1", sub: "/batches/:id/cancel", id: "b?x=1#f",
			want: "https://api.example.com/v1/batches/b%3Fx%3D1%23f/cancel"},
		{name: "id that is a dot segment", kind: config.KindOpenAI, base: "https://api.example.com/v1", sub: "/files/:id", id: "..", wantErr: "id"},
		{name: "azure deployment with a slash", kind: config.KindAzure, base: "https://res.openai.azure.com", model: "../x?y=1", sub: "/images/generations",
			want: "https://res.openai.azure.com/openai/deployments/..%2Fx%3Fy%3D1/images/generations?api-version=2024-10-21"},
		{name: "query values escaped again", kind: config.KindOpenAI, base: "https://api.example.com/v1", sub: "/files", query: "after=a%26limit%3D1&purpose=x%23y",
			want: "https://api.example.com/v1/files?after=a%26limit%3D1&purpose=x%23y"},
		{name: "azure api-version is the gateway's", kind: config.KindAzure, base: "https://res.openai.azure.com", sub: "/files", query: "api-version=2099-01-01",
			wantErr: "api-version"},
		{name: "query with a control character", kind: config.KindOpenAI, base: "https://api.example.com/v1", sub: "/files", query: "after=a%0d%0aHost:x",
			wantErr: "after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := config.Provider{Name: "p", Kind: tt.kind, BaseURL: tt.base, APIKey: "k", APIVersion: "2024-10-21"}
			u, err := newUpstream(p)
			if err != nil {
				t.Fatal(err)
			}
			req := &fasthttp.Request{}
			req.URI().DisablePathNormalizing = true // as the upstream clients send it
			err = u.pass.build(req, "POST", tt.sub, tt.id, tt.model, []byte(tt.query))
			if tt.wantErr != "" {
				var pe *providers.ParamError
				if !errors.As(err, &pe) || pe.Param != tt.wantErr {
					t.Fatalf("build: %v, want a ParamError for %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := req.URI().String(); got != tt.want {
				t.Errorf("URL %s, want %s", got, tt.want)
			}
			wantAuth := map[string]string{config.KindOpenAI: "Bearer k", config.KindAzure: "k"}[tt.kind]
			if got := string(req.Header.Peek(map[string]string{config.KindOpenAI: "Authorization", config.KindAzure: "api-key"}[tt.kind])); got != wantAuth {
				t.Errorf("auth header %q", got)
			}
		})
	}
	if u, _ := newUpstream(config.Provider{Name: "a", Kind: config.KindAnthropic, APIKey: "k"}); u.pass != nil {
		t.Error("anthropic providers must not pass OpenAI endpoints through")
	}
}

// BenchmarkPassthroughUpload streams an 8 MiB file through the gateway to
// the mock per op; allocs/op and B/op (gateway, mock and client together)
// stay small and do not grow with the file: the body is never held.
func BenchmarkPassthroughUpload(b *testing.B) {
	r := newRig(b, func(c *config.Config) {
		passConfig(c)
		c.FilesProvider = "renamed" // no 2 s total timeout
	})
	tok := r.token(nil)
	const n = 8 << 20
	b.SetBytes(n)
	b.ReportAllocs()
	for b.Loop() {
		ct, body, size, _ := bigForm(b, [][2]string{{"purpose", "batch"}}, n)
		resp := r.send("POST", "/v1/files", tok, ct, body, size)
		if got := readBody(b, resp); resp.StatusCode != 200 {
			b.Fatalf("status %d: %s", resp.StatusCode, got)
		}
	}
}
