package anthropic

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"

	"github.com/tidwall/gjson"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// fixedNow is the clock of every test provider.
func fixedNow() time.Time { return time.Unix(1700000000, 0) }

// testProvider returns a provider for base with the test clock.
func testProvider(t testing.TB, base string) *Provider {
	t.Helper()
	p, err := New(Options{Name: "claude", BaseURL: base, APIKey: "sk-ant-test", Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// readFile reads a testdata file.
func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// goldenJSON checks that got is valid JSON equal, once indented, to the
// golden file; -update rewrites it.
func goldenJSON(t *testing.T, path string, got []byte) {
	t.Helper()
	if !json.Valid(got) {
		t.Fatalf("output is not valid JSON: %s", got)
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, got, "", "  "); err != nil {
		t.Fatal(err)
	}
	buf.WriteByte('\n')
	golden(t, path, buf.Bytes())
}

// golden checks got against the golden file byte for byte; -update
// rewrites it.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s:\n got: %s\nwant: %s", filepath.Base(path), got, want)
	}
}

// readFileErr reads a file, for callers without a testing.TB.
func readFileErr(path string) ([]byte, error) { return os.ReadFile(path) }

// gjsonGet reads path from a JSON body.
func gjsonGet(body []byte, path string) gjson.Result { return gjson.GetBytes(body, path) }
