package dashboards

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/chtest"
)

// dashboard is the part of a Grafana dashboard JSON the test reads.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title      string  `json:"title"`
	Type       string  `json:"type"`
	Panels     []panel `json:"panels"` // collapsed rows
	Datasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RawSQL        string `json:"rawSql"`
		EditorType    string `json:"editorType"`
		Format        *int   `json:"format"`
		QueryType     string `json:"queryType"`
		PluginVersion string `json:"pluginVersion"`
	} `json:"targets"`
}

type variable struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Query      any    `json:"query"`
	IncludeAll bool   `json:"includeAll"`
}

func loadDashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob("*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboard files: %v", err)
	}
	out := map[string]dashboard{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[f] = d
	}
	return out
}

func flatPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		if p.Type == "row" {
			out = append(out, flatPanels(p.Panels)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

// pluginVersion is the grafana-clickhouse-datasource version the
// dashboards are written for, and docker-compose.yml installs.
const pluginVersion = "4.13.0"

// TestTargetsForPlugin checks that every query is saved in the form of
// the plugin's version 4 (a query without pluginVersion >= 4.0.0 is taken
// for a version 3 one and migrated on load): the SQL editor, a queryType
// of the plugin's ("table", "timeSeries") and the format it maps that to
// (table 1, time series 0), for the panel types that show them.
func TestTargetsForPlugin(t *testing.T) {
	formats := map[string]int{"table": 1, "timeSeries": 0}
	for f, d := range loadDashboards(t) {
		for _, p := range flatPanels(d.Panels) {
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", f, p.Title)
			}
			for _, tg := range p.Targets {
				format, ok := formats[tg.QueryType]
				switch {
				case tg.PluginVersion != pluginVersion:
					t.Errorf("%s: panel %q: pluginVersion %q, want %q", f, p.Title, tg.PluginVersion, pluginVersion)
				case tg.EditorType != "sql":
					t.Errorf("%s: panel %q: editorType %q, want sql", f, p.Title, tg.EditorType)
				case !ok:
					t.Errorf("%s: panel %q: queryType %q is not the plugin's table or timeSeries", f, p.Title, tg.QueryType)
				case tg.Format == nil || *tg.Format != format:
					t.Errorf("%s: panel %q: format %v, want %d for %s", f, p.Title, tg.Format, format, tg.QueryType)
				case (p.Type == "timeseries") != (tg.QueryType == "timeSeries"):
					t.Errorf("%s: panel %q of type %s has queryType %s", f, p.Title, p.Type, tg.QueryType)
				}
			}
		}
	}
}

// expander expands the ClickHouse plugin's macros and the dashboard's
// template variables the way Grafana does for this data source: the
// macros of grafana-clickhouse-datasource pluginVersion (its pkg/macros), each
// with the text the plugin writes, times in whole Unix seconds (or
// milliseconds for the _ms forms), dates as toDate('YYYY-MM-DD') in UTC.
type expander struct {
	from, to time.Time
	interval int // seconds; $__interval_s is at least 1
	vars     map[string][]string
}

var (
	macroCall = regexp.MustCompile(`\$__(timeFilter_ms|timeFilter|timeInterval_ms|timeInterval|dateFilter|dateTimeFilter|dt)\(([^()]*)\)`)
	varRef    = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([a-z]+))?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)
)

func (e *expander) expand(sql string) (string, error) {
	dt := func(t time.Time) string { return fmt.Sprintf("toDateTime(%d)", t.Unix()) }
	dt64 := func(t time.Time) string { return fmt.Sprintf("fromUnixTimestamp64Milli(%d)", t.UnixMilli()) }
	date := func(t time.Time) string { return "toDate('" + t.UTC().Format(time.DateOnly) + "')" }
	between := func(col string, conv func(time.Time) string) string {
		return fmt.Sprintf("%s >= %s AND %s <= %s", col, conv(e.from), col, conv(e.to))
	}
	interval := max(e.interval, 1)
	var err error
	sql = macroCall.ReplaceAllStringFunc(sql, func(m string) string {
		g := macroCall.FindStringSubmatch(m)
		var args []string
		for a := range strings.SplitSeq(g[2], ",") {
			args = append(args, strings.TrimSpace(a))
		}
		want := 1
		if g[1] == "dateTimeFilter" || g[1] == "dt" {
			want = 2
		}
		if len(args) != want || slices.Contains(args, "") {
			err = fmt.Errorf("macro %s: want %d arguments", m, want)
			return m
		}
		switch g[1] {
		case "timeFilter":
			return between(args[0], dt)
		case "timeFilter_ms":
			return between(args[0], dt64)
		case "dateFilter":
			return between(args[0], date)
		case "dateTimeFilter", "dt":
			return "(" + between(args[0], date) + ") AND (" + between(args[1], dt) + ")"
		case "timeInterval":
			return fmt.Sprintf("toStartOfInterval(toDateTime(%s), INTERVAL %d second)", args[0], interval)
		default: // timeInterval_ms
			return fmt.Sprintf("toStartOfInterval(toDateTime64(%s, 3), INTERVAL %d millisecond)", args[0], interval*1000)
		}
	})
	if err != nil {
		return "", err
	}
	sql = strings.NewReplacer(
		"$__fromTime_ms", dt64(e.from),
		"$__toTime_ms", dt64(e.to),
		"$__fromTime", dt(e.from),
		"$__toTime", dt(e.to),
		"$__interval_s", strconv.Itoa(interval),
	).Replace(sql)
	sql = varRef.ReplaceAllStringFunc(sql, func(m string) string {
		g := varRef.FindStringSubmatch(m)
		name, format := g[1], g[2]
		if name == "" {
			name = g[3]
		}
		vals, ok := e.vars[name]
		if !ok {
			err = fmt.Errorf("unknown variable or macro %q", m)
			return m
		}
		switch format {
		case "":
			return strings.Join(vals, ",")
		case "singlequote":
			q := make([]string, len(vals))
			for i, v := range vals {
				q[i] = "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
			}
			return strings.Join(q, ",")
		default:
			err = fmt.Errorf("variable format %q not supported by the test", format)
			return m
		}
	})
	if err != nil {
		return "", err
	}
	if strings.Contains(sql, "$") {
		return "", fmt.Errorf("unexpanded $ left in %q", sql)
	}
	return sql, nil
}

