package config_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/config/configdoc"
)

// reference is the generated configuration reference.
const reference = "../../docs/configuration.md"

// TestEveryKeyDocumented fails when a field of a struct reachable from
// Config, a section or a key, has no doc comment: the comment is the
// key's entry in the configuration reference.
func TestEveryKeyDocumented(t *testing.T) {
	d, err := configdoc.ReadDocs(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(config.KeyFields()) < 150 {
		t.Fatalf("KeyFields found %d keys; the walk is broken", len(config.KeyFields()))
	}
	if missing := d.Undocumented(); len(missing) > 0 {
		t.Errorf("%d config fields have no doc comment (say what the key does, its unit and its limits):\n%s",
			len(missing), strings.Join(missing, "\n"))
	}
}

// TestConfigurationReference fails when docs/configuration.md is not what
// the generator writes from this package; -update rewrites it.
func TestConfigurationReference(t *testing.T) {
	want, err := configdoc.Generate(".")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(reference)
	if err != nil && !*config.Update {
		t.Fatal(err)
	}
	if bytes.Equal(got, want) {
		return
	}
	if !*config.Update {
		t.Fatalf("docs/configuration.md is stale: run `%s` from the repository root (or make docs, or go test ./pkg/config -run TestConfigurationReference -update)", configdoc.Command)
	}
	if err := os.WriteFile(reference, want, 0o644); err != nil {
		t.Fatal(err)
	}
}
