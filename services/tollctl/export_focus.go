package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/tollgate/tollgate/pkg/finance"
	"github.com/tollgate/tollgate/pkg/pricing"
)

// setupExportFocus is `tollctl export focus --month YYYY-MM`.
func setupExportFocus(a *app, fs *pflag.FlagSet) func([]string) error {
	var cf chFlags
	cf.register(a, fs)
	month := fs.String("month", "", "month to export, YYYY-MM (UTC); required")
	dept := fs.String("dept", "", "export this department only (default all)")
	format := fs.String("format", "", "csv or parquet (default: parquet for an --out FILE ending in .parquet, else csv)")
	out := fs.String("out", "", "`FILE` to write (default standard output)")
	account := fs.String("account", "tollgate", "BillingAccountId and BillingAccountName of every row")
	return func(args []string) error {
		if len(args) > 0 || *month == "" {
			return fmt.Errorf("%w: give --month YYYY-MM", errUsage)
		}
		if _, err := time.Parse("2006-01", *month); err != nil {
			return fmt.Errorf("%w: --month %q: want YYYY-MM", errUsage, *month)
		}
		f := *format
		if f == "" {
			f = "csv"
			if strings.HasSuffix(*out, ".parquet") {
				f = "parquet"
			}
		}
		write := map[string]func(io.Writer, []finance.FocusRow) error{
			"csv": finance.WriteFocusCSV, "parquet": finance.WriteFocusParquet,
		}[f]
		if write == nil {
			return fmt.Errorf("%w: --format %q: want csv or parquet", errUsage, f)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		st, err := cf.open(ctx)
		if err != nil {
			return err
		}
		defer st.Close()
		rows, err := finance.FocusExport(ctx, st.Conn(), finance.FocusOptions{Month: *month, Dept: *dept, Account: *account})
		if err != nil {
			return err
		}
		if *out == "" {
			w := bufio.NewWriter(a.stdout)
			if err := write(w, rows); err != nil {
				return err
			}
			return w.Flush()
		}
		if err := writeFileAtomic(*out, func(w io.Writer) error { return write(w, rows) }); err != nil {
			return err
		}
		var total int64
		for _, r := range rows {
			total += r.BilledCost
		}
		_, err = fmt.Fprintf(a.stdout, "wrote %s: %d FOCUS rows of %s, BilledCost %s USD\n", *out, len(rows), *month, pricing.FormatUSD(total))
		return err
	}
}

// writeFileAtomic writes name through a temporary file in its directory,
// renamed into place once complete, so a failed export leaves no partial
// file behind.
func writeFileAtomic(name string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	w := bufio.NewWriter(tmp)
	if err := write(w); err != nil {
		tmp.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
