package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/user"
	"time"

	"github.com/spf13/pflag"

	"github.com/tollgate/tollgate/pkg/audit"
)

// actor is who runs a changing command, for its audit event: flag when
// given, else $USER, else the OS user name, else "unknown".
func (a *app) actor(flag string) string {
	if flag != "" {
		return flag
	}
	if u := a.getenv("USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "unknown"
}

// setupAudit lists the audit stream: every operator change since --since,
// oldest first, as text lines or JSON lines. It reads NATS only, so it
// works without ClickHouse.
func setupAudit(a *app, fs *pflag.FlagSet) func([]string) error {
	var nf natsFlags
	nf.register(a, fs)
	since := fs.String("since", "24h", "first event's time: RFC 3339 time, YYYY-MM-DD, or a duration ago (30d, 12h); empty for all")
	asJSON := jsonFlag(fs)
	return func(args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: audit takes no arguments", errUsage)
		}
		var from time.Time
		if *since != "" {
			t, err := parseWhen(*since, a.now())
			if err != nil {
				return fmt.Errorf("%w: --since: %v", errUsage, err)
			}
			from = t
		}
		nc, js, err := nf.connect()
		if err != nil {
			return err
		}
		defer nc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		events, err := audit.List(ctx, js, from)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(a.stdout)
			for _, e := range events {
				if err := enc.Encode(e); err != nil {
					return err
				}
			}
			return nil
		}
		for _, e := range events {
			fmt.Fprintf(a.stdout, "%s  %s  %s  %s  %s\n", e.Time.UTC().Format(time.RFC3339), e.Actor, e.Action, e.Target, e.Summary)
		}
		return nil
	}
}
