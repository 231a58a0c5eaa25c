package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/auth"
)

// keysCommands are `tollctl keys create|list|revoke|rotate`.
func keysCommands() []command {
	return []command{
		{
			use:     "create",
			summary: "create an API key (tg-...) for a principal and print it once",
			long: "--sub and --dept are required. With --json, one JSON object with id, key and the principal. " +
				"The gateway keeps only the key's hash: store the key when it is shown.",
			example: `tollctl keys create --sub nightly-eval --dept research --team nlp --models 'gpt-4o*' --budget key:*:50:month --expires 720h
tollctl keys create --sub ci --dept eng --rpm 600 --json`,
			setup: setupKeysCreate,
		},
		{
			use:     "list",
			summary: "list the API keys (never their secrets)",
			example: `tollctl keys list
tollctl keys list --json`,
			setup: setupKeysList,
		},
		{
			use:     "revoke ID",
			summary: "revoke an API key on every gateway",
			example: `tollctl keys revoke 3f9c0a61d2b84e57 --nats nats://127.0.0.1:4222`,
			setup:   setupKeysChange(false),
		},
		{
			use:     "rotate ID",
			summary: "give an API key a new secret (same id and principal) and print it once; the old one stops working",
			long:    "With --json, one JSON object with id, key and the principal.",
			example: `tollctl keys rotate 3f9c0a61d2b84e57 --json`,
			setup:   setupKeysChange(true),
		},
	}
}

// keyStore opens the key bucket with the NATS flags; its changes are
// recorded on the audit stream.
func (n *natsFlags) keyStore(ctx context.Context, a *app) (*apikey.Store, func(), error) {
	nc, js, err := n.connect()
	if err != nil {
		return nil, nil, err
	}
	kv, err := apikey.EnsureBucket(ctx, js, 0)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return apikey.NewStore(kv, a.now, audit.NewRecorder(js, audit.Options{Timeout: 5 * time.Second, Now: a.now})), nc.Close, nil
}

// notAudited reports a change that was made but whose audit event was
// lost: the command still prints what it did, then fails.
func notAudited(err error) error {
	if errors.Is(err, audit.ErrNotRecorded) {
		return fmt.Errorf("the change is made, but %w", err)
	}
	return nil
}

// budgetFlags is a repeatable --budget SCOPE:VALUE:USD:PERIOD.
type budgetFlags []auth.BudgetClaim

func (b *budgetFlags) String() string { return "" }

// Type names the value in pflag's errors.
func (b *budgetFlags) Type() string { return "budget" }

func (b *budgetFlags) Set(s string) error {
	parts := strings.Split(s, ":")
	if len(parts) != 4 {
		return fmt.Errorf("want SCOPE:VALUE:USD:PERIOD, e.g. key:*:10:month")
	}
	usd, err := strconv.ParseFloat(parts[2], 64)
	if err != nil {
		return fmt.Errorf("amount %q: %w", parts[2], err)
	}
	*b = append(*b, auth.BudgetClaim{Scope: parts[0], Value: parts[1], AmountUSD: usd, Period: parts[3]})
	return nil
}

// keyOutput is what create and rotate print with --json: the Key and,
// once, its token.
type keyOutput struct {
	apikey.Key
	Token string `json:"key"`
}

