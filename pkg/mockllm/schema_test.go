package mockllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

func TestToolArgs(t *testing.T) {
	tests := []struct {
		name, schema string
		words, call  int
		want         string
	}{
		{"no schema", ``, 2, 0, `{"input":"Tollgate mock"}`},
		{"bare object", `{"type":"object"}`, 3, 0, `{"input":"Tollgate mock answer"}`},
		{"empty schema", `{}`, 1, 0, `{"input":"Tollgate"}`},
		{"closed empty object", `{"type":"object","properties":{},"additionalProperties":false}`, 2, 0, `{}`},
		{"weather", `{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city"]}`,
			2, 0, `{"city":"Tollgate mock","unit":"celsius"}`},
		{"second call starts a word later", `{"type":"object","properties":{"city":{"type":"string"}}}`, 2, 1, `{"city":"mock answer"}`},
		{"numbers in bounds", `{"type":"object","properties":{"n":{"type":"integer","minimum":10,"maximum":20},"x":{"type":"number","exclusiveMaximum":0},"k":{"type":"integer","exclusiveMinimum":5}}}`,
			1, 0, `{"n":10,"x":-1,"k":6}`},
		{"draft-4 exclusive", `{"properties":{"n":{"type":"integer","minimum":3,"exclusiveMinimum":true,"maximum":4}}}`, 1, 0, `{"n":4}`},
		{"arrays", `{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"},"minItems":2,"maxItems":3},"none":{"type":"array","maxItems":0}},"required":["tags"]}`,
			1, 0, `{"tags":["Tollgate","mock"],"none":[]}`},
		{"nested, const, boolean, null", `{"type":"object","properties":{"loc":{"type":"object","properties":{"lat":{"type":"number"},"ok":{"type":"boolean"}},"required":["lat"]},"v":{"const":{"a":[1]}},"z":{"type":["null"]}}}`,
			1, 0, `{"loc":{"lat":1.5,"ok":true},"v":{"a":[1]},"z":null}`},
		{"gemini upper-case types", `{"type":"OBJECT","properties":{"q":{"type":"STRING"},"n":{"type":"INTEGER"}},"required":["q"]}`, 1, 0, `{"q":"Tollgate","n":1}`},
		{"nullable union", `{"type":"object","properties":{"s":{"type":["null","string"]},"a":{"anyOf":[{"type":"integer"},{"type":"null"}]}}}`, 1, 0, `{"s":"Tollgate","a":1}`},
		{"ref", `{"type":"object","properties":{"p":{"$ref":"#/$defs/point"}},"required":["p"],"$defs":{"point":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}}}`,
			1, 0, `{"p":{"x":1}}`},
		{"required without a property", `{"type":"object","properties":{"a":{"type":"boolean"}},"required":["b"]}`, 1, 0, `{"a":true,"b":"Tollgate"}`},
		{"string lengths and formats", `{"type":"object","properties":{"short":{"type":"string","maxLength":3},"long":{"type":"string","minLength":12},"when":{"type":"string","format":"date-time"}}}`,
			1, 0, `{"short":"Tol","long":"mock Tollgate","when":"2026-01-02T03:04:05Z"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s gjson.Result
			if tt.schema != "" {
				s = gjson.Parse(tt.schema)
			}
			got, ok := appendToolArgs(nil, s, tt.words, tt.call)
			if string(got) != tt.want || !ok {
				t.Errorf("got %s (ok %v), want %s", got, ok, tt.want)
			}
			if tt.schema != "" {
				if err := validateSchema(t, []byte(tt.schema), got); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// FuzzToolArgs checks that arguments generated for any schema are valid
// JSON and, when the generator reports it could satisfy the schema, valid
// against it for the supported keywords (checked with encoding/json and
// the independent validator below).
func FuzzToolArgs(f *testing.F) {
	for _, s := range []string{
		`{}`, `true`, `false`, `[]`, `"x"`,
		`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`,
		`{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer","minimum":-3,"maximum":-2},"minItems":3}}}`,
		`{"type":"object","properties":{"r":{"$ref":"#"}},"required":["r"]}`,
		`{"anyOf":[{"type":"string","maxLength":0}],"type":"string"}`,
		`{"type":["integer","string"],"exclusiveMinimum":1e308,"exclusiveMaximum":1.7976931348623157e308}`,
		`{"enum":[1.5,2],"type":"integer"}`,
		`{"type":"object","properties":{"k\"\\":{"const":"\u00e9\n"},"k\"\\":{"type":"null"}}}`,
		`{"type":"object","properties":{"x":{"type":"string","minLength":5,"maxLength":5,"format":"uuid"}}}`,
		`{"$defs":{"n":{"type":"object","properties":{"a":{"$ref":"#/$defs/n"},"b":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`,
	} {
		f.Add([]byte(s), uint8(3), uint8(0))
	}
	f.Fuzz(func(t *testing.T, schema []byte, words, call uint8) {
		if !json.Valid(schema) {
			return // the mock only reads bodies that are JSON
		}
		got, ok := appendToolArgs(nil, gjson.ParseBytes(schema), int(words%16), int(call%4))
		if !json.Valid(got) {
			t.Fatalf("schema %s: arguments %q are not JSON", schema, got)
		}
		if !ok {
			return
		}
		if err := validateSchema(t, schema, got); err != nil {
			t.Fatalf("schema %s: %v", schema, err)
		}
	})
}

// validateSchema checks value against schema for the keywords the
// generator supports; it is written apart from the generator, on values
// decoded by encoding/json.
func validateSchema(t *testing.T, schema, value []byte) error {
	t.Helper()
	s, err := decodeNumbers(schema)
	if err != nil {
		t.Fatalf("decode schema: %v", err)
	}
	v, err := decodeNumbers(value)
	if err != nil {
		return fmt.Errorf("decode value %s: %w", value, err)
	}
	if err := check(s, s, v, "$", 0); err != nil {
		return fmt.Errorf("value %s: %w", value, err)
	}
	return nil
}

func decodeNumbers(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

func check(root, schema, v any, at string, depth int) error {
	if depth > 64 {
		return nil
	}
	s, ok := schema.(map[string]any)
	if !ok {
		if b, isBool := schema.(bool); isBool && !b {
			return fmt.Errorf("%s: the schema false admits nothing", at)
		}
		return nil
	}
	if ref, ok := s["$ref"].(string); ok {
		target, found := pointer(root, ref)
		if !found {
			return nil
		}
		return check(root, target, v, at, depth+1)
	}
	if c, ok := s["const"]; ok && !jsonEqual(c, v) {
		return fmt.Errorf("%s: %v is not the const %v", at, v, c)
	}
	if e, ok := s["enum"].([]any); ok {
		found := false
		for _, x := range e {
			found = found || jsonEqual(x, v)
		}
		if !found {
			return fmt.Errorf("%s: %v is not in the enum", at, v)
		}
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alt, ok := s[k].([]any); ok && len(alt) > 0 {
			var errs []string
			for _, a := range alt {
				if err := check(root, a, v, at, depth+1); err != nil {
					errs = append(errs, err.Error())
				}
			}
			if len(errs) == len(alt) {
				return fmt.Errorf("%s: no %s branch matches: %s", at, k, strings.Join(errs, "; "))
			}
		}
	}
	if err := checkType(s["type"], v, at); err != nil {
		return err
	}
	switch x := v.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		for k, pv := range x {
			if ps, ok := props[k]; ok {
				if err := check(root, ps, pv, at+"."+k, depth+1); err != nil {
					return err
				}
			}
		}
		req, _ := s["required"].([]any)
		for _, r := range req {
			if name, ok := r.(string); ok {
				if _, ok := x[name]; !ok {
					return fmt.Errorf("%s: required %q missing", at, name)
				}
			}
		}
	case []any:
		if n, ok := count(s["minItems"]); ok && len(x) < n {
			return fmt.Errorf("%s: %d items, minItems %d", at, len(x), n)
		}
		if n, ok := count(s["maxItems"]); ok && len(x) > n {
			return fmt.Errorf("%s: %d items, maxItems %d", at, len(x), n)
		}
		prefix, _ := s["prefixItems"].([]any)
		items := s["items"]
		if tuple, ok := items.([]any); ok {
			prefix, items = tuple, nil
		}
		for i, item := range x {
			is := items
			if i < len(prefix) {
				is = prefix[i]
			}
			if is != nil {
				if err := check(root, is, item, at+"["+strconv.Itoa(i)+"]", depth+1); err != nil {
					return err
				}
			}
		}
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return nil // out of float64 range: copied from a const or enum
		}
		if err := checkBounds(s, f, at); err != nil {
			return err
		}
	case string:
		n := utf8.RuneCountInString(x)
		if m, ok := count(s["minLength"]); ok && n < m {
			return fmt.Errorf("%s: length %d, minLength %d", at, n, m)
		}
		if m, ok := count(s["maxLength"]); ok && n > m {
			return fmt.Errorf("%s: length %d, maxLength %d", at, n, m)
		}
	}
	return nil
}

func checkType(t, v any, at string) error {
	var names []string
	switch x := t.(type) {
	case nil:
		return nil
	case string:
		names = []string{x}
	case []any:
		for _, n := range x {
			if s, ok := n.(string); ok {
				names = append(names, s)
			}
		}
	default:
		return nil
	}
	for _, n := range names {
		if hasType(v, strings.ToLower(n)) {
			return nil
		}
	}
	return fmt.Errorf("%s: %v is not of type %v", at, v, t)
}

func hasType(v any, name string) bool {
	switch x := v.(type) {
	case map[string]any:
		return name == "object"
	case []any:
		return name == "array"
	case string:
		return name == "string"
	case bool:
		return name == "boolean"
	case nil:
		return name == "null"
	case json.Number:
		if name == "number" {
			return true
		}
		f, err := x.Float64()
		return name == "integer" && err == nil && f == math.Trunc(f)
	}
	return false
}

func checkBounds(s map[string]any, f float64, at string) error {
	num := func(k string) (float64, bool) {
		n, ok := s[k].(json.Number)
		if !ok {
			return 0, false
		}
		x, err := n.Float64()
		return x, err == nil
	}
	if m, ok := num("minimum"); ok {
		if ex, _ := s["exclusiveMinimum"].(bool); ex && f <= m || f < m {
			return fmt.Errorf("%s: %v below the minimum %v", at, f, m)
		}
	}
	if m, ok := num("maximum"); ok {
		if ex, _ := s["exclusiveMaximum"].(bool); ex && f >= m || f > m {
			return fmt.Errorf("%s: %v above the maximum %v", at, f, m)
		}
	}
	if m, ok := num("exclusiveMinimum"); ok && f <= m {
		return fmt.Errorf("%s: %v not above %v", at, f, m)
	}
	if m, ok := num("exclusiveMaximum"); ok && f >= m {
		return fmt.Errorf("%s: %v not below %v", at, f, m)
	}
	return nil
}

func count(v any) (int, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(n.String())
	return i, err == nil && i >= 0
}

// pointer resolves a local "#/..." reference.
func pointer(root any, ref string) (any, bool) {
	if !strings.HasPrefix(ref, "#") {
		return nil, false
	}
	cur := root
	p := ref[1:]
	if p == "" {
		return cur, true
	}
	if p[0] != '/' {
		return nil, false
	}
	for _, seg := range strings.Split(p[1:], "/") {
		seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
		switch x := cur.(type) {
		case map[string]any:
			var ok bool
			if cur, ok = x[seg]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) || seg != strconv.Itoa(i) {
				return nil, false
			}
			cur = x[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// jsonEqual compares decoded JSON values; numbers by value.
func jsonEqual(a, b any) bool {
	na, okA := a.(json.Number)
	nb, okB := b.(json.Number)
	if okA && okB {
		fa, errA := na.Float64()
		fb, errB := nb.Float64()
		if errA != nil || errB != nil {
			return na == nb
		}
		return fa == fb
	}
	return reflect.DeepEqual(a, b)
}
