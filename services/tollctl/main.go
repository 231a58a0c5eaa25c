// Command tollctl is the Tollgate operator CLI: it mints development
// tokens, manages API keys and checks configuration files. Run `tollctl help` for the list of
// commands and their flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
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
// function that runs it with the arguments left after the flags; help calls
// setup only to list the flags.
type command struct {
	args    string // positional arguments, for the usage line
	summary string
	setup   func(a *app, fs *flag.FlagSet) func(args []string) error
}

// commands maps a command line's leading words ("token", "config check") to
// the command they run. New subcommands (budget show, replay, revoke) are
// one entry each.
func commands() map[string]command {
	cmds := map[string]command{
		"token": {
			args:    "[flags]",
			summary: "mint a JWT for an issuer and print it",
			setup:   setupToken,
		},
		"audit": {
			args:    "[--since DURATION|RFC3339] [--json] [--nats URL]",
			summary: "list operator changes (revocations, reloads, budget limits, keys) from the audit stream, newest last",
			setup:   setupAudit,
		},
		"revoke": {
			args:    "--jti ID | --sub SUBJECT [--reason R] [--actor NAME]",
			summary: "refuse a token (by jti) or every token of a subject on every gateway",
			setup:   setupRevoke(false),
		},
		"unrevoke": {
			args:    "--jti ID | --sub SUBJECT [--actor NAME]",
			summary: "remove a revocation",
			setup:   setupRevoke(true),
		},
		"revocations": {
			args:    "[flags]",
			summary: "list the revoked key ids and subjects",
			setup:   setupRevocations,
		},
		"budget show": {
			args:    "[--dept D] [--team D/T] [--project D/P] [--period month] [--config FILE]",
			summary: "print spend totals (with limits and utilisation given --config)",
			setup:   setupBudgetShow,
		},
		"budget migrate": {
			args:    "[--apply] [--nats URL]",
			summary: "rebuild team and project totals by department (research/ml) from the usage stream and delete the flat ones (dry run unless --apply)",
			setup:   setupBudgetMigrate,
		},
		"replay": {
			args:    "--to clickhouse|budgets|ndjson [--since T] [--until T] [--from-seq N] [--to-seq N] [--reprice FILE]",
			summary: "re-read a range of the usage stream into ClickHouse, the spend totals of a period, or NDJSON",
			setup:   setupReplay,
		},
		"reconcile": {
			args:    "[--nats URL] [--clickhouse DSN] [--mock URL] [--since T] [--until T] [--wait D] [--by-scope] [--json]",
			summary: "check that the mock, the usage stream, ClickHouse and the budget totals agree exactly (exit 1 when not)",
			setup:   setupReconcile,
		},
		"explain": {
			args:    "[--prices FILE] [--config FILE] [--json] REQUEST_ID",
			summary: "show how a request's charge came about: principal, route, tokens, prices, cost",
			setup:   setupExplain,
		},
		"simulate": {
			args:    "--budgets FILE [--since 30d]",
			summary: "replay history against proposed limits: who would have been refused, and the saving",
			setup:   setupSimulate,
		},
		"statement": {
			args:    "--dept D --month YYYY-MM --key FILE [--dir DIR]",
			summary: "write a department's signed, hash-chained month statement (JSON and CSV)",
			setup:   setupStatement,
		},
		"export focus": {
			args:    "--month YYYY-MM [--dept D] [--format csv|parquet] [--out FILE]",
			summary: "write a month's usage as FOCUS 1.2 cost and usage rows (CSV or Parquet), equal to the ledger to the nano-dollar",
			setup:   setupExportFocus,
		},
		"prices import": {
			args:    "FILE --format litellm|models.dev [--provider P,...] [--out FILE] [--keep]",
			summary: "read a public price file (LiteLLM, models.dev) into a versioned price table, showing added, changed and removed entries before writing",
			setup:   setupPricesImport,
		},
		"statement verify": {
			args:    "DIR|FILES",
			summary: "check the signatures and hash chain of statements",
			setup:   setupStatementVerify,
		},
		"verify": {
			args:    "--gateway URL --token JWT|tg-KEY [--nats URL]",
			summary: "conformance kit: a fault matrix against a gateway routed at mockllm (routing, fallback, billing, client)",
			setup:   setupVerify,
		},
		"config check": {
			args:    "FILE",
			summary: "load and validate a config file, printing every problem",
			setup: func(a *app, _ *flag.FlagSet) func([]string) error {
				return a.configCheck
			},
		},
	}
	for name, c := range keysCommands() {
		cmds[name] = c
	}
	return cmds
}

