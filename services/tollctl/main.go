// Command tollctl is the Tollgate operator CLI: it mints development
// tokens, manages API keys, shows and checks spend, writes finance reports
// and runs operations on the usage stream. Run `tollctl help` for the
// commands and `tollctl help COMMAND` for one command's flags and
// examples; docs/tollctl.md is the same reference, generated from the
// commands by `go generate` (see reference.go).
package main

//go:generate go run . gen-docs ../../docs/tollctl.md

import (
	"errors"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// errUsage marks a command line that cannot be run as given (exit status 2).
var errUsage = errors.New("usage")

// errReported means the command already printed its problems (exit status 1).
var errReported = errors.New("problems reported")

// app is what commands read from and write to, so tests run them in-process.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	now            func() time.Time
}

// command is one subcommand. setup registers its flags on fs and returns the
// function that runs it with the positional arguments left after the flags
// (flags may come before, between or after them). A command without setup
// only groups its subcommands ("keys", "config").
type command struct {
	// use is the command's name and its positional arguments, as cobra's
	// Use: "revoke ID", "check FILE".
	use     string
	group   string // root commands only: the group the root help lists it under
	summary string // one line, lower case, no full stop
	// long says what summary has no room for: required flags, what --json
	// and --config mean for this command, its exit status when special.
	long    string
	example string
	// values lists the values shells complete for flags that take one
	// of a few words ("--to": clickhouse, budgets, ndjson).
	values map[string][]string
	setup  func(a *app, fs *pflag.FlagSet) func(args []string) error
	sub    []command
}

// The groups of the root help, in the order it lists them.
const (
	groupKeys    = "keys"
	groupSpend   = "spend"
	groupFinance = "finance"
	groupOps     = "ops"
)

