//go:build chdb

package dashboards

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/chsql"
	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/chtest"
	"github.com/tollgate/tollgate/pkg/replay"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestVersions runs every SQL statement Tollgate sends to ClickHouse, with
// the same data, on ClickHouse 18.16 (a clickhouse-server process, as the
// other tests) and on the current release chDB embeds (26.x), and compares
// their answers: the schema's migrations, the catalogue pkg/chsql (the
// loaders, finance, replay, reconcile, and so tollctl), and every panel and
// template variable of the dashboards with their Grafana macros expanded.
// The data goes into 18.16 through the project's own writers and is copied
// to the embedded engine with the catalogue's inserts, row by row.
func TestVersions(t *testing.T) {
	old, cur := openBoth(t)
	migrateCurrent(t, cur)
	// The data: every table the project writes, through its inserts.
	inserts := map[string]chsql.Statement{}
	for _, st := range chsql.All() {
		if tbl, _, ok := insertTarget(st.SQL); ok {
			inserts[tbl] = st
		}
	}
	for _, tbl := range slices.Sorted(maps.Keys(inserts)) {
		copyTable(t, old, cur, inserts[tbl])
	}
	t.Run("catalogue", func(t *testing.T) { checkCatalogue(t, old, cur) })
	t.Run("backfill", func(t *testing.T) { checkBackfill(t, old, cur) })
	checkDashboards(t, old, cur)
}

// openBoth opens the embedded engine, which must be a current release, and
// a migrated 18.16 server holding the dashboards' seed and the loader's.
func openBoth(t *testing.T) (*server, *embedded) {
	t.Helper()
	db := openChDB(t)
	v, err := db.query("SELECT version()", "TSV")
	if major, _, _ := strings.Cut(v, "."); err != nil || atoi(major) < 25 {
		t.Fatalf("chDB answers version %q, %v: want a current release (25 or later)", v, err)
	}
	t.Logf("current release: ClickHouse %s (chDB)", strings.TrimSpace(v))
	srv := chtest.New(t)
	s := openStoreOn(t, srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seedLoader(ctx, t, s)
	return &server{http: srv.HTTPAddr(), db: s.Database()}, &embedded{db: db}
}

// migrateCurrent applies the schema to the current release as Migrate does.
func migrateCurrent(t *testing.T, cur *embedded) {
	t.Helper()
	if _, err := cur.run(chsql.CreateDatabase("tollgate_created")); err != nil {
		t.Errorf("create database: %v", err)
	}
	if _, err := cur.run(chsql.CreateMigrations.SQL); err != nil {
		t.Fatalf("%s: %v", chsql.CreateMigrations.Name, err)
	}
	ms, err := chstore.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		for i, stmt := range m.Statements {
			if _, err := cur.run(stmt); err != nil {
				t.Fatalf("migration %s statement %d on %s: %v\n%s", m.Name, i+1, cur, err, stmt)
			}
		}
	}
}

// checkCatalogue runs each statement of the catalogue with arguments that
// find data (catalogueArgs).
func checkCatalogue(t *testing.T, old, cur engine) {
	seen := map[string]bool{}
	for _, st := range chsql.All() {
		if seen[st.Name] {
			t.Errorf("statement name %s used twice", st.Name)
		}
		seen[st.Name] = true
		if _, _, ok := insertTarget(st.SQL); ok || strings.HasPrefix(st.SQL, "CREATE ") {
			continue // run by migrateCurrent and copyTable
		}
		t.Run(st.Name, func(t *testing.T) {
			args, ok := catalogueArgs[st.Name]
			if !ok {
				t.Fatalf("no arguments for %s in catalogueArgs: add some that find data", st.Name)
			}
			rows := 0
			for i, a := range args {
				sql, err := bind(st.SQL, a...)
				if err != nil {
					t.Fatal(err)
				}
				rows += len(compare(t, fmt.Sprintf("args %d", i), old, cur, sql, "CSV"))
			}
			if rows == 0 && !t.Failed() {
				t.Errorf("no run of %s found rows: the comparison proves little", st.Name)
			}
		})
	}
	for name := range catalogueArgs {
		if !seen[name] {
			t.Errorf("catalogueArgs names %s, not in the catalogue", name)
		}
	}
}

