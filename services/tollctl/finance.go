package main

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/finance"
	"github.com/tollgate/tollgate/pkg/pricing"
)

// setupExplain is `tollctl explain REQUEST_ID`.
func setupExplain(a *app, fs *pflag.FlagSet) func([]string) error {
	var cf chFlags
	cf.register(a, fs)
	prices := fs.String("prices", "", "extra price file (a price book), for events priced with a version other than the embedded one")
	cfgFile := flagConfig.string(a, fs)
	asJSON := jsonFlag(fs)
	return func(args []string) error {
		if len(args) != 1 {
			return fmt.Errorf("%w: give one request id", errUsage)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var tables []*pricing.Table
		if *prices != "" {
			b, err := os.ReadFile(*prices)
			if err != nil {
				return err
			}
			t, err := pricing.Parse(b)
			if err != nil {
				return fmt.Errorf("parse %s: %w", *prices, err)
			}
			tables = append(tables, t)
		}
		if *cfgFile != "" {
			c, err := a.loadConfig(*cfgFile)
			if err != nil {
				return err
			}
			t, err := c.PriceTable()
			if err != nil {
				return fmt.Errorf("config %s: %w", *cfgFile, err)
			}
			tables = append(tables, t)
		}
		st, err := cf.open(ctx)
		if err != nil {
			return err
		}
		defer st.Close()
		c, err := finance.Explain(ctx, st.Conn(), args[0], tables...)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(a.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(c)
		}
		return c.WriteText(a.stdout)
	}
}

// setupSimulate is `tollctl simulate --budgets FILE --since 30d`.
func setupSimulate(a *app, fs *pflag.FlagSet) func([]string) error {
	var cf chFlags
	cf.register(a, fs)
	file := fs.String("budgets", "", "YAML list of proposed limits, as the config's budgets section (scope, value, amount_usd, period)")
	since := fs.String("since", "30d", "start of the history: RFC 3339, YYYY-MM-DD or a duration ago")
	until := fs.String("until", "", "end of the history (default now)")
	show := fs.Int("show", 50, "refusals to list (all are counted)")
	return func(args []string) error {
		if len(args) > 0 || *file == "" {
			return fmt.Errorf("%w: give --budgets FILE", errUsage)
		}
		from, err := parseWhen(*since, a.now())
		if err != nil {
			return fmt.Errorf("%w: --since: %v", errUsage, err)
		}
		to := a.now()
		if *until != "" {
			if to, err = parseWhen(*until, a.now()); err != nil {
				return fmt.Errorf("%w: --until: %v", errUsage, err)
			}
		}
		b, err := os.ReadFile(*file)
		if err != nil {
			return err
		}
		var proposed []config.BudgetLimit
		if err := yaml.Unmarshal(b, &proposed); err != nil {
			var wrapped struct {
				Budgets []config.BudgetLimit `yaml:"budgets"`
			}
			if yaml.Unmarshal(b, &wrapped) != nil {
				return fmt.Errorf("parse %s: %w", *file, err)
			}
			proposed = wrapped.Budgets
		}
		limits, err := budget.ParseLimits(proposed)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		st, err := cf.open(ctx)
		if err != nil {
			return err
		}
		defer st.Close()
		sim, err := finance.Simulate(ctx, st.Conn(), limits, from, to)
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "%d requests from %s to %s: %d would have been refused, saving $%s of $%s\n",
			sim.Events, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), len(sim.Refusals),
			pricing.FormatUSD(sim.SavedNano), pricing.FormatUSD(sim.SpentNano+sim.SavedNano))
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		if len(sim.SavedBy) > 0 {
			fmt.Fprintln(tw, "\nLIMIT\tSAVED USD")
			for _, k := range sortedKeys(sim.SavedBy) {
				fmt.Fprintf(tw, "%s\t%s\n", k, pricing.FormatUSD(sim.SavedBy[k]))
			}
		}
		if len(sim.Refusals) > 0 {
			fmt.Fprintln(tw, "\nTIME\tREQUEST\tREFUSED BY\tSPENT BEFORE\tCOST SAVED")
			for i, r := range sim.Refusals {
				if i == *show {
					fmt.Fprintf(tw, "... %d more\n", len(sim.Refusals)-i)
					break
				}
				fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s\t%s\n", r.Time.Format(time.RFC3339), r.RequestID, r.Limit, r.Value,
					pricing.FormatUSD(r.SpentNano), pricing.FormatUSD(r.SavedNano))
			}
		}
		return tw.Flush()
	}
}

