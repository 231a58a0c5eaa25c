package console

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tollgate/tollgate/pkg/billing"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chstore"
)

// rigTraffic is the traffic TestData and the page tests drive: two
// departments, three teams, four projects, subjects and keys.
var rigTraffic = []struct {
	p     principal
	model string
	n     int
}{
	{principal{"eng", "nlp", "p1", "alice", "key-a"}, "mock-gpt", 3},
	{principal{"eng", "nlp", "p2", "bob", "key-b"}, "mock-large", 2},
	{principal{"eng", "vision", "p3", "carol", "key-c"}, "mock-gpt", 1},
	{principal{"sales", "ops", "p9", "dave", "key-d"}, "mock-gpt", 2},
}

// drive sends rigTraffic and waits until it is stored and applied; it
// returns the number of requests.
func (r *rig) drive() uint64 {
	var n uint64
	for _, tr := range rigTraffic {
		for range tr.n {
			r.chat(tr.p, tr.model, 200)
			n++
		}
	}
	r.settle(n)
	return n
}

// chSum is ClickHouse's own sum of cost over the raw events matching
// where (with args).
func (r *rig) chSum(where string, args ...any) int64 {
	r.t.Helper()
	var c int64
	if err := r.store.Conn().QueryRow(context.Background(), "SELECT sum(cost_nano_usd) FROM usage_events WHERE "+where, args...).Scan(&c); err != nil {
		r.t.Fatal(err)
	}
	return c
}

// nodeWhere is the condition on usage_events of a node's events.
func nodeWhere(n Node) (string, any, any) {
	dept, name, _ := budget.SplitQualified(n.Value)
	switch n.Scope {
	case budget.ScopeDept:
		return "dept = ? AND ? = ''", n.Value, ""
	case budget.ScopeTeam:
		return "dept = ? AND team = ?", dept, name
	case budget.ScopeProject:
		return "dept = ? AND project = ?", dept, name
	case budget.ScopeSubject:
		return "subject = ? AND ? = ''", n.Value, ""
	}
	return "key_id = ? AND ? = ''", n.Value, ""
}

