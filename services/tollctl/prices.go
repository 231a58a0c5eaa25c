package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/spf13/pflag"

	"github.com/tollgate/tollgate/pkg/pricing"
)

// setupPricesImport is `tollctl prices import FILE --format litellm|models.dev`.
func setupPricesImport(a *app, fset *pflag.FlagSet) func([]string) error {
	format := fset.String("format", "", "format of FILE: litellm (model_prices_and_context_window.json) or models.dev (api.json); required")
	providers := fset.String("provider", "", "comma-separated providers to import (litellm_provider, or models.dev provider ids in order of preference); required for models.dev")
	version := fset.String("version", "", "version of the new table, recorded on every event priced with it (default FORMAT-YYYY-MM-DD, today)")
	base := fset.String("base", "", "price table `FILE` to diff against (default --out when it exists, else the embedded table)")
	out := fset.String("out", "", "write the new table to `FILE` (prices.yaml format) after showing the diff; without it only the diff is shown")
	keep := fset.Bool("keep", false, "keep the base table's entries the imported file lacks (nothing is removed)")
	showSkipped := fset.Bool("show-skipped", false, "list the file's entries that were not imported, with the reason")
	return func(args []string) error {
		files := args
		if len(files) != 1 || *format == "" {
			return fmt.Errorf("%w: give FILE and --format litellm|models.dev", errUsage)
		}
		if *format != pricing.FormatLiteLLM && *format != pricing.FormatModelsDev {
			return fmt.Errorf("%w: --format %q: want litellm or models.dev", errUsage, *format)
		}
		data, err := os.ReadFile(files[0])
		if err != nil {
			return err
		}
		prices, skips, err := pricing.Import(*format, data, splitList(*providers))
		if err != nil {
			return err
		}
		from, fromName, err := baseTable(*base, *out)
		if err != nil {
			return err
		}
		if *keep {
			for _, m := range from.Models() {
				if _, ok := prices[m]; !ok {
					prices[m], _ = from.Price(m)
				}
			}
		}
		v := *version
		if v == "" {
			v = *format + "-" + a.now().UTC().Format("2006-01-02")
		}
		to := pricing.NewTable(v, prices)
		changes := pricing.Diff(from, to)
		if err := printDiff(a.stdout, changes, skips, *showSkipped, fromName, from.Version, to.Version); err != nil {
			return err
		}
		if *out == "" {
			return nil
		}
		if err := writeFileAtomic(*out, func(w io.Writer) error {
			_, err := w.Write(to.Marshal())
			return err
		}); err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.stdout, "wrote %s (version %s, %d models)\n", *out, to.Version, len(to.Models()))
		return err
	}
}

// baseTable is the table an import is compared with: base, else out when
// it exists, else the embedded table.
func baseTable(base, out string) (*pricing.Table, string, error) {
	name := base
	if name == "" && out != "" {
		if _, err := os.Stat(out); err == nil {
			name = out
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, "", err
		}
	}
	if name == "" {
		return pricing.Default(), "the embedded table", nil
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, "", err
	}
	t, err := pricing.Parse(b)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	return t, name, nil
}

func printDiff(w io.Writer, changes []pricing.Change, skips []pricing.Skip, showSkipped bool, fromName, fromVersion, toVersion string) error {
	fmt.Fprintf(w, "price table %s against %s (version %s):\n", toVersion, fromName, fromVersion)
	n := map[byte]int{}
	for _, c := range changes {
		n[c.Kind]++
		fmt.Fprintln(w, c)
	}
	if showSkipped {
		for _, s := range skips {
			fmt.Fprintf(w, "! %s: %s\n", s.Model, s.Reason)
		}
	}
	_, err := fmt.Fprintf(w, "%d added, %d changed, %d removed; %d entries of the file not imported\n", n['+'], n['~'], n['-'], len(skips))
	return err
}