func sortedKeys(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// setupStatement is `tollctl statement --dept D --month YYYY-MM`.
func setupStatement(a *app, fs *pflag.FlagSet) func([]string) error {
	var cf chFlags
	cf.register(a, fs)
	dept := fs.String("dept", "", "department")
	month := fs.String("month", "", "month, YYYY-MM (UTC)")
	keyFile := fs.String("key", "", "Ed25519 private key: PEM (PKCS #8) or a file of the 32-byte seed, raw or hex")
	dir := fs.String("dir", ".", "directory of the statements: the previous month's is read from it, the new one written to it")
	return func(args []string) error {
		if len(args) > 0 || *dept == "" || *month == "" || *keyFile == "" {
			return fmt.Errorf("%w: give --dept, --month and --key", errUsage)
		}
		key, err := readKey(*keyFile)
		if err != nil {
			return err
		}
		m, err := time.Parse("2006-01", *month)
		if err != nil {
			return fmt.Errorf("%w: --month %q: want YYYY-MM", errUsage, *month)
		}
		var prev *finance.Statement
		prevPath := filepath.Join(*dir, statementName(*dept, m.AddDate(0, -1, 0).Format("2006-01"))+".json")
		if b, err := os.ReadFile(prevPath); err == nil {
			prev = &finance.Statement{}
			if err := json.Unmarshal(b, prev); err != nil {
				return fmt.Errorf("read %s: %w", prevPath, err)
			}
		} else if !os.IsNotExist(err) {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		st, err := cf.open(ctx)
		if err != nil {
			return err
		}
		defer st.Close()
		s, err := finance.BuildStatement(ctx, st.Conn(), *dept, *month, a.now())
		if err != nil {
			return err
		}
		s.Sign(prev, key)
		base := filepath.Join(*dir, statementName(*dept, *month))
		if err := os.WriteFile(base+".json", append(s.Canonical(), '\n'), 0o644); err != nil {
			return err
		}
		f, err := os.Create(base + ".csv")
		if err != nil {
			return err
		}
		if err := s.WriteCSV(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		link := "first of its chain"
		if prev != nil {
			link = "linked to " + prev.Month
		}
		fmt.Fprintf(a.stdout, "%s.json and .csv: %s %s, $%s over %d requests, %s, sha256 %s\n", base, *dept, *month,
			pricing.FormatUSD(s.Total.CostNanoUSD), s.Total.Requests, link, s.Hash())
		return nil
	}
}

// statementName is the file name (without extension) of a statement.
func statementName(dept, month string) string {
	safe := strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == 0 {
			return '_'
		}
		return r
	}, dept)
	return "statement-" + safe + "-" + month
}

// setupStatementVerify is `tollctl statement verify DIR|FILES`.
func setupStatementVerify(a *app, fs *pflag.FlagSet) func([]string) error {
	pubHex := fs.String("pubkey", "", "expected Ed25519 public key, hex (default: the key each chain names)")
	return func(args []string) error {
		if len(args) == 0 {
			return fmt.Errorf("%w: give a directory or statement files", errUsage)
		}
		var files []string
		for _, p := range args {
			fi, err := os.Stat(p)
			if err != nil {
				return err
			}
			if !fi.IsDir() {
				files = append(files, p)
				continue
			}
			m, _ := filepath.Glob(filepath.Join(p, "statement-*.json"))
			files = append(files, m...)
		}
		var pub ed25519.PublicKey
		if *pubHex != "" {
			b, err := hex.DecodeString(*pubHex)
			if err != nil || len(b) != ed25519.PublicKeySize {
				return fmt.Errorf("%w: --pubkey: want %d bytes of hex", errUsage, ed25519.PublicKeySize)
			}
			pub = b
		}
		var stmts []*finance.Statement
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			s := &finance.Statement{}
			if err := json.Unmarshal(b, s); err != nil {
				return fmt.Errorf("read %s: %w", f, err)
			}
			stmts = append(stmts, s)
		}
		if len(stmts) == 0 {
			return fmt.Errorf("no statements in %v", args)
		}
		if err := finance.Verify(stmts, pub); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "%d statements verified\n", len(stmts))
		return nil
	}
}

// readKey reads an Ed25519 private key: PEM PKCS #8, or a 32-byte seed raw
// or in hex.
func readKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if blk, _ := pem.Decode(b); blk != nil {
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		ek, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("parse %s: not an Ed25519 key", path)
		}
		return ek, nil
	}
	if len(b) == ed25519.SeedSize {
		return ed25519.NewKeyFromSeed(b), nil
	}
	if seed, err := hex.DecodeString(strings.TrimSpace(string(b))); err == nil && len(seed) == ed25519.SeedSize {
		return ed25519.NewKeyFromSeed(seed), nil
	}
	return nil, fmt.Errorf("%s: want a PEM PKCS #8 Ed25519 key or a 32-byte seed (raw or hex)", path)
}
