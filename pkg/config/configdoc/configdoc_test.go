package configdoc

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// copySource copies package config's non-test source into a temporary
// directory, with edit applied to the file named name.
func copySource(t *testing.T, name string, edit func(string) string) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join("..", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(src)
		if filepath.Base(f) == name {
			edited := edit(text)
			if edited == text {
				t.Fatalf("the edit of %s changed nothing", name)
			}
			text = edited
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestUndocumentedFound removes the comment of one field, a leaf and then
// a section, and checks that Undocumented names it and Generate refuses.
func TestUndocumentedFound(t *testing.T) {
	tests := []struct {
		file, comment, want string
	}{
		{"config.go", "\t// DuplicateWindow is the span of the usage stream's server-side\n\t// dedupe by Nats-Msg-Id. Default 2m.\n", "nats.duplicate_window (NATS.DuplicateWindow)"},
		{"routing.go", "\t// Circuit configures the per-target circuit breaker; a target is a\n\t// provider and an upstream model.\n", "routing.circuit (Routing.Circuit)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			dir := copySource(t, tt.file, func(s string) string { return strings.Replace(s, tt.comment, "", 1) })
			d, err := ReadDocs(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := d.Undocumented(); !slices.Equal(got, []string{tt.want}) {
				t.Errorf("Undocumented = %q, want [%s]", got, tt.want)
			}
			if _, err := Generate(dir); err == nil || !strings.Contains(err.Error(), "no doc comment") {
				t.Errorf("Generate with %s undocumented: err %v, want no doc comment", tt.want, err)
			}
		})
	}
}

// TestReference checks what the reference says for keys whose type,
// default and class come from different places.
func TestReference(t *testing.T) {
	out, err := Generate("..")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(out)
	for _, want := range []string{
		// ApplyDefaults, with a byte size.
		"### `usage.batch_bytes`\n\nType: integer (bytes). Default: `262144` (256 KiB). Needs a restart: held from start by the usage publisher and its spool.\n\n`batch_bytes` is",
		// A default the reader applies.
		"### `budget.leases.ttl`\n\nType: duration. Default: `30s`.",
		// A default ApplyDefaults applies under a condition.
		"Default: `0s`; `1m` when `discovery_url` or `jwks_url` is set.",
		// A default copied from another key.
		"### `models[].retry.deadline`\n\nType: duration. Default: the value of `routing.retry.deadline`. Applied by a reload.",
		// A reload key with a condition.
		"### `models[].cache.ttl`\n\nType: duration. Default: `0s`. Applied by a reload, except when a model sets it",
		// A section shows its type's detail.
		"### `routing.circuit`\n\nA section with the keys below.\n\n`circuit` configures the per-target circuit breaker; a target is a provider and an upstream model.\n\nA target that trips it",
		"### `models[]`\n\nA list; each element has the keys below.",
		"### `prices.*`\n\nA map by name; each entry has the keys below.",
		"| `nats.data_dir` | nats.data_dir was removed",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the reference lacks %q", want)
		}
	}
}

func TestDuration(t *testing.T) {
	for in, want := range map[string]string{"2m0s": "2m", "9600h0m0s": "9600h", "1h30m0s": "1h30m", "200ms": "200ms", "0s": "0s", "1m30s": "1m30s"} {
		d, err := time.ParseDuration(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := duration(d); got != want {
			t.Errorf("duration(%s) = %s, want %s", in, got, want)
		}
	}
}
