package rawjson

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSkipValue(t *testing.T) {
	tests := []struct {
		name, in string
		at, want int
	}{
		{"string with escaped quote", `"a\"b",1`, 0, 6},
		{"object with nested string brackets", `{"a":"}]","b":[1,{}]} x`, 0, 21},
		{"number", `123,`, 0, 3},
		{"literal", `true}`, 0, 4},
		{"unterminated", `{"a":[1`, 0, 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := SkipValue(tc.in, tc.at); got != tc.want {
				t.Errorf("SkipValue(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzAppendString checks the escaper against encoding/json: the output is
// a valid JSON string that decodes to the input (invalid UTF-8 as U+FFFD).
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "quote \" and \\", "ctl \x00\x1f\n\t", "é\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%q -> %s: %v", s, out, err)
		}
		if want := strings.ToValidUTF8(s, "\uFFFD"); back != want && utf8.ValidString(s) {
			t.Fatalf("%q round-tripped to %q", s, back)
		}
		if end := SkipString(string(out), 0); end != len(out) {
			t.Fatalf("SkipString(%s) = %d, want %d", out, end, len(out))
		}
	})
}
