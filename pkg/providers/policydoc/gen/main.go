// Gen writes the parameter-policy tables of docs/providers.md from the
// translating kinds' policies. Run it from the repository root:
//
//	go run ./pkg/providers/policydoc/gen
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tollgate/tollgate/pkg/providers/policydoc"
)

func main() {
	out := flag.String("o", "docs/providers.md", "the page to rewrite between its markers")
	flag.Parse()
	if err := policydoc.Write(*out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
