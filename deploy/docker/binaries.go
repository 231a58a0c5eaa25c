package docker

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// BinDir is where the image puts every program; a container names one as
// BinDir + "/" + program (e.g. /usr/local/bin/gateway).
const BinDir = "/usr/local/bin"

var (
	// buildRun matches the build stage's `go build ... -o /out/ ./services/a ./services/b`,
	// over continued lines.
	buildRun = regexp.MustCompile(`go build [^\n]*?-o (\S+)((?:\s+\./services/[a-z0-9_-]+)+)`)
	copyOut  = regexp.MustCompile(`(?m)^COPY --from=build (\S+) (\S+)\s*$`)
)

// Binaries returns the absolute paths of the programs the Dockerfile puts
// in its image: the packages its `go build -o DIR/` builds, for the COPY
// that brings DIR into the runtime stage. Tests of the manifests use it so
// a container naming a program the image lacks fails.
func Binaries(dockerfile string) ([]string, error) {
	src := strings.ReplaceAll(dockerfile, "\\\n", " ")
	m := buildRun.FindStringSubmatch(src)
	if m == nil {
		return nil, errors.New("no `go build -o DIR ./services/...` in the Dockerfile")
	}
	out := m[1]
	dest := ""
	for _, c := range copyOut.FindAllStringSubmatch(src, -1) {
		if c[1] == out {
			dest = c[2]
		}
	}
	if dest == "" {
		return nil, fmt.Errorf("the runtime stage copies nothing from %s", out)
	}
	var bins []string
	for _, pkg := range strings.Fields(m[2]) {
		bins = append(bins, path.Join(dest, path.Base(pkg)))
	}
	return bins, nil
}
