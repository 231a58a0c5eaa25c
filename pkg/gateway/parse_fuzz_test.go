package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// FuzzResponsesRequest runs arbitrary /v1/responses bodies through the
// parse the endpoint uses: every body is refused with a 400 or accepted,
// and an accepted body is JSON (by encoding/json) whose model member is
// the string the parse found, and whose stream member is what it found.
func FuzzResponsesRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"mock-gpt","input":"hi"}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"x"}]}],"stream":true,"max_output_tokens":16}`,
		`{"model":"m","input":"x","background":true}`, `{"model":"m","input":"x","background":"true"}`,
		`{"model":"m","input":"x","max_output_tokens":-1}`, `{"mod\u0065l":"m","input":"x"}`,
		`{"model":"m","model":"n","input":"x"}`, `{"model":1}`, `[]`, ``, "{\"model\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var info reqInfo
		aerr := parseRequest(body, epResponses, &info)
		if aerr != nil {
			if aerr.Status != 400 {
				t.Fatalf("status %d for %q", aerr.Status, body)
			}
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("accepted a body encoding/json refuses: %q: %v", body, err)
		}
		var model string
		if err := json.Unmarshal(m["model"], &model); err != nil || model != info.model || model == "" {
			t.Fatalf("parse found model %q, encoding/json %q (%v): %q", info.model, model, err, body)
		}
		var stream bool
		if raw, ok := m["stream"]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, &stream); err != nil {
				t.Fatalf("accepted a stream member that is not a boolean: %q", body)
			}
		}
		if stream != info.stream {
			t.Fatalf("parse found stream %v, encoding/json %v: %q", info.stream, stream, body)
		}
	})
}

// FuzzMultipartHead runs arbitrary multipart bodies through the reader of
// an upload's head (audio transcriptions and translations, image edits):
// every body is refused with a 400 or gives a model of 1 to 256 bytes read
// from at most the first 64 KiB, and where the reader places the model's
// value in what it read, that value is the model.
func FuzzMultipartHead(f *testing.F) {
	const boundary = "fuzzbound"
	part := func(name, value string) string {
		return "--" + boundary + "\r\nContent-Disposition: form-data; name=\"" + name + "\"\r\n\r\n" + value + "\r\n"
	}
	for _, s := range []string{
		part("model", "whisper-1") + "--" + boundary + "--\r\n",
		part("language", "en") + part("model", "m") + "--" + boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF\r\n--" + boundary + "--\r\n",
		"--" + boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF\r\n" + part("model", "m"),
		part("model", "") + "--" + boundary + "--\r\n",
		part("model", strings.Repeat("m", 300)),
		part("model", "a") + part("model", "b"),
		"--" + boundary + "\r\n\r\n", "", "--x--",
	} {
		f.Add([]byte(s))
	}
	app := fiber.New()
	f.Fuzz(func(t *testing.T, body []byte) {
		c := app.AcquireCtx(&fasthttp.RequestCtx{})
		defer app.ReleaseCtx(c)
		c.Request().Header.SetContentType("multipart/form-data; boundary=" + boundary)
		c.Request().SetBody(body)
		h, aerr := readMultipartHead(c)
		if aerr != nil {
			if aerr.Status != 400 {
				t.Fatalf("status %d for %q", aerr.Status, body)
			}
			return
		}
		if len(h.model) == 0 || len(h.model) > 256 {
			t.Fatalf("model of %d bytes accepted: %q", len(h.model), body)
		}
		if len(h.prefix) > maxMultipartHead || !bytes.HasPrefix(body, h.prefix) {
			t.Fatalf("head of %d bytes is not the body's start: %q", len(h.prefix), body)
		}
		if h.valueAt >= 0 && string(h.prefix[h.valueAt:h.valueAt+len(h.model)]) != h.model {
			t.Fatalf("model %q placed at %d, where the head has %q", h.model, h.valueAt, h.prefix[h.valueAt:])
		}
	})
}