// checkDashboards runs every template variable and panel of every
// dashboard as Grafana sends them, over the month at a daily interval and
// up to mid-month at an hourly one, and fails for a panel that finds no
// rows in any case.
func checkDashboards(t *testing.T, old, cur engine) {
	dashes := loadDashboards(t)
	panelRows := map[string]int{} // rows of each panel over the cases
	for _, tc := range []struct {
		name     string
		to       time.Time
		interval int
	}{
		{"month daily", rangeTo, 86400},
		{"mid-month hourly", forecastAt, 3600},
	} {
		for _, f := range slices.Sorted(maps.Keys(dashes)) {
			t.Run(tc.name+"/"+f, func(t *testing.T) {
				e := &expander{from: rangeFrom, to: tc.to, interval: tc.interval, vars: map[string][]string{}}
				resolveBoth(t, old, cur, dashes[f], e)
				for _, p := range flatPanels(dashes[f].Panels) {
					for i, tg := range p.Targets {
						sql, err := e.expand(tg.RawSQL)
						if err != nil {
							t.Errorf("panel %q: %v", p.Title, err)
							continue
						}
						out := compare(t, fmt.Sprintf("panel %q target %d", p.Title, i), old, cur, sql, "CSVWithNames")
						if raw, ok := overEvents(sql); ok {
							for _, eng := range []engine{old, cur} {
								sameAnswer(t, fmt.Sprintf("panel %q target %d over the raw events", p.Title, i), eng, sql, raw)
							}
						}
						panelRows[f+"/"+p.Title] += max(len(out)-1, 0) // less the names
						if t.Failed() {
							panelRows[f+"/"+p.Title]++ // reported already
						}
					}
				}
			})
		}
	}
	for _, p := range slices.Sorted(maps.Keys(panelRows)) {
		if panelRows[p] == 0 {
			t.Errorf("panel %s found no rows in any case: the comparison proves little", p)
		}
	}
}

// resolveBoth sets e.vars to every value of each query variable (All, as
// Grafana sends it), comparing the variable's answers on both engines.
func resolveBoth(t *testing.T, old, cur engine, d dashboard, e *expander) {
	t.Helper()
	for _, v := range d.Templating.List {
		q, _ := v.Query.(string)
		if v.Type != "query" {
			e.vars[v.Name] = []string{q}
			continue
		}
		sql, err := e.expand(q)
		if err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		var vals []string
		for _, r := range compare(t, "variable "+v.Name, old, cur, sql, "CSV") {
			vals = append(vals, r[0])
		}
		if len(vals) == 0 {
			t.Fatalf("variable %s: no values", v.Name)
		}
		e.vars[v.Name] = vals
	}
}

