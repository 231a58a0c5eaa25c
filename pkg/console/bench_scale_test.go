//go:build chscale

package console

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/billing"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/chtest/scaledata"
	"github.com/tollgate/tollgate/pkg/finance"
	"github.com/tollgate/tollgate/pkg/gateway"
	"github.com/tollgate/tollgate/pkg/natstest"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// The page benchmark at scale (make bench-console): not part of make test.
var (
	pagesEvents = flag.Int("pages.events", 10_000_000, "synthetic usage events to load for BenchmarkPages")
	pagesCH     = flag.String("pages.clickhouse", "", "a ClickHouse server (host:port) to load the events into and keep, so that a second run reuses them; default a server of the benchmark's own")
)

// BenchmarkPages times each read page's server time, through the admin
// listener on loopback, with -pages.events synthetic usage events (30 days,
// 300 departments, 3000 teams, 20000 subjects, 5000 keys, 30 models;
// chtest/scaledata, the history of the dashboards' scale test) in a
// ClickHouse 18.16 server of its own, at the last second of the 30 days
// (so month to date is the whole month). The spend totals the gateway
// watches are those the budget service would have written for the
// departments, teams and the global scope, read from usage_scope_daily
// into a NATS KV bucket that a budget.Tracker watches.
//
// Run: go test -tags chscale -run '^$' -bench BenchmarkPages -benchtime 20x ./pkg/console
func BenchmarkPages(b *testing.B) {
	end := time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC)
	from := end.Add(-scaledata.Days * 24 * time.Hour)
	began := time.Now()
	var store *chstore.Store
	var summary string
	if *pagesCH != "" {
		store, summary = scaledata.LoadAt(b, *pagesCH, *pagesEvents, from)
	} else {
		store, summary = scaledata.Load(b, *pagesEvents, from)
	}
	b.Logf("%s", summary)
	tracker := scaleTotals(b, store, end)
	b.Logf("loaded and totals written in %v", time.Since(began).Round(time.Second))
	ex := &billing.Explainer{Store: finance.Store{Conn: store.Conn()}}
	d := &Data{Totals: tracker, CH: chstore.Querier(store.Conn()), Explainer: ex, Now: func() time.Time { return end },
		Routes: func() gateway.Routes { return gateway.Routes{} }}
	s := newSite(b, d)

	// A deep page: the cursor of the 200th page, walked by the data layer.
	deep := ""
	for range 200 {
		p, err := d.Requests(context.Background(), AllDepts(), RequestFilter{After: deep})
		if err != nil || p.Next == "" {
			b.Fatalf("walk to a deep page: %v", err)
		}
		deep = p.Next
	}
	// A request id of the middle of the range, for the explain page.
	var mid string
	var midMs uint64
	if err := store.Conn().QueryRow(context.Background(), "SELECT request_id, ts_ms FROM usage_events WHERE dept = 'dept-7' AND ts >= toDateTime(?) ORDER BY ts LIMIT 1",
		from.Add(15*24*time.Hour).Unix()).Scan(&mid, &midMs); err != nil {
		b.Fatal(err)
	}
	viewer := User{Subject: "v", Role: "viewer", Dept: "dept-7"}
	deptAdmin := User{Subject: "d", Role: "dept-admin", Dept: "dept-7"}
	admin := User{Subject: "a", Role: "admin"}
	for _, tc := range []struct {
		name string
		u    User
		path string
		want string // a mark the page must hold
	}{
		{"overview/admin", admin, "/ui/", `id="spend-chart"`},
		{"overview/viewer", viewer, "/ui/", `id="spend-chart"`},
		{"budgets/top", admin, "/ui/budgets", `id="children-table"`},
		{"budgets/dept", deptAdmin, "/ui/budgets?scope=dept:dept-7", `id="children-table"`},
		{"budgets/team", deptAdmin, "/ui/budgets?scope=team:dept-7/team-7", `id="children-table"`},
		{"budgets/project", deptAdmin, "/ui/budgets?scope=project:dept-7/proj-14", `id="children-table"`},
		{"budgets/subject", admin, "/ui/budgets?scope=subject:user-00028", `id="children-table"`},
		{"budgets/subject-dept-admin", deptAdmin, "/ui/budgets?scope=subject:user-00028", `id="children-table"`},
		{"requests/first", admin, "/ui/requests", `id="next-page"`},
		{"requests/deep", admin, "/ui/requests?after=" + deep, `id="next-page"`},
		{"requests/dept", deptAdmin, "/ui/requests", `id="next-page"`},
		{"requests/filtered", admin, "/ui/requests?dept=dept-7&model=model-03&status=error", `id="requests-table"`},
		{"request", admin, fmt.Sprintf("/ui/requests/%s?dept=dept-7&at=%d", mid, midMs), `id="charge-total"`},
		{"models", admin, "/ui/models", `id="targets-h"`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			id, _, err := s.c.NewSessionForTest(context.Background(), tc.u)
			if err != nil {
				b.Fatal(err)
			}
			client := &http.Client{Timeout: time.Minute}
			mark := regexp.MustCompile(regexp.QuoteMeta(tc.want))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodGet, s.base+tc.path, nil)
				req.AddCookie(&http.Cookie{Name: SessionCookie, Value: id})
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || !mark.Match(body) {
					b.Fatalf("%s: %d %v, lacks %s\n%.2000s", tc.path, resp.StatusCode, err, tc.want, body)
				}
			}
		})
	}
}

