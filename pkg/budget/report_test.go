package budget

import (
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
	r := tr.Reserve(Scopes{Dept: "finance", Team: "ml"}, 250)
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
		tr.Reserve(s, 100)
	}
	var got []string
	for _, st := range tr.Report() {
		got = append(got, st.Scope+" "+st.Value)
	}
	if want := "team finance/ml,team research/ml,team research/web"; strings.Join(got, ",") != want {
		t.Fatalf("report rows %q, want %s", got, want)
	}
}
