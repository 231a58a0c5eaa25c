package anthropic

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/valyala/fasthttp"
)

// addFiles seeds f with every input file (not golden) matching pattern.
func addFiles(f *testing.F, pattern string) {
	f.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		f.Fatalf("no seeds for %s: %v", pattern, err)
	}
	for _, name := range files {
		if strings.Contains(name, ".golden.") {
			continue
		}
		b, err := readFileErr(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzBuild translates arbitrary OpenAI bodies: never a panic, and a
// request built without error has a JSON body.
func FuzzBuild(f *testing.F) {
	addFiles(f, filepath.Join("testdata", "request", "*.json"))
	p, err := New(Options{Name: "fuzz", Now: fixedNow})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req fasthttp.Request
		if err := p.Build(&req, chatCall(body)); err == nil && !json.Valid(req.Body()) {
			t.Fatalf("invalid JSON %s for %s", req.Body(), body)
		}
	})
}

// FuzzResponse translates arbitrary Anthropic bodies.
func FuzzResponse(f *testing.F) {
	addFiles(f, filepath.Join("testdata", "response", "*.json"))
	p, err := New(Options{Name: "fuzz", Now: fixedNow})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		out, _, err := p.Response(nil, body, &providers.Call{Model: "m"})
		if err == nil && !json.Valid(out) {
			t.Fatalf("invalid JSON %s for %s", out, body)
		}
		if a, err := providers.ScanAnswer(body, "content"); err == nil {
			UsageOf(a.Usage)
		}
	})
}

// FuzzRequestToOpenAI translates arbitrary Anthropic requests; the
// translation without its reasoning effort is valid JSON too.
func FuzzRequestToOpenAI(f *testing.F) {
	addFiles(f, filepath.Join("testdata", "inbound", "*.json"))
	f.Fuzz(func(t *testing.T, body []byte) {
		out, _, _, err := RequestToOpenAI(nil, body)
		if err == nil && !json.Valid(out) {
			t.Fatalf("invalid JSON %s for %s", out, body)
		}
		if plain, ok := DropReasoningEffort(nil, out); err == nil && ok && !json.Valid(plain) {
			t.Fatalf("invalid JSON without the effort %s for %s", plain, body)
		}
	})
}

// FuzzResponseFromOpenAI translates arbitrary OpenAI completions.
func FuzzResponseFromOpenAI(f *testing.F) {
	addFiles(f, filepath.Join("testdata", "inbound_response", "*.json"))
	f.Fuzz(func(t *testing.T, body []byte) {
		out, err := ResponseFromOpenAI(nil, body, "m")
		if err == nil && !json.Valid(out) {
			t.Fatalf("invalid JSON %s for %s", out, body)
		}
	})
}

// FuzzNativeStream passes arbitrary events: never a panic, and what it
// passes on is the event unchanged.
func FuzzNativeStream(f *testing.F) {
	addFiles(f, filepath.Join("testdata", "stream", "*.sse"))
	p, err := New(Options{Name: "fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ev []byte) {
		s := p.NativeStream()
		defer s.Close()
		out, st, err := s.Event(nil, ev)
		if st != providers.Failed && string(out) != string(ev) || st == providers.Failed && (err == nil || len(out) != 0) {
			t.Fatalf("state %v err %v out %q for %q", st, err, out, ev)
		}
	})
}