// scaleTotals writes the totals of the departments, teams and global scope
// (month and day of end, all time) from usage_scope_daily into a KV bucket
// and returns a Tracker watching it, with limits on each department and
// team as a config might set them.
func scaleTotals(b *testing.B, store *chstore.Store, end time.Time) *budget.Tracker {
	ctx := context.Background()
	js, err := jetstream.New(natstest.Connect(b, natstest.Start(b)))
	if err != nil {
		b.Fatal(err)
	}
	kv, err := budget.EnsureBucket(ctx, js, 1)
	if err != nil {
		b.Fatal(err)
	}
	starts := budget.PeriodStarts(end.UnixNano())
	day := end.Format(time.DateOnly)
	rows, err := store.Conn().Query(ctx, `SELECT scope, value, sum(requests), sum(cost_nano_usd), sumIf(requests, day = toDate(?)), sumIf(cost_nano_usd, day = toDate(?))
		FROM usage_scope_daily WHERE scope IN ('global', 'dept', 'team') GROUP BY scope, value`, day, day)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var scope, value string
		var reqs, dayReqs uint64
		var cost, dayCost int64
		if err := rows.Scan(&scope, &value, &reqs, &cost, &dayReqs, &dayCost); err != nil {
			b.Fatal(err)
		}
		sc, err := budget.ParseScope(scope)
		if err != nil {
			b.Fatal(err)
		}
		// The history is one month: its month total is its all-time total.
		for _, p := range []struct {
			period budget.Period
			reqs   uint64
			cost   int64
		}{{budget.PeriodDay, dayReqs, dayCost}, {budget.PeriodMonth, reqs, cost}, {budget.PeriodTotal, reqs, cost}} {
			id := budget.TotalID{Scope: sc, Value: value, Period: p.period, Start: starts[p.period]}
			data, err := proto.Marshal(&usagev1.SpendTotal{Scope: scope, Value: value, Period: p.period.String(), PeriodStart: id.PeriodStart(),
				CostNanoUsd: p.cost, Requests: p.reqs, AsOfSeq: 1})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := kv.Put(ctx, id.Key(), data); err != nil {
				b.Fatal(err)
			}
			n++
		}
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	rows.Close()
	limits := []budget.Limit{
		{Scope: budget.ScopeDept, Value: budget.Star, Period: budget.PeriodMonth, AmountNano: 50_000 * budget.NanoPerUSD},
		{Scope: budget.ScopeDept, Value: budget.Star, Period: budget.PeriodDay, AmountNano: 2_000 * budget.NanoPerUSD},
		{Scope: budget.ScopeTeam, Value: budget.Star, Period: budget.PeriodMonth, AmountNano: 5_000 * budget.NanoPerUSD},
		{Scope: budget.ScopeGlobal, Period: budget.PeriodMonth, AmountNano: 10_000_000 * budget.NanoPerUSD},
	}
	tracker := budget.NewTracker(budget.TrackerOptions{Limits: limits, Now: func() time.Time { return end }})
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = tracker.Run(tctx, kv) }()
	b.Cleanup(func() { cancel(); <-done })
	<-tracker.Ready()
	b.Logf("%d totals written", n)
	if got := len(tracker.Values(budget.ScopeDept, budget.PeriodMonth, nil)); got != scaledata.Depts {
		b.Fatalf("the tracker holds %d departments, want %d", got, scaledata.Depts)
	}
	return tracker
}
