package rawjson

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
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

func TestAppendString(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "hello", `"hello"`},
		{"quotes and backslash", `a"b\c`, `"a\"b\\c"`},
		{"control", "a\nb\tc\r\x00\x01\x1f", `"a\nb\tc\r\u0000\u0001\u001f"`},
		{"utf8", "héllo 世界 🎉 \u2028", "\"héllo 世界 🎉 \u2028\""},
		{"invalid utf8", "a\xffb\xc3", `"a\ufffdb\ufffd"`},
		{"html passes", "<a href='x'>&</a>", `"<a href='x'>&</a>"`},
		{"empty", "", `""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(AppendString(nil, tt.in))
			if got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
			var back string
			if err := json.Unmarshal([]byte(got), &back); err != nil {
				t.Fatalf("not JSON: %v", err)
			}
			if body := string(AppendStringBody(nil, tt.in)); `"`+body+`"` != got {
				t.Errorf("AppendStringBody %s, want %s without its quotes", body, got)
			}
		})
	}
}

// FuzzAppendString checks the escaper against encoding/json: the output is
// a valid JSON string that decodes to the input, each invalid byte as
// U+FFFD (as converting to runes does).
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "quote \" and \\", "ctl \x00\x1f\n\t\x7f", "é\xff", "\xff\xfe", "é🎉", "☺\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%q -> %s: %v", s, out, err)
		}
		if want := string([]rune(s)); back != want {
			t.Fatalf("%q decoded to %q, want %q", s, back, want)
		}
		if end := SkipString(string(out), 0); end != len(out) {
			t.Fatalf("SkipString(%s) = %d, want %d", out, end, len(out))
		}
	})
}

func TestAppendRaw(t *testing.T) {
	tests := []struct {
		name, raw, want string
	}{
		{"value kept", "{\"a\":\"x\\n\", \"b\":[1,\n2]}", "{\"a\":\"x\\n\", \"b\":[1,\n2]}"},
		{"invalid utf8", "{\"a\":\"x\xffy\\n\"}", `{"a":"x\ufffdy\n"}`},
		{"multibyte", `"日本"`, `"日本"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(AppendRaw(nil, tt.raw)); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestAppendRawBody(t *testing.T) {
	tests := []struct {
		name, raw, want string
	}{
		{"escapes kept", `a\n\"b\u00e9`, `a\n\"b\u00e9`},
		{"invalid utf8", "a\xffb", `a\ufffdb`},
		{"stray control", "a\x01b", `a\u0001b`},
		{"multibyte", "日本", "日本"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(AppendRawBody(nil, tt.raw)); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
			if got := string(AppendRawString(nil, `"`+tt.raw+`"`)); got != `"`+tt.want+`"` {
				t.Errorf("AppendRawString %s, want %q", got, `"`+tt.want+`"`)
			}
		})
	}
	for _, tok := range []string{`12`, `null`, `{"a":"b"}`, `"`, ``} {
		if got := string(AppendRawString(nil, tok)); got != `""` {
			t.Errorf("AppendRawString(%s) = %s, want \"\"", tok, got)
		}
	}
}

// FuzzAppendRawBody checks that copying an encoded string token keeps it
// valid and equal.
func FuzzAppendRawBody(f *testing.F) {
	for _, s := range []string{"", "a\"b\\", "\x00\n", "é🎉", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, _ := json.Marshal(s)
		out := AppendRawString(nil, string(tok))
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%s -> %s: %v", tok, out, err)
		}
		var want string
		_ = json.Unmarshal(tok, &want)
		if back != want {
			t.Fatalf("%s decoded to %q, want %q", tok, back, want)
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
