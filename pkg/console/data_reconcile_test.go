package console

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/pricing"
)

// TestReconcile drives traffic through a real gateway (mockllm upstream),
// lets the budget service and the analytics loader apply it, and checks
// that the console's figures (the overview's and the budgets page's, as
// the pages render them from the data layer) equal what `tollctl budget
// show` prints from the spend totals and what ClickHouse sums from the
// raw events, to the nano-dollar, for every department and team and each
// period: today, this month, all time.
func TestReconcile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tollctl")
	}
	r := newRig(t)
	r.drive()
	ctx := context.Background()
	d := r.data
	now := time.Now().UTC()
	shows := tollctlBudgetShow(t, r.configPath)

	o, err := d.Overview(ctx, AllDepts())
	if err != nil || o.History != nil {
		t.Fatalf("overview: %v %v", err, o.History)
	}
	if now.Format(time.DateOnly) != time.Now().UTC().Format(time.DateOnly) {
		t.Skip("the day changed during the test: run it again")
	}
	type figure struct{ console, tollctl, clickhouse int64 }
	figures := map[string]figure{}
	check := func(name string, f figure) {
		t.Helper()
		figures[name] = f
		if f.console != f.tollctl || f.console != f.clickhouse || f.console == 0 {
			t.Errorf("%s: console %d, tollctl budget show %d, ClickHouse %d nano-USD", name, f.console, f.tollctl, f.clickhouse)
		}
	}
	day, month := now.Format(time.DateOnly), now.Format("2006-01")
	periods := []struct {
		name, start, where string
	}{
		{"day", day, "toDate(ts) = toDate(?)"},
		{"month", month, "toStartOfMonth(ts) = toStartOfMonth(toDate(?))"},
		{"total", "", "? != ''"},
	}
	for _, dp := range o.Depts {
		b, err := d.Budgets(ctx, AllDepts(), Node{Scope: budget.ScopeDept, Value: dp.Dept})
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range periods {
			console := b.Spend[i].SpentNano
			switch p.name {
			case "day":
				if dp.Today.SpentNano != console {
					t.Errorf("%s: overview today %d, budgets page %d", dp.Dept, dp.Today.SpentNano, console)
				}
			case "month":
				if dp.Month.SpentNano != console {
					t.Errorf("%s: overview month %d, budgets page %d", dp.Dept, dp.Month.SpentNano, console)
				}
			}
			check("dept "+dp.Dept+" "+p.name, figure{console, shows.spend(t, "dept", dp.Dept, p.name, p.start),
				r.chSum("dept = ? AND "+p.where, dp.Dept, day)})
		}
		for _, c := range b.Children {
			dept, team, _ := budget.SplitQualified(c.Node.Value)
			check("team "+c.Node.Value+" month", figure{c.MonthNano, shows.spend(t, "team", c.Node.Value, "month", month),
				r.chSum("dept = ? AND team = ? AND "+periods[1].where, dept, team, day)})
		}
		for _, l := range b.Limits {
			if got := shows.limit(t, "dept", dp.Dept, l.Period, l.PeriodStart); got != l.LimitNano {
				t.Errorf("%s %s limit: console %d, tollctl %d", dp.Dept, l.Period, l.LimitNano, got)
			}
		}
	}
	var global int64
	for _, dr := range o.Drift {
		if dr.Scope == "global" {
			global = dr.AppliedNano
		}
	}
	check("global total", figure{global, shows.spend(t, "global", "", "total", ""), r.chSum("1")})
	if len(figures) != 10 { // 2 departments x 3 periods, 3 teams, the global total
		t.Fatalf("%d figures compared: the traffic reached too few scopes", len(figures))
	}
	for _, name := range sortedKeys(figures) {
		f := figures[name]
		t.Logf("%-28s console = tollctl = ClickHouse = %d nano-USD (%s USD)", name, f.console, pricing.FormatUSD(f.console))
	}
}

// budgetShow is the rows of `tollctl budget show --json`.
type budgetShow []struct {
	Scope       string `json:"scope"`
	Value       string `json:"value"`
	Period      string `json:"period"`
	PeriodStart string `json:"period_start"`
	SpendUSD    string `json:"spend_usd"`
	LimitUSD    string `json:"limit_usd"`
}

func (s budgetShow) row(t *testing.T, scope, value, period, start string) (spend, limit string) {
	t.Helper()
	for _, r := range s {
		if r.Scope == scope && r.Value == value && r.Period == period && r.PeriodStart == start {
			return r.SpendUSD, r.LimitUSD
		}
	}
	t.Fatalf("tollctl budget show has no %s %s %s %s", scope, value, period, start)
	return "", ""
}

func (s budgetShow) spend(t *testing.T, scope, value, period, start string) int64 {
	t.Helper()
	usd, _ := s.row(t, scope, value, period, start)
	n, err := pricing.ParseUSD(usd)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (s budgetShow) limit(t *testing.T, scope, value, period, start string) int64 {
	t.Helper()
	_, usd := s.row(t, scope, value, period, start)
	n, err := pricing.ParseUSD(usd)
	if err != nil {
		t.Fatalf("limit of %s %s %s: %q: %v", scope, value, period, usd, err)
	}
	return n
}

// tollctlBudgetShow builds tollctl and runs `tollctl budget show --json`
// with the rig's config (its NATS URL and budgets).
func tollctlBudgetShow(t *testing.T, configPath string) budgetShow {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tollctl")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/tollgate/tollgate/services/tollctl").CombinedOutput(); err != nil {
		t.Fatalf("build tollctl: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "budget", "show", "--json", "--config", configPath).Output()
	if err != nil {
		t.Fatalf("tollctl budget show: %v", err)
	}
	var rows budgetShow
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("tollctl budget show --json: %v\n%s", err, out)
	}
	return rows
}
