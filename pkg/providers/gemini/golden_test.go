package gemini

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/sse"
	"github.com/valyala/fasthttp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// fixedNow is the test clock: goldens carry its unix seconds as created.
func fixedNow() time.Time { return time.Unix(1700000000, 0) }

func newTestProvider(t testing.TB, baseURL string) *Provider {
	t.Helper()
	p, err := New(Options{Name: "gem", BaseURL: baseURL, APIKey: "test-key", Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// callFor reads the fields the gateway would from an OpenAI body.
func callFor(body []byte, ep providers.Endpoint) *providers.Call {
	s := string(body)
	c := &providers.Call{Endpoint: ep, Body: body, Model: gjson.Get(s, "model").String()}
	c.Stream = gjson.Get(s, "stream").Type == gjson.True
	c.IncludeUsage = gjson.Get(s, "stream_options.include_usage").Type == gjson.True
	return c
}

// golden compares got with the golden file, or rewrites it with -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// indent pretty-prints JSON, failing the test when it is not valid.
func indent(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		t.Fatalf("invalid JSON: %v\n%s", err, b)
	}
	out.WriteByte('\n')
	return out.Bytes()
}

func inputs(t *testing.T, dir, ext string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", dir, "*"+ext))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s inputs in testdata/%s: %v", ext, dir, err)
	}
	var out []string
	for _, f := range files {
		if !strings.Contains(f, ".golden") {
			out = append(out, f)
		}
	}
	return out
}

func goldenPath(in, ext string) string {
	return strings.TrimSuffix(in, filepath.Ext(in)) + ".golden" + ext
}

func TestGoldenRequests(t *testing.T) {
	p := newTestProvider(t, "")
	for _, in := range inputs(t, "request", ".json") {
		name := strings.TrimSuffix(filepath.Base(in), ".json")
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			ep := providers.Chat
			if strings.HasPrefix(name, "embeddings") {
				ep = providers.Embeddings
			}
			var req fasthttp.Request
			if err := p.Build(&req, callFor(body, ep)); err != nil {
				t.Fatalf("build: %v", err)
			}
			var out bytes.Buffer
			out.WriteString("POST " + req.URI().String() + "\n")
			out.Write(indent(t, req.Body()))
			golden(t, goldenPath(in, ".json"), out.Bytes())
		})
	}
}

func TestGoldenResponses(t *testing.T) {
	p := newTestProvider(t, "")
	for _, in := range inputs(t, "response", ".json") {
		name := strings.TrimSuffix(filepath.Base(in), ".json")
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			c := &providers.Call{Endpoint: providers.Chat, Model: "requested-model", Body: []byte(`{}`)}
			if strings.HasPrefix(name, "embeddings") {
				c.Endpoint = providers.Embeddings
				if strings.Contains(name, "base64") {
					c.Body = []byte(`{"encoding_format":"base64"}`)
				}
			}
			out, u, err := p.Response(nil, body, c)
			if err != nil {
				t.Fatalf("response: %v", err)
			}
			got := indent(t, out)
			got = append(got, []byte(usageLine(u))...)
			golden(t, goldenPath(in, ".json"), got)
		})
	}
}

func usageLine(u providers.Usage) string {
	b, _ := json.Marshal(u)
	return "// usage " + string(b) + "\n"
}

// streamCases say which transcripts ask for the usage chunk.
var streamCases = map[string]bool{
	"text_usage":  true,
	"tool_calls":  true,
	"error_event": false,
	"safety":      false,
	"blocked":     true,
}

func TestGoldenStreams(t *testing.T) {
	p := newTestProvider(t, "")
	for _, in := range inputs(t, "stream", ".sse") {
		name := strings.TrimSuffix(filepath.Base(in), ".sse")
		includeUsage, ok := streamCases[name]
		if !ok {
			t.Fatalf("stream transcript %s has no case", name)
		}
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			s := p.Stream(&providers.Call{Endpoint: providers.Chat, Model: "requested-model", Stream: true, IncludeUsage: includeUsage})
			defer s.Close()
			out, end := translate(t, s, raw)
			checkChunks(t, out)
			got := append(out, []byte("// end "+end+"\n"+usageLine(s.Usage()))...)
			golden(t, goldenPath(in, ".sse"), got)
		})
	}
}

// translate feeds every SSE event of raw to s the way the gateway's relay
// does, and describes how the stream ended.
func translate(t testing.TB, s providers.Stream, raw []byte) ([]byte, string) {
	t.Helper()
	r := sse.NewReader(bytes.NewReader(raw), 512, 1<<20)
	var out []byte
	for {
		ev, ok := r.Next()
		if !ok {
			if err := r.Fill(); err != nil {
				return out, "eof complete=" + boolString(s.Complete())
			}
			continue
		}
		var st providers.State
		var err error
		out, st, err = s.Event(out, ev)
		switch st {
		case providers.Done:
			return out, "done"
		case providers.Failed:
			var ue *providers.UpstreamError
			if errors.As(err, &ue) {
				return out, "failed upstream: " + ue.Message
			}
			return out, "failed: " + err.Error()
		}
	}
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// checkChunks checks the OpenAI wire rules on translated output: every
// event is valid JSON or [DONE], one id throughout, at most one finish
// reason, the role chunk first.
func checkChunks(t testing.TB, out []byte) {
	t.Helper()
	var id string
	finishes := 0
	for i, ev := range bytes.Split(bytes.TrimSuffix(out, []byte("\n\n")), []byte("\n\n")) {
		if len(ev) == 0 {
			continue
		}
		data, ok := bytes.CutPrefix(ev, []byte("data: "))
		if !ok {
			t.Fatalf("event %d is not a data event: %q", i, ev)
		}
		if string(data) == "[DONE]" {
			continue
		}
		var c struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			Choices []struct {
				Delta struct {
					Role *string `json:"role"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(data, &c); err != nil {
			t.Fatalf("event %d is not JSON: %v: %s", i, err, data)
		}
		if id == "" {
			id = c.ID
			if len(c.Choices) != 1 || c.Choices[0].Delta.Role == nil {
				t.Errorf("first chunk is not the role chunk: %s", data)
			}
		}
		if c.ID != id || c.Object != "chat.completion.chunk" || c.Created == 0 {
			t.Errorf("event %d: id %q object %q created %d", i, c.ID, c.Object, c.Created)
		}
		for _, ch := range c.Choices {
			if ch.FinishReason != nil {
				finishes++
			}
		}
	}
	if finishes > 1 {
		t.Errorf("%d chunks carry a finish_reason", finishes)
	}
}
