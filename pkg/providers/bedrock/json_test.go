package bedrock

import (
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
)

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
