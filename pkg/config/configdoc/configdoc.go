// Package configdoc generates the configuration reference,
// docs/configuration.md, from package config: every key's path and type
// from the Config struct, its default from what Config.ApplyDefaults
// applies, whether a reload applies it from config.Keys, and its meaning
// from the field's doc comment in the package's source.
package configdoc

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/profiling"
	"github.com/tollgate/tollgate/pkg/ratelimit"
	"github.com/tollgate/tollgate/pkg/tracing"
	"github.com/tollgate/tollgate/pkg/usage"
)

// Command regenerates the reference from the repository root.
const Command = "go run ./pkg/config/configdoc/gen"

// Docs holds the doc comments of package config's struct types and of
// their fields, read from its source.
type Docs struct {
	Types  map[string]string // type name -> doc
	Fields map[string]string // "Type.Field" -> doc (the comment above the field)
}

// ReadDocs parses the non-test Go files of package config in dir.
func ReadDocs(dir string) (*Docs, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	d := &Docs{Types: map[string]string{}, Fields: map[string]string{}}
	fset := token.NewFileSet()
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		if f.Name.Name != "config" {
			return nil, fmt.Errorf("%s: package %s, want config", name, f.Name.Name)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				doc := ts.Doc
				if doc == nil {
					doc = gd.Doc
				}
				d.Types[ts.Name.Name] = doc.Text()
				for _, fld := range st.Fields.List {
					for _, n := range fld.Names {
						d.Fields[ts.Name.Name+"."+n.Name] = fld.Doc.Text()
					}
				}
			}
		}
	}
	return d, nil
}

// Field returns the doc comment of a key's field.
func (d *Docs) Field(k config.KeyField) string {
	return d.Fields[k.Owner.Name()+"."+k.Field.Name]
}

// Undocumented returns the keys, sections included, whose field has no
// doc comment, as "path (Type.Field)".
func (d *Docs) Undocumented() []string {
	var out []string
	for _, k := range config.KeyFields() {
		if strings.TrimSpace(d.Field(k)) == "" {
			out = append(out, k.Path+" ("+k.Owner.Name()+"."+k.Field.Name+")")
		}
	}
	return out
}

// sections group the top-level keys of the reference, in order; every
// top-level key is in exactly one.
var sections = []struct {
	title string
	keys  []string
}{
	{"Listener and limits", []string{"listen", "body_limit", "max_header_bytes", "read_timeout", "write_timeout", "idle_timeout", "shutdown_grace"}},
	{"Logging", []string{"log"}},
	{"Admin listener", []string{"admin"}},
	{"Web console", []string{"console"}},
	{"Profiling", []string{"profiling"}},
	{"Tracing", []string{"tracing"}},
	{"Authentication", []string{"auth"}},
	{"Providers", []string{"providers", "files_provider"}},
	{"Models", []string{"models"}},
	{"Routing", []string{"routing"}},
	{"Budgets", []string{"budgets", "budget_overcommit", "budget"}},
	{"Priorities", []string{"priority"}},
	{"Rate limits", []string{"rate_limits", "rate_limit"}},
	{"NATS", []string{"nats"}},
	{"ClickHouse", []string{"clickhouse"}},
	{"Usage events", []string{"usage"}},
	{"Prices", []string{"price_book", "prices"}},
}

