package gemini

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/valyala/fasthttp"
)

// seedFiles adds every testdata input of dir to f.
func seedFiles(f *testing.F, dir, ext string) {
	files, _ := filepath.Glob(filepath.Join("testdata", dir, "*"+ext))
	for _, name := range files {
		if strings.Contains(name, ".golden") {
			continue
		}
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
}

// FuzzStreamEvent feeds arbitrary upstream events to the stream translator:
// it must never panic, and everything it writes must be SSE data events
// holding valid JSON (or [DONE]).
func FuzzStreamEvent(f *testing.F) {
	seedFiles(f, "stream", ".sse")
	f.Add([]byte("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\\u0000\\\"\"},{\"functionCall\":{\"name\":\"x\\\"\",\"args\":{\"q\":\"\\n\"}}}]},\"finishReason\":\"STOP\"}]}\n\n"))
	f.Add([]byte("data: {\"responseId\":\"\\u00ff\\\"\",\"modelVersion\":\"m\\u0001\"}\n\n"))
	f.Add([]byte(":x\n\ndata: {\"error\":{}}\n\n"))
	p, err := New(Options{Name: "f"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		s := p.Stream(&providers.Call{Model: "m\"\x01", IncludeUsage: true})
		defer s.Close()
		out, _ := translate(t, s, raw)
		for _, ev := range bytes.Split(out, []byte("\n\n")) {
			if len(ev) == 0 {
				continue
			}
			data, ok := bytes.CutPrefix(ev, []byte("data: "))
			if !ok {
				t.Fatalf("not a data event: %q", ev)
			}
			if string(data) != "[DONE]" && !json.Valid(data) {
				t.Fatalf("invalid JSON event: %s", data)
			}
		}
	})
}

// FuzzResponse checks that any 200 body either fails with ErrMalformed or
// becomes valid JSON.
func FuzzResponse(f *testing.F) {
	seedFiles(f, "response", ".json")
	p, err := New(Options{Name: "f"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, c := range []*providers.Call{
			{Endpoint: providers.Chat, Model: "m"},
			{Endpoint: providers.Embeddings, Model: "m", Body: []byte(`{"encoding_format":"base64"}`)},
		} {
			out, _, err := p.Response(nil, body, c)
			if err == nil && !json.Valid(out) {
				t.Fatalf("invalid JSON answer for %s: %s", body, out)
			}
		}
	})
}

// FuzzBuild checks that any client body either is refused or becomes a
// valid JSON request.
func FuzzBuild(f *testing.F) {
	seedFiles(f, "request", ".json")
	p, err := New(Options{Name: "f"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, ep := range []providers.Endpoint{providers.Chat, providers.Embeddings} {
			var req fasthttp.Request
			if err := p.Build(&req, &providers.Call{Endpoint: ep, Body: body, Model: "m"}); err == nil && !json.Valid(req.Body()) {
				t.Fatalf("invalid JSON request for %s: %s", body, req.Body())
			}
		}
	})
}
