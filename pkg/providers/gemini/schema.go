package gemini

import (
	"slices"
	"strings"

	"github.com/tidwall/gjson"
)

// Limits on schema translation: $ref inlining can multiply a schema's size,
// and recursive schemas never end.
const (
	maxSchemaDepth = 48
	maxSchemaNodes = 20000
)

// schemaCleaner rewrites a JSON Schema into the OpenAPI subset Gemini's
// Schema accepts (see the package documentation for the rules).
type schemaCleaner struct {
	root  gjson.Result // for local $ref resolution
	order bool         // add propertyOrdering to keep the client's order
	nodes int
}

// schemaMember is one key of a flattened schema object.
type schemaMember struct {
	key string
	raw string // the key as written, quotes included
	val gjson.Result
}

var (
	trueResult  = gjson.Result{Type: gjson.True, Raw: "true"}
	nullableRaw = `"nullable"`
	typeRaw     = `"type"`
)

// set adds or replaces key in ms, keeping the position of its first
// occurrence.
func set(ms []schemaMember, m schemaMember) []schemaMember {
	for i := range ms {
		if ms[i].key == m.key {
			ms[i].val = m.val
			return ms
		}
	}
	return append(ms, m)
}

// flatten collects the members of schema s, inlining local $refs and
// allOf (flattenAll), and turning nullable unions into nullable.
func (sc *schemaCleaner) flatten(ms []schemaMember, s gjson.Result, param string, depth int) ([]schemaMember, error) {
	if depth > maxSchemaDepth {
		return ms, paramErr(param, "the schema nests too deep (recursive schemas are not supported by Gemini)")
	}
	var err error
	s.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "$ref":
			target, ok := sc.resolve(v.Str)
			if !ok {
				err = paramErr(param, "cannot resolve $ref %q: only local #/$defs and #/definitions references are supported", v.Str)
				return false
			}
			ms, err = sc.flatten(ms, target, param, depth+1)
		case "allOf":
			ms, err = sc.flattenAll(ms, v, param, depth+1)
		case "anyOf", "oneOf":
			var other []gjson.Result
			null := false
			v.ForEach(func(_, e gjson.Result) bool {
				if e.Get("type").Str == "null" {
					null = true
				} else {
					other = append(other, e)
				}
				return true
			})
			switch {
			case null && len(other) == 1:
				ms, err = sc.flatten(ms, other[0], param, depth+1)
				ms = set(ms, schemaMember{"nullable", nullableRaw, trueResult})
			default:
				ms = set(ms, schemaMember{"anyOf", `"anyOf"`, v})
				if null {
					ms = set(ms, schemaMember{"nullable", nullableRaw, trueResult})
				}
			}
		case "const":
			if v.Type == gjson.String {
				ms = set(ms, schemaMember{"enum", `"enum"`, gjson.Parse("[" + v.Raw + "]")})
			}
		case "type":
			if !v.IsArray() {
				ms = set(ms, schemaMember{"type", typeRaw, v})
				break
			}
			var types []gjson.Result
			null := false
			v.ForEach(func(_, t gjson.Result) bool {
				if t.Str == "null" {
					null = true
				} else {
					types = append(types, t)
				}
				return true
			})
			if len(types) != 1 {
				err = paramErr(param, "a type union of several non-null types is not supported by Gemini")
				return false
			}
			ms = set(ms, schemaMember{"type", typeRaw, types[0]})
			if null {
				ms = set(ms, schemaMember{"nullable", nullableRaw, trueResult})
			}
		default:
			ms = set(ms, schemaMember{k.Str, k.Raw, v})
		}
		return err == nil
	})
	return ms, err
}

// flattenAll merges the schemas of an allOf into ms, in order. Several
// schemas merge when no key is set twice, but for pattern: Gemini takes one
// regular expression, so patterns that allOf combines are dropped (Claude
// Code's tools combine two on one string). Any other key set twice is
// refused.
func (sc *schemaCleaner) flattenAll(ms []schemaMember, all gjson.Result, param string, depth int) ([]schemaMember, error) {
	if !all.IsArray() {
		return ms, paramErr(param, "allOf must be an array of schemas")
	}
	if all.Get("#").Int() == 1 {
		return sc.flatten(ms, all.Get("0"), param, depth)
	}
	var err error
	patterns := 0
	for _, m := range ms {
		if m.key == "pattern" {
			patterns++
		}
	}
	all.ForEach(func(_, e gjson.Result) bool {
		var sub []schemaMember
		if sub, err = sc.flatten(nil, e, param, depth); err != nil {
			return false
		}
		for _, m := range sub {
			if m.key == "pattern" {
				patterns++
				ms = set(ms, m)
				continue
			}
			for _, have := range ms {
				if have.key == m.key {
					err = paramErr(param, "allOf schemas that set %s more than once are not supported by Gemini", m.key)
					return false
				}
			}
			ms = append(ms, m)
		}
		return true
	})
	if err == nil && patterns > 1 {
		ms = slices.DeleteFunc(ms, func(m schemaMember) bool { return m.key == "pattern" })
	}
	return ms, err
}