func TestExpand(t *testing.T) {
	e := &expander{from: time.Unix(100, 0), to: time.Unix(200, 0), interval: 60,
		vars: map[string][]string{"dept": {"eng", "o'k"}, "c": {"x=1"}}}
	tests := []struct {
		name, in, want string
	}{
		{"time filter", "$__timeFilter(ts)", "ts >= toDateTime(100) AND ts <= toDateTime(200)"},
		{"from to", "$__fromTime $__toTime", "toDateTime(100) toDateTime(200)"},
		{"time interval", "$__timeInterval(ts)", "toStartOfInterval(toDateTime(ts), INTERVAL 60 second)"},
		{"time interval ms", "$__timeInterval_ms(ts)", "toStartOfInterval(toDateTime64(ts, 3), INTERVAL 60000 millisecond)"},
		{"time filter ms", "$__timeFilter_ms(ts)", "ts >= fromUnixTimestamp64Milli(100000) AND ts <= fromUnixTimestamp64Milli(200000)"},
		{"from to ms", "$__fromTime_ms $__toTime_ms", "fromUnixTimestamp64Milli(100000) fromUnixTimestamp64Milli(200000)"},
		{"date filter", "$__dateFilter(d)", "d >= toDate('1970-01-01') AND d <= toDate('1970-01-01')"},
		{"date time filter", "$__dateTimeFilter(d, ts)", "(d >= toDate('1970-01-01') AND d <= toDate('1970-01-01')) AND (ts >= toDateTime(100) AND ts <= toDateTime(200))"},
		{"dt", "$__dt(d,ts)", "(d >= toDate('1970-01-01') AND d <= toDate('1970-01-01')) AND (ts >= toDateTime(100) AND ts <= toDateTime(200))"},
		{"interval seconds", "intDiv(x, $__interval_s)", "intDiv(x, 60)"},
		{"singlequote", "IN (${dept:singlequote})", `IN ('eng','o\'k')`},
		{"plain braces", "'${c}'", "'x=1'"},
		{"plain", "'$c'", "'x=1'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := e.expand(tc.in)
			if err != nil || got != tc.want {
				t.Fatalf("expand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
	if _, err := e.expand("$nope"); err == nil {
		t.Fatal("unknown variable expanded")
	}
	if _, err := e.expand("$__dt(ts)"); err == nil {
		t.Fatal("$__dt with one argument expanded")
	}
	if got, _ := (&expander{}).expand("$__interval_s"); got != "1" {
		t.Fatalf("$__interval_s of a zero interval = %q, want 1 (the plugin's floor)", got)
	}
}

// event is one seeded usage event.
type event struct {
	id, key, subject, dept, team, project, model, provider string
	ts                                                     time.Time
	cost                                                   int64 // nano-USD
	in, out                                                uint64
	status                                                 uint32
	errType                                                string
	stream                                                 bool
	ttft, overhead                                         uint64 // µs
	attempts                                               uint32
	fallbacks                                              []string
}

func at(s string) time.Time {
	ts, err := time.Parse(time.DateTime, s)
	if err != nil {
		panic(err)
	}
	return ts.UTC()
}

// seed is the known history: March 2024 plus one event on each side.
var seed = []event{
	{id: "e1", key: "k-alice-1", subject: "alice", dept: "eng", team: "platform", project: "gw", model: "gpt-4o", provider: "openai", ts: at("2024-03-02 10:15:00"), cost: 1_500_000_000, in: 1000, out: 200, status: 200, stream: true, ttft: 120_000, overhead: 300, attempts: 1},
	{id: "e2", key: "k-bob", subject: "bob", dept: "eng", team: "platform", project: "gw", model: "gpt-4o", provider: "openai", ts: at("2024-03-02 11:30:00"), cost: 250_000_000, in: 400, out: 100, status: 200, overhead: 500, attempts: 1},
	{id: "e3", key: "k-alice-2", subject: "alice", dept: "eng", team: "search", project: "idx", model: "claude-sonnet", provider: "anthropic", ts: at("2024-03-05 09:00:00"), cost: 3_000_000_001, in: 2000, out: 800, status: 200, stream: true, ttft: 300_000, overhead: 700, attempts: 2, fallbacks: []string{"openai/gpt-4o"}},
	{id: "e4", key: "k-carol", subject: "carol", dept: "eng", team: "search", project: "idx", model: "claude-sonnet", provider: "anthropic", ts: at("2024-03-05 09:10:00"), status: 502, errType: "upstream_error", overhead: 900, attempts: 3},
	{id: "e5", key: "k-dave", subject: "dave", dept: "sales", team: "crm", project: "leads", model: "gpt-4o-mini", provider: "openai", ts: at("2024-03-10 14:00:00"), cost: 12_345_678, in: 300, out: 50, status: 200, stream: true, ttft: 80_000, overhead: 400, attempts: 1},
	{id: "e6", key: "k-dave", subject: "dave", dept: "sales", team: "crm", project: "leads", model: "gpt-4o-mini", provider: "openai", ts: at("2024-03-20 14:00:00"), cost: 500_000_000, in: 100, out: 10, status: 429, overhead: 200, attempts: 1},
	{id: "e7", key: "k-erin", subject: "erin", dept: "sales", team: "crm", project: "leads", model: "gpt-4o-mini", provider: "openai", ts: at("2024-02-28 23:59:59"), cost: 7_000_000_000, in: 5, out: 5, status: 200, overhead: 100, attempts: 1},
	{id: "e8", key: "k-alice-1", subject: "alice", dept: "eng", team: "platform", project: "gw", model: "gpt-4o", provider: "openai", ts: at("2024-04-01 00:00:00"), cost: 9_000_000_000, in: 5, out: 5, status: 200, overhead: 100, attempts: 1},
	// The forecast's last 7 days before forecastAt: eng spends on the
	// 16th and the 20th, sales (e6) on the 20th; eng's failed request of
	// the 15th costs nothing, so its rate window still starts on the 16th.
	{id: "e9", key: "k-alice-1", subject: "alice", dept: "eng", team: "platform", project: "gw", model: "gpt-4o", provider: "openai", ts: at("2024-03-16 08:00:00"), cost: 2_000_000_000, in: 700, out: 100, status: 200, overhead: 357, attempts: 1},
	{id: "e11", key: "k-bob", subject: "bob", dept: "eng", team: "platform", project: "gw", model: "gpt-4o", provider: "openai", ts: at("2024-03-15 12:00:00"), status: 500, overhead: 150, attempts: 1},
	{id: "e10", key: "k-carol", subject: "carol", dept: "eng", team: "search", project: "idx", model: "claude-sonnet", provider: "anthropic", ts: at("2024-03-20 09:30:00"), cost: 600_000_000, in: 900, out: 300, status: 200, stream: true, ttft: 257_300, overhead: 650, attempts: 1},
}

var (
	rangeFrom = at("2024-03-01 00:00:00")
	rangeTo   = at("2024-03-31 23:59:59")
)

func seedEvents(ctx context.Context, t *testing.T, conn driver.Conn) {
	t.Helper()
	b, err := conn.PrepareBatch(ctx, `INSERT INTO usage_events (event_id, request_id, ts, ts_ms, key_id, subject, dept, team, project,
		requested_model, served_model, provider, attempts, fallbacks, prompt_tokens, completion_tokens, cost_nano_usd,
		pricing_version, stream, status_code, error_type, ttft_us, overhead_us, stream_seq, ingested_at)`)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	for i, e := range seed {
		fb := e.fallbacks
		if fb == nil {
			fb = []string{}
		}
		var stream uint8
		if e.stream {
			stream = 1
		}
		if err := b.Append(e.id, "req-"+e.id, e.ts, uint64(e.ts.UnixMilli()), e.key, e.subject, e.dept, e.team, e.project,
			e.model, e.model, e.provider, e.attempts, fb, e.in, e.out, e.cost,
			"test", stream, e.status, e.errType, e.ttft, e.overhead, uint64(i+1), time.Now()); err != nil {
			t.Fatalf("append: %v", err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// row is one result row, numbers as float64.
type row map[string]any

func (r row) f(col string) float64 {
	v, ok := r[col].(float64)
	if !ok {
		panic(fmt.Sprintf("column %q is %T, not a number", col, r[col]))
	}
	return v
}

func (r row) s(col string) string {
	v, ok := r[col].(string)
	if !ok {
		panic(fmt.Sprintf("column %q is %T, not a string", col, r[col]))
	}
	return v
}

func query(ctx context.Context, conn driver.Conn, sql string) ([]row, error) {
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols := rows.Columns()
	types := rows.ColumnTypes()
	var out []row
	for rows.Next() {
		ptrs := make([]any, len(cols))
		for i, ct := range types {
			ptrs[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		r := row{}
		for i, c := range cols {
			r[c] = normalize(reflect.ValueOf(ptrs[i]).Elem())
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func normalize(v reflect.Value) any {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return float64(v.Uint())
	case reflect.Float32, reflect.Float64:
		return v.Float()
	case reflect.String:
		return v.String()
	}
	return v.Interface()
}

func openStore(t *testing.T) *chstore.Store {
	t.Helper()
	return openStoreOn(t, chtest.Start(t))
}

// openStoreOn is openStore on the server at addr.
func openStoreOn(t *testing.T, addr string) *chstore.Store {
	t.Helper()
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := chstore.Open(ctx, chstore.Options{Addr: addr, Database: "dash_" + hex.EncodeToString(suffix[:])})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	seedEvents(ctx, t, s.Conn())
	seedAudit(ctx, t, s.Conn())
	seedLimits(ctx, t, s)
	return s
}

// limitWrites are two successive configs' budget limits, written the way
// the analytics service writes them. The second changes eng's monthly
// limit, drops sales' (sales then has the "*" limit) and adds limits of
// other scopes and periods, which the dept panel must not read and the
// spend and forecast panel must: a "*/name" project limit, a "*" subject
// limit, a key limit, one of a key without spend, and "*" total and day
// limits of keys (k-erin, with spend in February only, is under the first
// and not the second).
var limitWrites = [][]chstore.Limit{
	{
		{Scope: "dept", Value: "eng", Period: "month", AmountNano: 5e9},
		{Scope: "dept", Value: "sales", Period: "month", AmountNano: 99e9},
		{Scope: "dept", Value: "*", Period: "month", AmountNano: 2e9},
	},
	{
		{Scope: "dept", Value: "eng", Period: "month", AmountNano: 10e9},
		{Scope: "dept", Value: "*", Period: "month", AmountNano: 2e9},
		{Scope: "dept", Value: "eng", Period: "day", AmountNano: 1e9},
		{Scope: "team", Value: "sales/crm", Period: "month", AmountNano: 3_500_000_000},
		{Scope: "global", Value: "", Period: "total", AmountNano: 1000e9},
		{Scope: "project", Value: "*/idx", Period: "month", AmountNano: 5e9},
		{Scope: "subject", Value: "*", Period: "day", AmountNano: 750_000_000},
		{Scope: "key", Value: "k-dave", Period: "month", AmountNano: 600_000_000},
		{Scope: "key", Value: "k-none", Period: "day", AmountNano: 1e9},
		{Scope: "key", Value: "*", Period: "total", AmountNano: 5e9},
		{Scope: "key", Value: "*", Period: "day", AmountNano: 2e9},
	},
}

// limitsWritten is when the last of limitWrites was written.
var limitsWritten = at("2024-03-15 12:00:00")

func seedLimits(ctx context.Context, t *testing.T, s *chstore.Store) {
	t.Helper()
	for i, ls := range limitWrites {
		if _, err := s.WriteLimits(ctx, ls, limitsWritten.Add(time.Duration(i+1-len(limitWrites))*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
}

// auditSeed are audit_events rows: two in the test range, one before it,
// and one inserted twice (a copy the panel must show once, without FINAL).
var auditSeed = []struct {
	id, ts, actor, action, target, summary string
}{
	{"a0", "2024-02-10 08:00:00", "ops", "token.revoked", "jti:old", "revoked jti:old"},
	{"a1", "2024-03-05 09:00:00", "alice", "token.revoked", "jti:k1", "revoked jti:k1"},
	{"a2", "2024-03-20 10:00:00", "signal", "config.reloaded", "tollgate.yaml", `budgets[0].amount_usd: "5" -> "10"`},
	{"a2", "2024-03-20 10:00:00", "signal", "config.reloaded", "tollgate.yaml", `budgets[0].amount_usd: "5" -> "10"`},
}

func seedAudit(ctx context.Context, t *testing.T, conn driver.Conn) {
	t.Helper()
	b, err := conn.PrepareBatch(ctx, "INSERT INTO audit_events (id, ts, ts_ms, actor, action, target, summary, stream_seq, ingested_at)")
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range auditSeed {
		ts := at(a.ts)
		if err := b.Append(a.id, ts, uint64(ts.UnixMilli()), a.actor, a.action, a.target, a.summary, uint64(i+1), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
}

// filter selects seeded events for one set of variable values and the end
// of the time range.
type filter struct {
	dept, team, model, provider string    // "" = All
	to                          time.Time // the range's end; zero: rangeTo
}

func (f filter) end() time.Time {
	if f.to.IsZero() {
		return rangeTo
	}
	return f.to
}

func (f filter) in(e event) bool {
	if e.ts.Before(rangeFrom) || e.ts.After(f.end()) {
		return false
	}
	return (f.dept == "" || e.dept == f.dept) && (f.team == "" || e.team == f.team) &&
		(f.model == "" || e.model == f.model) && (f.provider == "" || e.provider == f.provider)
}

func (f filter) events() []event {
	var out []event
	for _, e := range seed {
		if f.in(e) {
			out = append(out, e)
		}
	}
	return out
}

func TestPanels(t *testing.T) {
	s := openStore(t)
	dashes := loadDashboards(t)
	tests := []struct {
		name     string
		file     string
		selected map[string][]string // variables not listed are All
		f        filter
	}{
		{"spend all", "spend-by-department.json", nil, filter{}},
		{"spend eng", "spend-by-department.json", map[string][]string{"dept": {"eng"}}, filter{dept: "eng"}},
		{"spend sales", "spend-by-department.json", map[string][]string{"dept": {"sales"}}, filter{dept: "sales"}},
		{"spend mid-month", "spend-by-department.json", nil, filter{to: forecastAt}},
		// One team or one model: the panels that read a rollup without
		// teams or models at All read the wider one here.
		{"spend team search", "spend-by-department.json", map[string][]string{"team": {"search"}}, filter{team: "search"}},
		{"spend model gpt-4o", "spend-by-department.json", map[string][]string{"model": {"gpt-4o"}}, filter{model: "gpt-4o"}},
		{"traffic all", "gateway-traffic.json", nil, filter{}},
		{"traffic anthropic", "gateway-traffic.json", map[string][]string{"provider": {"anthropic"}}, filter{provider: "anthropic"}},
	}
	covered := map[string]bool{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := dashes[tc.file]
			if !ok {
				t.Fatalf("no dashboard %s", tc.file)
			}
			covered[tc.file] = true
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			e := &expander{from: rangeFrom, to: tc.f.end(), interval: 86400, vars: map[string][]string{}}
			resolveVars(ctx, t, s.Conn(), d, e, tc.selected)
			for _, p := range flatPanels(d.Panels) {
				t.Run(p.Title, func(t *testing.T) {
					if p.Datasource.Type != "grafana-clickhouse-datasource" || p.Datasource.UID != "tollgate-clickhouse" {
						t.Fatalf("data source %+v", p.Datasource)
					}
					check, ok := checks[p.Title]
					if !ok {
						t.Fatalf("no check for panel %q: every panel's numbers are checked", p.Title)
					}
					if len(p.Targets) != 1 {
						t.Fatalf("%d targets, want 1", len(p.Targets))
					}
					if strings.Contains(p.Targets[0].RawSQL, "$__timeInterval") {
						t.Fatal("$__timeInterval expands to toStartOfInterval, unknown to ClickHouse 18.16; bucket with $__interval_s")
					}
					if regexp.MustCompile(`(?i)\bFINAL\b`).MatchString(p.Targets[0].RawSQL) {
						t.Fatal("FINAL: the loader stores each event once, so panels read rows as stored, without waiting on merges (issue #13)")
					}
					sql, err := e.expand(p.Targets[0].RawSQL)
					if err != nil {
						t.Fatal(err)
					}
					rows, err := query(ctx, s.Conn(), sql)
					if err != nil {
						t.Fatalf("query: %v\n%s", err, sql)
					}
					if len(rows) == 0 {
						t.Fatalf("no rows\n%s", sql)
					}
					check(t, tc.f, rows)
				})
			}
		})
	}
	for f := range dashes {
		if !covered[f] {
			t.Errorf("dashboard %s has no test case", f)
		}
	}
}

// resolveVars sets e.vars in dashboard order: selected values, or for All
// every value the variable's query returns (as Grafana does without a
// custom all value), constants from their query.
func resolveVars(ctx context.Context, t *testing.T, conn driver.Conn, d dashboard, e *expander, selected map[string][]string) {
	t.Helper()
	for _, v := range d.Templating.List {
		q, _ := v.Query.(string)
		switch {
		case selected[v.Name] != nil:
			e.vars[v.Name] = selected[v.Name]
		case v.Type == "constant" || v.Type == "custom" || v.Type == "textbox":
			e.vars[v.Name] = []string{q}
		case v.Type == "query":
			if !v.IncludeAll {
				t.Fatalf("variable %s: no All option", v.Name)
			}
			sql, err := e.expand(q)
			if err != nil {
				t.Fatalf("variable %s: %v", v.Name, err)
			}
			rows, err := query(ctx, conn, sql)
			if err != nil {
				t.Fatalf("variable %s: %v\n%s", v.Name, err, sql)
			}
			var vals []string
			for _, r := range rows {
				for _, val := range r {
					vals = append(vals, fmt.Sprint(val))
				}
			}
			if len(vals) == 0 {
				t.Fatalf("variable %s: no values", v.Name)
			}
			e.vars[v.Name] = vals
		default:
			t.Fatalf("variable %s: type %s not handled", v.Name, v.Type)
		}
	}
}

func usd(nano int64) float64 { return float64(nano) / 1e9 }

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// sums adds up per key: cost (USD), requests, tokens in and out.
type sums struct{ cost, requests, in, out float64 }

func group(evs []event, key func(event) string) map[string]*sums {
	m := map[string]*sums{}
	for _, e := range evs {
		k := key(e)
		if m[k] == nil {
			m[k] = &sums{}
		}
		m[k].cost += usd(e.cost)
		m[k].requests++
		m[k].in += float64(e.in)
		m[k].out += float64(e.out)
	}
	return m
}

// checkGroups compares rows grouped by key columns with the seeded sums.
func checkGroups(t *testing.T, rows []row, want map[string]*sums, key func(row) string, cols map[string]func(*sums) float64) {
	t.Helper()
	got := map[string]map[string]float64{}
	for _, r := range rows {
		k := key(r)
		if got[k] == nil {
			got[k] = map[string]float64{}
		}
		for c := range cols {
			got[k][c] += r.f(c)
		}
	}
	if len(got) != len(want) {
		t.Errorf("groups %v, want %d groups", keys(got), len(want))
	}
	for k, w := range want {
		for c, f := range cols {
			near(t, k+" "+c, got[k][c], f(w))
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var (
	costCol = func(s *sums) float64 { return s.cost }
	reqCol  = func(s *sums) float64 { return s.requests }
)

// quantileBucketed is what a latency panel shows: ClickHouse's
// quantileExactWeighted over the latency buckets (0014_panel_rollups.sql),
// the smallest bucket whose cumulated count reaches ceil(level*n).
func quantileBucketed(vals []uint64, level float64) float64 {
	s := make([]float64, len(vals))
	for i, v := range vals {
		s[i] = float64(latencyBucket(v))
	}
	sort.Float64s(s)
	i := int(math.Ceil(level*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// latencyBucket keeps two significant digits of us (microseconds), as the
// latency rollups do.
func latencyBucket(us uint64) uint64 {
	if us < 100 {
		return us
	}
	p := uint64(1)
	for v := us; v >= 100; v /= 10 {
		p *= 10
	}
	return us / p * p
}

var checks = map[string]func(t *testing.T, f filter, rows []row){
	"Spend over time, top 10 departments": func(t *testing.T, f filter, rows []row) {
		for _, r := range rows {
			ts, ok := r["time"].(time.Time)
			if !ok || ts.Before(rangeFrom) || ts.After(f.end()) {
				t.Errorf("time %v outside the range", r["time"])
			}
		}
		checkGroups(t, rows, group(f.events(), func(e event) string { return e.dept }),
			func(r row) string { return r.s("dept") }, map[string]func(*sums) float64{"spend_usd": costCol})
	},
	"Month-to-date spend against budget": func(t *testing.T, f filter, rows []row) {
		// The month of the range's end, up to it: all of the range here;
		// every team and model (the panel filters departments only).
		f.team, f.model = "", ""
		want := group(f.events(), func(e event) string { return e.dept })
		// eng's own limit as last written; sales' was removed, so "*".
		limits := map[string]float64{"eng": 10, "sales": 2}
		checkGroups(t, rows, want, func(r row) string { return r.s("dept") },
			map[string]func(*sums) float64{"spend_usd": costCol})
		for _, r := range rows {
			d := r.s("dept")
			near(t, d+" budget_usd", r.f("budget_usd"), limits[d])
			near(t, d+" budget_used_pct", r.f("budget_used_pct"), 100*want[d].cost/limits[d])
		}
	},
	"Top teams by cost": func(t *testing.T, f filter, rows []row) {
		checkGroups(t, rows, group(f.events(), func(e event) string { return e.dept + "/" + e.team }),
			func(r row) string { return r.s("dept") + "/" + r.s("team") },
			map[string]func(*sums) float64{"cost_usd": costCol, "requests": reqCol})
		sorted(t, rows, "cost_usd")
	},
	"Top projects by cost": func(t *testing.T, f filter, rows []row) {
		checkGroups(t, rows, group(f.events(), func(e event) string { return e.dept + "/" + e.project }),
			func(r row) string { return r.s("dept") + "/" + r.s("project") },
			map[string]func(*sums) float64{"cost_usd": costCol, "requests": reqCol})
		sorted(t, rows, "cost_usd")
	},
	"Top subjects by cost": func(t *testing.T, f filter, rows []row) {
		checkGroups(t, rows, group(f.events(), func(e event) string { return e.subject + "@" + e.dept }),
			func(r row) string { return r.s("subject") + "@" + r.s("dept") },
			map[string]func(*sums) float64{"cost_usd": costCol, "requests": reqCol})
		sorted(t, rows, "cost_usd")
	},
	"Top models by cost": func(t *testing.T, f filter, rows []row) {
		checkGroups(t, rows, group(f.events(), func(e event) string { return e.model + "@" + e.provider }),
			func(r row) string { return r.s("model") + "@" + r.s("provider") },
			map[string]func(*sums) float64{"cost_usd": costCol, "requests": reqCol,
				"tokens_in": func(s *sums) float64 { return s.in }, "tokens_out": func(s *sums) float64 { return s.out }})
		sorted(t, rows, "cost_usd")
	},
	"Top keys by cost": func(t *testing.T, f filter, rows []row) {
		checkGroups(t, rows, group(f.events(), func(e event) string { return e.key + "/" + e.subject + "@" + e.dept }),
			func(r row) string { return r.s("key_id") + "/" + r.s("subject") + "@" + r.s("dept") },
			map[string]func(*sums) float64{"cost_usd": costCol, "requests": reqCol})
		sorted(t, rows, "cost_usd")
	},
	"Budget limits in force": func(t *testing.T, _ filter, rows []row) {
		// The last write's limits, each once, ordered by scope, value, period.
		want := []string{"dept * month 2", "dept eng day 1", "dept eng month 10", "global - total 1000",
			"key * day 2", "key * total 5", "key k-dave month 0.6", "key k-none day 1", "project */idx month 5", "subject * day 0.75", "team sales/crm month 3.5"}
		var got []string
		for _, r := range rows {
			got = append(got, fmt.Sprintf("%s %s %s %v", r.s("scope"), r.s("value"), r.s("period"), r.f("amount_usd")))
			if ts, ok := r["updated_at"].(time.Time); !ok || !ts.Equal(limitsWritten) {
				t.Errorf("updated_at %v, want %v", r["updated_at"], limitsWritten)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("limits\n got %q\nwant %q", got, want)
		}
	},
	"Budget spend and forecast": checkForecast,
	"Tokens in/out": func(t *testing.T, f filter, rows []row) {
		checkGroups(t, rows, group(f.events(), func(event) string { return "" }), func(row) string { return "" },
			map[string]func(*sums) float64{"tokens_in": func(s *sums) float64 { return s.in }, "tokens_out": func(s *sums) float64 { return s.out }})
	},
	"Cost per 1k requests by department": func(t *testing.T, f filter, rows []row) {
		want := group(f.events(), func(e event) string { return e.dept })
		checkGroups(t, rows, want, func(r row) string { return r.s("dept") },
			map[string]func(*sums) float64{"cost_usd": costCol, "requests": reqCol,
				"cost_per_1k_requests": func(s *sums) float64 { return 1000 * s.cost / s.requests }})
	},
	"Requests by provider": func(t *testing.T, f filter, rows []row) {
		checkGroups(t, rows, group(f.events(), func(e event) string { return e.provider }),
			func(r row) string { return r.s("provider") }, map[string]func(*sums) float64{"requests": reqCol})
	},
	"Errors by type": func(t *testing.T, f filter, rows []row) {
		var errs []event
		for _, e := range f.events() {
			if e.status >= 400 || e.errType != "" {
				errs = append(errs, e)
			}
		}
		checkGroups(t, rows, group(errs, func(e event) string {
			if e.errType != "" {
				return e.errType
			}
			return "http_" + strconv.Itoa(int(e.status))
		}), func(r row) string { return r.s("error") }, map[string]func(*sums) float64{"errors": reqCol})
	},
	"Fallbacks and retries": func(t *testing.T, f filter, rows []row) {
		var fell, retried float64
		for _, e := range f.events() {
			if len(e.fallbacks) > 0 {
				fell++
			}
			if e.attempts > 1 {
				retried++
			}
		}
		var gotFell, gotRetried float64
		for _, r := range rows {
			gotFell += r.f("fell_back")
			gotRetried += r.f("retried")
		}
		near(t, "fell_back", gotFell, fell)
		near(t, "retried", gotRetried, retried)
	},
	"Recent operator changes": func(t *testing.T, _ filter, rows []row) {
		// Newest first, within the range, each event once.
		want := []string{"a2", "a1"}
		if len(rows) != len(want) {
			t.Fatalf("%d rows, want %d: %v", len(rows), len(want), rows)
		}
		if rows[0]["actor"] != "signal" || rows[0]["action"] != "config.reloaded" || rows[1]["target"] != "jti:k1" ||
			rows[0]["summary"] != auditSeed[2].summary {
			t.Errorf("rows %v", rows)
		}
	},
	"Time to first token by provider": func(t *testing.T, f filter, rows []row) {
		ttft := map[string][]uint64{}
		for _, e := range f.events() {
			if e.stream && e.ttft > 0 {
				ttft[e.provider] = append(ttft[e.provider], e.ttft)
			}
		}
		checkQuantiles(t, rows, ttft, 1000, "streams", "ttft_p50_ms", "ttft_p99_ms")
	},
	"Gateway overhead p50/p99 by provider": func(t *testing.T, f filter, rows []row) {
		over := map[string][]uint64{}
		for _, e := range f.events() {
			over[e.provider] = append(over[e.provider], e.overhead)
		}
		checkQuantiles(t, rows, over, 1, "requests", "overhead_p50_us", "overhead_p99_us")
	},
	"Gateway overhead p99 over time": func(t *testing.T, f filter, rows []row) {
		perDay := map[string][]uint64{}
		for _, e := range f.events() {
			k := e.ts.Truncate(24*time.Hour).Format(time.DateOnly) + "/" + e.provider
			perDay[k] = append(perDay[k], e.overhead)
		}
		if len(rows) != len(perDay) {
			t.Errorf("%d rows, want %d (day, provider) buckets", len(rows), len(perDay))
		}
		for _, r := range rows {
			k := r["time"].(time.Time).UTC().Format(time.DateOnly) + "/" + r.s("provider")
			near(t, k+" p99", r.f("overhead_p99_us"), quantileBucketed(perDay[k], 0.99))
		}
	},
}

// checkQuantiles checks a latency table: per provider, the count and the
// bucketed quantiles of vals (µs) in units of div µs.
func checkQuantiles(t *testing.T, rows []row, vals map[string][]uint64, div float64, countCol, p50, p99 string) {
	t.Helper()
	if len(rows) != len(vals) {
		t.Errorf("%d rows, want %d providers", len(rows), len(vals))
	}
	for _, r := range rows {
		p := r.s("provider")
		near(t, p+" "+countCol, r.f(countCol), float64(len(vals[p])))
		near(t, p+" "+p50, r.f(p50), quantileBucketed(vals[p], 0.5)/div)
		near(t, p+" "+p99, r.f(p99), quantileBucketed(vals[p], 0.99)/div)
	}
}

func sorted(t *testing.T, rows []row, col string) {
	t.Helper()
	for i := 1; i < len(rows); i++ {
		if rows[i].f(col) > rows[i-1].f(col) {
			t.Errorf("rows not in descending %s order", col)
		}
	}
}

// forecastAt is the end of the "spend mid-month" range: 18:00 UTC on
// 2024-03-20, 6 hours before its day ends and 270 before its month does.
var forecastAt = at("2024-03-20 18:00:00")

// forecast is one row of the budget spend and forecast panel, money in
// nano-USD; projected is 0 for a total limit (no period end), as
// budget.Project gives it.
type forecast struct {
	limit, spend, rate, projected int64
	crosses                       bool
}

// forecastMidMonth is the spend and forecast panel's answer at forecastAt, worked out
// by hand from the seed and the last of limitWrites, keyed
// "scope limit value period". The rate window is the 14th to the 20th.
//   - eng: 7.350000001 USD this month, 0.6 today (e10); 2.6 in the window
//     since its first day with spend, the 16th, 4 days 18 hours ago:
//     2.6/114 h = 22807017 nano-USD/h. Month: 7.350000001 + 2.6*270/114 =
//     13.507894737 (6157894736.8 added, rounded down), over eng's 10 while
//     the spend is not; over the "*" 2 already. Day: 0.6 + 2.6*6/114 =
//     0.736842105, under 1.
//   - sales, its team crm and its key k-dave: 0.512345678 this month, the
//     window's spend all today (e6, 0.5 over 18 h: 27777777/h); month:
//     0.512345678 + 0.5*270/18 = 8.012345678, over 2, 3.5 and 0.6.
//   - project eng/idx (the "*/idx" limit): 3.600000001 this month, 0.6 today
//     over 18 h (33333333/h); month 3.600000001 + 0.6*15 = 12.600000001.
//   - subjects ("*" day 0.75), today: alice 0, 2.0 in the window since the
//     16th (17543859/h), 2*6/114 = 0.105263157; bob nothing in the window;
//     carol 0.6 + 0.6*6/18 = 0.8, over 0.75; dave 0.5 + 0.5/3 = 0.666666666.
//   - key k-none: a named limit without spend, listed with zeros.
//   - total limits, all time up to forecastAt: global 14.862345679 (e7 in
//     February too; e8 is after), 3.1 in the window since the 16th
//     (27192982/h); each key with spend ever against "*" 5: k-alice-1 3.5
//     (2.0 in the window since the 16th), k-alice-2 3.000000001, k-bob
//     0.25 (its 15th costs nothing), k-carol 0.6 today, k-dave
//     0.512345678, k-erin 7 in February, over the limit already.
//   - keys against "*" day 2: the subjects' figures (k-alice-1 is alice's
//     today, k-carol carol's, k-dave dave's); k-alice-2 and k-bob nothing in
//     the window; k-erin not at all.
var forecastMidMonth = map[string]forecast{
	"dept eng eng month":             {10e9, 7_350_000_001, 22_807_017, 13_507_894_737, true},
	"dept * eng month":               {2e9, 7_350_000_001, 22_807_017, 13_507_894_737, false},
	"dept eng eng day":               {1e9, 600_000_000, 22_807_017, 736_842_105, false},
	"dept * sales month":             {2e9, 512_345_678, 27_777_777, 8_012_345_678, true},
	"team sales/crm sales/crm month": {3_500_000_000, 512_345_678, 27_777_777, 8_012_345_678, true},
	"key k-dave k-dave month":        {600_000_000, 512_345_678, 27_777_777, 8_012_345_678, true},
	"project */idx eng/idx month":    {5e9, 3_600_000_001, 33_333_333, 12_600_000_001, true},
	"subject * alice day":            {750_000_000, 0, 17_543_859, 105_263_157, false},
	"subject * bob day":              {750_000_000, 0, 0, 0, false},
	"subject * carol day":            {750_000_000, 600_000_000, 33_333_333, 800_000_000, true},
	"subject * dave day":             {750_000_000, 500_000_000, 27_777_777, 666_666_666, false},
	"key k-none k-none day":          {1e9, 0, 0, 0, false},
	"global - - total":               {1000e9, 14_862_345_679, 27_192_982, 0, false},
	"key * k-alice-1 total":          {5e9, 3_500_000_000, 17_543_859, 0, false},
	"key * k-alice-2 total":          {5e9, 3_000_000_001, 0, 0, false},
	"key * k-bob total":              {5e9, 250_000_000, 0, 0, false},
	"key * k-carol total":            {5e9, 600_000_000, 33_333_333, 0, false},
	"key * k-dave total":             {5e9, 512_345_678, 27_777_777, 0, false},
	"key * k-erin total":             {5e9, 7_000_000_000, 0, 0, false},
	"key * k-alice-1 day":            {2e9, 0, 17_543_859, 105_263_157, false},
	"key * k-alice-2 day":            {2e9, 0, 0, 0, false},
	"key * k-bob day":                {2e9, 0, 0, 0, false},
	"key * k-carol day":              {2e9, 600_000_000, 33_333_333, 800_000_000, false},
	"key * k-dave day":               {2e9, 500_000_000, 27_777_777, 666_666_666, false},
}

// projectSeed is pkg/budget's forecast (budget.Project, as the budget
// service and tollctl compute it) at end of every row the spend and
// forecast panel must show: each limit of the last of limitWrites with each
// value it applies to that has seeded events up to end (for a day or month
// limit, events in its month or rate window), and a named limit's own
// value in any case.
func projectSeed(end time.Time) map[string]forecast {
	starts := budget.PeriodStarts(end.UnixNano())
	today := starts[budget.PeriodDay]
	monthFirst := int32(time.Date(end.Year(), end.Month(), 1, 0, 0, 0, 0, time.UTC).Unix() / 86400)
	from := min(today-(budget.ForecastWindowDays-1), monthFirst)
	type scopeValue struct {
		scope budget.Scope
		value string
	}
	days := map[scopeValue]map[int32]int64{}
	recent := map[scopeValue]bool{}
	for _, e := range seed {
		d := int32(e.ts.Unix() / 86400)
		if e.ts.After(end) {
			continue
		}
		vs := budget.ScopeValues(e.key, e.subject, e.dept, e.team, e.project)
		for sc := range budget.NumScopes {
			k := scopeValue{budget.Scope(sc), vs[sc]}
			if k.value == "" && k.scope != budget.ScopeGlobal {
				continue
			}
			if days[k] == nil {
				days[k] = map[int32]int64{}
			}
			days[k][d] += e.cost
			recent[k] = recent[k] || d >= from
		}
	}
	out := map[string]forecast{}
	for _, l := range limitWrites[len(limitWrites)-1] {
		sc, err := budget.ParseScope(l.Scope)
		if err != nil {
			panic(err)
		}
		per, err := budget.ParsePeriod(l.Period)
		if err != nil {
			panic(err)
		}
		bl := budget.Limit{Scope: sc, Value: l.Value, Period: per, AmountNano: l.AmountNano}
		values := map[string]bool{}
		if l.Value != budget.Star && !strings.HasPrefix(l.Value, "*/") {
			values[l.Value] = true
		}
		for k := range days {
			if k.scope == sc && bl.Matches(k.value) && (recent[k] || per == budget.PeriodTotal) {
				values[k.value] = true
			}
		}
		for v := range values {
			var spent int64
			var totals []budget.DayTotal
			for d, c := range days[scopeValue{sc, v}] {
				totals = append(totals, budget.DayTotal{Day: d, SpendNano: c})
				if per == budget.PeriodTotal || d == today || (per == budget.PeriodMonth && d >= monthFirst) {
					spent += c
				}
			}
			id := budget.TotalID{Scope: sc, Value: v, Period: per, Start: starts[per]}
			f := budget.Project(l.AmountNano, spent, id.PeriodEnd(), end, totals)
			lv, vv := l.Value, v
			if sc == budget.ScopeGlobal {
				lv, vv = "-", "-"
			}
			out[strings.Join([]string{l.Scope, lv, vv, l.Period}, " ")] = forecast{l.AmountNano, spent, f.RateNanoPerHour, f.ProjectedNano, f.Crosses}
		}
	}
	return out
}

// nano is a panel's USD figure back in nano-USD.
func nano(usd float64) int64 { return int64(math.Round(usd * 1e9)) }

func checkForecast(t *testing.T, f filter, rows []row) {
	got := map[string]forecast{}
	for i, r := range rows {
		k := strings.Join([]string{r.s("scope"), r.s("limit_value"), r.s("value"), r.s("period")}, " ")
		if _, dup := got[k]; dup {
			t.Errorf("row %q twice", k)
		}
		var projected int64
		if r.s("period") == "total" {
			if r["projected_usd"] != nil || r["projected_pct"] != nil {
				t.Errorf("row %q: projected %v (%v%%), want none: a total limit's period does not end", k, r["projected_usd"], r["projected_pct"])
			}
		} else {
			projected = nano(r.f("projected_usd"))
			near(t, k+" projected_pct", r.f("projected_pct"), 100*r.f("projected_usd")/r.f("limit_usd"))
		}
		got[k] = forecast{nano(r.f("limit_usd")), nano(r.f("spend_usd")), nano(r.f("rate_usd_per_hour")), projected, r.f("crosses") == 1}
		near(t, k+" used_pct", r.f("used_pct"), 100*r.f("spend_usd")/r.f("limit_usd"))
		if i > 0 && r.f("crosses") > rows[i-1].f("crosses") {
			t.Errorf("row %q: crossing rows not first", k)
		}
	}
	want := projectSeed(f.end())
	if f.to.Equal(forecastAt) && !reflect.DeepEqual(want, forecastMidMonth) {
		t.Errorf("budget.Project on the seed disagrees with the figures worked out by hand\n got %v\nwant %v", want, forecastMidMonth)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("forecast rows\n got %v\nwant %v", got, want)
	}
}
