package mockllm

import (
	"math"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Tool-call arguments are generated from the tool's JSON schema, so that
// agent frameworks validating the input against the schema accept them
// (issue #16). The value depends only on the schema and the word count, so
// the same request always gets the same arguments.
//
// Supported keywords: type (a name or a list, Gemini's upper-case names
// too; the first that is not "null" is used), properties and required
// (every declared property is filled down to optionalDepth, only required
// ones below it), enum (the first value), const, anyOf and oneOf (the
// first branch), $ref to a local JSON pointer ("#/$defs/x"), items,
// prefixItems and a tuple-form items array, minItems and maxItems (one item
// unless they say otherwise), minimum, maximum and their exclusive forms
// (the draft-4 boolean one too), minLength and maxLength, and a few
// formats (date-time, date, time, email, uri, uuid, hostname, ipv4, ipv6).
// Strings are generated words; integers count up from 1 and numbers from
// 1.5, moved into their bounds. Ignored: pattern, multipleOf, uniqueItems,
// allOf, not, if/then/else, dependent schemas and property counts.
//
// A schema object that declares no properties and allows additional ones
// (such as {"type":"object"}) is answered, at the top level, with the
// mock's older fixed form {"input":"<words>"}, which such a schema accepts.

const (
	maxSchemaDepth = 32      // nesting of generated values, $ref hops included
	optionalDepth  = 4       // deeper objects get their required properties only
	maxGenItems    = 64      // most array items generated
	maxGenString   = 4 << 10 // longest string (minLength) generated
	maxGenBytes    = 64 << 10
)

// schemaGen generates one value. ok turns false when the schema asks for
// something it cannot satisfy (or does not support in that combination);
// the value is still valid JSON.
type schemaGen struct {
	root  gjson.Result // the whole schema, for $ref
	words int          // words of a generated string
	strs  int          // strings generated so far: each starts one word later
	nums  int          // numbers generated so far
	start int          // len(dst) when generation began, for maxGenBytes
	ok    bool
}

// appendToolArgs appends the arguments of a call to a tool whose parameter
// schema is schema (gjson's zero Result when the tool declares none): a
// JSON object. call offsets the generated words, so parallel calls differ.
// It reports whether the value satisfies the schema's supported keywords.
func appendToolArgs(dst []byte, schema gjson.Result, words, call int) ([]byte, bool) {
	if !schema.Exists() || schema.IsObject() && legacyArgs(schema) {
		return appendLegacyArgs(dst, words, call), true
	}
	g := schemaGen{root: schema, words: words, strs: call, nums: call, start: len(dst), ok: true}
	return g.value(dst, schema, 0), g.ok
}

// legacyArgs reports whether schema is an object schema with no declared
// or required properties that admits others.
func legacyArgs(schema gjson.Result) bool {
	if memberOf(schema, "type").Exists() && schemaType(schema) != "object" {
		return false // a schema naming no type is taken as an object's
	}
	if p := memberOf(schema, "properties"); p.IsObject() && hasMember(p) {
		return false
	}
	if r := memberOf(schema, "required"); r.IsArray() && hasMember(r) {
		return false
	}
	for _, k := range [...]string{"$ref", "anyOf", "oneOf", "enum", "const"} {
		if memberOf(schema, k).Exists() {
			return false
		}
	}
	return memberOf(schema, "additionalProperties").Type != gjson.False
}

// appendLegacyArgs appends {"input":"<words>"}.
func appendLegacyArgs(dst []byte, words, call int) []byte {
	dst = append(dst, `{"input":"`...)
	dst = appendWordsFrom(dst, call, words)
	return append(dst, `"}`...)
}

func hasMember(obj gjson.Result) bool {
	found := false
	obj.ForEach(func(_, _ gjson.Result) bool {
		found = true
		return false
	})
	return found
}

// memberOf returns the member key of obj, compared decoded (gjson paths
// would treat some key characters as syntax). Of repeated keys the last
// counts, as for encoding/json.
func memberOf(obj gjson.Result, key string) gjson.Result {
	var out gjson.Result
	obj.ForEach(func(k, v gjson.Result) bool {
		if k.Str == key {
			out = v
		}
		return true
	})
	return out
}

// value appends a value for schema s.
func (g *schemaGen) value(dst []byte, s gjson.Result, depth int) []byte {
	if depth > maxSchemaDepth || len(dst)-g.start > maxGenBytes {
		g.ok = false
		return append(dst, "null"...)
	}
	switch s.Type {
	case gjson.True:
		return g.str(dst, gjson.Result{})
	case gjson.False:
		g.ok = false
		return append(dst, "null"...)
	}
	if !s.IsObject() {
		return g.str(dst, gjson.Result{})
	}
	if ref := memberOf(s, "$ref"); ref.Exists() {
		target, found := g.resolve(ref)
		if !found {
			g.ok = false
			return g.str(dst, gjson.Result{})
		}
		return g.value(dst, target, depth+1)
	}
	if c := memberOf(s, "const"); c.Exists() {
		if !typeAllows(s, c) || fixedConstrained(s) {
			g.ok = false
		}
		return append(dst, c.Raw...)
	}
	if e := memberOf(s, "enum"); e.Exists() {
		var pick gjson.Result
		e.ForEach(func(_, v gjson.Result) bool {
			if typeAllows(s, v) {
				pick = v
				return false
			}
			return true
		})
		if !e.IsArray() || !pick.Exists() || fixedConstrained(s) {
			g.ok = false
		}
		if !pick.Exists() {
			return append(dst, "null"...)
		}
		return append(dst, pick.Raw...)
	}
	for _, k := range [...]string{"anyOf", "oneOf"} {
		if alt := memberOf(s, k); alt.Exists() {
			first := alt.Get("0")
			if !alt.IsArray() || !first.Exists() || constrained(s) {
				g.ok = false // siblings would need merging
			}
			if first.Exists() {
				return g.value(dst, first, depth+1)
			}
		}
	}
	switch t := schemaType(s); t {
	case "object":
		return g.object(dst, s, depth)
	case "array":
		return g.array(dst, s, depth)
	case "integer", "number":
		return g.number(dst, s, t == "integer")
	case "boolean":
		return append(dst, "true"...)
	case "null":
		return append(dst, "null"...)
	case "string":
		return g.str(dst, s)
	default:
		g.ok = false
		return g.str(dst, gjson.Result{})
	}
}

// fixedConstrained reports whether a const or enum schema has keywords,
// besides type, that its fixed value would have to satisfy as well.
func fixedConstrained(s gjson.Result) bool {
	c := false
	s.ForEach(func(k, _ gjson.Result) bool {
		switch k.Str {
		case "properties", "required", "items", "prefixItems", "minItems", "maxItems",
			"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
			"$ref", "anyOf", "oneOf":
			c = true
		}
		return !c
	})
	return c || memberOf(s, "const").Exists() && memberOf(s, "enum").Exists()
}

// typeAllows reports whether the JSON value v has a type s allows: any
// when s names no type.
func typeAllows(s, v gjson.Result) bool {
	t := memberOf(s, "type")
	if !t.Exists() {
		return true
	}
	if t.Type == gjson.String {
		return isType(v, t.Str)
	}
	ok := false
	t.ForEach(func(_, name gjson.Result) bool {
		ok = name.Type == gjson.String && isType(v, name.Str)
		return !ok
	})
	return ok
}

// isType reports whether v is of the JSON schema type name.
func isType(v gjson.Result, name string) bool {
	switch strings.ToLower(name) {
	case "string":
		return v.Type == gjson.String
	case "number":
		return v.Type == gjson.Number
	case "integer":
		return v.Type == gjson.Number && v.Num == math.Trunc(v.Num) && !math.IsInf(v.Num, 0)
	case "boolean":
		return v.Type == gjson.True || v.Type == gjson.False
	case "null":
		return v.Type == gjson.Null
	case "object":
		return v.IsObject()
	case "array":
		return v.IsArray()
	}
	return false
}

// constrained reports whether s has keywords besides anyOf/oneOf that a
// value must satisfy.
func constrained(s gjson.Result) bool {
	c := false
	s.ForEach(func(k, _ gjson.Result) bool {
		switch k.Str {
		case "type", "properties", "required", "items", "prefixItems", "minItems", "maxItems",
			"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
			"enum", "const", "$ref":
			c = true
		}
		return !c
	})
	// anyOf and oneOf both present: only the first is generated.
	return c || memberOf(s, "anyOf").Exists() && memberOf(s, "oneOf").Exists()
}

// schemaType returns the lower-case type s asks for, inferred from its
// keywords when it names none; "" for an unsupported type value.
func schemaType(s gjson.Result) string {
	t := memberOf(s, "type")
	switch {
	case t.Type == gjson.String:
		return strings.ToLower(t.Str)
	case t.IsArray():
		name, only := "", ""
		t.ForEach(func(_, v gjson.Result) bool {
			if v.Type != gjson.String {
				return true
			}
			if n := strings.ToLower(v.Str); n != "null" {
				name = n
				return false
			}
			only = "null"
			return true
		})
		if name == "" {
			return only
		}
		return name
	case t.Exists():
		return ""
	}
	has := func(keys ...string) bool {
		for _, k := range keys {
			if memberOf(s, k).Exists() {
				return true
			}
		}
		return false
	}
	switch {
	case has("properties", "required", "additionalProperties"):
		return "object"
	case has("items", "prefixItems", "minItems", "maxItems"):
		return "array"
	case has("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
		return "number"
	}
	return "string"
}

// resolve follows a local $ref ("#" or "#/a/b", JSON pointer escapes
// ~0 and ~1, percent-encoding not decoded).
func (g *schemaGen) resolve(ref gjson.Result) (gjson.Result, bool) {
	if ref.Type != gjson.String || !strings.HasPrefix(ref.Str, "#") {
		return gjson.Result{}, false
	}
	cur := g.root
	p := ref.Str[1:]
	if p == "" {
		return cur, true
	}
	if p[0] != '/' {
		return gjson.Result{}, false
	}
	for _, seg := range strings.Split(p[1:], "/") {
		seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
		switch {
		case cur.IsObject():
			cur = memberOf(cur, seg)
		case cur.IsArray():
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || seg != strconv.Itoa(i) {
				return gjson.Result{}, false
			}
			cur = cur.Get(strconv.Itoa(i))
		default:
			return gjson.Result{}, false
		}
		if !cur.Exists() {
			return gjson.Result{}, false
		}
	}
	return cur, true
}

// object appends every property (only the required ones below
// optionalDepth), then required names the properties do not declare.
func (g *schemaGen) object(dst []byte, s gjson.Result, depth int) []byte {
	props := memberOf(s, "properties")
	required := memberOf(s, "required")
	isRequired := func(name string) bool {
		found := false
		required.ForEach(func(_, v gjson.Result) bool {
			found = v.Type == gjson.String && v.Str == name
			return !found
		})
		return found
	}
	dst = append(dst, '{')
	n := 0
	var seen []string
	if props.IsObject() {
		props.ForEach(func(k, v gjson.Result) bool {
			if depth >= optionalDepth && !isRequired(k.Str) {
				return true
			}
			if n > 0 {
				dst = append(dst, ',')
			}
			n++
			seen = append(seen, k.Str)
			dst = append(dst, k.Raw...)
			dst = append(dst, ':')
			dst = g.value(dst, v, depth+1)
			return true
		})
	}
	extra := memberOf(s, "additionalProperties")
	required.ForEach(func(_, v gjson.Result) bool {
		if v.Type != gjson.String || contains(seen, v.Str) {
			return true
		}
		if extra.Type == gjson.False {
			g.ok = false
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		seen = append(seen, v.Str)
		dst = append(dst, v.Raw...)
		dst = append(dst, ':')
		if extra.IsObject() {
			dst = g.value(dst, extra, depth+1)
		} else {
			dst = g.str(dst, gjson.Result{})
		}
		return true
	})
	return append(dst, '}')
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// array appends max(minItems, 1) items, at most maxItems.
func (g *schemaGen) array(dst []byte, s gjson.Result, depth int) []byte {
	lo, hasLo := schemaCount(g, memberOf(s, "minItems"))
	hi, hasHi := schemaCount(g, memberOf(s, "maxItems"))
	n := 1
	if hasLo {
		n = max(n, lo)
	}
	if hasHi {
		n = min(n, hi)
	}
	if hasLo && hasHi && lo > hi {
		g.ok = false
	}
	if n > maxGenItems {
		n = maxGenItems
		g.ok = false
	}
	items := memberOf(s, "items")
	prefix := memberOf(s, "prefixItems")
	if items.IsArray() { // draft-4 tuple form
		prefix, items = items, gjson.Result{}
	}
	dst = append(dst, '[')
	for i := range n {
		if i > 0 {
			dst = append(dst, ',')
		}
		item := prefix.Get(strconv.Itoa(i))
		if !prefix.IsArray() || !item.Exists() {
			item = items
		}
		if item.Exists() {
			dst = g.value(dst, item, depth+1)
		} else {
			dst = g.str(dst, gjson.Result{})
		}
	}
	return append(dst, ']')
}

// schemaCount reads a non-negative integer keyword such as minItems.
func schemaCount(g *schemaGen, v gjson.Result) (int, bool) {
	if !v.Exists() {
		return 0, false
	}
	if v.Type != gjson.Number || v.Num < 0 || v.Num != math.Trunc(v.Num) || v.Num > 1<<30 {
		g.ok = false
		return 0, false
	}
	return int(v.Num), true
}

// number appends an integer (counting up from 1) or a number (from 1.5),
// moved inside the bounds.
func (g *schemaGen) number(dst []byte, s gjson.Result, integer bool) []byte {
	g.nums++
	v := float64(g.nums)
	if !integer {
		v += 0.5
	}
	lo, loEx, hasLo := g.bound(s, "minimum", "exclusiveMinimum", true)
	hi, hiEx, hasHi := g.bound(s, "maximum", "exclusiveMaximum", false)
	if integer {
		if hasLo {
			lo2 := math.Ceil(lo)
			if loEx && lo2 == lo && lo2+1 != lo2 {
				lo2++
			}
			lo, loEx = lo2, loEx && lo2 == lo // still exclusive: too large to step over

		}
		if hasHi {
			hi2 := math.Floor(hi)
			if hiEx && hi2 == hi && hi2-1 != hi2 {
				hi2--
			}
			hi, hiEx = hi2, hiEx && hi2 == hi
		}
	}
	inLo := func(x float64) bool { return !hasLo || x > lo || !loEx && x == lo }
	inHi := func(x float64) bool { return !hasHi || x < hi || !hiEx && x == hi }
	if !inLo(v) {
		v = lo
		if loEx {
			v = lo + 1
			if !inHi(v) {
				v = lo/2 + hi/2
			}
		}
	}
	if !inHi(v) {
		v = hi
		if hiEx {
			v = hi - 1
			if !inLo(v) {
				v = lo/2 + hi/2
			}
		}
	}
	if !inLo(v) || !inHi(v) || math.IsInf(v, 0) || math.IsNaN(v) {
		g.ok = false
		if math.IsInf(v, 0) || math.IsNaN(v) {
			v = 0
		}
	}
	if integer {
		return strconv.AppendFloat(dst, v, 'f', -1, 64)
	}
	return strconv.AppendFloat(dst, v, 'g', -1, 64)
}

// bound reads minimum/maximum and their exclusive form: a number (draft 6
// and later) or a boolean applying to the plain keyword (draft 4). When
// both give a number, the tighter wins. lower picks which is tighter.
func (g *schemaGen) bound(s gjson.Result, plain, exclusive string, lower bool) (v float64, excl, ok bool) {
	p, e := memberOf(s, plain), memberOf(s, exclusive)
	if p.Exists() {
		if p.Type != gjson.Number || math.IsInf(p.Num, 0) {
			g.ok = false
		} else {
			v, ok = p.Num, true
			excl = e.Type == gjson.True
		}
	}
	if e.Type == gjson.Number {
		if math.IsInf(e.Num, 0) {
			g.ok = false
			return v, excl, ok
		}
		if !ok || lower && e.Num >= v || !lower && e.Num <= v {
			v, excl, ok = e.Num, true, true
		}
	}
	return v, excl, ok
}

// formats are the fixed values of the supported string formats.
var formats = map[string]string{
	"date-time": "2026-01-02T03:04:05Z",
	"date":      "2026-01-02",
	"time":      "03:04:05Z",
	"email":     "tollgate@example.com",
	"uri":       "https://example.com/tollgate",
	"url":       "https://example.com/tollgate",
	"uuid":      "00000000-0000-4000-8000-000000000000",
	"hostname":  "example.com",
	"ipv4":      "192.0.2.1",
	"ipv6":      "2001:db8::1",
}

// str appends a string: a format's value, or generated words (each string
// starting one word later than the previous), padded to minLength and cut
// to maxLength.
func (g *schemaGen) str(dst []byte, s gjson.Result) []byte {
	lo, hasLo := schemaCount(g, memberOf(s, "minLength"))
	hi, hasHi := schemaCount(g, memberOf(s, "maxLength"))
	if hasLo && hasHi && lo > hi {
		g.ok = false
	}
	if lo > maxGenString {
		lo = maxGenString
		g.ok = false
	}
	start := len(dst) + 1
	dst = append(dst, '"')
	if f, ok := formats[memberOf(s, "format").Str]; ok {
		dst = append(dst, f...)
	} else {
		dst = appendWordsFrom(dst, g.strs, g.words)
		g.strs++
	}
	for i := 0; len(dst)-start < lo; i++ {
		if len(dst) > start {
			dst = append(dst, ' ')
		}
		dst = append(dst, word(i)...)
	}
	if hasHi && len(dst)-start > hi {
		dst = dst[:start+hi]
	}
	if n := len(dst) - start; hasLo && n < lo && !(hasHi && n == hi) {
		g.ok = false
	}
	return append(dst, '"')
}

// appendWordsFrom appends n generated words starting at word from.
func appendWordsFrom(dst []byte, from, n int) []byte {
	for i := range n {
		if i > 0 {
			dst = append(dst, ' ')
		}
		dst = append(dst, word(from+i)...)
	}
	return dst
}