// catalogueArgs are the arguments each catalogue statement is run with (one
// run per list), chosen to find the seeded rows.
var catalogueArgs = map[string][][]any{
	"chstore.column_exists":      {{"usage_events", "service_tier"}, {"usage_events", "nope"}},
	"chstore.applied_migrations": {{}},
	"chstore.cluster_shards":     {{"tollgate"}, {"nope"}},
	"chstore.has_setting":        {{"max_threads"}, {"nope"}},
	"chstore.cluster_hosts":      {{"nope"}},
	"chstore.table_exists":       {{"usage_events"}, {"nope"}},
	"chstore.watermark":          {{chstore.DefaultStream, chstore.DefaultDurable}, {chstore.DefaultStream, "other"}},
	"chstore.load_state":         {{chstore.DefaultStream, chstore.DefaultDurable}},
	"chstore.running_inserts":    {{"tollgate-load-x-"}},
	"chstore.stored_rows": {
		{unix(loaderFrom), unix(loaderFrom.Add(time.Hour)), uint64(100), uint64(102)},
		{unix(rangeFrom), unix(rangeTo), uint64(1), uint64(5)},
	},
	"chstore.current_limits":    {{}},
	"chstore.limits_version":    {{}},
	"chstore.stored_audit_ids":  {{set{"a1", "a2", "nope"}}},
	"finance.explain":           {{"req-e3"}, {"req-l1"}, {"req-none"}},
	"finance.simulate_history":  {{rangeFrom.Unix(), rangeTo.Unix()}},
	"finance.statement_team":    {{"eng", rangeFrom.Unix(), rangeTo.Unix() + 1}},
	"finance.statement_project": {{"eng", rangeFrom.Unix(), rangeTo.Unix() + 1}},
	"finance.statement_model":   {{"sales", rangeFrom.Unix(), rangeTo.Unix() + 1}},
	"finance.focus":             {{rangeFrom.Unix(), rangeTo.Unix() + 1}, {loaderFrom.Unix(), loaderFrom.AddDate(0, 1, 0).Unix()}},
	"finance.focus_dept":        {{rangeFrom.Unix(), rangeTo.Unix() + 1, "eng"}},
	"replay.stored":             {{unix(rangeFrom), unix(loaderFrom.Add(time.Hour)), []string{"e1", "e5", "l2", "nope"}}},
	"replay.stored_repriced":    {{"2026-12-01", unix(loaderFrom), unix(loaderFrom.Add(time.Hour)), []string{"l1", "l2", "nope"}}},
	"finance.explain_at":        {{"eng", at("2024-03-05 09:00:00").Unix(), "req-e3"}, {"eng", at("2024-03-05 09:00:01").Unix(), "req-e3"}},
	"console.top_models":        {{"2024-03-01", "2024-03-31"}},
	"console.top_models_dept":   {{"2024-03-01", "2024-03-31", "eng"}},
	"console.top_teams":         {{"2024-03-01", "2024-03-31", "", ""}, {"2024-03-01", "2024-03-31", "sales/", "sales/"}},
	"console.spend_daily":       {{"2024-03-01", "2024-03-31", "", ""}, {"2024-03-01", "2024-03-31", "eng", "eng"}},
	"console.counted":           {{}},
	"console.counted_dept":      {{"eng"}, {"none"}},
	"console.team_projects":     {{"eng", "search", rangeFrom.Unix(), rangeTo.Unix() + 1}},
	"console.project_subjects":  {{"eng", "gw", rangeFrom.Unix(), rangeTo.Unix() + 1}},
	"console.subject_keys":      {{"2024-03-01", "", "", "alice"}, {"2024-03-01", "sales", "sales", "alice"}},
	"console.key_in_dept":       {{"eng", "k-bob"}, {"sales", "k-bob"}},
	"console.keys_last_used":    {{"2024-01-01"}, {"2030-01-01"}},
	"console.request_keys": {
		{rangeFrom.Unix(), rangeTo.Unix(), "", "", "", "", "", "", "", "", uint64(rangeTo.UnixMilli() + 1000), uint64(rangeTo.UnixMilli() + 1000), "", 50},
		{rangeFrom.Unix(), rangeTo.Unix(), "platform", "platform", "gpt-4o", "gpt-4o", "ok", "ok", "ok", "ok", uint64(rangeTo.UnixMilli()), uint64(rangeTo.UnixMilli()), "", 2},
		{rangeFrom.Unix(), rangeTo.Unix(), "", "", "", "", "error", "error", "error", "error", uint64(at("2024-03-20 14:00:00").UnixMilli()), uint64(at("2024-03-20 14:00:00").UnixMilli()), "req-e6", 50},
		{rangeFrom.Unix(), rangeTo.Unix(), "", "", "", "", "502", "502", "502", "502", uint64(rangeTo.UnixMilli()), uint64(rangeTo.UnixMilli()), "", 50},
	},
	"console.recent_keys":      {{rangeFrom.Unix(), rangeTo.Unix(), uint64(rangeTo.UnixMilli()), uint64(rangeTo.UnixMilli()), "", 3}},
	"console.recent_keys_dept": {{"sales", rangeFrom.Unix(), rangeTo.Unix(), uint64(rangeTo.UnixMilli()), uint64(rangeTo.UnixMilli()), "", 3}},
	"console.request_keys_dept": {
		{"eng", rangeFrom.Unix(), rangeTo.Unix(), "", "", "", "", "", "", "", "", uint64(rangeTo.UnixMilli()), uint64(rangeTo.UnixMilli()), "", 3},
	},
	"console.request_rows":    {{set{"eng", "sales"}, rangeFrom.Unix(), rangeTo.Unix(), []string{"req-e3", "req-e5", "req-none"}}},
	"console.model_traffic":   {{rangeFrom.Unix()}},
	"reconcile.count":         {{}},
	"reconcile.count_to":      {{unix(rangeTo), uint64(rangeTo.UnixMilli())}},
	"reconcile.count_from":    {{unix(rangeFrom), uint64(rangeFrom.UnixMilli())}},
	"reconcile.count_from_to": {{unix(rangeFrom), uint64(rangeFrom.UnixMilli()), unix(rangeTo), uint64(rangeTo.UnixMilli())}},
}

