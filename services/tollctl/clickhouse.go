package main

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/tollgate/tollgate/pkg/chstore"
)

// chFlags are the connection flags of the commands that read or write
// ClickHouse (replay, reconcile, explain, simulate, statement, export).
type chFlags struct {
	addr, database, user, password string
	// fromEnv is set when TOLLGATE_CLICKHOUSE gave addr; fs tells whether
	// the command line did.
	fromEnv bool
	fs      *pflag.FlagSet
}

// register adds the global --clickhouse flag and the ClickHouse database
// and user to fs; the password comes from TOLLGATE_CLICKHOUSE_PASSWORD or
// the --clickhouse DSN, never from a flag other users could see.
func (c *chFlags) register(a *app, fs *pflag.FlagSet) {
	flagClickHouse.stringVar(a, fs, &c.addr)
	fs.StringVar(&c.database, "database", "tollgate", "ClickHouse database, when --clickhouse names none")
	fs.StringVar(&c.user, "ch-user", "default", "ClickHouse user, when --clickhouse names none")
	c.password = a.getenv("TOLLGATE_CLICKHOUSE_PASSWORD")
	c.fromEnv = a.getenv(flagClickHouse.env) != ""
	c.fs = fs
}

// named reports whether the command line or the environment named a
// ClickHouse server, rather than the default.
func (c *chFlags) named() bool {
	return c.fromEnv || c.fs.Changed(flagClickHouse.name)
}

// open connects to ClickHouse with the flags.
func (c *chFlags) open(ctx context.Context) (*chstore.Store, error) {
	o, err := parseClickHouseDSN(c.addr, c.password)
	if err != nil {
		return nil, err
	}
	if o.Database == "" {
		o.Database = c.database
	}
	if o.User == "" {
		o.User = c.user
	}
	return chstore.Open(ctx, o)
}
