package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/reconcile"
)

// exitStatus ends the command with its own exit status after printing err:
// reconcile exits 2 on an error, keeping 1 for sources that differ.
type exitStatus struct {
	code int
	err  error
}

func (e exitStatus) Error() string { return e.err.Error() }
func (e exitStatus) Unwrap() error { return e.err }

// setupReconcile is `tollctl reconcile`: check that the mock, the usage
// stream, ClickHouse and the budget totals agree. Exit 0 when they do, 1
// when they differ, 2 on an error.
func setupReconcile(a *app, fs *pflag.FlagSet) func([]string) error {
	var nf natsFlags
	nf.register(a, fs)
	var cf chFlags
	cf.register(a, fs)
	stream := fs.String("stream", "", "usage stream (default TOLLGATE_USAGE)")
	mock := fs.String("mock", "", "compare a mockllm server's ledger: its URL, e.g. http://127.0.0.1:9999")
	since := fs.String("since", "", "start of the range by event time: RFC 3339, YYYY-MM-DD, or a duration ago (30d, 12h)")
	until := fs.String("until", "", "end of the range (exclusive), same forms as --since")
	wait := fs.Duration("wait", 0, "read the sources again until they agree or this time is up (the consumers lag the stream)")
	asJSON := jsonFlag(fs)
	byScope := fs.Bool("by-scope", false, "also print, per scope, the spend in the stream minus the spend applied to the all-time totals (the budget service's lag; whole stream, so not with --since/--until)")
	return func(args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected arguments %q", errUsage, args)
		}
		o := reconcile.Options{Wait: *wait}
		var err error
		if o.Since, err = parseWhen(*since, a.now()); err != nil {
			return fmt.Errorf("%w: --since: %v", errUsage, err)
		}
		if o.Until, err = parseWhen(*until, a.now()); err != nil {
			return fmt.Errorf("%w: --until: %v", errUsage, err)
		}
		if *wait < 0 {
			return fmt.Errorf("%w: --wait must not be negative", errUsage)
		}
		if *byScope && (*since != "" || *until != "") {
			return fmt.Errorf("%w: --by-scope compares all-time totals; drop --since/--until", errUsage)
		}
		rep, drift, err := a.reconcile(nf, *stream, cf, *mock, o, *byScope)
		if err != nil {
			return exitStatus{code: 2, err: err}
		}
		if *asJSON {
			enc := json.NewEncoder(a.stdout)
			out := struct {
				reconcile.Report
				ByScope []scopeDrift `json:"by_scope,omitempty"`
			}{rep, drift}
			if err := enc.Encode(out); err != nil {
				return exitStatus{code: 2, err: err}
			}
		} else if err := writeReport(a, rep); err != nil {
			return exitStatus{code: 2, err: err}
		} else if drift != nil {
			writeDrift(a.stdout, drift)
		}
		if !rep.OK {
			return errReported
		}
		return nil
	}
}

// reconcile connects to the sources and runs the reconciliation, then
// measures the per-scope drift when byScope is set.
func (a *app) reconcile(nf natsFlags, stream string, cf chFlags, mockURL string, o reconcile.Options, byScope bool) (reconcile.Report, []scopeDrift, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	src := reconcile.Sources{Stream: stream, Budgets: true, MockURL: mockURL}
	if nf.config != "" {
		cfg, err := a.loadConfig(nf.config)
		if err != nil {
			return reconcile.Report{}, nil, err
		}
		if src.Prices, err = cfg.PriceTable(); err != nil {
			return reconcile.Report{}, nil, err
		}
	}
	nc, js, err := nf.connect()
	if err != nil {
		return reconcile.Report{}, nil, err
	}
	defer nc.Close()
	src.JetStream = js
	if cf.named() {
		st, err := cf.open(ctx)
		if err != nil {
			return reconcile.Report{}, nil, err
		}
		defer st.Close()
		src.ClickHouse = st.Conn()
	}
	rep, err := reconcile.Run(ctx, src, o)
	if err != nil || !byScope {
		return rep, nil, err
	}
	drift, err := measureDrift(ctx, js, stream)
	return rep, drift, err
}

// parseClickHouseDSN reads host:port[,host:port...] or
// clickhouse://[user[:password]@]host:port[/database].
func parseClickHouseDSN(dsn, password string) (chstore.Options, error) {
	o := chstore.Options{Addr: dsn, Password: password}
	if !strings.Contains(dsn, "://") {
		return o, nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return o, fmt.Errorf("--clickhouse: %w", err)
	}
	if u.Scheme != "clickhouse" && u.Scheme != "tcp" {
		return o, fmt.Errorf("--clickhouse %q: want host:port or clickhouse://host:port/database (native protocol)", dsn)
	}
	if u.Host == "" {
		return o, errors.New("--clickhouse: the DSN names no host")
	}
	o.Addr = u.Host
	o.Database = strings.Trim(u.Path, "/")
	if u.User != nil {
		o.User = u.User.Username()
		if p, ok := u.User.Password(); ok {
			o.Password = p
		}
	}
	return o, nil
}

// writeReport prints the report as an aligned table and the differences.
func writeReport(a *app, rep reconcile.Report) error {
	rng := "all time"
	if rep.Range.Since != "" || rep.Range.Until != "" {
		rng = "[" + or(rep.Range.Since, "start") + ", " + or(rep.Range.Until, "now") + ")"
	}
	fmt.Fprintf(a.stdout, "range %s, budgets compared: %s\n\n", rng, rep.Range.Budgets)
	w := len("SOURCE")
	for _, s := range rep.Sources {
		w = max(w, len(s.Name))
	}
	fmt.Fprintf(a.stdout, "%-*s  %10s  %20s  %20s\n", w, "SOURCE", "REQUESTS", "COST USD", "COST NANO-USD")
	for _, s := range rep.Sources {
		fmt.Fprintf(a.stdout, "%-*s  %10d  %20s  %20d\n", w, s.Name, s.Requests, pricing.FormatUSD(s.CostNanoUSD), s.CostNanoUSD)
	}
	if s, ok := rep.Source(reconcile.SourceStream); ok && s.Extra["duplicates"] > 0 {
		fmt.Fprintf(a.stdout, "\nthe stream holds %d messages for %d event ids (duplicates: %d)\n", s.Extra["raw_requests"], s.Requests, s.Extra["duplicates"])
	}
	if s, ok := rep.Source(reconcile.SourceStream); ok && s.Extra["recovered_requests"] > 0 {
		fmt.Fprintf(a.stdout, "\nthe stream holds %d recovered events (%s USD): requests a killed gateway began, billed by the recovery rule (estimated)\n",
			s.Extra["recovered_requests"], pricing.FormatUSD(s.Extra["recovered_cost_nano_usd"]))
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(a.stdout, "\nnote: %s\n", n)
	}
	if rep.OK {
		_, err := fmt.Fprintf(a.stdout, "\nok: every source agrees (%s)\n", a.now().UTC().Format(time.RFC3339))
		return err
	}
	fmt.Fprintf(a.stdout, "\n%d differences:\n", len(rep.Differences))
	for _, d := range rep.Differences {
		fmt.Fprintf(a.stdout, "  %s\n", d)
	}
	return nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
