package mockllm

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCountWordsJSON(t *testing.T) {
	tests := []struct {
		name, raw string
		want      int
	}{
		{"empty", `""`, 0},
		{"spaces only", `"  \t "`, 0},
		{"plain", `"hello there world"`, 3},
		{"escaped newline", `"hello\nworld"`, 2},
		{"escaped tab and return", `"a\tb\r\nc"`, 3},
		{"unicode escaped space", `"a\u0020b\u2003c"`, 3},
		{"escaped quote inside a word", `"say \"hi\" now"`, 3},
		{"escaped slash", `"a\/b c"`, 2},
		{"surrogate pair", `"smile \ud83d\ude00 ok"`, 3},
		{"utf-8 space", "\"a\u00a0b\u3000c\"", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := countWordsJSON(tt.raw); got != tt.want {
				t.Errorf("countWordsJSON(%s) = %d, want %d", tt.raw, got, tt.want)
			}
		})
	}
}

// FuzzCountWordsJSON checks countWordsJSON against strings.Fields of the
// text encoding/json decodes, for the fuzzer's input both as text (encoded
// by encoding/json) and as the inside of a raw JSON string token.
func FuzzCountWordsJSON(f *testing.F) {
	for _, s := range []string{"", "a b", "a\nb", `a\nb`, `\u2003x`, "x\u2028y", `\"q\"`, "\xff \xfe", `\ud83d\ude00 a`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var decoded string
		if err := json.Unmarshal(raw, &decoded); err != nil {
			t.Fatal(err)
		}
		if got, want := countWordsJSON(string(raw)), len(strings.Fields(decoded)); got != want {
			t.Errorf("encoded %s: %d words, want %d", raw, got, want)
		}
		token := `"` + s + `"`
		if json.Unmarshal([]byte(token), &decoded) != nil {
			return
		}
		if got, want := countWordsJSON(token), len(strings.Fields(decoded)); got != want {
			t.Errorf("token %s: %d words, want %d", token, got, want)
		}
	})
}
