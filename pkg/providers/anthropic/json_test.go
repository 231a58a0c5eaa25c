package anthropic

import (
	"encoding/json"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
)

func TestAppendJSONString(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "hello", `"hello"`},
		{"quotes and backslash", `a"b\c`, `"a\"b\\c"`},
		{"control", "a\nb\tc\r\x01\x1f", `"a\nb\tc\r\u0001\u001f"`},
		{"utf8", "héllo 世界 🎉", `"héllo 世界 🎉"`},
		{"invalid utf8", "a\xffb\xc3", `"a\ufffdb\ufffd"`},
		{"html passes", "<a>&", `"<a>&"`},
		{"empty", "", `""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(rawjson.AppendString(nil, tt.in))
			if got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestAppendEscaped(t *testing.T) {
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
			if got := string(appendEscaped(nil, tt.raw)); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestMember(t *testing.T) {
	obj := `{ "a" : 1, "b":{"c":[1,{"d":"}"}]}, "e":"x\"y", "g":"back\\", "h":"\\\"q", "i":3, "a":2 }`
	tests := []struct {
		key, want string
	}{
		{"a", "1"},
		{"b", `{"c":[1,{"d":"}"}]}`},
		{"e", `"x\"y"`},
		{"g", `"back\\"`},
		{"h", `"\\\"q"`},
		{"i", "3"},
		{"z", ""},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got := member(obj, tt.key); got != tt.want {
				t.Errorf("member %q = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
	var got []string
	forEachRaw(`[ 1, "a,b" ,{"x":[2]} ]`, func(_ int, raw string) bool {
		got = append(got, raw)
		return true
	})
	if strings.Join(got, "|") != `1|"a,b"|{"x":[2]}` {
		t.Errorf("forEachRaw = %q", got)
	}
}

// FuzzAppendJSONString checks the escaper against encoding/json: the
// output is valid JSON decoding to the input, invalid UTF-8 replaced.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a\"b", "\x00\x1f\n", "\xff\xfe", "é🎉", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := rawjson.AppendString(nil, s)
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%q -> %s: %v", s, out, err)
		}
		// Each invalid byte becomes U+FFFD, as converting to runes does.
		if want := string([]rune(s)); back != want {
			t.Fatalf("%q decoded to %q, want %q", s, back, want)
		}
	})
}

// FuzzAppendEscaped checks that copying an encoded string token keeps it
// valid and equal.
func FuzzAppendEscaped(f *testing.F) {
	for _, s := range []string{"", "a\"b\\", "\x00\n", "é🎉", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, _ := json.Marshal(s)
		out := append(appendEscaped([]byte{'"'}, string(tok[1:len(tok)-1])), '"')
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

// FuzzEachMember checks the raw member scanner against gjson on valid
// objects: the same members, each value valid JSON, and member finding
// the first of each key.
func FuzzEachMember(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"b":"x\\\"","c":[{"d":"]}"}]}`, `{ "k" : { "n" : null } , "k":2}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, obj string) {
		if !providers.ValidJSON([]byte(obj)) || !gjson.Parse(obj).IsObject() {
			return
		}
		var want []string
		gjson.Parse(obj).ForEach(func(k, v gjson.Result) bool {
			want = append(want, v.Raw)
			return true
		})
		var got []string
		seen := map[string]bool{}
		eachMember(obj, func(k, v string) bool {
			got = append(got, v)
			if !json.Valid([]byte(v)) {
				t.Fatalf("value %q of %q is not JSON", v, k)
			}
			if !seen[k] && member(obj, k) != v {
				t.Fatalf("member(%q) = %q, want %q", k, member(obj, k), v)
			}
			seen[k] = true
			return true
		})
		if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
			t.Fatalf("members %q, gjson %q", got, want)
		}
	})
}