// commands is the command tree under `tollctl`. New subcommands are one
// entry each.
func commands() []command {
	return []command{
		{
			use: "token", group: groupKeys,
			summary: "mint a JWT for an issuer and print it",
			long: "Prints the token alone on standard output. --sub is required. With --config, the issuer named by " +
				"--issuer (an auth.issuers entry) gives the iss claim, audience, claim names, kid, algorithm and " +
				"secret; flags given on the command line override them.",
			example: `# the dev config's issuer; its secret comes from $TOLLGATE_DEV_SECRET
tollctl token --config deploy/dev/tollgate.yaml --sub alice --dept research --models 'mock-*'
# an admin token for one hour, signed with a secret read from a file
tollctl token --sub ops --admin --ttl 1h --secret-file dev.secret`,
			setup: setupToken,
		},
		{
			use: "keys", group: groupKeys,
			summary: "manage API keys (tg-...): create, list, revoke, rotate",
			sub:     keysCommands(),
		},
		{
			use: "revoke", group: groupKeys,
			summary: "refuse a token (by jti) or every token of a subject on every gateway",
			long:    "Give exactly one of --jti or --sub.",
			example: `tollctl revoke --jti key-7f3a --reason "leaked in a build log"
tollctl revoke --sub mallory --actor alice`,
			setup: setupRevoke(false),
		},
		{
			use: "unrevoke", group: groupKeys,
			summary: "remove a revocation",
			long:    "Give exactly one of --jti or --sub.",
			example: `tollctl unrevoke --jti key-7f3a`,
			setup:   setupRevoke(true),
		},
		{
			use: "revocations", group: groupKeys,
			summary: "list the revoked key ids and subjects",
			example: `tollctl revocations --nats nats://127.0.0.1:4222`,
			setup:   setupRevocations,
		},
		{
			use: "budget", group: groupSpend,
			summary: "spend totals: show, migrate",
			sub: []command{
				{
					use:     "show",
					summary: "print spend totals (with limits, utilisation and forecasts given --config)",
					long: "With --config, each total gets the limit of the config's budgets that applies to it, its " +
						"utilisation and, for the current day and month, a forecast of the spend at the period's end.",
					example: `tollctl budget show --config tollgate.yaml --dept eng
tollctl budget show --team '*/ml' --period month --json`,
					values: map[string][]string{"period": {"day", "month", "total"}},
					setup:  setupBudgetShow,
				},
				{
					use:     "migrate",
					summary: "rebuild team and project totals by department (research/ml) from the usage stream and delete the flat ones (dry run unless --apply)",
					long:    "Stop the budget service before --apply.",
					example: `tollctl budget migrate --nats nats://127.0.0.1:4222          # prints the plan
tollctl budget migrate --nats nats://127.0.0.1:4222 --apply  # writes it`,
					setup: setupBudgetMigrate,
				},
			},
		},
		{
			use: "simulate", group: groupSpend,
			summary: "replay history against proposed limits: who would have been refused, and the saving",
			long:    "--budgets is required. The history is read from ClickHouse.",
			example: `tollctl simulate --budgets proposed.yaml --since 30d`,
			setup:   setupSimulate,
		},
		{
			use: "explain REQUEST_ID", group: groupFinance,
			summary: "show how a request's charge came about: principal, route, tokens, prices, cost",
			long: "Reads the request's usage event from ClickHouse. With --config, the price table the config's " +
				"price_book and prices build explains the events that config priced; --prices adds a price book " +
				"for events priced with another version.",
			example: `tollctl explain 01JF3Q8Z6M7R0V2KX4T9BNE5CW
tollctl explain 01JF3Q8Z6M7R0V2KX4T9BNE5CW --config tollgate.yaml --json`,
			setup: setupExplain,
		},
		{
			use: "statement", group: groupFinance,
			summary: "write a department's signed, hash-chained month statement (JSON and CSV)",
			long: "--dept, --month and --key are required. The previous month's statement in --dir, when there, " +
				"is linked into the new one's hash chain.",
			example: `tollctl statement --dept eng --month 2026-11 --key statement.key --dir statements`,
			setup:   setupStatement,
			sub: []command{{
				use:     "verify DIR|FILE...",
				summary: "check the signatures and hash chain of statements",
				example: `tollctl statement verify statements
tollctl statement verify statements --pubkey 3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29`,
				setup: setupStatementVerify,
			}},
		},
		{
			use: "export", group: groupFinance,
			summary: "export usage in standard formats: focus",
			sub: []command{{
				use:     "focus",
				summary: "write a month's usage as FOCUS 1.2 cost and usage rows (CSV or Parquet), equal to the ledger to the nano-dollar",
				long:    "--month is required.",
				example: `tollctl export focus --month 2026-11 --out focus-2026-11.parquet
tollctl export focus --month 2026-11 --dept eng > eng.csv`,
				values: map[string][]string{"format": {"csv", "parquet"}},
				setup:  setupExportFocus,
			}},
		},
		{
			use: "prices", group: groupFinance,
			summary: "price tables: import",
			sub: []command{{
				use:     "import FILE",
				summary: "read a public price file (LiteLLM, models.dev) into a versioned price table, showing added, changed and removed entries before writing",
				long:    "--format is required, and --provider for models.dev.",
				example: `tollctl prices import model_prices_and_context_window.json --format litellm --provider openai,anthropic
tollctl prices import api.json --format models.dev --provider openai --out prices.yaml`,
				values: map[string][]string{"format": {"litellm", "models.dev"}},
				setup:  setupPricesImport,
			}},
		},
		{
			use: "audit", group: groupOps,
			summary: "list operator changes (revocations, reloads, budget limits, keys) from the audit stream, newest last",
			long:    "With --json, one JSON object per event.",
			example: `tollctl audit --since 7d
tollctl audit --since 2026-12-01 --json`,
			setup: setupAudit,
		},
		{
			use: "replay", group: groupOps,
			summary: "re-read a range of the usage stream into ClickHouse, the spend totals of a period, or NDJSON",
			long: "--to ndjson (the default) prints the events; --to clickhouse inserts the ones ClickHouse lacks; " +
				"--to budgets recomputes the spend totals of one --period.",
			example: `tollctl replay --since 2026-11-01 --until 2026-12-01 --to clickhouse
tollctl replay --to budgets --period month:2026-11
tollctl replay --from-seq 1000 --to-seq 2000 --reprice prices.yaml > events.ndjson`,
			values: map[string][]string{"to": {"clickhouse", "budgets", "ndjson"}},
			setup:  setupReplay,
		},
		{
			use: "reconcile", group: groupOps,
			summary: "check that the mock, the usage stream, ClickHouse and the budget totals agree exactly (exit 1 when not)",
			long: "Exit status 0 when the sources agree, 1 when they differ, 2 when a source cannot be read. ClickHouse " +
				"is compared when --clickhouse or TOLLGATE_CLICKHOUSE names it; --config also gives the prices " +
				"(over the embedded table) for the mock's answers.",
			example: `tollctl reconcile --since 1h --clickhouse 127.0.0.1:9000 --mock http://127.0.0.1:9999 --wait 30s
tollctl reconcile --by-scope --json`,
			setup: setupReconcile,
		},
		{
			use: "verify", group: groupOps,
			summary: "conformance kit: a fault matrix against a gateway routed at mockllm (routing, fallback, billing, client)",
			long: "--token is required. The billing column is checked against the usage stream when --nats or " +
				"--config names one, else it says \"not checked\". Exit status 1 when a case fails.",
			example: `TOKEN=$(tollctl token --config deploy/verify/tollgate.yaml --sub verify --dept verify --models 'verify-*')
tollctl verify --gateway http://127.0.0.1:8090 --token "$TOKEN" --nats nats://127.0.0.1:4223`,
			setup: setupVerify,
		},
		{
			use: "spool", group: groupOps,
			summary: "a gateway's usage spool directory: recover",
			sub: []command{{
				use: "recover",
				summary: "publish what a gateway that never comes back left in its spool directory: its spooled events, " +
					"and one recovered event for each request it began and never billed",
				long: "--dir is required. Run it only once the gateway is gone for good (two processes on one directory " +
					"would share its producer id); a gateway that restarts on its directory does the same by itself. " +
					"Running it twice publishes nothing more. --dry-run lists the unfinished requests and what each would be billed.",
				example: `tollctl spool recover --dir /var/lib/tollgate/spool --dry-run
tollctl spool recover --dir /var/lib/tollgate/spool --nats nats://127.0.0.1:4222`,
				setup: setupSpoolRecover,
			}},
		},
		{
			use: "config", group: groupOps,
			summary: "config files: check",
			sub: []command{{
				use:     "check FILE",
				summary: "load and validate a config file, printing every problem",
				long: "Builds the price table (reading price_book) and loads the keys the issuers name, as the " +
					"gateway does at start. Exit status 1 when the file has problems, each printed on one line.",
				example: `tollctl config check deploy/dev/tollgate.yaml`,
				setup: func(a *app, _ *pflag.FlagSet) func([]string) error {
					return a.configCheck
				},
			}},
		},
	}
}

// run executes the command line args and returns the process exit status:
// 0 success, 1 failure, 2 bad usage.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{stdout: stdout, stderr: stderr, getenv: getenv, now: time.Now}
	return a.execute(newRoot(a), args)
}
