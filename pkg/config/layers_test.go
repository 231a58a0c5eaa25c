package config

import (
	"os/exec"
	"strings"
	"testing"
)

// TestConfigIsALeaf: everything reads pkg/config, so it imports only
// leaves of the module: tables with no imports of their own module
// (provider kinds, the built-in price table, the console's roles), never a package that does
// work (usage, budget, gateway), which would point the layers upward.
func TestConfigIsALeaf(t *testing.T) {
	leaves := map[string]bool{
		"github.com/tollgate/tollgate/pkg/providers/kind": true,
		"github.com/tollgate/tollgate/pkg/pricing":        true,
		"github.com/tollgate/tollgate/pkg/access":         true,
	}
	out, err := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, imp := range strings.Fields(string(out)) {
		if strings.HasPrefix(imp, "github.com/tollgate/tollgate/") && !leaves[imp] {
			t.Errorf("pkg/config imports %s", imp)
		}
	}
	for leaf := range leaves {
		out, err := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, leaf).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", leaf, err, out)
		}
		for _, imp := range strings.Fields(string(out)) {
			if strings.HasPrefix(imp, "github.com/tollgate/tollgate/") {
				t.Errorf("%s, imported by pkg/config, imports %s: it is no longer a leaf", leaf, imp)
			}
		}
	}
}
