package admin

import (
	"fmt"
	"net/url"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/pkg/config"
)

// Redacted replaces every secret value Redact hides.
const Redacted = "[redacted]"

// Redact returns c as a generic tree keyed by the YAML field names (so it
// reads like the config file, durations as "30s"), ready for encoding/json,
// with secrets hidden: every non-empty value of a field whose name says it
// holds a secret (api_key, secret, and any name containing secret, password,
// passwd, private_key or token, except *_file and *_env names, which hold
// paths and variable names) becomes Redacted, and the password of any URL
// (user:password@host, also in comma-separated lists) is masked. Matching
// by name rather than by field keeps secrets added to the config later
// hidden too. c is not modified.
func Redact(c *config.Config) (any, error) {
	raw, err := yaml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	var tree any
	if err := yaml.Unmarshal(raw, &tree); err != nil {
		return nil, fmt.Errorf("decode config: %w", err)
	}
	return redactTree(tree, ""), nil
}

// redactTree walks v, a value decoded from YAML, whose field name is key.
func redactTree(v any, key string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = redactTree(x, k)
		}
		return v
	case []any:
		for i, x := range v {
			v[i] = redactTree(x, key)
		}
		return v
	case string:
		if v == "" {
			return v
		}
		if secretName(key) {
			return Redacted
		}
		return redactURLs(v)
	}
	return v
}

// secretName reports whether a config field of this name holds a secret.
func secretName(key string) bool {
	k := strings.ToLower(key)
	if strings.HasSuffix(k, "_file") || strings.HasSuffix(k, "_env") {
		return false
	}
	if k == "api_key" || k == "apikey" || k == "api_keys" || k == "access_key_id" {
		return true
	}
	for _, s := range []string{"secret", "password", "passwd", "private_key", "token"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// redactURLs masks the password of s, or of each comma-separated element of
// s, that is a URL with one.
func redactURLs(s string) string {
	if !strings.Contains(s, "@") || !strings.Contains(s, "://") {
		return s
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			// Unparseable: hide whatever stands between the scheme and the @.
			if a, b := strings.Index(p, "://"), strings.LastIndex(p, "@"); a >= 0 && b > a {
				parts[i] = p[:a+3] + Redacted + p[b:]
			}
			continue
		}
		if u.User == nil {
			continue
		}
		if _, has := u.User.Password(); has {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
