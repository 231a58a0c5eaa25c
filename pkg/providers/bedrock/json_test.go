package bedrock

import (
	"encoding/json"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
)

func TestAppendJSONString(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain", "hello", `"hello"`},
		{"quotes and backslash", `a"b\c`, `"a\"b\\c"`},
		{"controls", "a\nb\r\t\x00\x1f", `"a\nb\r\t\u0000\u001f"`},
		{"utf8", "é😀", `"é😀"`},
		{"invalid utf8", "a\xffb\xc3", `"a\ufffdb\ufffd"`},
		{"html stays", "<b>&</b>", `"<b>&</b>"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := string(rawjson.AppendString(nil, tc.in))
			if got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
			var back string
			if err := json.Unmarshal([]byte(got), &back); err != nil {
				t.Fatalf("not JSON: %v", err)
			}
		})
	}
}

func TestAppendRawJSON(t *testing.T) {
	if got := string(appendRawJSON(nil, "{\"a\":\"x\xffy\\n\"}")); got != `{"a":"x\ufffdy\n"}` {
		t.Errorf("got %s", got)
	}
}

func TestRawMember(t *testing.T) {
	obj := ` { "p" : "a\"}b", "delta" : {"text":"hi \"there\"\n","n":[1,{"x":"]"}]} , "k":-1.5e3,"t":true}`
	tests := []struct{ obj, key, want string }{
		{obj, "delta", `{"text":"hi \"there\"\n","n":[1,{"x":"]"}]}`},
		{obj, "p", `"a\"}b"`},
		{obj, "k", `-1.5e3`},
		{obj, "t", `true`},
		{obj, "missing", ``},
		{`[1,2]`, "a", ``},
		{`"str"`, "a", ``},
		{``, "a", ``},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			if got := rawMember(tc.obj, tc.key); got != tc.want {
				t.Errorf("rawMember(%q) = %q, want %q", tc.key, got, tc.want)
			}
		})
	}
}

// FuzzRawMember checks rawMember against gjson on valid JSON.
func FuzzRawMember(f *testing.F) {
	f.Add(`{"delta":{"text":"a\"b"},"text":1}`)
	f.Add(`{"a":[{"b":"}"}],"text":"x"}`)
	f.Fuzz(func(t *testing.T, obj string) {
		if !providers.ValidJSON([]byte(obj)) {
			_ = rawMember(obj, "text") // must not panic on anything
			return
		}
		for _, key := range []string{"text", "delta", "input"} {
			want := ""
			if r := gjson.Parse(obj); r.IsObject() {
				want = r.Get(key).Raw
			}
			if got := rawMember(obj, key); got != want {
				t.Fatalf("rawMember(%q, %q) = %q, gjson %q", obj, key, got, want)
			}
		}
	})
}