// run executes the command line args and returns the process exit status:
// 0 success, 1 failure, 2 bad usage.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{stdout: stdout, stderr: stderr, getenv: getenv, now: time.Now}
	cmds := commands()
	if len(args) == 0 {
		usage(stderr, cmds)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout, cmds)
		return 0
	}
	name, rest, ok := lookup(cmds, args)
	if !ok {
		fmt.Fprintf(stderr, "tollctl: unknown command %s (run 'tollctl help')\n", unknown(cmds, args))
		return 2
	}
	cmd := cmds[name]
	fs := flag.NewFlagSet("tollctl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { commandUsage(stderr, name, cmd, a) }
	runCmd := cmd.setup(a, fs)
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // flag has printed the error and the usage
	}
	err := runCmd(fs.Args())
	var status exitStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &status):
		fmt.Fprintf(stderr, "tollctl %s: %v\n", name, err)
		return status.code
	case errors.Is(err, errReported):
		return 1
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "tollctl %s: %v\n", name, err)
		commandUsage(stderr, name, cmd, a)
		return 2
	default:
		fmt.Fprintf(stderr, "tollctl %s: %v\n", name, err)
		return 1
	}
}

// lookup finds the command named by the first one or two words of args and
// returns the arguments that follow its name.
func lookup(cmds map[string]command, args []string) (string, []string, bool) {
	if len(args) >= 2 {
		if name := args[0] + " " + args[1]; hasCommand(cmds, name) {
			return name, args[2:], true
		}
	}
	if hasCommand(cmds, args[0]) {
		return args[0], args[1:], true
	}
	return "", nil, false
}

// unknown describes a command line that names no command, quoting the group
// word's subcommands when the first word is one ("config" of "config check").
func unknown(cmds map[string]command, args []string) string {
	var subs []string
	for name := range cmds {
		if strings.HasPrefix(name, args[0]+" ") {
			subs = append(subs, name)
		}
	}
	if len(subs) == 0 {
		return fmt.Sprintf("%q", args[0])
	}
	slices.Sort(subs)
	return fmt.Sprintf("%q (want %s)", strings.Join(args[:min(2, len(args))], " "), strings.Join(subs, ", "))
}

func hasCommand(cmds map[string]command, name string) bool {
	_, ok := cmds[name]
	return ok
}

// usage lists every command and the flags of each.
func usage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for name := range cmds {
		names = append(names, name)
	}
	slices.Sort(names)
	fmt.Fprint(w, "tollctl is the Tollgate operator CLI.\n\nUsage:\n  tollctl <command> [flags] [arguments]\n\nCommands:\n")
	for _, name := range names {
		fmt.Fprintf(w, "  %-28s %s\n", name+" "+cmds[name].args, cmds[name].summary)
	}
	fmt.Fprintf(w, "  %-28s %s\n", "help", "show this help")
	a := &app{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }, now: time.Now}
	for _, name := range names {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		cmds[name].setup(a, fs)
		if hasFlags(fs) {
			fmt.Fprintf(w, "\nFlags of %s:\n", name)
			fs.SetOutput(w)
			fs.PrintDefaults()
		}
	}
}

// commandUsage prints one command's usage line and flags.
func commandUsage(w io.Writer, name string, cmd command, a *app) {
	fmt.Fprintf(w, "Usage: tollctl %s %s\n  %s\n", name, cmd.args, cmd.summary)
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	cmd.setup(a, fs)
	if hasFlags(fs) {
		fmt.Fprintln(w, "Flags:")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}
