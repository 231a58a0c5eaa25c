package anthropic

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
)

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
