// Gen writes the configuration reference, docs/configuration.md, from
// package config. Run it from the repository root:
//
//	go run ./pkg/config/configdoc/gen
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tollgate/tollgate/pkg/config/configdoc"
)

func main() {
	src := flag.String("src", "pkg/config", "the directory of package config's source")
	out := flag.String("o", "docs/configuration.md", "the file to write")
	flag.Parse()
	if err := configdoc.Write(*src, *out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
