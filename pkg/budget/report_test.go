package budget

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestReportAndSetLimits(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tr := NewTracker(TrackerOptions{Now: func() time.Time { return now }, Limits: []Limit{
		{Scope: ScopeDept, Value: "finance", Period: PeriodMonth, AmountNano: 1000},
		{Scope: ScopeTeam, Value: Star, Period: PeriodDay, AmountNano: 500},
	}})
	r := tr.Bind(Scopes{Dept: "finance", Team: "ml"}).Reserve(250)
	rep := tr.Report()
	if len(rep) != 2 {
		t.Fatalf("report has %d rows, want 2: %+v", len(rep), rep)
	}
	if rep[0].Scope != "dept" || rep[0].Value != "finance" || rep[0].Reserved != 250 || rep[0].Utilization != 0.25 || rep[0].PeriodStart != "2026-11" {
		t.Errorf("dept row %+v", rep[0])
	}
	if rep[1].Scope != "team" || rep[1].Value != "ml" || rep[1].Utilization != 0.5 {
		t.Errorf("team row %+v", rep[1])
	}
	if err := tr.Check(Scopes{Team: "ml"}, nil, 300); err == nil {
		t.Error("team ml should be over its 500 limit with 250 reserved and 300 more")
	}
	tr.SetLimits([]Limit{{Scope: ScopeTeam, Value: Star, Period: PeriodDay, AmountNano: 10_000}})
	if err := tr.Check(Scopes{Team: "ml"}, nil, 300); err != nil {
		t.Errorf("after raising the limit: %v", err)
	}
	r.Release()
}

// TestReportQualified: /admin/budgets lists a "*/ml" limit once per
// department's ml, by its qualified value, and an exact one once.
func TestReportQualified(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tr := NewTracker(TrackerOptions{Now: func() time.Time { return now }, Limits: []Limit{
		{Scope: ScopeTeam, Value: "*/ml", Period: PeriodDay, AmountNano: 1000},
		{Scope: ScopeTeam, Value: "research/web", Period: PeriodDay, AmountNano: 1000},
	}})
	for _, s := range []Scopes{NewScopes("", "", "research", "ml", ""), NewScopes("", "", "finance", "ml", ""),
		NewScopes("", "", "research", "web", ""), NewScopes("", "", "finance", "web", "")} {
		tr.Bind(s).Reserve(100)
	}
	var got []string
	for _, st := range tr.Report() {
		got = append(got, st.Scope+" "+st.Value)
	}
	if want := "team finance/ml,team research/ml,team research/web"; strings.Join(got, ",") != want {
		t.Fatalf("report rows %q, want %s", got, want)
	}
}

// weekOfSpend is the usage of forecast_test.go's week as events of dept
// eng: 24 USD on each of Dec 4-9 and 12 USD on Dec 10 by noon.
func weekOfSpend() []ev {
	var evs []ev
	for d := 4; d <= 9; d++ {
		evs = append(evs, ev{at: utc(2026, 12, d, 10, 0, 0), dept: "eng", costNano: 24 * usd})
	}
	return append(evs, ev{at: utc(2026, 12, 10, 9, 0, 0), dept: "eng", costNano: 12 * usd})
}