func setupKeysCreate(a *app, fs *pflag.FlagSet) func([]string) error {
	var nf natsFlags
	nf.register(a, fs)
	var spec apikey.Key
	fs.StringVar(&spec.Subject, "sub", "", "subject the key acts as; required")
	fs.StringVar(&spec.Dept, "dept", "", "department; required")
	fs.StringVar(&spec.Team, "team", "", "team")
	fs.StringVar(&spec.Project, "project", "", "project")
	fs.StringVar(&spec.Name, "name", "", "a name to recognise the key by (\"nightly-eval\")")
	models := fs.String("models", "", "comma-separated model globs the key may use (default all models)")
	var budgets budgetFlags
	fs.Var(&budgets, "budget", "a spend limit `SCOPE:VALUE:USD:PERIOD` (scope key, subject, team, dept or project; period day, month or total); repeatable")
	fs.Int64Var(&spec.RPM, "rpm", 0, "requests-per-minute limit of the key (0: none)")
	fs.Int64Var(&spec.TPM, "tpm", 0, "tokens-per-minute limit of the key (0: none)")
	fs.StringVar(&spec.Priority, "priority", "", "the highest request priority of the key (a name of the gateway's priority.levels; default priority.default)")
	expires := fs.String("expires", "", "when the key stops working: a duration from now (720h) or an RFC 3339 time (default never)")
	by := fs.String("by", "", "who creates the key, kept with it and in the audit log (default: the OS user name)")
	asJSON := jsonFlag(fs)
	return func(args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected arguments %q", errUsage, args)
		}
		if spec.Subject == "" || spec.Dept == "" {
			return fmt.Errorf("%w: give --sub and --dept", errUsage)
		}
		if *models != "" {
			spec.Models = splitList(*models)
		}
		spec.Budgets = budgets
		if *expires != "" {
			t, err := parseExpires(*expires, a.now())
			if err != nil {
				return fmt.Errorf("%w: --expires: %v", errUsage, err)
			}
			spec.ExpiresAt = t
		}
		spec.CreatedBy = *by
		if spec.CreatedBy == "" {
			spec.CreatedBy = "tollctl:" + a.actor("")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = audit.WithActor(ctx, a.actor(*by))
		s, done, err := nf.keyStore(ctx, a)
		if err != nil {
			return err
		}
		defer done()
		tok, k, err := s.Create(ctx, spec)
		if err != nil && notAudited(err) == nil {
			return err
		}
		if perr := a.printKey(tok, k, *asJSON, "created"); perr != nil {
			return perr
		}
		return notAudited(err)
	}
}

// parseExpires reads a duration from now or an RFC 3339 time.
func parseExpires(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("duration %s is not in the future", s)
		}
		return now.Add(d).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("want a duration (720h) or an RFC 3339 time, got %q", s)
	}
	return t.UTC(), nil
}

// printKey shows a new token once: as JSON, or as text with a warning.
func (a *app) printKey(tok string, k apikey.Key, asJSON bool, what string) error {
	if asJSON {
		return json.NewEncoder(a.stdout).Encode(keyOutput{Key: k, Token: tok})
	}
	fmt.Fprintf(a.stdout, "%s API key %s for %s (dept %s)\n%s\n", what, k.ID, k.Subject, k.Dept, tok)
	fmt.Fprintln(a.stderr, "the key is shown only now: store it; the gateway keeps only its hash")
	return nil
}

func setupKeysList(a *app, fs *pflag.FlagSet) func([]string) error {
	var nf natsFlags
	nf.register(a, fs)
	asJSON := jsonFlag(fs)
	return func(args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected arguments %q", errUsage, args)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, done, err := nf.keyStore(ctx, a)
		if err != nil {
			return err
		}
		defer done()
		keys, err := s.List(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(a.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(keys)
		}
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tSUB\tDEPT\tTEAM\tPROJECT\tCREATED\tBY\tEXPIRES\tSTATUS")
		for _, k := range keys {
			status := "active"
			switch {
			case !k.RevokedAt.IsZero():
				status = "revoked " + k.RevokedAt.Format(time.RFC3339)
			case !k.ExpiresAt.IsZero() && !a.now().Before(k.ExpiresAt):
				status = "expired"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Subject, k.Dept, k.Team, k.Project,
				k.CreatedAt.Format(time.RFC3339), k.CreatedBy, formatTime(k.ExpiresAt), status)
		}
		return tw.Flush()
	}
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339)
}

// setupKeysChange is `keys rotate ID` (rotate) or `keys revoke ID`.
func setupKeysChange(rotate bool) func(a *app, fs *pflag.FlagSet) func([]string) error {
	return func(a *app, fs *pflag.FlagSet) func([]string) error {
		var nf natsFlags
		nf.register(a, fs)
		var asJSON *bool
		if rotate {
			asJSON = jsonFlag(fs)
		}
		actor := fs.String("actor", "", "who makes the change, for the audit log (default: the OS user name)")
		return func(args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("%w: give exactly one key ID", errUsage)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ctx = audit.WithActor(ctx, a.actor(*actor))
			s, done, err := nf.keyStore(ctx, a)
			if err != nil {
				return err
			}
			defer done()
			if rotate {
				tok, k, err := s.Rotate(ctx, args[0])
				if err != nil && notAudited(err) == nil {
					return err
				}
				if perr := a.printKey(tok, k, *asJSON, "rotated"); perr != nil {
					return perr
				}
				return notAudited(err)
			}
			if _, err = s.Revoke(ctx, args[0]); err != nil && notAudited(err) == nil {
				return err
			}
			fmt.Fprintf(a.stdout, "revoked API key %s: every gateway refuses it once its watch delivers the change\n", args[0])
			return notAudited(err)
		}
	}
}