// loaderFrom is when the events written through the loader's insert
// happened: after the dashboards' range, so their checks are unchanged.
var loaderFrom = at("2024-04-02 10:00:00")

func unix(t time.Time) uint32 { return uint32(t.Unix()) }

// seedLoader writes what the loader, replay and the watermark writer
// write: events with every column (budgets, batches), re-priced copies, a
// watermark and audit events with before and after.
func seedLoader(ctx context.Context, t *testing.T, s *chstore.Store) {
	t.Helper()
	var events []*usagev1.UsageEvent
	var src []chstore.Source
	for i := range 3 {
		ts := loaderFrom.Add(time.Duration(i) * time.Minute)
		events = append(events, &usagev1.UsageEvent{
			EventId: fmt.Sprintf("l%d", i+1), RequestId: fmt.Sprintf("req-l%d", i+1), Timestamp: ts.UnixNano(),
			Issuer: "dev", Subject: "zoe", KeyId: "k-zoe", Dept: "research", Team: "ml", Project: "eval",
			RequestedModel: "gpt-4o", ServedModel: "gpt-4o-2024-08-06", Provider: "openai", Deployment: "openai/gpt-4o",
			Attempts: 2, Fallbacks: []string{"azure/gpt-4o"}, Route: "gpt-4o",
			PromptTokens: 1000, CompletionTokens: 200, CachedTokens: 100, CacheWriteTokens: 50, ReasoningTokens: 10,
			CostNanoUsd: 1_230_000_000 + int64(i), PricingVersion: "2026-11-01", Endpoint: "/v1/chat/completions",
			Stream: true, StatusCode: 200, LatencyTotalUs: 5000, TtftUs: 900, UpstreamUs: 4500, OverheadUs: 120,
			ServiceTier: "flex", Units: uint64(i), Unit: "images",
			Budgets: []*usagev1.BudgetCheck{{Scope: "dept", Value: "research", Period: "month", PeriodStart: "2024-04-01",
				LimitNanoUsd: 10e9, SpentNanoUsd: 1e9, ReservedNanoUsd: 5e6, HeadroomNanoUsd: 8_995_000_000}},
		})
		src = append(src, chstore.Source{StreamSeq: uint64(100 + i), Producer: "gw-1", BatchSeq: 7})
	}
	if err := chstore.InsertSourced(ctx, s.Conn(), events, src, loaderFrom.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	sink := replay.NewClickHouse(s.Conn(), true)
	var items []replay.Item
	for i, ev := range events[:2] {
		rep := proto.CloneOf(ev)
		rep.PricingVersion, rep.CostNanoUsd = "2026-12-01", ev.CostNanoUsd/2
		items = append(items, replay.Item{Seq: src[i].StreamSeq, Event: rep, OriginalCost: ev.CostNanoUsd, OriginalVersion: ev.PricingVersion})
	}
	if err := sink.Write(ctx, items); err != nil {
		t.Fatal(err)
	}
	b, err := s.Conn().PrepareBatch(ctx, chsql.InsertWatermark.SQL)
	if err != nil {
		t.Fatal(err)
	}
	for i, seq := range []uint64{100, 102} {
		if err := b.Append(chstore.DefaultStream, chstore.DefaultDurable, seq, loaderFrom.Add(time.Duration(i)*time.Minute), fmt.Sprintf("w%d", seq)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	b, err = s.Conn().PrepareBatch(ctx, chsql.InsertAudit.SQL)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append("a9", loaderFrom, uint64(loaderFrom.UnixMilli()), "ops", "budget.changed", "budgets[0]",
		`{"amount_usd":"5"}`, `{"amount_usd":"10"}`, "raised", uint64(9), loaderFrom); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
}

// engine runs SQL text and answers in a ClickHouse output format.
type engine interface {
	run(sql string) (string, error)
	runFormat(sql, format string) (string, error)
	String() string
}

// server is a clickhouse-server, asked over its HTTP interface.
type server struct{ http, db string }

func (s *server) String() string { return "ClickHouse 18.16" }

func (s *server) run(sql string) (string, error) { return s.runFormat(sql, "") }

func (s *server) runFormat(sql, format string) (string, error) {
	if format != "" {
		sql += "\nFORMAT " + format
	}
	resp, err := http.Post("http://"+s.http+"/?database="+url.QueryEscape(s.db), "text/plain", strings.NewReader(sql))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// embedded is chDB.
type embedded struct{ db *chDB }

func (e *embedded) String() string { return "ClickHouse 26 (chDB)" }

func (e *embedded) run(sql string) (string, error) { return e.db.query(sql, "TSV") }

func (e *embedded) runFormat(sql, format string) (string, error) { return e.db.query(sql, format) }

var insertInto = regexp.MustCompile(`(?s)^INSERT INTO ([A-Za-z_][A-Za-z0-9_]*) \((.*)\)$`)

// insertTarget returns the table and column list of a prepared insert.
func insertTarget(sql string) (table, cols string, ok bool) {
	m := insertInto.FindStringSubmatch(sql)
	if m == nil {
		return "", "", false
	}
	return m[1], strings.Join(strings.Fields(m[2]), " "), true
}

// copyTable copies the rows the insert ins writes from 18.16 to the
// embedded engine, each row with an insert of its own (the current
// release collapses rows of one insert that share a sorting key; the
// project's inserts never hold such rows, and 18.16's rows came from
// several). The insert's columns must be all of the table's. Row counts
// are not compared: ReplacingMergeTree tables lose replaced rows when
// parts merge, which the current release does sooner.
func copyTable(t *testing.T, old *server, cur *embedded, ins chsql.Statement) {
	t.Helper()
	tbl, cols, _ := insertTarget(ins.SQL)
	all, err := old.runFormat("SELECT name FROM system.columns WHERE database = currentDatabase() AND table = '"+tbl+"'", "TSV")
	if err != nil {
		t.Fatalf("columns of %s: %v", tbl, err)
	}
	listed := strings.Split(strings.ReplaceAll(cols, " ", ""), ",")
	for _, c := range strings.Fields(all) {
		if !slices.Contains(listed, c) {
			t.Errorf("%s: %s does not write column %s", ins.Name, tbl, c)
		}
	}
	out, err := old.runFormat("SELECT "+cols+" FROM "+tbl, "TSV")
	if err != nil {
		t.Fatalf("read %s: %v", tbl, err)
	}
	n := 0
	for line := range strings.Lines(out) {
		if _, err := cur.run(ins.SQL + " FORMAT TSV\n" + line); err != nil {
			t.Fatalf("%s on %s: %v\n%s", ins.Name, cur, err, line)
		}
		n++
	}
	if n == 0 && tbl != "watermarks" {
		t.Fatalf("%s: no rows to copy", tbl)
	}
}

// compare runs sql on both engines and fails t where either fails or their
// answers differ; it returns 18.16's rows.
func compare(t *testing.T, what string, old, cur engine, sql, format string) [][]string {
	t.Helper()
	a, errA := old.runFormat(sql, format)
	b, errB := cur.runFormat(sql, format)
	if errA != nil || errB != nil {
		if errA != nil {
			t.Errorf("%s on %s: %v", what, old, errA)
		}
		if errB != nil {
			t.Errorf("%s on %s: %v", what, cur, firstLine(errB.Error()))
		}
		t.Logf("SQL:\n%s", sql)
		return nil
	}
	ra, rb := parseCSV(t, a), parseCSV(t, b)
	if diff := diffRows(ra, rb, hasOrderBy(sql)); diff != "" {
		t.Errorf("%s: answers differ (%s):\n%s: %q\n%s: %q\nSQL:\n%s", what, diff, old, a, cur, b, sql)
	}
	return ra
}

func firstLine(s string) string {
	if i := strings.Index(s, ". Stack trace"); i > 0 {
		s = s[:i]
	}
	return s
}

func parseCSV(t *testing.T, s string) [][]string {
	t.Helper()
	r := csv.NewReader(strings.NewReader(s))
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		t.Fatalf("parse CSV %q: %v", s, err)
	}
	return rows
}

// hasOrderBy reports whether the statement's outermost query orders its
// rows (an ORDER BY after the last closing parenthesis).
func hasOrderBy(sql string) bool {
	tail := sql[strings.LastIndex(sql, ")")+1:]
	return strings.Contains(strings.ToUpper(tail), "ORDER BY")
}

// diffRows says how a and b differ: in rows, or (when ordered) in order.
// Cells are equal when their text is, or both are numbers within 1e-9 of
// each other relatively (Float64 division, and Decimal's trailing zeros,
// which the current release drops).
func diffRows(a, b [][]string, ordered bool) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d rows against %d", len(a), len(b))
	}
	if !ordered {
		a, b = sortedRows(a), sortedRows(b)
	}
	for i := range a {
		if !sameRow(a[i], b[i]) {
			if ordered && slices.EqualFunc(sortedRows(a), sortedRows(b), sameRow) {
				return fmt.Sprintf("order differs at row %d", i)
			}
			return fmt.Sprintf("row %d: %q against %q", i, a[i], b[i])
		}
	}
	return ""
}

func sortedRows(rows [][]string) [][]string {
	out := slices.Clone(rows)
	slices.SortFunc(out, func(x, y []string) int { return strings.Compare(strings.Join(x, "\x00"), strings.Join(y, "\x00")) })
	return out
}

func sameRow(x, y []string) bool {
	return slices.EqualFunc(x, y, func(p, q string) bool {
		if p == q {
			return true
		}
		fp, err1 := strconv.ParseFloat(p, 64)
		fq, err2 := strconv.ParseFloat(q, 64)
		return err1 == nil && err2 == nil && math.Abs(fp-fq) <= 1e-9*math.Max(1, math.Max(math.Abs(fp), math.Abs(fq)))
	})
}

// set is a bind rendered as a tuple, as clickhouse-go renders a GroupSet
// (for IN ?).
type set []string

// bind replaces each '?' outside quotes with its argument, the way
// clickhouse-go binds on the client: strings quoted and escaped, numbers
// as they are, []string as an array.
func bind(sql string, args ...any) (string, error) {
	var b strings.Builder
	n := 0
	var quote byte
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case quote != 0:
			if c == '\\' && i+1 < len(sql) {
				b.WriteByte(c)
				i++
				c = sql[i]
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '`' || c == '"':
			quote = c
		case c == '?':
			if n >= len(args) {
				return "", fmt.Errorf("more '?' than the %d arguments in %q", len(args), sql)
			}
			lit, err := literal(args[n])
			if err != nil {
				return "", err
			}
			b.WriteString(lit)
			n++
			continue
		}
		b.WriteByte(c)
	}
	if n != len(args) {
		return "", fmt.Errorf("%d arguments for %d '?' in %q", len(args), n, sql)
	}
	return b.String(), nil
}

