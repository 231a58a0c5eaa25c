package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"
	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/natsconn"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/revoke"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
	"google.golang.org/protobuf/proto"
)

// natsFlags are the connection flags of the commands that talk to NATS.
type natsFlags struct {
	url, config string
}

// register adds the global --nats and --config flags to fs.
func (n *natsFlags) register(a *app, fs *pflag.FlagSet) {
	flagNATS.stringVar(a, fs, &n.url)
	flagConfig.stringVar(a, fs, &n.config)
}

// connect opens JetStream with the flags.
func (n *natsFlags) connect() (*nats.Conn, jetstream.JetStream, error) {
	var c config.NATS
	if n.config != "" {
		cfg, err := config.Load(n.config)
		if err != nil {
			return nil, nil, err
		}
		c = cfg.NATS
	}
	if n.url != "" {
		c.URL = n.url
	}
	nc, err := natsconn.Connect(c, "tollctl", slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

func setupRevoke(undo bool) func(a *app, fs *pflag.FlagSet) func([]string) error {
	return func(a *app, fs *pflag.FlagSet) func([]string) error {
		var nf natsFlags
		nf.register(a, fs)
		jti := fs.String("jti", "", "revoke one token by its key id (jti claim)")
		sub := fs.String("sub", "", "revoke every token of a subject")
		reason := fs.String("reason", "", "why (kept with the revocation)")
		actor := fs.String("actor", "", "who makes the change, for the audit log (default: the OS user name)")
		return func(args []string) error {
			if len(args) > 0 || (*jti == "") == (*sub == "") {
				return fmt.Errorf("%w: give exactly one of --jti or --sub", errUsage)
			}
			kind, value := revoke.KeyID, *jti
			if *sub != "" {
				kind, value = revoke.Subject, *sub
			}
			nc, js, err := nf.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			kv, err := revoke.EnsureBucket(ctx, js, 0)
			if err != nil {
				return err
			}
			rv := revoke.NewRevoker(kv, audit.NewRecorder(js, audit.Options{Timeout: 5 * time.Second, Now: a.now}), a.now)
			who := a.actor(*actor)
			if undo {
				err = rv.Unrevoke(ctx, who, kind, value)
			} else {
				err = rv.Revoke(ctx, who, kind, value, *reason)
			}
			if err != nil && !errors.Is(err, audit.ErrNotRecorded) {
				return err
			}
			if undo {
				fmt.Fprintf(a.stdout, "unrevoked %s %s\n", kind, value)
			} else {
				fmt.Fprintf(a.stdout, "revoked %s %s: every gateway refuses it once its watch delivers the change\n", kind, value)
			}
			return err // the change is made; a lost audit event still fails the command
		}
	}
}

func setupRevocations(a *app, fs *pflag.FlagSet) func([]string) error {
	var nf natsFlags
	nf.register(a, fs)
	return func([]string) error {
		nc, js, err := nf.connect()
		if err != nil {
			return err
		}
		defer nc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		kv, err := revoke.EnsureBucket(ctx, js, 0)
		if err != nil {
			return err
		}
		list, err := revoke.List(ctx, kv)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tVALUE\tREVOKED AT\tREASON")
		for _, e := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Kind, e.Value, time.Unix(0, e.RevokedAtUnixNano).UTC().Format(time.RFC3339), e.Reason)
		}
		return tw.Flush()
	}
}

// setupBudgetShow prints spend totals from the KV bucket, with the
// configured limits when --config is given.
func setupBudgetShow(a *app, fs *pflag.FlagSet) func([]string) error {
	var nf natsFlags
	nf.register(a, fs)
	filters := map[string]*string{}
	for _, s := range []string{"dept", "team", "project", "subject", "key"} {
		help := "show only this " + s
		if config.Qualified(s) {
			help += ", named with its department: research/ml, or */ml for ml of every department"
		}
		filters[s] = fs.String(s, "", help)
	}
	period := fs.String("period", "", "day, month or total (default: all)")
	asJSON := jsonFlag(fs)
	return func([]string) error {
		nc, js, err := nf.connect()
		if err != nil {
			return err
		}
		defer nc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		kv, err := js.KeyValue(ctx, budget.Bucket)
		if err != nil {
			return fmt.Errorf("open %s: %w", budget.Bucket, err)
		}
		var limits []budget.Limit
		if nf.config != "" {
			cfg, err := config.Load(nf.config)
			if err != nil {
				return err
			}
			if limits, err = budget.ParseLimits(cfg.Budgets); err != nil {
				return err
			}
		}
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			return err
		}
		var rows []budgetRow
		days := map[scopeValue][]budget.DayTotal{}
		for k := range keys.Keys() {
			id, err := budget.ParseKey(k)
			if err != nil {
				continue
			}
			if excluded(filters, id) {
				continue
			}
			e, err := kv.Get(ctx, k)
			if err != nil {
				continue
			}
			var t usagev1.SpendTotal
			if proto.Unmarshal(e.Value(), &t) != nil {
				continue
			}
			if id.Period == budget.PeriodDay {
				sv := scopeValue{id.Scope, id.Value}
				days[sv] = append(days[sv], budget.DayTotal{Day: id.Start, SpendNano: t.CostNanoUsd})
			}
			if *period != "" && id.Period.String() != *period {
				continue
			}
			rows = append(rows, newBudgetRow(id, &t, limits))
		}
		now := a.now()
		current := budget.TotalID{Period: budget.PeriodDay, Start: int32(now.Unix() / 86400)}.PeriodStart()
		currentMonth := now.UTC().Format("2006-01")
		for i := range rows {
			r := &rows[i]
			if r.limit < 0 || r.Period == "day" && r.PeriodStart != current || r.Period == "month" && r.PeriodStart != currentMonth {
				continue // no limit, or a past period: nothing to forecast
			}
			r.setForecast(budget.Project(r.limit, r.spend, r.id.PeriodEnd(), now, days[scopeValue{r.id.Scope, r.id.Value}]))
		}
		sortBudgetRows(rows)
		if *asJSON {
			enc := json.NewEncoder(a.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(rows)
		}
		return printBudgetRows(a.stdout, rows)
	}
}

