package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/natstest"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestBudgetShowForecast: budget show forecasts each limit of a current
// period from the day totals in the bucket, at a fixed clock, on the week
// of pkg/budget's TestProject: 24 USD on each of Dec 4-9 and 12 USD on
// Dec 10 by noon, 1 USD an hour.
func TestBudgetShowForecast(t *testing.T) {
	ns := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := budget.EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	const usd = budget.NanoPerUSD
	put := func(id budget.TotalID, cost int64) {
		b, err := proto.Marshal(&usagev1.SpendTotal{Scope: id.Scope.String(), Value: id.Value, Period: id.Period.String(),
			PeriodStart: id.PeriodStart(), CostNanoUsd: cost, AsOfSeq: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, id.Key(), b); err != nil {
			t.Fatal(err)
		}
	}
	day := func(d int) int32 { return int32(time.Date(2026, 12, d, 0, 0, 0, 0, time.UTC).Unix() / 86400) }
	eng := func(p budget.Period, start int32) budget.TotalID {
		return budget.TotalID{Scope: budget.ScopeDept, Value: "eng", Period: p, Start: start}
	}
	for d := 4; d <= 9; d++ {
		put(eng(budget.PeriodDay, day(d)), 24*usd)
	}
	put(eng(budget.PeriodDay, day(10)), 12*usd)
	put(eng(budget.PeriodMonth, 2026*12+11), 156*usd)
	put(eng(budget.PeriodMonth, 2026*12+10), 999*usd) // November: a past period, not forecast

	cfg := writeFile(t, t.TempDir(), "tollgate.yaml", "providers: [{name: m, kind: mock}]\n"+
		"budgets: [{scope: dept, value: eng, amount_usd: '600', period: month}, {scope: dept, value: '*', amount_usd: '20', period: day}]\n")
	show := func(args ...string) string {
		var out, errOut bytes.Buffer
		a := &app{stdout: &out, stderr: &errOut, getenv: func(string) string { return "" },
			now: func() time.Time { return time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC) }}
		fs := pflag.NewFlagSet("budget show", pflag.ContinueOnError)
		runShow := setupBudgetShow(a, fs)
		if err := fs.Parse(append([]string{"--nats", ns.ClientURL(), "--config", cfg}, args...)); err != nil {
			t.Fatal(err)
		}
		if err := runShow(fs.Args()); err != nil {
			t.Fatalf("budget show %v: %v: %s", args, err, errOut.String())
		}
		return out.String()
	}

	var rows []budgetRow
	if err := json.Unmarshal([]byte(show("--period", "month", "--json")), &rows); err != nil {
		t.Fatal(err)
	}
	want := []budgetRow{
		// 156 + 516 h to Jan 1 = 672 > 600; the 444 USD left last 444 h.
		{PeriodStart: "2026-12", RateUSDPerHour: "1.00", ProjectedUSD: "672.00", ExhaustsAt: "2026-12-29T00:00:00Z", Crosses: true},
		{PeriodStart: "2026-11"},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %+v, want %d", rows, len(want))
	}
	for i, w := range want {
		r := rows[i]
		if r.PeriodStart != w.PeriodStart || r.RateUSDPerHour != w.RateUSDPerHour || r.ProjectedUSD != w.ProjectedUSD ||
			r.ExhaustsAt != w.ExhaustsAt || r.Crosses != w.Crosses {
			t.Errorf("row %d = %+v, want forecast %+v", i, r, w)
		}
	}

	// The table's forecast column: today's 20 USD day limit, 12 spent, is
	// out at 20:00 and projected at 24 (over: "!").
	out := show("--period", "day")
	var today string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(line, "2026-12-10"):
			today = line
		case strings.Contains(line, "/h"):
			t.Errorf("a past day is forecast: %s", line)
		}
	}
	if !strings.Contains(out, "FORECAST") || !strings.Contains(today, "1.00/h, end 24.00!, out 2026-12-10T20:00:00Z") {
		t.Errorf("budget show --period day:\n%s", out)
	}
}