// TestReportForecast: /admin/budgets forecasts each limit from the day
// totals the tracker watches, with the answers of TestProject's week
// (1 USD an hour).
func TestReportForecast(t *testing.T) {
	e := startEnv(t)
	run(t, newConsumer(t, e.js, ConsumerOptions{}))
	noon := utc(2026, 12, 10, 12, 0, 0)
	tr := runTracker(t, e, TrackerOptions{Now: fixedClock(noon), Limits: []Limit{
		{Scope: ScopeDept, Value: "eng", Period: PeriodMonth, AmountNano: 600 * usd},
		{Scope: ScopeDept, Value: Star, Period: PeriodDay, AmountNano: 20 * usd},
		{Scope: ScopeDept, Value: "eng", Period: PeriodTotal, AmountNano: 1000 * usd},
	}})
	seq := e.publish(t, weekOfSpend()...)
	month := TotalID{Scope: ScopeDept, Value: "eng", Period: PeriodMonth, Start: periodStart(PeriodMonth, noon.UnixNano())}
	waitFor(t, 5*time.Second, func() bool {
		_, _, asOf := tr.Spend(month)
		return asOf == seq
	})
	waitFor(t, 5*time.Second, func() bool {
		_, _, asOf := tr.Spend(TotalID{Scope: ScopeDept, Value: "eng", Period: PeriodTotal})
		return asOf == seq
	})
	for d := 4; d <= 10; d++ { // every day total reached the tracker's watch
		waitFor(t, 5*time.Second, func() bool {
			spend, _, _ := tr.Spend(TotalID{Scope: ScopeDept, Value: "eng", Period: PeriodDay, Start: dayOf(d)})
			return spend > 0
		})
	}
	want := map[string]Forecast{
		// 156 spent + 516 h to Jan 1 = 672 > 600; 444 USD left = 444 h.
		"month": {RateNanoPerHour: usd, ProjectedNano: 672 * usd, ExhaustsAt: utc(2026, 12, 29, 0, 0, 0), Crosses: true},
		// 12 spent + 12 h = 24 > 20; 8 USD left = 8 h.
		"day": {RateNanoPerHour: usd, ProjectedNano: 24 * usd, ExhaustsAt: utc(2026, 12, 10, 20, 0, 0), Crosses: true},
		// 156 of 1000: 844 h from now, no period end.
		"total": {RateNanoPerHour: usd, ExhaustsAt: noon.Add(844 * time.Hour)},
	}
	rep := tr.Report()
	if len(rep) != 3 {
		t.Fatalf("report %+v, want 3 rows", rep)
	}
	for _, st := range rep {
		if w, ok := want[st.Period]; !ok || st.Forecast != w || st.Value != "eng" {
			t.Errorf("%s %s %s: forecast %+v, want %+v", st.Scope, st.Value, st.Period, st.Forecast, w)
		}
	}
	b, err := json.Marshal(rep[0].Forecast)
	if err != nil || string(b) != `{"rate_nano_usd_per_hour":1000000000,"projected_nano_usd":672000000000,"exhausts_at":"2026-12-29T00:00:00Z","crosses":true}` {
		t.Errorf("forecast JSON %s, %v", b, err)
	}
}

// TestValues: the console's lists of departments and teams are the values
// with a total (here, a reservation) in the current period, sorted and
// filtered; reservations are not applied spend.
func TestValues(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tr := NewTracker(TrackerOptions{Now: func() time.Time { return now }})
	for _, s := range []Scopes{NewScopes("k1", "alice", "research", "ml", ""), NewScopes("k2", "bob", "finance", "ml", ""),
		NewScopes("k3", "carol", "research", "web", "")} {
		tr.Bind(s).Reserve(100)
	}
	for _, tc := range []struct {
		scope  Scope
		period Period
		keep   func(string) bool
		want   string
	}{
		{ScopeDept, PeriodMonth, nil, "finance,research"},
		{ScopeDept, PeriodDay, func(v string) bool { return v == "research" }, "research"},
		{ScopeTeam, PeriodMonth, func(v string) bool { return strings.HasPrefix(v, "research/") }, "research/ml,research/web"},
		{ScopeSubject, PeriodTotal, nil, "alice,bob,carol"},
		{ScopeProject, PeriodMonth, nil, ""},
	} {
		if got := strings.Join(tr.Values(tc.scope, tc.period, tc.keep), ","); got != tc.want {
			t.Errorf("Values(%s, %s) = %q, want %q", tc.scope, tc.period, got, tc.want)
		}
	}
	if got := tr.Applied(ScopeGlobal); got != 0 {
		t.Errorf("Applied(global) = %d with reservations only", got)
	}
}
