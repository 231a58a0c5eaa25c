package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ListenEnv is the environment variable that overrides Config.Listen.
const ListenEnv = "TOLLGATE_LISTEN"

// Load reads the YAML file at path and returns it parsed, with environment
// references expanded from the process environment, defaults applied and
// validated. See Parse.
func Load(path string) (*Config, error) { return LoadEnv(path, os.Getenv) }

// LoadEnv is Load with environment references expanded from getenv, for a
// program that reads its environment in one place.
func LoadEnv(path string, getenv func(string) string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(data, getenv)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse builds a Config from YAML text. Before parsing, ${VAR} and
// ${VAR:-default} references anywhere in the text are replaced by getenv's
// answer (default when that is empty; an unset variable without a default
// expands to ""), and $$ stands for a literal $. A $ followed by anything
// else is kept as is. Values that contain YAML syntax (": ", " #", quotes)
// must be quoted in the file: "${VAR}". A provider whose api_key is exactly
// one reference, "${VAR}" or "${VAR:-default}", gets VAR in APIKeyEnv.
//
// Keys the types do not declare are errors, reported with their line. The
// environment variable
// TOLLGATE_LISTEN, when set, overrides listen. Defaults are then applied and
// the result validated; a validation failure returns every problem at once,
// joined with errors.Join. A nil getenv is an empty environment.
func Parse(data []byte, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	expanded, err := expandEnv(data, getenv)
	if err != nil {
		return nil, err
	}
	c := &Config{}
	dec := yaml.NewDecoder(bytes.NewReader(expanded))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return nil, decodeError(err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, decodeError(err)
	default:
		return nil, fmt.Errorf("line %d: a config file holds one YAML document", extra.Line)
	}
	recordAPIKeyEnv(c, data)
	if v := getenv(ListenEnv); v != "" {
		c.Listen = v
	}
	if v := getenv(AdminListenEnv); v != "" {
		c.Admin.Listen = v
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// decodeError splits a yaml.TypeError, which lists every bad key and value
// with its line, into one joined error per problem.
func decodeError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("parse yaml: %w", err)
	}
	errs := make([]error, 0, len(te.Errors))
	for _, msg := range te.Errors {
		for _, rk := range RemovedKeys {
			if strings.HasSuffix(msg, "field "+rk.name()+" not found in type config."+rk.Owner) {
				msg += ": " + rk.Advice
			}
		}
		errs = append(errs, errors.New(msg))
	}
	return errors.Join(errs...)
}

// RemovedKey is a key a config file may still carry from an older
// release. Such a key is refused like any unknown key, with its advice.
type RemovedKey struct {
	// Path is the key's path, in the notation of KeyClass.Path.
	Path string
	// Owner is the struct type that held it ("NATS").
	Owner string
	// Advice says that the key was removed and what to do instead.
	Advice string
}

// name is the key's last segment.
func (rk RemovedKey) name() string {
	return rk.Path[strings.LastIndexByte(rk.Path, '.')+1:]
}

// RemovedKeys are the keys removed from Config, each refused with what
// replaces it. The configuration reference lists them.
var RemovedKeys = []RemovedKey{
	{"nats.data_dir", "NATS", "nats.data_dir was removed (nothing ever read it); the embedded NATS server of gateway -embed stores under the -data-dir flag's nats/ directory: remove the key"},
}

// expandEnv replaces ${VAR}, ${VAR:-default} and $$ in data. A malformed
// reference (unterminated, or a name that is not [A-Za-z_][A-Za-z0-9_]*) is
// an error naming its line; all of them are reported.
func expandEnv(data []byte, getenv func(string) string) ([]byte, error) {
	if bytes.IndexByte(data, '$') < 0 {
		return data, nil
	}
	var (
		out  = make([]byte, 0, len(data))
		errs []error
		line = 1
	)
	for i := 0; i < len(data); i++ {
		b := data[i]
		if b == '\n' {
			line++
		}
		if b != '$' || i+1 == len(data) {
			out = append(out, b)
			continue
		}
		switch data[i+1] {
		case '$':
			out = append(out, '$')
			i++
		case '{':
			end := bytes.IndexAny(data[i+2:], "}\n")
			if end < 0 || data[i+2+end] != '}' {
				errs = append(errs, fmt.Errorf("line %d: unterminated ${ (write $$ for a literal $)", line))
				out = append(out, b)
				continue
			}
			ref := string(data[i+2 : i+2+end])
			name, def, hasDef := strings.Cut(ref, ":-")
			if !validEnvName(name) {
				errs = append(errs, fmt.Errorf("line %d: bad variable name in ${%s}", line, ref))
			} else if v := getenv(name); v != "" || !hasDef {
				out = append(out, v...)
			} else {
				out = append(out, def...)
			}
			i += 2 + end
		default:
			out = append(out, b)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("expand environment: %w", errors.Join(errs...))
	}
	return out, nil
}

// validEnvName reports whether s is a shell variable name.
func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// recordAPIKeyEnv fills Provider.APIKeyEnv from the unexpanded text: a
// provider whose api_key is exactly "${VAR}" (or "${VAR:-default}") records
// VAR. It decodes the raw text leniently into a shadow of the providers list
// and gives up quietly when that text does not line up with the expanded one.
func recordAPIKeyEnv(c *Config, raw []byte) {
	if len(c.Providers) == 0 || !bytes.Contains(raw, []byte("${")) {
		return
	}
	var shadow struct {
		Providers []struct {
			APIKey string `yaml:"api_key"`
		} `yaml:"providers"`
	}
	if err := yaml.Unmarshal(raw, &shadow); err != nil || len(shadow.Providers) != len(c.Providers) {
		return
	}
	for i, p := range shadow.Providers {
		if name, ok := soleEnvRef(p.APIKey); ok {
			c.Providers[i].APIKeyEnv = name
		}
	}
}

// soleEnvRef returns VAR when s is exactly "${VAR}" or "${VAR:-default}".
func soleEnvRef(s string) (string, bool) {
	s = strings.TrimSpace(s)
	inner, ok := strings.CutPrefix(s, "${")
	if !ok {
		return "", false
	}
	inner, ok = strings.CutSuffix(inner, "}")
	if !ok || strings.ContainsAny(inner, "}\n") {
		return "", false
	}
	name, _, _ := strings.Cut(inner, ":-")
	if !validEnvName(name) {
		return "", false
	}
	return name, true
}
