package anthropic

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/tollgate/tollgate/pkg/providers"
)

func TestResponseGolden(t *testing.T) {
	p := testProvider(t, "")
	tests := []struct {
		name  string
		usage providers.Usage
	}{
		{"text", providers.Usage{Prompt: 2112, Completion: 9, Cached: 2000, CacheWrite: 100, Reported: true}},
		{"tool_use", providers.Usage{Prompt: 300, Completion: 80, Reported: true}},
		{"thinking", providers.Usage{Prompt: 5, Completion: 1024, Reported: true}},
		{"refusal_no_usage", providers.Usage{}},
		{"stop_sequence", providers.Usage{Prompt: 3, Completion: 2, Reported: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := readFile(t, filepath.Join("testdata", "response", tt.name+".json"))
			out, u, err := p.Response(nil, body, &providers.Call{Model: "fallback"})
			if err != nil {
				t.Fatal(err)
			}
			if u != tt.usage {
				t.Errorf("usage %+v, want %+v", u, tt.usage)
			}
			goldenJSON(t, filepath.Join("testdata", "response", tt.name+".golden.json"), out)
		})
	}
}

func TestResponseMalformed(t *testing.T) {
	p := testProvider(t, "")
	for _, body := range []string{``, `{"content":`, `{"type":"message"}`, `{"content":"x"}`, `[` + string(make([]byte, 0)) + `]`} {
		_, _, err := p.Response(nil, []byte(body), &providers.Call{})
		if !errors.Is(err, providers.ErrMalformed) {
			t.Errorf("%q: err %v, want ErrMalformed", body, err)
		}
	}
}

func TestErrorMessage(t *testing.T) {
	p := testProvider(t, "")
	tests := []struct {
		name, body, want string
	}{
		{"anthropic", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, "Overloaded"},
		{"top level", `{"message":"bad gateway"}`, "bad gateway"},
		{"none", `<html>`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.ErrorMessage([]byte(tt.body)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestUsageGarbage: an Anthropic usage object with a count that is not one
// (negative, fractional, past 2^64-1), in the answer or a later stream
// event, or a prompt whose parts sum past 2^64-1, reports no usage, not
// the wrapped or truncated number.
func TestUsageGarbage(t *testing.T) {
	var u usage
	u.update(`{"input_tokens":10,"cache_creation_input_tokens":2,"cache_read_input_tokens":3,"output_tokens":1}`)
	u.update(`{"output_tokens":7}`) // message_delta: the other members keep their value
	if got, want := u.providers(), (providers.Usage{Prompt: 15, Completion: 7, Cached: 3, CacheWrite: 2, Reported: true}); got != want {
		t.Fatalf("good usage = %+v, want %+v", got, want)
	}
	for _, events := range [][]string{
		{`{"input_tokens":-10,"output_tokens":1}`},
		{`{"input_tokens":10,"output_tokens":2.5}`},
		{`{"input_tokens":10,"output_tokens":18446744073709551617}`}, // would wrap to 1
		{`{"input_tokens":10,"output_tokens":1}`, `{"output_tokens":"7"}`},
		{`{"input_tokens":18446744073709551615,"cache_read_input_tokens":1,"output_tokens":1}`},
	} {
		var u usage
		for _, ev := range events {
			u.update(ev)
		}
		if got := u.providers(); got != (providers.Usage{}) {
			t.Errorf("usage of %v = %+v, want none", events, got)
		}
	}
}