// resolve finds the schema a local reference points to.
func (sc *schemaCleaner) resolve(ref string) (gjson.Result, bool) {
	var name string
	switch {
	case strings.HasPrefix(ref, "#/$defs/"):
		name = "$defs"
	case strings.HasPrefix(ref, "#/definitions/"):
		name = "definitions"
	default:
		return gjson.Result{}, false
	}
	defs := sc.root.Get(gjson.Escape(name))
	key := ref[len(name)+3:]
	var found gjson.Result
	defs.ForEach(func(k, v gjson.Result) bool {
		if k.Str == key {
			found = v
			return false
		}
		return true
	})
	return found, found.IsObject()
}

// append writes the Gemini form of schema s.
func (sc *schemaCleaner) append(dst []byte, s gjson.Result, param string, depth int) ([]byte, error) {
	sc.nodes++
	if sc.nodes > maxSchemaNodes {
		return dst, paramErr(param, "the schema is too large once its references are inlined")
	}
	if !s.IsObject() {
		return append(dst, "{}"...), nil
	}
	var buf [16]schemaMember
	ms, err := sc.flatten(buf[:0], s, param, depth)
	if err != nil {
		return dst, err
	}
	typ := ""
	hasOrdering, hasEnum := false, false
	for _, m := range ms {
		switch m.key {
		case "type":
			typ = strings.ToLower(m.val.Str)
		case "propertyOrdering":
			hasOrdering = true
		case "enum":
			hasEnum = stringArray(m.val)
		}
	}
	dst = append(dst, '{')
	n := 0
	key := func(raw string) {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = append(dst, raw...)
		dst = append(dst, ':')
	}
	if typ == "" && hasEnum { // Gemini enums are string enums
		key(typeRaw)
		dst = append(dst, `"string"`...)
	}
	for _, m := range ms {
		v := m.val
		switch m.key {
		case "type", "title", "description", "pattern":
			if v.Type == gjson.String {
				key(m.raw)
				dst = append(dst, v.Raw...)
			}
		case "nullable":
			if v.Type == gjson.True || v.Type == gjson.False {
				key(m.raw)
				dst = append(dst, v.Raw...)
			}
		case "format":
			if formatAllowed(typ, v.Str) {
				key(m.raw)
				dst = append(dst, v.Raw...)
			}
		case "minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties", "minimum", "maximum":
			if v.Type == gjson.Number {
				key(m.raw)
				dst = append(dst, v.Raw...)
			}
		case "required", "propertyOrdering":
			if stringArray(v) {
				key(m.raw)
				dst = append(dst, v.Raw...)
			}
		case "default", "example":
			key(m.raw)
			dst = append(dst, v.Raw...)
		case "enum":
			if stringArray(v) {
				key(m.raw)
				dst = append(dst, v.Raw...)
			}
		case "items":
			if v.IsObject() {
				key(m.raw)
				if dst, err = sc.append(dst, v, param, depth+1); err != nil {
					return dst, err
				}
			}
		case "anyOf":
			key(m.raw)
			dst = append(dst, '[')
			i := 0
			v.ForEach(func(_, e gjson.Result) bool {
				if i > 0 {
					dst = append(dst, ',')
				}
				i++
				dst, err = sc.append(dst, e, param, depth+1)
				return err == nil
			})
			if err != nil {
				return dst, err
			}
			dst = append(dst, ']')
		case "properties":
			if !v.IsObject() || strings.TrimSpace(v.Raw[1:len(v.Raw)-1]) == "" {
				continue
			}
			key(m.raw)
			if dst, err = sc.appendProperties(dst, v, param, depth); err != nil {
				return dst, err
			}
			if sc.order && !hasOrdering {
				key(`"propertyOrdering"`)
				dst = appendKeys(dst, v)
			}
		}
	}
	return append(dst, '}'), nil
}

// appendProperties writes a properties object with each schema cleaned.
func (sc *schemaCleaner) appendProperties(dst []byte, props gjson.Result, param string, depth int) ([]byte, error) {
	var err error
	dst = append(dst, '{')
	i := 0
	props.ForEach(func(k, v gjson.Result) bool {
		if i > 0 {
			dst = append(dst, ',')
		}
		i++
		dst = append(dst, k.Raw...)
		dst = append(dst, ':')
		dst, err = sc.append(dst, v, param, depth+1)
		return err == nil
	})
	return append(dst, '}'), err
}

// appendKeys writes the keys of an object as a JSON array of strings.
func appendKeys(dst []byte, obj gjson.Result) []byte {
	dst = append(dst, '[')
	i := 0
	obj.ForEach(func(k, _ gjson.Result) bool {
		if i > 0 {
			dst = append(dst, ',')
		}
		i++
		dst = append(dst, k.Raw...)
		return true
	})
	return append(dst, ']')
}

// stringArray reports whether v is an array of strings.
func stringArray(v gjson.Result) bool {
	if !v.IsArray() {
		return false
	}
	ok := true
	v.ForEach(func(_, e gjson.Result) bool {
		ok = e.Type == gjson.String
		return ok
	})
	return ok
}

// formatAllowed reports whether Gemini accepts format f on type typ.
func formatAllowed(typ, f string) bool {
	switch typ {
	case "string":
		return f == "enum" || f == "date-time"
	case "number":
		return f == "float" || f == "double"
	case "integer":
		return f == "int32" || f == "int64"
	}
	return false
}
