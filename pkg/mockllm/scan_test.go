package mockllm

import (
	"slices"
	"testing"

	"github.com/tidwall/gjson"
)

func TestMember(t *testing.T) {
	tests := []struct {
		name, obj, key, want string
	}{
		{"string", `{"role":"user","content":"hi\n\"there\""}`, "content", `"hi\n\"there\""`},
		{"array", `{"content":[{"type":"text","text":"a]"}],"x":1}`, "content", `[{"type":"text","text":"a]"}]`},
		{"number with spaces", `{ "a" : 12 , "b":true}`, "a", `12`},
		{"last member", `{"a":{"b":{}},"b":null}`, "b", `null`},
		{"nested key is not a member", `{"a":{"content":"x"}}`, "content", ``},
		{"absent", `{"a":1}`, "content", ``},
		{"not an object", `["content"]`, "content", ``},
		{"empty object", `{}`, "a", ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := member(tt.obj, tt.key); got != tt.want {
				t.Errorf("member(%s, %q) = %q, want %q", tt.obj, tt.key, got, tt.want)
			}
		})
	}
}

// FuzzScan checks member and forEachRaw against gjson on valid JSON.
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":"x\"}","c":[1,{"d":"]"}]}`, `[1, "a", [2,3], {"x":null}, true]`,
		`{ "content" : [ {"type":"text","text":"hi"} ] }`, `[]`, `{}`, `"s"`, ` [ 1 ] `,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !gjson.Valid(s) {
			return
		}
		v := gjson.Parse(s)
		var want []string
		v.ForEach(func(k, e gjson.Result) bool {
			if v.IsObject() {
				if k.Raw != `"`+k.Str+`"` || slices.Contains(want, k.Str) {
					return true // escaped or repeated key
				}
				want = append(want, k.Str)
				if got := member(s, k.Str); got != e.Raw {
					t.Errorf("member(%s, %q) = %q, want %q", s, k.Str, got, e.Raw)
				}
			}
			return true
		})
		if !v.IsArray() {
			forEachRaw(s, func(raw string) { t.Errorf("forEachRaw(%s) called with %q", s, raw) })
			return
		}
		var elems, got []string
		v.ForEach(func(_, e gjson.Result) bool { elems = append(elems, e.Raw); return true })
		forEachRaw(s, func(raw string) { got = append(got, raw) })
		if !slices.Equal(got, elems) {
			t.Errorf("forEachRaw(%s) = %q, want %q", s, got, elems)
		}
	})
}
