package rawjson

import (
	"encoding/json"
	"fmt"
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

func TestEachMemberAndElem(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"object", ` { "a" : 1 , "b\"c":{"x":[1]} }`, `a=1@9;b\"c={"x":[1]}@20;`},
		{"empty object", `{ }`, ``},
		{"not an object", `[1]`, `0=1;`},
		{"truncated", `{"a":1,"b"`, `a=1@5;`},
		{"array", ` [ 1 , "x" ,{"a":[]} ]`, `0=1;1="x";2={"a":[]};`},
		{"empty array", `[ ]`, ``},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sb strings.Builder
			EachMember(tc.in, func(k, v string, at int) bool {
				if tc.in[at:at+len(v)] != v {
					t.Errorf("%q is not at %d", v, at)
				}
				fmt.Fprintf(&sb, "%s=%s@%d;", k, v, at)
				return true
			})
			EachElem(tc.in, func(n int, v string) bool {
				fmt.Fprintf(&sb, "%d=%s;", n, v)
				return true
			})
			if got := sb.String(); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestMember(t *testing.T) {
	tests := []struct {
		name, obj, key, want string
	}{
		{"string", `{"a":"x\"y","b":1}`, "a", `"x\"y"`},
		{"later member", ` { "a" : 1 , "b" : [1, {"c":2}] }`, "b", `[1, {"c":2}]`},
		{"first of repeated keys", `{"a":1,"a":2}`, "a", "1"},
		{"escaped key does not match", `{"\u0061":1}`, "a", ""},
		{"missing", `{"a":1}`, "b", ""},
		{"not an object", `[1]`, "a", ""},
		{"invalid before the key", `{"a":1 "b":2}`, "b", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Member(tt.obj, tt.key); got != tt.want {
				t.Errorf("Member(%s, %q) = %q, want %q", tt.obj, tt.key, got, tt.want)
			}
		})
	}
	if Inner(`"a\nb"`) != `a\nb` || Inner(`1`) != "" || !IsString(`""`) || IsString(`"`) {
		t.Error("Inner/IsString")
	}
}

// TestKeyName: a key is read decoded whether or not it was written with
// escapes, and KeyIs agrees with it.
func TestKeyName(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"model", "model"},
		{`mod\u0065l`, "model"},
		{`a\"b`, `a"b`},
		{`tab\tand\\`, "tab\tand\\"},
		{"", ""},
	} {
		if got := KeyName(tc.raw); got != tc.want {
			t.Errorf("KeyName(%q) = %q, want %q", tc.raw, got, tc.want)
		}
		if !KeyIs(tc.raw, tc.want) {
			t.Errorf("KeyIs(%q, %q) = false", tc.raw, tc.want)
		}
	}
}