// excluded reports whether the filters (--dept, --team, ...) leave out the
// total id: one of another value of a filtered scope, or of a scope no
// filter names while some filter is set.
func excluded(filters map[string]*string, id budget.TotalID) bool {
	f := filters[id.Scope.String()]
	set := id.Scope != budget.ScopeGlobal && f != nil && *f != ""
	if set && !(&budget.Limit{Scope: id.Scope, Value: *f}).Matches(id.Value) {
		return true
	}
	return !set && anyFilter(filters)
}

// newBudgetRow is the row of total t (id), with the limit among limits
// that applies to it.
func newBudgetRow(id budget.TotalID, t *usagev1.SpendTotal, limits []budget.Limit) budgetRow {
	row := budgetRow{Scope: t.Scope, Value: t.Value, Period: t.Period, PeriodStart: t.PeriodStart,
		SpendUSD: pricing.FormatUSD(t.CostNanoUsd), Requests: t.Requests, PromptTokens: t.PromptTokens,
		CompletionTokens: t.CompletionTokens, AsOfSeq: t.AsOfSeq, id: id, spend: t.CostNanoUsd, limit: -1}
	for _, l := range limits {
		if l.Scope == id.Scope && l.Period == id.Period && l.Matches(id.Value) {
			row.LimitUSD = pricing.FormatUSD(l.AmountNano)
			row.limit = l.AmountNano
			if l.AmountNano > 0 {
				row.Utilization = float64(t.CostNanoUsd) / float64(l.AmountNano)
			}
		}
	}
	return row
}

// sortBudgetRows orders rows by scope, value and period, the latest
// period first.
func sortBudgetRows(rows []budgetRow) {
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Scope != b.Scope {
			return a.Scope < b.Scope
		}
		if a.Value != b.Value {
			return a.Value < b.Value
		}
		if a.Period != b.Period {
			return a.Period < b.Period
		}
		return a.PeriodStart > b.PeriodStart
	})
}

// printBudgetRows writes rows as the table of tollctl budget show.
func printBudgetRows(w io.Writer, rows []budgetRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tVALUE\tPERIOD\tSTART\tSPEND USD\tLIMIT USD\tUSED\tFORECAST\tREQUESTS\tTOKENS IN\tTOKENS OUT")
	for _, r := range rows {
		used := ""
		if r.LimitUSD != "" {
			used = fmt.Sprintf("%.1f%%", 100*r.Utilization)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", r.Scope, r.Value, r.Period, r.PeriodStart, r.SpendUSD, r.LimitUSD, used, r.forecastText(), r.Requests, r.PromptTokens, r.CompletionTokens)
	}
	return tw.Flush()
}

type budgetRow struct {
	Scope            string  `json:"scope"`
	Value            string  `json:"value"`
	Period           string  `json:"period"`
	PeriodStart      string  `json:"period_start"`
	SpendUSD         string  `json:"spend_usd"`
	LimitUSD         string  `json:"limit_usd,omitempty"`
	Utilization      float64 `json:"utilization,omitempty"`
	Requests         uint64  `json:"requests"`
	PromptTokens     uint64  `json:"prompt_tokens"`
	CompletionTokens uint64  `json:"completion_tokens"`
	AsOfSeq          uint64  `json:"as_of_seq"`
	// The forecast of the limit (budget.Project), for a current period
	// with a limit only.
	RateUSDPerHour string `json:"rate_usd_per_hour,omitempty"`
	ProjectedUSD   string `json:"projected_usd,omitempty"`
	ExhaustsAt     string `json:"exhausts_at,omitempty"`
	Crosses        bool   `json:"crosses,omitempty"`

	id           budget.TotalID
	spend, limit int64 // nano-USD; limit -1 when none applies
}

// scopeValue names the totals of one scope value, every period.
type scopeValue struct {
	scope budget.Scope
	value string
}

func (r *budgetRow) setForecast(f budget.Forecast) {
	r.RateUSDPerHour = pricing.FormatUSD(f.RateNanoPerHour)
	if !r.id.PeriodEnd().IsZero() {
		r.ProjectedUSD = pricing.FormatUSD(f.ProjectedNano)
	}
	if !f.ExhaustsAt.IsZero() {
		r.ExhaustsAt = f.ExhaustsAt.UTC().Format(time.RFC3339)
	}
	r.Crosses = f.Crosses
}

// forecastText is the FORECAST column: "1.00/h, end 672.00, out
// 2026-12-29T00:00:00Z", with "!" after the projection when it crosses the
// limit.
func (r *budgetRow) forecastText() string {
	if r.RateUSDPerHour == "" {
		return ""
	}
	s := r.RateUSDPerHour + "/h"
	if r.ProjectedUSD != "" {
		s += ", end " + r.ProjectedUSD
		if r.Crosses {
			s += "!"
		}
	}
	if r.ExhaustsAt != "" {
		s += ", out " + r.ExhaustsAt
	}
	return s
}

func anyFilter(f map[string]*string) bool {
	for _, v := range f {
		if *v != "" {
			return true
		}
	}
	return false
}
