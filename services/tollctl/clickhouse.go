package main

import (
	"context"
	"flag"

	"github.com/tollgate/tollgate/pkg/chstore"
)

// chFlags are the connection flags of the commands that read or write
// ClickHouse (replay, explain, simulate, statement).
type chFlags struct {
	addr, database, user, password string
}

func (c *chFlags) register(a *app, fs *flag.FlagSet) {
	def := a.getenv("TOLLGATE_CLICKHOUSE")
	if def == "" {
		def = "127.0.0.1:9000"
	}
	fs.StringVar(&c.addr, "clickhouse", def, "ClickHouse native address host:port (env TOLLGATE_CLICKHOUSE)")
	fs.StringVar(&c.database, "database", "tollgate", "ClickHouse database")
	fs.StringVar(&c.user, "ch-user", "default", "ClickHouse user")
	c.password = a.getenv("TOLLGATE_CLICKHOUSE_PASSWORD")
}

// open connects to ClickHouse with the flags.
func (c *chFlags) open(ctx context.Context) (*chstore.Store, error) {
	return chstore.Open(ctx, chstore.Options{Addr: c.addr, Database: c.database, User: c.user, Password: c.password})
}
