package bedrock

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/valyala/fasthttp"
)

// FuzzBuild translates arbitrary request bodies: Build must never panic,
// and a body it accepts must become valid JSON in valid UTF-8.
func FuzzBuild(f *testing.F) {
	files, _ := filepath.Glob("testdata/request/*.json")
	for _, in := range files {
		if b, err := os.ReadFile(in); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}],\"stop\":[\"\\u0000\"]}"))
	p := testProvider(f, "")
	f.Fuzz(func(t *testing.T, body []byte) {
		var req fasthttp.Request
		if err := p.Build(&req, chatCall(string(body))); err != nil {
			return
		}
		if out := req.Body(); !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("invalid upstream body %q for %q", out, body)
		}
	})
}

// FuzzResponse translates arbitrary Converse answers: Response must never
// panic, and what it returns must be valid JSON in valid UTF-8.
func FuzzResponse(f *testing.F) {
	files, _ := filepath.Glob("testdata/response/*.json")
	for _, in := range files {
		if b, err := os.ReadFile(in); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("{\"output\":{\"message\":{\"content\":[{\"text\":\"a\xffb\"},{\"toolUse\":{\"input\":\"\xfe\"}}]}}}"))
	p := testProvider(f, "")
	f.Fuzz(func(t *testing.T, body []byte) {
		out, _, err := p.Response(nil, body, chatCall(`{}`))
		if err != nil {
			return
		}
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("invalid answer %q for %q", out, body)
		}
	})
}
