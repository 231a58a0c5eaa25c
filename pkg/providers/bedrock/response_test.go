package bedrock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
)

// TestResponseGolden translates each Converse answer in
// testdata/response/*.json and compares the chat.completion with its
// .openai.json golden.
func TestResponseGolden(t *testing.T) {
	p := testProvider(t, "")
	files, err := filepath.Glob("testdata/response/*.json")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]providers.Usage{
		"text":              {Prompt: 31, Completion: 14, Reported: true},
		"tool_use":          {Prompt: 120, Completion: 60, Reported: true},
		"cached_max_tokens": {Prompt: 1210, Completion: 5, Cached: 1000, CacheWrite: 200, Reported: true},
		"guardrail":         {Prompt: 8, Completion: 7, Reported: true},
		"no_usage_empty":    {},
	}
	n := 0
	for _, in := range files {
		if strings.HasSuffix(in, ".openai.json") {
			continue
		}
		n++
		name := strings.TrimSuffix(filepath.Base(in), ".json")
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			out, u, err := p.Response(nil, body, chatCall(`{}`))
			if err != nil {
				t.Fatalf("response: %v", err)
			}
			if w, ok := want[name]; !ok || u != w {
				t.Errorf("usage = %+v, want %+v", u, w)
			}
			golden(t, strings.TrimSuffix(in, ".json")+".openai.json", indent(t, out))
		})
	}
	if n != len(want) {
		t.Fatalf("%d fixtures, %d expected", n, len(want))
	}
}

func TestResponseMalformed(t *testing.T) {
	p := testProvider(t, "")
	tests := []struct{ name, body string }{
		{"not json", `{"output":`},
		{"no output", `{"stopReason":"end_turn"}`},
		{"content not an array", `{"output":{"message":{"content":"hi"}}}`},
		{"hostile nesting", strings.Repeat("[", 1000) + strings.Repeat("]", 1000)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := p.Response(nil, []byte(tc.body), chatCall(`{}`))
			if !errors.Is(err, providers.ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	p := testProvider(t, "")
	tests := []struct{ name, body, want string }{
		{"bedrock", `{"message":"Too many requests, please wait before trying again."}`, "Too many requests, please wait before trying again."},
		{"capitalized", `{"Message":"User is not authorized"}`, "User is not authorized"},
		{"openai shaped", `{"error":{"message":"bad"}}`, "bad"},
		{"none", `{}`, ""},
		{"not json", `<html>503</html>`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.ErrorMessage([]byte(tc.body)); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFinishReason(t *testing.T) {
	tests := []struct {
		stop  string
		tools bool
		want  string
	}{
		{"end_turn", false, "stop"},
		{"stop_sequence", false, "stop"},
		{"max_tokens", false, "length"},
		{"model_context_window_exceeded", false, "length"},
		{"tool_use", true, "tool_calls"},
		{"tool_use", false, "stop"},
		{"content_filtered", false, "content_filter"},
		{"guardrail_intervened", false, "content_filter"},
		{"malformed_model_output", false, "stop"},
		{"", false, "stop"},
	}
	for _, tc := range tests {
		t.Run(tc.stop, func(t *testing.T) {
			if got := finishReason(tc.stop, tc.tools); got != tc.want {
				t.Errorf("finishReason(%q, %v) = %q, want %q", tc.stop, tc.tools, got, tc.want)
			}
		})
	}
}

// TestUsageGarbage: a Converse usage object with a count that is not one
// (negative, fractional, quoted, in exponent form, past 2^64-1) or a
// prompt summing past 2^64-1 reports no usage, not gjson's rounding or
// saturation of it.
func TestUsageGarbage(t *testing.T) {
	good := parseUsage(gjson.Parse(`{"inputTokens":10,"outputTokens":5,"cacheReadInputTokens":3,"cacheWriteInputTokens":2}`))
	if want := (providers.Usage{Prompt: 15, Completion: 5, Cached: 3, CacheWrite: 2, Reported: true}); good != want {
		t.Fatalf("good usage = %+v, want %+v", good, want)
	}
	for _, u := range []string{
		`{"inputTokens":-10,"outputTokens":5}`,
		`{"inputTokens":10,"outputTokens":2.7}`,
		`{"inputTokens":10,"outputTokens":"5"}`,
		`{"inputTokens":10,"outputTokens":1e30}`,
		`{"inputTokens":20000000000000000000,"outputTokens":5}`,
		`{"inputTokens":18446744073709551615,"outputTokens":5,"cacheReadInputTokens":1}`,
	} {
		if got := parseUsage(gjson.Parse(u)); got != (providers.Usage{}) {
			t.Errorf("parseUsage(%s) = %+v, want no usage", u, got)
		}
	}
}