// units name what a number or string key counts, shown with its type.
var units = map[string]string{
	"body_limit":                           "bytes",
	"max_header_bytes":                     "bytes",
	"auth.cache_size":                      "tokens",
	"providers[].max_conns":                "connections",
	"providers[].max_response_body":        "bytes",
	"models[].targets[].weight":            "relative share",
	"models[].targets[].rpm":               "requests per minute",
	"models[].targets[].tpm":               "tokens per minute",
	"models[].retry.max_attempts":          "calls",
	"routing.retry.max_attempts":           "calls",
	"routing.circuit.failures":             "consecutive failed calls",
	"routing.circuit.failure_rate":         "fraction, 0 to 1",
	"routing.circuit.min_requests":         "calls",
	"budgets[].amount_usd":                 "USD, decimal string, read exactly as nano-USD",
	"budgets[].degrade[].at":               "fraction of the limit, 0 to 1",
	"budget.leases.max_slice_usd":          "USD, decimal string, read exactly as nano-USD",
	"rate_limits[].rpm":                    "requests per minute",
	"rate_limits[].tpm":                    "tokens per minute",
	"tracing.sample_ratio":                 "fraction, above 0 and at most 1",
	"nats.replicas":                        "servers",
	"usage.buffer":                         "events",
	"usage.batch_size":                     "events",
	"usage.batch_bytes":                    "bytes",
	"usage.spool_max_bytes":                "bytes",
	"prices.*.input":                       "USD per million tokens, decimal string",
	"prices.*.output":                      "USD per million tokens, decimal string",
	"prices.*.cached_input":                "USD per million tokens, decimal string",
	"prices.*.cache_write":                 "USD per million tokens, decimal string",
	"prices.*.per_request":                 "USD per call, decimal string",
	"prices.*.per_image":                   "USD per image, decimal string",
	"prices.*.per_image_by":                "USD per image, decimal strings",
	"prices.*.per_audio_second":            "USD per second of audio, decimal string",
	"prices.*.per_1m_characters":           "USD per million characters, decimal string",
	"prices.*.long.above_prompt_tokens":    "prompt tokens",
	"prices.*.long.input":                  "USD per million tokens, decimal string",
	"prices.*.long.output":                 "USD per million tokens, decimal string",
	"prices.*.long.cached_input":           "USD per million tokens, decimal string",
	"prices.*.long.cache_write":            "USD per million tokens, decimal string",
	"prices.*.tiers.flex.input":            "USD per million tokens, decimal string",
	"prices.*.tiers.flex.output":           "USD per million tokens, decimal string",
	"prices.*.tiers.flex.cached_input":     "USD per million tokens, decimal string",
	"prices.*.tiers.priority.input":        "USD per million tokens, decimal string",
	"prices.*.tiers.priority.output":       "USD per million tokens, decimal string",
	"prices.*.tiers.priority.cached_input": "USD per million tokens, decimal string",
}

// appliedElsewhere are defaults that the code reading a key applies to
// its zero value, rather than Config.ApplyDefaults, by the constant the
// code uses.
var appliedElsewhere = map[string]any{
	"nats.url":                       nats.DefaultURL,
	"budget.leases.ttl":              budget.DefaultLeaseTTL,
	"budget.leases.refill_wait":      budget.DefaultRefillWait,
	"budget.leases.first_grant_wait": budget.DefaultFirstGrantWait,
	"rate_limit.presence_ttl":        ratelimit.DefaultPresenceTTL,
	"usage.flush_delay":              usage.DefaultFlushDelay,
	"tracing.service_name":           tracing.DefaultServiceName,
	"profiling.application_name":     profiling.DefaultApplicationName,
	"priority.levels":                config.DefaultPriorityLevels,
}

// derived are keys whose default is another key's value: a probe sets the
// other key and checks that ApplyDefaults copies it.
var derived = []struct{ key, from string }{
	{"models[].targets[].model", "models[].name"},
	{"models[].retry.max_attempts", "routing.retry.max_attempts"},
	{"models[].retry.backoff_base", "routing.retry.backoff_base"},
	{"models[].retry.backoff_max", "routing.retry.backoff_max"},
	{"models[].retry.deadline", "routing.retry.deadline"},
	{"models[].fallback_on", "routing.fallback_on"},
}

// conditions are defaults ApplyDefaults applies only when another key is
// set: a probe sets it and reads the keys that were zero without it.
var conditions = []struct {
	set   string
	value any
	when  string
}{
	{"auth.issuers[].jwks_url", "https://idp.example/jwks.json", "when `discovery_url` or `jwks_url` is set"},
	{"models[].name", "prefix/*", "on a wildcard route"},
}

