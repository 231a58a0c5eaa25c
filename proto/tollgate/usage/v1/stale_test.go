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

// vtprotoOpts are the protoc-gen-go-vtproto options (as scripts/proto.sh
// passes them): the features generated and the pooled messages.
const vtprotoOpts = "features=marshal+size+unmarshal+unmarshal_unsafe+pool," +
	"pool=github.com/tollgate/tollgate/proto/tollgate/usage/v1.UsageBatch," +
	"pool=github.com/tollgate/tollgate/proto/tollgate/usage/v1.UsageEvent," +
	"pool=github.com/tollgate/tollgate/proto/tollgate/usage/v1.BudgetCheck"

// TestGeneratedCodeIsCurrent regenerates usage.pb.go and usage_vtproto.pb.go
// from usage.proto and fails when a committed file differs: run
// scripts/proto.sh after editing the schema. The protoc version line of the
// header is ignored so any protoc release may regenerate; protoc-gen-go must
// match go.mod's protobuf module, and usage_vtproto.pb.go names the
// protoc-gen-go-vtproto version that made it (scripts/proto.sh installs it).
func TestGeneratedCodeIsCurrent(t *testing.T) {
	protoc, plugin, vtplugin := generators(t)

	out := t.TempDir()
	cmd := exec.Command(protoc,
		"-I", protoRoot,
		"--plugin=protoc-gen-go="+plugin,
		"--go_out="+out,
		"--go_opt=paths=source_relative",
		"--plugin=protoc-gen-go-vtproto="+vtplugin,
		"--go-vtproto_out="+out,
		"--go-vtproto_opt=paths=source_relative,"+vtprotoOpts,
		"tollgate/usage/v1/usage.proto")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, msg)
	}

	for _, name := range []string{"usage.pb.go", "usage_vtproto.pb.go"} {
		got, err := os.ReadFile(filepath.Join(out, "tollgate", "usage", "v1", name))
		if err != nil {
			t.Fatalf("read regenerated code: %v", err)
		}
		want, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("read committed code: %v", err)
		}
		if !bytes.Equal(withoutProtocVersion(got), withoutProtocVersion(want)) {
			t.Errorf("%s is stale: run scripts/proto.sh and commit the result", name)
		}
	}
}

// generators finds protoc, a protoc-gen-go of the pinned version and
// protoc-gen-go-vtproto, or skips the test (fails it when CI=true).
func generators(t *testing.T) (protoc, plugin, vtplugin string) {
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
	plugin = findPlugin("protoc-gen-go")
	if plugin == "" {
		unavailable("protoc-gen-go not found: run scripts/proto.sh")
	}
	vtplugin = findPlugin("protoc-gen-go-vtproto")
	if vtplugin == "" {
		unavailable("protoc-gen-go-vtproto not found: run scripts/proto.sh")
	}
	have, err := exec.Command(plugin, "--version").Output()
	if err != nil {
		unavailable("run %s --version: %v", plugin, err)
	}
	want := pinnedVersion(t)
	if got := strings.TrimSpace(strings.TrimPrefix(string(have), "protoc-gen-go")); got != want {
		unavailable("%s is %s, go.mod pins %s: run scripts/proto.sh", plugin, got, want)
	}
	return protoc, plugin, vtplugin
}

// findPlugin returns the program name from PATH, GOBIN or GOPATH/bin, or "".
func findPlugin(name string) string {
	if p, err := exec.LookPath(name); err == nil {
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
		p := filepath.Join(d, name)
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