func literal(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'", nil
	case []string:
		q := make([]string, len(v))
		for i, s := range v {
			q[i], _ = literal(s)
		}
		return "[" + strings.Join(q, ", ") + "]", nil
	case set:
		q := make([]string, len(v))
		for i, s := range v {
			q[i], _ = literal(s)
		}
		return "(" + strings.Join(q, ", ") + ")", nil
	case int, int64, uint32, uint64:
		return fmt.Sprint(v), nil
	}
	return "", fmt.Errorf("no literal for %T", v)
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// rollupsAsEvents maps each rollup a panel may read to usage_events shaped
// as that rollup: its key columns, and one request per row.
var rollupsAsEvents = map[string]string{
	"usage_dept_daily":    eventsAsDaily,
	"usage_team_daily":    eventsAsDaily,
	"usage_key_daily":     eventsAsDaily,
	"usage_subject_daily": eventsAsDaily,
	"usage_model_daily":   eventsAsDaily,
	"usage_daily":         eventsAsDaily,
	"usage_hourly":        eventsAsHourly,
	"usage_dept_hourly":   eventsAsHourly,
	"usage_dims":          "(SELECT *, toUInt64(1) AS requests FROM usage_events)",
	"usage_traffic_5m": `(SELECT toStartOfFiveMinute(ts) AS bucket, provider, served_model,
		if(status_code >= 400 OR error_type != '', if(error_type != '', error_type, concat('http_', toString(status_code))), '') AS error,
		toUInt64(1) AS requests, toUInt64(length(fallbacks) > 0) AS fell_back, toUInt64(attempts > 1) AS retried
		FROM usage_events)`,
	"usage_scope_daily": `(SELECT s.1 AS scope, toDate(ts) AS day, s.2 AS value, s.3 AS name, toUInt64(1) AS requests, cost_nano_usd
		FROM usage_events
		ARRAY JOIN arrayFilter(x -> x.1 = 'global' OR x.4 != '', [
			('global', '', '', ''),
			('dept', dept, '', dept),
			('team', concat(replaceAll(replaceAll(replaceAll(dept, '%', '%25'), '/', '%2F'), '*', '%2A'), '/', team), team, team),
			('project', concat(replaceAll(replaceAll(replaceAll(dept, '%', '%25'), '/', '%2F'), '*', '%2A'), '/', project), project, project),
			('subject', subject, '', subject),
			('key', key_id, '', key_id)]) AS s)`,
	"usage_overhead_hourly": "(SELECT toStartOfHour(ts) AS hour, provider, served_model, " + twoDigits("overhead_us") +
		" AS overhead_bucket_us, toUInt64(1) AS in_bucket FROM usage_events)",
	"usage_ttft_hourly": "(SELECT toStartOfHour(ts) AS hour, provider, served_model, " + twoDigits("ttft_us") +
		" AS ttft_bucket_us, toUInt64(1) AS in_bucket FROM usage_events WHERE stream = 1 AND ttft_us > 0)",
}