// Generate returns the configuration reference; dir holds package
// config's source.
func Generate(dir string) ([]byte, error) {
	d, err := ReadDocs(dir)
	if err != nil {
		return nil, err
	}
	defaults, err := defaultTexts()
	if err != nil {
		return nil, err
	}
	classes := map[string]config.KeyClass{}
	for _, k := range config.Keys {
		for _, p := range config.ExpandPath(k.Path) {
			classes[p] = k
		}
	}
	keys := config.KeyFields()
	for u := range units {
		if !slices.ContainsFunc(keys, func(k config.KeyField) bool { return k.Leaf && k.Path == u }) {
			return nil, fmt.Errorf("configdoc: units names %s, which is no key", u)
		}
	}
	var b bytes.Buffer
	b.WriteString(intro)
	b.WriteString("## Sections\n\n")
	for _, s := range sections {
		fmt.Fprintf(&b, "- [%s](#%s)\n", s.title, anchor(s.title))
	}
	b.WriteString("- [Removed keys](#removed-keys)\n")
	seen := map[string]bool{}
	for _, s := range sections {
		fmt.Fprintf(&b, "\n## %s\n", s.title)
		for _, top := range s.keys {
			n := 0
			for _, k := range keys {
				if k.Path != top && !under(k.Path, top) {
					continue
				}
				n++
				seen[top] = true
				doc := d.Field(k)
				if doc == "" {
					return nil, fmt.Errorf("configdoc: key %s (%s.%s) has no doc comment", k.Path, k.Owner.Name(), k.Field.Name)
				}
				// The comment opens with the Go name; the reader of the
				// file knows the key's.
				if rest, ok := strings.CutPrefix(doc, k.Field.Name+" "); ok {
					doc = "`" + k.Path[strings.LastIndexAny(k.Path, ".]")+1:] + "` " + rest
				}
				fmt.Fprintf(&b, "\n### `%s`\n\n", display(k))
				if !k.Leaf {
					fmt.Fprintf(&b, "%s.\n\n%s", sectionKind(k), paragraph(doc))
					if td := detail(d.Types[elem(k.Field.Type).Name()]); td != "" {
						fmt.Fprintf(&b, "\n%s", paragraph(td))
					}
					continue
				}
				kc, ok := classes[k.Path]
				if !ok {
					return nil, fmt.Errorf("configdoc: key %s has no row in config.Keys", k.Path)
				}
				fmt.Fprintf(&b, "Type: %s. Default: %s. %s\n\n%s", typeText(k), defaults[k.Path], classText(kc), paragraph(doc))
			}
			if n == 0 {
				return nil, fmt.Errorf("configdoc: section %q names %s, which is no key", s.title, top)
			}
		}
	}
	b.WriteString("\n## Removed keys\n\nA file that sets one of these keys is refused, with this advice.\n\n| Key | Advice |\n| --- | --- |\n")
	for _, rk := range config.RemovedKeys {
		fmt.Fprintf(&b, "| `%s` | %s |\n", rk.Path, rk.Advice)
	}
	for _, k := range keys {
		if top, _, _ := strings.Cut(k.Path, "."); !seen[strings.TrimSuffix(top, "[]")] {
			return nil, fmt.Errorf("configdoc: key %s is in no section", k.Path)
		}
	}
	return b.Bytes(), nil
}

const intro = `# Configuration reference

<!-- Generated from pkg/config by ` + "`" + Command + "`" + ` (make docs); edit the field comments in pkg/config, not this file. -->

The gateway, the budget and analytics services and tollctl read one YAML file,
given with ` + "`-config FILE`" + `. [deploy/dev/tollgate.yaml](../deploy/dev/tollgate.yaml), the
file ` + "`make run`" + ` uses, is a working example.

- ` + "`${VAR}`" + ` and ` + "`${VAR:-default}`" + ` anywhere in the file are replaced from the
  environment before parsing (the default when the variable is empty or unset);
  ` + "`$$`" + ` is a literal ` + "`$`" + `. Quote a value that expands to YAML syntax: ` + "`\"${VAR}\"`" + `.
- Unknown keys are errors, reported with their line. A key removed from
  Tollgate is refused with what replaces it (see [Removed keys](#removed-keys)).
- Every key is read by the code (a test fails on a key nothing reads).
- A reload (SIGHUP or ` + "`POST /admin/reload`" + `) applies the keys marked "reload" to
  new requests. A reload that changes a key marked "restart" is refused,
  naming the key, and the running config stays.
- ` + "`tollctl config check FILE`" + ` validates a file (and reads its ` + "`price_book`" + ` and
  issuer key files, as the gateway does at start) and prints every problem with
  its key path, or ` + "`ok:`" + ` with the counts and the price table's version.

Paths: ` + "`models[].cache.ttl`" + ` is the ` + "`cache.ttl`" + ` key of every element of the
` + "`models`" + ` list; ` + "`prices.*.input`" + ` is the ` + "`input`" + ` key of every entry of the ` + "`prices`" + `
map. Durations are Go durations (` + "`300ms`, `30s`, `5m`, `2h`" + `). Sizes are bytes.
Money is a decimal string of USD (` + "`\"12.50\"`" + `), read exactly into integer
nano-USD, never through a float. A default of "none" is an empty value; the
meaning says what that does.

`

