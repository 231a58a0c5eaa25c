package usagev1_test

import (
	"bytes"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// protoRoot is the proto/ directory, relative to this package.
const protoRoot = "../../.."

// TestGeneratedCodeIsCurrent regenerates usage.pb.go from usage.proto and
// fails when the committed file differs: run scripts/proto.sh after editing
// the schema. The protoc version line of the header is ignored so any protoc
// release may regenerate; protoc-gen-go must match go.mod's protobuf module.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	protoc, plugin := generators(t)

	out := t.TempDir()
	cmd := exec.Command(protoc,
		"-I", protoRoot,
		"--plugin=protoc-gen-go="+plugin,
		"--go_out="+out,
		"--go_opt=paths=source_relative",
		"tollgate/usage/v1/usage.proto")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, msg)
	}

	got, err := os.ReadFile(filepath.Join(out, "tollgate", "usage", "v1", "usage.pb.go"))
	if err != nil {
		t.Fatalf("read regenerated code: %v", err)
	}
	want, err := os.ReadFile("usage.pb.go")
	if err != nil {
		t.Fatalf("read committed code: %v", err)
	}
	if !bytes.Equal(withoutProtocVersion(got), withoutProtocVersion(want)) {
		t.Fatalf("usage.pb.go is stale: run scripts/proto.sh and commit the result")
	}
}

// generators finds protoc and a protoc-gen-go of the pinned version, or
// skips the test (fails it when CI=true).
func generators(t *testing.T) (protoc, plugin string) {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format+" (skipped; CI=true makes this fail)", args...)
	}

	protoc, err := exec.LookPath("protoc")
	if err != nil {
		unavailable("protoc not found: install protobuf-compiler")
	}
	plugin = findPlugin()
	if plugin == "" {
		unavailable("protoc-gen-go not found: run scripts/proto.sh")
	}
	have, err := exec.Command(plugin, "--version").Output()
	if err != nil {
		unavailable("run %s --version: %v", plugin, err)
	}
	want := pinnedVersion(t)
	if got := strings.TrimSpace(strings.TrimPrefix(string(have), "protoc-gen-go")); got != want {
		unavailable("%s is %s, go.mod pins %s: run scripts/proto.sh", plugin, got, want)
	}
	return protoc, plugin
}

// findPlugin returns protoc-gen-go from PATH, GOBIN or GOPATH/bin, or "".
func findPlugin() string {
	if p, err := exec.LookPath("protoc-gen-go"); err == nil {
		return p
	}
	dirs := []string{os.Getenv("GOBIN")}
	for _, gp := range filepath.SplitList(build.Default.GOPATH) {
		dirs = append(dirs, filepath.Join(gp, "bin"))
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, "protoc-gen-go")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	return ""
}

// pinnedVersion is the google.golang.org/protobuf version go.mod requires.
func pinnedVersion(t *testing.T) string {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join(protoRoot, "..", "go.mod"))
	if err != nil {
		t.Fatalf("read go.mod: %v", err)
	}
	for line := range strings.Lines(string(mod)) {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "require" {
			f = f[1:]
		}
		if len(f) >= 2 && f[0] == "google.golang.org/protobuf" {
			return f[1]
		}
	}
	t.Fatal("go.mod does not require google.golang.org/protobuf")
	return ""
}

// withoutProtocVersion drops the "// \tprotoc  vX" header line, which names
// the protoc release that happened to run.
func withoutProtocVersion(src []byte) []byte {
	var b bytes.Buffer
	for line := range bytes.Lines(src) {
		if bytes.HasPrefix(line, []byte("// \tprotoc ")) {
			continue
		}
		b.Write(line)
	}
	return b.Bytes()
}

func TestWithoutProtocVersion(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{
			name: "drops protoc line only",
			in:   "// versions:\n// \tprotoc-gen-go v1.36.12\n// \tprotoc        v3.21.12\npackage x\n",
			want: "// versions:\n// \tprotoc-gen-go v1.36.12\npackage x\n",
		},
		{
			name: "keeps other lines",
			in:   "package x\n// protoc is mentioned\n",
			want: "package x\n// protoc is mentioned\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(withoutProtocVersion([]byte(tt.in))); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