// eventsAsDaily is usage_events shaped as a daily rollup: a day column
// and one request per row.
const eventsAsDaily = "(SELECT toDate(ts) AS day, *, toUInt64(1) AS requests FROM usage_events)"

// eventsAsHourly is usage_events shaped as an hourly rollup.
const eventsAsHourly = "(SELECT toStartOfHour(ts) AS hour, *, toUInt64(1) AS requests FROM usage_events)"

// twoDigits is the latency bucket of 0014_panel_rollups.sql: col (whole
// microseconds) with two significant digits kept.
func twoDigits(col string) string {
	var b strings.Builder
	b.WriteString("multiIf(" + col + " < 100, " + col)
	for p := uint64(10); p <= 1_000_000; p *= 10 {
		fmt.Fprintf(&b, ", %s < %d, intDiv(%s, %d) * %d", col, p*100, col, p, p)
	}
	fmt.Fprintf(&b, ", intDiv(%s, 10000000) * 10000000)", col)
	return b.String()
}

// overEvents rewrites a panel that reads a rollup (rollupsAsEvents) to
// read the raw events instead, and reports whether it read one.
func overEvents(sql string) (string, bool) {
	raw := fromRollup.ReplaceAllStringFunc(sql, func(from string) string {
		return "FROM " + rollupsAsEvents[strings.TrimPrefix(from, "FROM ")]
	})
	return raw, raw != sql
}