// under reports whether path p is inside the top-level section top.
func under(p, top string) bool {
	return strings.HasPrefix(p, top+".") || strings.HasPrefix(p, top+"[].")
}

// display is a key's path as the reference heads it: a list section with
// "[]", a map section with ".*".
func display(k config.KeyField) string {
	if k.Leaf {
		return k.Path
	}
	switch deref(k.Field.Type).Kind() {
	case reflect.Slice:
		return k.Path + "[]"
	case reflect.Map:
		return k.Path + ".*"
	}
	return k.Path
}

// elem is the struct type of a section's field.
func elem(t reflect.Type) reflect.Type {
	t = deref(t)
	if t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = deref(t.Elem())
	}
	return t
}

// detail is a type's doc comment without its first sentence, the Go
// summary that the field's own comment says for the reader of the file.
func detail(doc string) string {
	doc = strings.Join(strings.Fields(doc), " ")
	if _, rest, ok := strings.Cut(doc, ". "); ok {
		return rest
	}
	return ""
}

func sectionKind(k config.KeyField) string {
	switch deref(k.Field.Type).Kind() {
	case reflect.Slice:
		return "A list; each element has the keys below"
	case reflect.Map:
		return "A map by name; each entry has the keys below"
	}
	return "A section with the keys below"
}

func deref(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Pointer {
		return t.Elem()
	}
	return t
}

// anchor is the GitHub anchor of a heading.
func anchor(title string) string {
	return strings.ReplaceAll(strings.ToLower(title), " ", "-")
}

