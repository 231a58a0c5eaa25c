package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// unreadAllowed are the config keys no program code reads as a field,
// with why that is right.
var unreadAllowed = map[string]string{
	"routing.fallback_on": "ApplyDefaults copies it into every model's fallback_on that is not set, which the router reads",
}

// configFilesThatRead are the files of this package whose functions use
// the config (a logger, the price table, lookups by name) rather than
// check or default it; a field read only by validation, defaults or the
// loader counts as read by nothing.
var configFilesThatRead = []string{"log.go", "prices.go", "lookup.go", "priority.go", "console.go"}

// TestEveryKeyIsRead type-checks the module's programs and packages (not
// their tests) and fails for a config key whose field no code reads
// (a selector x.Field that is not the target of an assignment). Setting a
// key that nothing reads would pass `tollctl config check` and do nothing.
// Fields are told apart by their Go struct type, so keys of one type
// (routing.retry.* and models[].retry.*) count as read together.
func TestEveryKeyIsRead(t *testing.T) {
	read := fieldsRead(t)
	owners := map[string]string{} // key path -> Type.Field
	walkKeys(func(path, owner string) { owners[path] = owner })
	for _, path := range LeafKeys() {
		owner := owners[path]
		if owner == "" {
			t.Fatalf("key %s: no field found", path)
		}
		if read[owner] || unreadAllowed[path] != "" {
			continue
		}
		t.Errorf("config key %s (%s) is read by nothing outside validation and defaults: use it or remove it", path, owner)
	}
	for path := range unreadAllowed {
		if owner := owners[path]; owner == "" || read[owner] {
			t.Errorf("unreadAllowed lists %s, which is not an unread key: remove the entry", path)
		}
	}
}

// listedPackage is what fieldsRead needs of `go list -json`.
type listedPackage struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
	DepOnly    bool
	Error      *struct{ Err string }
}

// fieldsRead returns the fields of this package's struct types ("NATS.URL")
// that non-test code of the module reads, found with go/types on the
// packages' sources and the compiler's export data of their imports.
func fieldsRead(t *testing.T) map[string]bool {
	t.Helper()
	configPath := reflect.TypeFor[Config]().PkgPath()
	module := strings.TrimSuffix(configPath, "/pkg/config")
	cmd := exec.Command("go", "list", "-e", "-deps", "-export", "-json=ImportPath,Dir,GoFiles,Export,DepOnly,Error", module+"/...")
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	exports := map[string]string{}
	var pkgs []listedPackage
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		exports[p.ImportPath] = p.Export
		if !p.DepOnly && strings.HasPrefix(p.ImportPath, module+"/") {
			pkgs = append(pkgs, p)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, errors.New("no export data for " + path)
		}
		return os.Open(exports[path])
	})
	read := map[string]bool{}
	for _, p := range pkgs {
		var files, counted []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
			if p.ImportPath != configPath || slices.Contains(configFilesThatRead, name) {
				counted = append(counted, f)
			}
		}
		info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
		if _, err := (&types.Config{Importer: imp}).Check(p.ImportPath, fset, files, info); err != nil {
			t.Fatalf("type-check %s: %v", p.ImportPath, err)
		}
		for _, owner := range configFieldReads(counted, info, configPath) {
			read[owner] = true
		}
	}
	return read
}

// configFieldReads returns the fields of struct types of package
// configPath ("Type.Field") that selectors in files read; a selector
// assigned to is a write, not a read.
func configFieldReads(files []*ast.File, info *types.Info, configPath string) []string {
	written := map[*ast.SelectorExpr]bool{}
	in := func(pos token.Pos) bool {
		return slices.ContainsFunc(files, func(f *ast.File) bool { return f.FileStart <= pos && pos <= f.FileEnd })
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if as, ok := n.(*ast.AssignStmt); ok {
				for _, l := range as.Lhs {
					if sel, ok := l.(*ast.SelectorExpr); ok {
						written[sel] = true
					}
				}
			}
			return true
		})
	}
	var out []string
	for sel, s := range info.Selections {
		if s.Kind() != types.FieldVal || written[sel] || !in(sel.Pos()) {
			continue
		}
		if owner := fieldOwner(s); owner != nil && owner.Obj().Pkg() != nil && owner.Obj().Pkg().Path() == configPath {
			out = append(out, owner.Obj().Name()+"."+s.Obj().Name())
		}
	}
	return out
}

// fieldOwner is the named struct type that declares the field s selects,
// following embedded fields (rr.Value of a struct embedding
// config.RateLimit is RateLimit's); nil for an unnamed struct.
func fieldOwner(s *types.Selection) *types.Named {
	t := s.Recv()
	idx := s.Index()
	for i, n := range idx {
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		st, ok := t.Underlying().(*types.Struct)
		if !ok {
			return nil
		}
		if i == len(idx)-1 {
			named, _ := t.(*types.Named)
			return named
		}
		t = st.Field(n).Type()
	}
	return nil
}