// fromRollup matches "FROM r" for each rollup r of rollupsAsEvents.
var fromRollup = regexp.MustCompile(`\bFROM (` + strings.Join(slices.Collect(maps.Keys(rollupsAsEvents)), "|") + `)\b`)

// sameAnswer fails unless eng answers sql and raw alike: a panel over a
// rollup must say what the same aggregate over the events says.
func sameAnswer(t *testing.T, what string, eng engine, sql, raw string) {
	t.Helper()
	a, errA := eng.runFormat(sql, "CSVWithNames")
	b, errB := eng.runFormat(raw, "CSVWithNames")
	if errA != nil || errB != nil {
		t.Errorf("%s on %s: %v, %v\nSQL:\n%s", what, eng, errA, errB, raw)
		return
	}
	if diff := diffRows(parseCSV(t, a), parseCSV(t, b), hasOrderBy(sql)); diff != "" {
		t.Errorf("%s on %s: answers differ (%s):\nrollup: %q\nevents: %q", what, eng, diff, a, b)
	}
}

// insertSelect matches a backfill: INSERT INTO t (columns) SELECT ...
var insertSelect = regexp.MustCompile(`(?s)^INSERT INTO ([A-Za-z_][A-Za-z0-9_]*) \(([^)]*)\)\s+SELECT `)