// paragraph turns a doc comment into Markdown: lines joined into
// paragraphs, blank lines kept.
func paragraph(doc string) string {
	var b strings.Builder
	for _, para := range strings.Split(strings.TrimSpace(doc), "\n\n") {
		b.WriteString(strings.Join(strings.Fields(para), " "))
		b.WriteString("\n\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

var durationType = reflect.TypeFor[time.Duration]()

// typeText is a leaf key's type, with its unit.
func typeText(k config.KeyField) string {
	t := deref(k.Field.Type)
	var s string
	switch {
	case t == durationType:
		s = "duration"
	case t.Kind() == reflect.String:
		s = "string"
	case t.Kind() == reflect.Bool:
		s = "boolean"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		s = "integer"
	case t.Kind() == reflect.Float64:
		s = "number"
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		s = "list of strings"
	case t.Kind() == reflect.Map && t.Elem().Kind() == reflect.String:
		s = "map of string to string"
	default:
		s = t.String()
	}
	if u := units[k.Path]; u != "" {
		s += " (" + u + ")"
	}
	return s
}

func classText(k config.KeyClass) string {
	switch {
	case k.Class == config.Restart:
		return "Needs a restart: held from start by " + k.Why + "."
	case k.Why != "":
		return "Applied by a reload, except when " + k.Why + "."
	}
	return "Applied by a reload."
}

// defaultTexts returns the default of every leaf key as the reference
// shows it, read from configs that Config.ApplyDefaults filled.
func defaultTexts() (map[string]string, error) {
	base := probe(nil)
	out := map[string]string{}
	for _, k := range config.KeyFields() {
		if !k.Leaf {
			continue
		}
		v := valueAt(reflect.ValueOf(base).Elem(), k.Path)
		if e, ok := appliedElsewhere[k.Path]; ok {
			if !v.IsZero() {
				return nil, fmt.Errorf("configdoc: %s is defaulted by ApplyDefaults: remove it from appliedElsewhere", k.Path)
			}
			v = reflect.ValueOf(e)
		}
		text := format(k.Path, v)
		if v.IsZero() {
			for _, c := range conditions {
				if c.set == k.Path {
					continue
				}
				p := probe(map[string]any{c.set: c.value})
				if cv := valueAt(reflect.ValueOf(p).Elem(), k.Path); !cv.IsZero() {
					text += "; " + format(k.Path, cv) + " " + c.when
				}
			}
		}
		out[k.Path] = text
	}
	for _, dv := range derived {
		sentinel := sentinelFor(valueAt(reflect.ValueOf(base).Elem(), dv.from).Type())
		p := probe(map[string]any{dv.from: sentinel})
		got := valueAt(reflect.ValueOf(p).Elem(), dv.key).Interface()
		if !reflect.DeepEqual(got, sentinel) {
			return nil, fmt.Errorf("configdoc: %s does not default to %s (set to %v, got %v)", dv.key, dv.from, sentinel, got)
		}
		out[dv.key] = "the value of `" + dv.from + "`"
	}
	return out, nil
}

func sentinelFor(t reflect.Type) any {
	switch {
	case t == durationType:
		return 7 * time.Second
	case t.Kind() == reflect.Int:
		return 7
	case t.Kind() == reflect.String:
		return "sentinel"
	case t.Kind() == reflect.Slice:
		return []string{"sentinel"}
	}
	panic("configdoc: no sentinel for " + t.String())
}

// probe returns a Config with one element in every list and one entry in
// every map of sections, the keys of set set to their values, and defaults
// applied.
func probe(set map[string]any) *config.Config {
	c := &config.Config{}
	fill(reflect.ValueOf(c).Elem())
	for path, val := range set {
		valueAt(reflect.ValueOf(c).Elem(), path).Set(reflect.ValueOf(val))
	}
	c.ApplyDefaults()
	return c
}

// fill gives every list of structs in v one element, every map of
// structs one entry and every pointer to a struct a value.
func fill(v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		if !v.Type().Field(i).IsExported() {
			continue
		}
		switch t := f.Type(); {
		case t.Kind() == reflect.Struct:
			fill(f)
		case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
			f.Set(reflect.New(t.Elem()))
			fill(f.Elem())
		case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
			f.Set(reflect.MakeSlice(t, 1, 1))
			fill(f.Index(0))
		case t.Kind() == reflect.Map && t.Elem().Kind() == reflect.Struct:
			e := reflect.New(t.Elem()).Elem()
			fill(e)
			f.Set(reflect.MakeMap(t))
			f.SetMapIndex(reflect.ValueOf("entry"), e)
		}
	}
}

// valueAt is the value at path in a config that fill prepared: the first
// element of a list, the entry of a map. Keys inside a map cannot be set.
func valueAt(v reflect.Value, path string) reflect.Value {
	for _, seg := range strings.Split(path, ".") {
		for v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if seg == "*" {
			v = v.MapIndex(v.MapKeys()[0])
			continue
		}
		name, list := strings.CutSuffix(seg, "[]")
		v = field(v, name)
		if list {
			v = v.Index(0)
		}
	}
	return v
}

// field is the field of struct v whose key is name.
func field(v reflect.Value, name string) reflect.Value {
	for i := range v.NumField() {
		if n, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ","); n == name {
			return v.Field(i)
		}
	}
	panic("configdoc: no key " + name + " in " + v.Type().String())
}

// format shows a default value.
func format(path string, v reflect.Value) string {
	if v.IsZero() {
		switch v.Kind() {
		case reflect.String, reflect.Slice, reflect.Map:
			return "none"
		}
	}
	switch x := v.Interface().(type) {
	case time.Duration:
		return "`" + duration(x) + "`"
	case string:
		return "`" + x + "`"
	case []string:
		return "`[" + strings.Join(x, ", ") + "]`"
	case int:
		s := "`" + strconv.Itoa(x) + "`"
		if strings.HasPrefix(units[path], "bytes") {
			s += size(int64(x))
		}
		return s
	case int64:
		s := "`" + strconv.FormatInt(x, 10) + "`"
		if strings.HasPrefix(units[path], "bytes") {
			s += size(x)
		}
		return s
	}
	return fmt.Sprintf("`%v`", v.Interface())
}

// duration writes d as Go parses it, without zero units: 2m, 9600h, 1h30m.
func duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// size adds a binary unit to a byte count that has one.
func size(n int64) string {
	for _, u := range []struct {
		name  string
		shift uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf(" (%d %s)", n>>u.shift, u.name)
		}
	}
	return ""
}

// Write regenerates the reference at path; dir holds package config's
// source.
func Write(dir, path string) error {
	out, err := Generate(dir)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}
