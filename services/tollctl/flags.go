package main

import (
	"github.com/spf13/pflag"
)

// globalFlag is a flag several commands read: each of them registers it
// through the same globalFlag, so it has one name, default, environment
// variable and help text everywhere. A command registers only the global
// flags it reads, so that one it ignores is refused as unknown instead of
// being accepted and dropped (`tollctl token --json` prints no JSON).
type globalFlag struct {
	name string
	// env, when set and not empty, replaces def; the command line
	// replaces both.
	env   string
	def   string
	usage string
}

// The global flags, in the order the help lists them.
var (
	flagNATS = globalFlag{name: "nats", env: "TOLLGATE_NATS_URL",
		usage: "NATS `URL` (default: the config's nats.url, else nats://127.0.0.1:4222, where make run listens)"}
	flagConfig = globalFlag{name: "config", env: "TOLLGATE_CONFIG",
		usage: "gateway config `FILE`: its nats section (URL, credentials, TLS), and what the command's description says it reads"}
	flagClickHouse = globalFlag{name: "clickhouse", env: "TOLLGATE_CLICKHOUSE", def: "127.0.0.1:9000",
		usage: "ClickHouse native-protocol `ADDR`: host:port[,host:port...] or clickhouse://user:password@host:port/database; the password may also come from TOLLGATE_CLICKHOUSE_PASSWORD"}
	flagJSON = globalFlag{name: "json", usage: "print JSON instead of text"}

	globalFlags = []globalFlag{flagNATS, flagConfig, flagClickHouse, flagJSON}
)

// help is the flag's help text with its environment variable.
func (g globalFlag) help() string {
	if g.env == "" {
		return g.usage
	}
	return g.usage + " (env " + g.env + ")"
}

// stringVar registers g on fs with p as its value: g's default, replaced by
// its environment variable when that is set. The help shows the default,
// never the environment's value (it may hold a password), so it reads the
// same on every machine.
func (g globalFlag) stringVar(a *app, fs *pflag.FlagSet, p *string) {
	fs.StringVar(p, g.name, g.def, g.help())
	if g.env != "" {
		if v := a.getenv(g.env); v != "" {
			*p = v
		}
	}
}

// string is stringVar with a new variable, as pflag's String.
func (g globalFlag) string(a *app, fs *pflag.FlagSet) *string {
	p := new(string)
	g.stringVar(a, fs, p)
	return p
}

// jsonFlag registers --json on fs.
func jsonFlag(fs *pflag.FlagSet) *bool {
	return fs.Bool(flagJSON.name, false, flagJSON.help())
}

// isGlobal reports whether name is one of the global flags.
func isGlobal(name string) bool {
	for _, g := range globalFlags {
		if g.name == name {
			return true
		}
	}
	return false
}
