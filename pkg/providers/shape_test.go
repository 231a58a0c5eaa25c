package providers

import (
	"errors"
	"strings"
	"testing"
)

// ScanAnswer is the one pass over a relayed 200 answer: validity, shape and
// the usage member.
func TestScanAnswer(t *testing.T) {
	deep := strings.Repeat("[", MaxJSONDepth+1) + strings.Repeat("]", MaxJSONDepth+1)
	tests := []struct {
		name, body, member string
		usage              string
		err                string // "" when accepted
	}{
		{"chat", `{"choices":[{"index":0}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`, "choices", `{"prompt_tokens":3,"completion_tokens":1}`, ""},
		{"no usage", `{"choices":[]}`, "choices", "", ""},
		{"usage first", ` {"usage":{"a":1} ,"data":[1]} `, "data", `{"a":1}`, ""},
		{"repeated usage: the first, as parsers read it", `{"output":[],"usage":{"a":1},"usage":{"a":2}}`, "output", `{"a":1}`, ""},
		{"service tier", `{"service_tier":"flex","choices":[]}`, "choices", "", ""},
		{"escaped key", `{"ch\u006fices":[],"usage":null}`, "choices", "null", ""},
		{"not UTF-8 inside a string, relayed as sent", "{\"choices\":[\"\xff\"]}", "choices", "", ""},
		{"member is an object", `{"choices":{}}`, "choices", "", `has no "choices" array`},
		{"member missing", `{"content":[]}`, "choices", "", `has no "choices" array`},
		{"member nested only", `{"x":{"choices":[]}}`, "choices", "", `has no "choices" array`},
		{"array", `[{"choices":[]}]`, "choices", "", "not a JSON object"},
		{"string", `"choices"`, "choices", "", "not a JSON object"},
		{"truncated", `{"choices":[{"index":0}`, "choices", "", "body is not JSON"},
		{"trailing garbage", `{"choices":[]} x`, "choices", "", "body is not JSON"},
		{"empty", ``, "choices", "", "body is not JSON"},
		{"too deep", `{"choices":[` + deep + `]}`, "choices", "", "body is not JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ScanAnswer([]byte(tt.body), tt.member)
			usage := a.Usage
			if tt.err == "" {
				if err != nil || usage != tt.usage {
					t.Fatalf("ScanAnswer = %q, %v; want %q, nil", usage, err, tt.usage)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("ScanAnswer error %v; want ErrMalformed with %q", err, tt.err)
			}
		})
	}
}
