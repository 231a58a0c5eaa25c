package policydoc

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/providers"
)

var update = flag.Bool("update", false, "rewrite docs/providers.md")

// page is the Providers page.
const page = "../../../docs/providers.md"

// TestProvidersPage fails when the parameter-policy tables of
// docs/providers.md are not what the generator writes from the policies;
// -update rewrites them.
func TestProvidersPage(t *testing.T) {
	got, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Splice(got, Tables(Policies()))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, want) {
		return
	}
	if !*update {
		t.Fatalf("docs/providers.md is stale: run `%s` from the repository root (or make docs, or go test ./pkg/providers/policydoc -run TestProvidersPage -update)", Command)
	}
	if err := os.WriteFile(page, want, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTables checks that each kind's table lists every member once, with
// its action, and refusals with their reason.
func TestTables(t *testing.T) {
	for _, p := range Policies() {
		t.Run(p.Kind, func(t *testing.T) {
			doc := string(Tables([]*providers.ChatPolicy{p}))
			if !strings.Contains(doc, "### `"+p.Kind+"`") {
				t.Errorf("no heading for %s", p.Kind)
			}
			for _, param := range providers.ChatParams() {
				row := "| `" + param.String() + "` | " + p.Action(param).String() + " | "
				if n := strings.Count(doc, row); n != 1 {
					t.Errorf("%d rows %q, want 1", n, row)
				}
			}
			for _, line := range strings.Split(doc, "\n") {
				if strings.Contains(line, "| refuse | ") && !strings.Contains(line, p.Upstream) {
					t.Errorf("refusal %q does not name %s", line, p.Upstream)
				}
			}
		})
	}
}

func TestSplice(t *testing.T) {
	in := []byte("intro\n" + Begin + "\nold\n" + End + "\nrest\n")
	out, err := Splice(in, []byte("new\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "intro\n" + Begin + "\nnew\n" + End + "\nrest\n"; string(out) != want {
		t.Errorf("got %q, want %q", out, want)
	}
	if _, err := Splice([]byte("no markers"), nil); !errors.Is(err, ErrNoMarkers) {
		t.Errorf("err %v, want ErrNoMarkers", err)
	}
}