// rollupSums are the summed columns of each rollup a migration backfills;
// the columns before them are its key.
var rollupSums = map[string]string{
	"usage_dept_daily":      "requests, cost_nano_usd",
	"usage_team_daily":      "requests, errors, prompt_tokens, completion_tokens, cost_nano_usd",
	"usage_key_daily":       "requests, cost_nano_usd",
	"usage_traffic_5m":      "requests, fell_back, retried",
	"usage_dims":            "requests",
	"usage_dept_hourly":     "requests, prompt_tokens, completion_tokens, cost_nano_usd",
	"usage_subject_daily":   "requests, cost_nano_usd",
	"usage_scope_daily":     "requests, cost_nano_usd",
	"usage_model_daily":     "requests, cost_nano_usd",
	"usage_overhead_hourly": "in_bucket",
	"usage_ttft_hourly":     "in_bucket",
}

// checkBackfill empties the rollups that migrations backfill (those of
// rollupSums) on the current release, which migrated before it held
// events, and runs the migrations' backfills there: each rollup must then
// hold what 18.16's views put in it, the same sums by its key.
func checkBackfill(t *testing.T, old, cur engine) {
	ms, err := chstore.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, m := range ms {
		for _, stmt := range m.Statements {
			sm := insertSelect.FindStringSubmatch(stmt)
			if sm == nil || !strings.Contains(stmt, "WHERE (SELECT count() FROM "+sm[1]+") = 0") {
				continue
			}
			tbl, cols := sm[1], sm[2]
			sums, ok := rollupSums[tbl]
			if !ok {
				t.Fatalf("%s backfills %s: add its summed columns to rollupSums", m.Name, tbl)
			}
			key, ok := strings.CutSuffix(cols, ", "+sums)
			if !ok {
				t.Fatalf("%s: columns %q do not end in the sums %q", tbl, cols, sums)
			}
			if _, err := cur.run("TRUNCATE TABLE " + tbl); err != nil {
				t.Fatalf("truncate %s: %v", tbl, err)
			}
			if _, err := cur.run(stmt); err != nil {
				t.Fatalf("backfill %s: %v", tbl, err)
			}
			keys[tbl] = key
		}
	}
	if len(keys) != len(rollupSums) {
		t.Fatalf("the migrations backfill %v, want the %d rollups of rollupSums", slices.Sorted(maps.Keys(keys)), len(rollupSums))
	}
	for _, tbl := range slices.Sorted(maps.Keys(keys)) {
		var sums []string
		for _, c := range strings.Split(rollupSums[tbl], ", ") {
			sums = append(sums, "sum("+c+")")
		}
		sql := "SELECT " + keys[tbl] + ", " + strings.Join(sums, ", ") + " FROM " + tbl + " GROUP BY " + keys[tbl] + " ORDER BY " + keys[tbl]
		if rows := compare(t, tbl, old, cur, sql, "CSV"); len(rows) == 0 {
			t.Errorf("%s is empty: the comparison proves little", tbl)
		}
	}
}
