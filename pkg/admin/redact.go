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
// with every credential-shaped value hidden (issue 41, finding 5):
//
//   - every value of a headers map (providers[].headers): static upstream
//     headers are how credentials travel (Authorization, api-key,
//     Helicone-Auth), so none is shown;
//   - every non-empty value of a field whose name says it holds a secret
//     (secretName);
//   - in any value that is a URL, or a comma-separated list of them, the
//     userinfo (nats://TOKEN@host shows as nats://[redacted]@host,
//     user:pass@ as user:xxxxx@) and every query value (?api-key=...).
//
// Matching by name rather than by field keeps secrets added to the config
// later hidden too. c is not modified.
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
	if secretMap(key) {
		return redactAll(v)
	}
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

// redactAll replaces every non-empty string in v, at any depth, by
// Redacted.
func redactAll(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = redactAll(x)
		}
		return v
	case []any:
		for i, x := range v {
			v[i] = redactAll(x)
		}
		return v
	case string:
		if v == "" {
			return v
		}
		return Redacted
	case nil:
		return nil
	}
	return Redacted // a number or bool given as a header value
}

// secretMap reports whether every value under a config field of this name
// is hidden: header maps.
func secretMap(key string) bool {
	return strings.EqualFold(key, "headers")
}

// secretName reports whether a config field (or header) of this name holds
// a secret: a name containing secret, password, passwd, token, credential,
// cookie, auth or private_key, or ending in key or keys (api_key, x-api-key,
// access_key_id too), except *_file and *_env names (paths and variable
// names), public keys and key ids.
func secretName(key string) bool {
	k := strings.ToLower(key)
	if strings.HasSuffix(k, "_file") || strings.HasSuffix(k, "_env") {
		return false
	}
	switch k {
	case "public_key", "key_id", "kid", "keys":
		return false
	case "access_key_id":
		return true
	}
	if strings.HasSuffix(strings.TrimSuffix(k, "s"), "key") {
		return true
	}
	for _, s := range []string{"secret", "password", "passwd", "private_key", "token", "credential", "cookie", "auth"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// redactURLs hides the credentials of s, or of each comma-separated element
// of s, that is a URL: its userinfo (the password of user:password, or the
// whole of a lone user, which NATS reads as a token) and its query values.
func redactURLs(s string) string {
	if !strings.Contains(s, "://") || !strings.ContainsAny(s, "@?") {
		return s
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		if strings.Contains(p, "://") {
			parts[i] = redactURL(p)
		}
	}
	return strings.Join(parts, ",")
}

// redactURL hides the credentials of one URL (see redactURLs).
func redactURL(p string) string {
	u, err := url.Parse(strings.TrimSpace(p))
	if err != nil {
		// Unparseable: hide whatever stands between the scheme and the @,
		// and everything after a ?.
		if q := strings.Index(p, "?"); q >= 0 {
			p = p[:q+1] + Redacted
		}
		if a, b := strings.Index(p, "://"), strings.LastIndex(p, "@"); a >= 0 && b > a {
			p = p[:a+3] + Redacted + p[b:]
		}
		return p
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			u.User = url.User(Redacted)
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k, vs := range q {
			for j := range vs {
				vs[j] = Redacted
			}
			q[k] = vs
		}
		u.RawQuery = q.Encode()
	}
	out := u.String()
	// Keep the brackets of the marker readable rather than escaped.
	return strings.NewReplacer("%5Bredacted%5D", Redacted).Replace(out)
}