func TestData(t *testing.T) {
	r := newRig(t)
	n := r.drive()
	ctx := context.Background()
	d := r.data
	total := r.chSum("1")
	if total <= 0 {
		t.Fatalf("the traffic cost %d nano-USD: the figures below prove little", total)
	}

	t.Run("keys last used", func(t *testing.T) {
		last, err := d.KeysLastUsed(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range rigTraffic {
			var want string
			if err := r.store.Conn().QueryRow(ctx, "SELECT toString(max(toDate(ts))) FROM usage_events WHERE key_id = ?", tr.p.key).Scan(&want); err != nil {
				t.Fatal(err)
			}
			if got := last[tr.p.key]; got != want {
				t.Errorf("key %s last used %q, ClickHouse's events say %q", tr.p.key, got, want)
			}
		}
		if day, ok := last["key-never-used"]; ok {
			t.Errorf("a key with no traffic has a last use: %q", day)
		}
	})

	t.Run("overview every department", func(t *testing.T) {
		o, err := d.Overview(ctx, AllDepts())
		if err != nil || o.History != nil {
			t.Fatalf("overview: %v, history %v", err, o.History)
		}
		var names []string
		for _, dp := range o.Depts {
			names = append(names, dp.Dept)
			want := r.chSum("dept = ?", dp.Dept)
			if dp.Month.SpentNano != want || dp.Today.SpentNano != want {
				t.Errorf("%s: month %d, today %d, ClickHouse %d", dp.Dept, dp.Month.SpentNano, dp.Today.SpentNano, want)
			}
			if dp.Today.Limit == nil || dp.Today.Limit.LimitNano != 50*budget.NanoPerUSD {
				t.Errorf("%s: day limit %+v, want the * limit of 50 USD", dp.Dept, dp.Today.Limit)
			}
		}
		if !slices.Equal(names, []string{"eng", "sales"}) {
			t.Fatalf("departments %v", names)
		}
		if l := o.Depts[0].Month.Limit; l == nil || l.LimitNano != 100*budget.NanoPerUSD || l.HeadroomNano != l.LimitNano-o.Depts[0].Month.SpentNano {
			t.Errorf("eng month limit %+v", l)
		} else if l.Forecast.RateNanoPerHour <= 0 {
			t.Errorf("eng month forecast %+v: no rate from spend today", l.Forecast)
		}
		if o.Depts[1].Month.Limit != nil {
			t.Errorf("sales has no month limit, got %+v", o.Depts[1].Month.Limit)
		}
		for _, dr := range o.Drift {
			if dr.UnappliedNano != 0 || dr.Scope == "global" && dr.CountedNano != total {
				t.Errorf("drift %+v, total %d", dr, total)
			}
		}
		if len(o.Drift) != 2 || o.Drift[0].Scope != "global" || o.Drift[1].Scope != "dept" || o.Drift[1].CountedNano != total {
			t.Errorf("drift %+v, total %d", o.Drift, total)
		}
		var models, teams int64
		for _, m := range o.TopModels {
			models += m.CostNano
		}
		var teamNames []string
		for _, tm := range o.TopTeams {
			teams += tm.CostNano
			teamNames = append(teamNames, tm.Name)
		}
		slices.Sort(teamNames)
		if models != total || teams != total || !slices.Equal(teamNames, []string{"eng/nlp", "eng/vision", "sales/ops"}) {
			t.Errorf("top models sum %d, top teams %v sum %d, total %d", models, teamNames, teams, total)
		}
		if len(o.Daily) != 1 || o.Daily[0].CostNano != total || o.Daily[0].Day != time.Now().UTC().Format(time.DateOnly) {
			t.Errorf("daily %+v, total %d", o.Daily, total)
		}
	})

	t.Run("overview one department", func(t *testing.T) {
		o, err := d.Overview(ctx, OneDept("sales"))
		if err != nil || o.History != nil {
			t.Fatalf("overview: %v, history %v", err, o.History)
		}
		if len(o.Depts) != 1 || o.Depts[0].Dept != "sales" {
			t.Fatalf("departments %+v", o.Depts)
		}
		sales := r.chSum("dept = 'sales'")
		if len(o.TopTeams) != 1 || o.TopTeams[0].Name != "sales/ops" || o.TopTeams[0].CostNano != sales {
			t.Errorf("top teams %+v, sales %d", o.TopTeams, sales)
		}
		if len(o.TopModels) != 1 || o.TopModels[0].CostNano != sales {
			t.Errorf("top models %+v, sales %d", o.TopModels, sales)
		}
		if len(o.Drift) != 1 || o.Drift[0].CountedNano != sales || o.Drift[0].UnappliedNano != 0 {
			t.Errorf("drift %+v, sales %d", o.Drift, sales)
		}
		if len(o.Daily) != 1 || o.Daily[0].CostNano != sales {
			t.Errorf("daily %+v, sales %d", o.Daily, sales)
		}
		none, err := d.Overview(ctx, View{})
		if err != nil || len(none.Depts) != 0 || len(none.TopTeams) != 0 || len(none.TopModels) != 0 || len(none.Daily) != 0 {
			t.Errorf("the zero View sees %+v (%v)", none, err)
		}
		if live := d.Live(OneDept("sales")); len(live) != 2 || live[0].Scope != "dept:sales" || live[1].SpentNano != sales {
			t.Errorf("live totals of sales %+v, sales %d", live, sales)
		}
	})

	t.Run("budgets drill-down", func(t *testing.T) {
		steps := []struct {
			scope    string
			children []string
		}{
			{"", []string{"dept:eng", "dept:sales"}},
			{"dept:eng", []string{"team:eng/nlp", "team:eng/vision"}},
			{"team:eng/nlp", []string{"project:eng/p1", "project:eng/p2"}},
			{"project:eng/p1", []string{"subject:alice"}},
			{"subject:alice", []string{"key:key-a"}},
			{"key:key-a", nil},
		}
		for _, st := range steps {
			node, err := ParseNode(st.scope)
			if err != nil {
				t.Fatal(err)
			}
			b, err := d.Budgets(ctx, AllDepts(), node)
			if err != nil || b.ChildrenErr != nil {
				t.Fatalf("%s: %v, children %v", st.scope, err, b.ChildrenErr)
			}
			var got []string
			for _, c := range b.Children {
				got = append(got, c.Node.String())
				if want := r.chSum(nodeWhere(c.Node)); c.MonthNano != want || c.DayNano != want {
					t.Errorf("%s: child %s month %d day %d, ClickHouse %d", st.scope, c.Node, c.MonthNano, c.DayNano, want)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, st.children) {
				t.Errorf("%s: children %v, want %v", st.scope, got, st.children)
			}
			if st.scope != "" && len(b.Spend) != 3 {
				t.Errorf("%s: spend of %d periods", st.scope, len(b.Spend))
			}
		}
		b, err := d.Budgets(ctx, AllDepts(), Node{Scope: budget.ScopeTeam, Value: "eng/nlp"})
		if err != nil {
			t.Fatal(err)
		}
		nlp := r.chSum("dept = 'eng' AND team = 'nlp'")
		if len(b.Limits) != 1 || b.Limits[0].LimitNano != 20*budget.NanoPerUSD || b.Limits[0].SpentNano != nlp || b.Spend[1].SpentNano != nlp {
			t.Errorf("eng/nlp limits %+v spend %+v, ClickHouse %d", b.Limits, b.Spend, nlp)
		}
	})

	t.Run("budgets one department", func(t *testing.T) {
		top, err := d.Budgets(ctx, OneDept("sales"), Node{})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range top.Limits {
			if l.Scope != "dept" || l.Value != "sales" {
				t.Errorf("sales sees the limit %+v", l)
			}
		}
		if len(top.Limits) != 1 || len(top.Children) != 1 || top.Children[0].Node.Value != "sales" {
			t.Errorf("sales top: limits %+v children %+v", top.Limits, top.Children)
		}
		for _, tc := range []struct {
			scope string
			want  error
		}{
			{"dept:eng", ErrNotAllowed},
			{"team:eng/nlp", ErrNotAllowed},
			{"project:eng/p1", ErrNotAllowed},
			{"subject:alice", ErrNotAllowed},
			{"key:key-a", ErrNotAllowed},
			{"subject:dave", nil},
			{"key:key-d", nil},
			{"team:sales/ops", nil},
		} {
			node, err := ParseNode(tc.scope)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Budgets(ctx, OneDept("sales"), node); !errors.Is(err, tc.want) {
				t.Errorf("sales at %s: %v, want %v", tc.scope, err, tc.want)
			}
		}
	})

	t.Run("requests keyset", func(t *testing.T) {
		var ids []string
		var last time.Time
		after := ""
		for pages := 0; ; pages++ {
			p, err := d.Requests(ctx, AllDepts(), RequestFilter{Limit: 3, After: after})
			if err != nil {
				t.Fatal(err)
			}
			for _, row := range p.Rows {
				if !last.IsZero() && row.Time.After(last) {
					t.Errorf("row %s at %v after the previous row's %v", row.RequestID, row.Time, last)
				}
				last = row.Time
				ids = append(ids, row.RequestID)
			}
			if p.Next == "" {
				break
			}
			if pages > int(n) {
				t.Fatal("pages never end")
			}
			after = p.Next
		}
		var want []string
		rows, err := r.store.Conn().Query(ctx, "SELECT request_id FROM usage_events")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			want = append(want, id)
		}
		rows.Close()
		slices.Sort(ids)
		slices.Sort(want)
		if !slices.Equal(ids, want) || uint64(len(ids)) != n {
			t.Errorf("pages hold %d ids %v, ClickHouse %d %v", len(ids), ids, len(want), want)
		}
	})

	t.Run("requests filters", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			v    View
			f    RequestFilter
			rows int
			err  error
		}{
			{"every", AllDepts(), RequestFilter{}, 8, nil},
			{"own department", OneDept("sales"), RequestFilter{}, 2, nil},
			{"other department", OneDept("sales"), RequestFilter{Dept: "eng"}, 0, ErrNotAllowed},
			{"zero view", View{}, RequestFilter{}, 0, nil},
			{"team", AllDepts(), RequestFilter{Dept: "eng", Team: "nlp"}, 5, nil},
			{"model", AllDepts(), RequestFilter{Model: "mock-gpt"}, 8, nil},
			{"model none", AllDepts(), RequestFilter{Model: "mock-large"}, 0, nil},
			{"ok", AllDepts(), RequestFilter{Status: "ok"}, 8, nil},
			{"error", AllDepts(), RequestFilter{Status: "error"}, 0, nil},
			{"code", AllDepts(), RequestFilter{Status: "200"}, 8, nil},
			{"other code", AllDepts(), RequestFilter{Status: "502"}, 0, nil},
			{"bad status", AllDepts(), RequestFilter{Status: "2OO"}, 0, ErrBadInput},
			{"bad cursor", AllDepts(), RequestFilter{After: "!!"}, 0, ErrBadInput},
			{"control character", AllDepts(), RequestFilter{Team: "a\x00b"}, 0, ErrBadInput},
			{"future", AllDepts(), RequestFilter{From: time.Now().Add(time.Hour)}, 0, ErrBadInput},
			{"past", AllDepts(), RequestFilter{From: time.Now().Add(-48 * time.Hour), To: time.Now().Add(-24 * time.Hour)}, 0, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p, err := d.Requests(ctx, tc.v, tc.f)
				if !errors.Is(err, tc.err) {
					t.Fatalf("error %v, want %v", err, tc.err)
				}
				if err == nil && len(p.Rows) != tc.rows {
					t.Errorf("%d rows, want %d", len(p.Rows), tc.rows)
				}
				if err == nil && !tc.v.All() {
					for _, row := range p.Rows {
						if !tc.v.Sees(row.Dept) {
							t.Errorf("row of %s in the view of %s", row.Dept, tc.v.Dept())
						}
					}
				}
			})
		}
	})

	t.Run("request explain", func(t *testing.T) {
		p, err := d.Requests(ctx, OneDept("eng"), RequestFilter{Limit: 1})
		if err != nil || len(p.Rows) != 1 {
			t.Fatalf("%v %+v", err, p)
		}
		row := p.Rows[0]
		c, err := d.Request(ctx, OneDept("eng"), row.RequestID, RequestHint{})
		if err != nil {
			t.Fatal(err)
		}
		at, err := d.Request(ctx, OneDept("eng"), row.RequestID, RequestHint{Dept: "eng", At: row.Time})
		if err != nil || at.EventID != c.EventID || at.CostNano != c.CostNano {
			t.Fatalf("located %+v (%v), searched %+v", at, err, c)
		}
		if _, err := d.Request(ctx, OneDept("eng"), row.RequestID, RequestHint{Dept: "eng", At: row.Time.Add(-time.Hour)}); !errors.Is(err, billing.ErrNotFound) {
			t.Errorf("a wrong hint finds the request: %v", err)
		}
		if _, err := d.Request(ctx, OneDept("sales"), row.RequestID, RequestHint{Dept: "eng", At: row.Time}); !errors.Is(err, ErrNotAllowed) {
			t.Errorf("sales looks into eng by a hint: %v", err)
		}
		if c.CostNano != row.CostNano || !c.PriceKnown || c.InputNano+c.OutputNano+c.CachedNano+c.CacheWriteNano+c.ReqNano-c.CostNano > 5 {
			t.Errorf("charge %+v, row cost %d", c, row.CostNano)
		}
		if _, err := d.Request(ctx, OneDept("sales"), row.RequestID, RequestHint{}); !errors.Is(err, ErrNotAllowed) {
			t.Errorf("sales explains an eng request: %v", err)
		}
		if _, err := d.Request(ctx, AllDepts(), "req-none", RequestHint{}); !errors.Is(err, billing.ErrNotFound) {
			t.Errorf("unknown request: %v", err)
		}
	})

	t.Run("models", func(t *testing.T) {
		m := d.Models(ctx)
		if m.History != nil || len(m.Routes) != 2 || len(m.Targets) == 0 || m.Traffic["mock-gpt"].Requests != n || m.Traffic["mock-gpt"].ErrorRate() != 0 {
			t.Errorf("models %+v", m)
		}
	})

	t.Run("ClickHouse absent or down", func(t *testing.T) {
		down, err := clickhouse.Open(&clickhouse.Options{Addr: []string{listen(t).Addr().String()}, DialTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for name, dd := range map[string]*Data{
			"absent": {Totals: r.tracker, Routes: r.gw.Routes},
			"down":   {Totals: r.tracker, Routes: r.gw.Routes, CH: chstore.Querier(down)},
		} {
			o, err := dd.Overview(ctx, AllDepts())
			if err != nil || o.History == nil || len(o.Depts) != 2 || o.Depts[0].Month.SpentNano != r.chSum("dept = 'eng'") {
				t.Errorf("%s: overview %+v, %v", name, o, err)
			}
			if name == "absent" && !errors.Is(o.History, ErrNoClickHouse) {
				t.Errorf("absent: history %v", o.History)
			}
			if _, err := dd.Requests(ctx, AllDepts(), RequestFilter{}); err == nil {
				t.Errorf("%s: requests without ClickHouse", name)
			}
			if b, err := dd.Budgets(ctx, AllDepts(), Node{Scope: budget.ScopeTeam, Value: "eng/nlp"}); err != nil || b.ChildrenErr == nil || len(b.Limits) != 1 {
				t.Errorf("%s: budgets %+v, %v", name, b, err)
			}
			if m := dd.Models(ctx); m.History == nil || len(m.Routes) != 2 {
				t.Errorf("%s: models %+v", name, m)
			}
		}
	})
}

func TestParseNode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Node
		err  bool
	}{
		{"", Node{}, false},
		{"global", Node{}, false},
		{"dept:eng", Node{budget.ScopeDept, "eng"}, false},
		{"team:eng/ml", Node{budget.ScopeTeam, "eng/ml"}, false},
		{"project:a%2Fb/p", Node{budget.ScopeProject, "a%2Fb/p"}, false},
		{"subject:alice@example.com", Node{budget.ScopeSubject, "alice@example.com"}, false},
		{"key:k:1", Node{budget.ScopeKey, "k:1"}, false},
		{"team:ml", Node{}, true},
		{"dept:", Node{}, true},
		{"dept", Node{}, true},
		{"region:eu", Node{}, true},
		{"global:x", Node{}, true},
		{"dept:a\nb", Node{}, true},
		{"dept:" + string(make([]byte, 600)), Node{}, true},
	} {
		got, err := ParseNode(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseNode(%q) = %+v, %v", tc.in, got, err)
		}
		if err != nil && !errors.Is(err, ErrBadInput) {
			t.Errorf("ParseNode(%q): %v does not wrap ErrBadInput", tc.in, err)
		}
		if err == nil && tc.want.Scope != budget.ScopeGlobal && got.String() != tc.in {
			t.Errorf("ParseNode(%q).String() = %q", tc.in, got.String())
		}
	}
}

func TestCursor(t *testing.T) {
	c := cursor{tsMs: 1765000000123, requestID: "req:1/2"}
	got, err := parseCursor(c.String())
	if err != nil || got != c {
		t.Fatalf("round trip %+v: %+v, %v", c, got, err)
	}
	for _, bad := range []string{"", "!!", "MTIz", "OjEyMw", "YWJjOmQ", "LTE6cg"} {
		if _, err := parseCursor(bad); !errors.Is(err, ErrBadInput) {
			t.Errorf("parseCursor(%q): %v", bad, err)
		}
	}
}
