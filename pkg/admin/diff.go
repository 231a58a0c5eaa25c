package admin

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/pkg/config"
)

// Change is one difference between two configs, at a path written as in
// validation errors: models[2].targets, budgets[0].amount_usd. Before and
// After are redacted as Redact does; nil means absent.
type Change struct {
	Path   string `json:"path"`
	Before any    `json:"before,omitempty"`
	After  any    `json:"after,omitempty"`
	// Secret is set when the value is a secret, or a URL whose credentials
	// changed: Before and After then show nothing of it.
	Secret bool `json:"secret,omitempty"`
}

// String is the change for a summary line: `budgets[0].amount_usd: "5" ->
// "10"`, `providers[0].api_key: changed`, `models[3]: added`.
func (c Change) String() string {
	switch {
	case c.Secret:
		return c.Path + ": changed"
	case c.Before == nil:
		return c.Path + ": added"
	case c.After == nil:
		return c.Path + ": removed"
	}
	return c.Path + ": " + compact(c.Before) + " -> " + compact(c.After)
}

// compact is v as one line of JSON, cut to 80 bytes so a summary stays
// short (Before and After keep the whole value).
func compact(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}

// Diff lists what changed from before to after, in path order. Maps are
// compared key by key and lists of equal length element by element; a list
// whose length changed is one change of the whole list. Secrets never
// appear: a changed secret is reported with Secret set. Neither config is
// modified.
func Diff(before, after *config.Config) ([]Change, error) {
	a, err := tree(before)
	if err != nil {
		return nil, err
	}
	b, err := tree(after)
	if err != nil {
		return nil, err
	}
	var out []Change
	diffTree(a, b, "", "", false, &out)
	return out, nil
}

// tree is c as a generic tree keyed by YAML field names, unredacted.
func tree(c *config.Config) (any, error) {
	if c == nil {
		return map[string]any{}, nil
	}
	raw, err := yaml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	var t any
	if err := yaml.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("decode config: %w", err)
	}
	return t, nil
}

// diffTree appends the changes from a to b at path, whose last field name
// is key; hidden is set below a map whose every value is secret (headers).
func diffTree(a, b any, path, key string, hidden bool, out *[]Change) {
	if reflect.DeepEqual(a, b) {
		return
	}
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := make([]string, 0, len(am)+len(bm))
		for k := range am {
			keys = append(keys, k)
		}
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			diffTree(am[k], bm[k], p, k, hidden || secretMap(key), out)
		}
		return
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && len(al) == len(bl) {
		for i := range al {
			diffTree(al[i], bl[i], path+"["+strconv.Itoa(i)+"]", key, hidden, out)
		}
		return
	}
	c := Change{Path: path}
	redact := func(v any) any { return redactTree(v, key) }
	if hidden {
		redact = redactAll
	}
	if a != nil {
		c.Before = redact(a)
	}
	if b != nil {
		c.After = redact(b)
	}
	// Both sides redact to the same value although they differ: the
	// difference is a secret (a key, a URL's password).
	if a != nil && b != nil && reflect.DeepEqual(c.Before, c.After) {
		c.Secret, c.Before, c.After = true, Redacted, Redacted
	}
	_, aText := a.(string)
	_, bText := b.(string)
	if (hidden || secretName(key)) && (aText || bText) {
		c.Secret = true
	}
	*out = append(*out, c)
}
