// Package chsql is the catalogue of the SQL statements Tollgate sends to
// ClickHouse from Go: the analytics loaders (pkg/chstore), finance
// (explain, simulate, statements, FOCUS export), replay and reconcile,
// and through them tollctl. The code sends these values and nothing else,
// and the dual-version test (dashboards/versions_test.go, build tag chdb)
// runs every one of them, with data, on ClickHouse 18.16 and on a current
// release, so a statement added here is checked on both.
//
// The schema's own statements are the migrations (chstore.Migrations);
// the dashboards' are in their JSON.
//
// Placeholders are clickhouse-go's client-side binds ('?'). Inserts list
// their columns and carry no VALUES: they are prepared as native batches.
package chsql

import (
	"context"
	"strings"
)

// Statement is one SQL statement, named for the code that sends it.
type Statement struct {
	// Name is "package.what", unique in the catalogue.
	Name string
	// SQL is the text sent, with '?' binds.
	SQL string
}

// String returns the SQL.
func (s Statement) String() string { return s.SQL }

var all []Statement

func add(name, sql string) Statement {
	s := Statement{Name: name, SQL: sql}
	all = append(all, s)
	return s
}

// All returns every statement of the catalogue, in the order declared.
func All() []Statement { return append([]Statement(nil), all...) }

// EventColumns lists the usage_events columns the loader writes, in the
// order of its column batch (chstore's columns.slices).
const EventColumns = "event_id, request_id, ts, ts_ms, issuer, subject, key_id, dept, team, project, " +
	"requested_model, served_model, provider, deployment, attempts, fallbacks, route, " +
	"prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, estimated, " +
	"cost_nano_usd, pricing_version, endpoint, stream, status_code, error_type, client_aborted, " +
	"latency_total_us, ttft_us, upstream_us, overhead_us, cache_hit, degradation_step, clamped_max_tokens, " +
	"stream_seq, ingested_at, " +
	"budget_scope, budget_value, budget_period, budget_period_start, budget_from_token, " +
	"budget_limit_nano_usd, budget_spent_nano_usd, budget_reserved_nano_usd, budget_headroom_nano_usd, " +
	"hedged, units, unit, producer_id, batch_seq, cache_write_tokens, service_tier, recovered"

// RepricedColumns lists the usage_events_repriced columns replay writes.
const RepricedColumns = `event_id, request_id, ts, dept, team, project, subject, key_id, served_model, provider,
prompt_tokens, completion_tokens, cached_tokens, cost_nano_usd, pricing_version,
original_cost_nano_usd, original_pricing_version, stream_seq, repriced_at`

// Schema bookkeeping (chstore.Migrate).
var (
	// CreateMigrations creates the table of applied migrations.
	CreateMigrations = add("chstore.create_schema_migrations", `CREATE TABLE IF NOT EXISTS schema_migrations
		(version UInt32, name String, applied_at DateTime('UTC'))
		ENGINE = ReplacingMergeTree(applied_at) ORDER BY version`)
	// ColumnExists counts the columns of a table (binds: table, column)
	// in the current database: 18.16 has no ADD COLUMN IF NOT EXISTS.
	ColumnExists = add("chstore.column_exists",
		"SELECT count() FROM system.columns WHERE database = currentDatabase() AND table = ? AND name = ?")
	// AppliedMigrations lists the versions applied.
	AppliedMigrations = add("chstore.applied_migrations", "SELECT DISTINCT version FROM schema_migrations ORDER BY version")
	// ClusterShards counts the shards of a cluster of the server's
	// remote_servers (bind: cluster); 0 for a cluster it does not know.
	ClusterShards = add("chstore.cluster_shards", "SELECT uniqExact(shard_num) FROM system.clusters WHERE cluster = ?")
	// ClusterHosts lists the servers of a cluster (bind: cluster) in one
	// row: their host addresses and native-protocol ports, empty for a
	// cluster the server does not know.
	ClusterHosts = add("chstore.cluster_hosts", "SELECT groupArray(host_address), groupArray(port) FROM "+
		"(SELECT host_address, port FROM system.clusters WHERE cluster = ? ORDER BY shard_num, replica_num)")
	// HasSetting counts the server's settings of a name (bind: name): 1
	// when the server knows it.
	HasSetting = add("chstore.has_setting", "SELECT count() FROM system.settings WHERE name = ?")
	// InsertMigration records a migration.
	InsertMigration = add("chstore.insert_migration", "INSERT INTO schema_migrations (version, name, applied_at)")
)

// InsertEventsInto returns InsertEvents into table instead, which has the
// columns of usage_events: on a cluster the loader writes the Null table
// usage_ingest (chstore.IngestTable), whose views fill usage_events and the
// rollups.
func InsertEventsInto(table string) string {
	return "INSERT INTO " + table + " (" + EventColumns + ")"
}

// CreateDatabase returns the statement creating database name, which the
// caller has checked is a plain identifier.
func CreateDatabase(name string) string {
	return "CREATE DATABASE IF NOT EXISTS `" + name + "`"
}

// The usage loader (chstore.Loader).
var (
	// Watermark reads a consumer's watermark (binds: stream, consumer).
	Watermark = add("chstore.watermark", "SELECT max(seq) FROM watermarks WHERE stream = ? AND consumer = ?")
	// LoadState reads a consumer's watermark and the batch windows stored
	// with it (binds: stream, consumer).
	LoadState = add("chstore.load_state",
		"SELECT max(seq), argMax(windows, seq) FROM watermarks WHERE stream = ? AND consumer = ?")
	// InsertWatermark writes a watermark.
	InsertWatermark = add("chstore.insert_watermark", "INSERT INTO watermarks (stream, consumer, seq, updated_at, windows)")
	// InsertEvents inserts usage events, the loader's and replay's rows.
	InsertEvents = add("chstore.insert_events", InsertEventsInto("usage_events"))
	// TableExists counts the tables of a name (bind: name) in the current
	// database.
	TableExists = add("chstore.table_exists", "SELECT count() FROM system.tables WHERE database = currentDatabase() AND name = ?")
	// RunningInserts counts the queries running whose id starts with the
	// bind, the loader's insert prefix.
	RunningInserts = add("chstore.running_inserts", "SELECT count() FROM system.processes WHERE startsWith(query_id, ?)")
	// StoredRows lists the rows stored under a range of stream sequences
	// (binds: min ts, max ts in Unix seconds, lowest and highest sequence).
	StoredRows = add("chstore.stored_rows", `SELECT stream_seq, event_id FROM usage_events
		WHERE ts >= toDateTime(?) AND ts <= toDateTime(?) AND stream_seq >= ? AND stream_seq <= ?`)
)

// Budget limits (chstore.WriteLimits, Limits).
var (
	// InsertLimits writes budget limits.
	InsertLimits = add("chstore.insert_limits",
		"INSERT INTO budget_limits (scope, value, period, amount_nano_usd, removed, version, updated_at)")
	// CurrentLimits reads the current limits.
	CurrentLimits = add("chstore.current_limits",
		"SELECT scope, value, period, amount_nano_usd FROM budget_limits_current ORDER BY scope, value, period")
	// LimitsVersion reads the largest version stored.
	LimitsVersion = add("chstore.limits_version", "SELECT max(version) FROM budget_limits")
)

// Audit events (chstore.AuditLoader).
var (
	// InsertAudit inserts audit events.
	InsertAudit = add("chstore.insert_audit",
		"INSERT INTO audit_events (id, ts, ts_ms, actor, action, target, before, after, summary, stream_seq, ingested_at)")
	// StoredAuditIDs lists which of a set of ids are stored (bind: a
	// clickhouse.GroupSet of ids).
	StoredAuditIDs = add("chstore.stored_audit_ids", "SELECT DISTINCT id FROM audit_events WHERE id IN ?")
)

// Finance (pkg/finance; tollctl finance and export focus).
var (
	// Explain reads the event of a request id (bind: request id).
	Explain = add("finance.explain", explainSelect+`WHERE request_id = ? ORDER BY ts LIMIT 1`)
	// ExplainAt reads the event of a request id of a department at a
	// second, which the sorting key finds without reading the table
	// (binds: dept, Unix second, request id): the console's links carry
	// both.
	ExplainAt = add("finance.explain_at", explainSelect+`WHERE dept = ? AND ts = toDateTime(?) AND request_id = ? ORDER BY ts LIMIT 1`)
	// SimulateHistory reads the events of a time range in time order
	// (binds: from, to in Unix seconds).
	SimulateHistory = add("finance.simulate_history", `SELECT request_id, ts_ms, dept, team, project, subject, key_id, cost_nano_usd
		FROM usage_events FINAL WHERE ts >= toDateTime(?) AND ts < toDateTime(?) ORDER BY ts_ms, event_id`)
	// StatementByTeam, StatementByProject and StatementByModel sum a
	// department's month (binds: dept, from, to in Unix seconds).
	StatementByTeam    = add("finance.statement_team", statementBy("team"))
	StatementByProject = add("finance.statement_project", statementBy("project"))
	StatementByModel   = add("finance.statement_model", statementBy("served_model"))
	// Focus reads a month's FOCUS rows (binds: from, to in Unix seconds);
	// FocusDept one department's (binds: from, to, dept).
	Focus     = add("finance.focus", focus(""))
	FocusDept = add("finance.focus_dept", focus(` AND dept = ?`))
)

const explainSelect = `SELECT event_id, request_id, ts, issuer, subject, key_id, dept, team, project,
		requested_model, served_model, provider, deployment, route, attempts, fallbacks, endpoint, status_code, error_type,
		prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens, reasoning_tokens, estimated, cost_nano_usd, pricing_version, service_tier,
		recovered, budget_scope, budget_value, budget_period, budget_period_start, budget_from_token,
		budget_limit_nano_usd, budget_spent_nano_usd, budget_reserved_nano_usd, budget_headroom_nano_usd
		FROM usage_events FINAL `

func statementBy(col string) string {
	return `SELECT ` + col + `, toUInt64(count()), sum(prompt_tokens), sum(completion_tokens), sum(cost_nano_usd),
			toUInt64(countIf(recovered = 1)), sumIf(cost_nano_usd, recovered = 1)
			FROM usage_events FINAL WHERE dept = ? AND ts >= toDateTime(?) AND ts < toDateTime(?)
			GROUP BY ` + col + ` ORDER BY ` + col
}

func focus(and string) string {
	return `SELECT toStartOfDay(ts) AS day, dept, team, project, key_id, provider, served_model, unit,
		toUInt64(count()), sum(prompt_tokens), sum(completion_tokens), sum(cached_tokens), sum(cache_write_tokens),
		sum(reasoning_tokens), sum(units), sum(cost_nano_usd)
		FROM usage_events FINAL WHERE ts >= toDateTime(?) AND ts < toDateTime(?)` + and + `
		GROUP BY day, dept, team, project, key_id, provider, served_model, unit
		ORDER BY day, dept, team, project, key_id, provider, served_model, unit`
}

// Replay (pkg/replay; tollctl replay).
var (
	// ReplayStored lists which of a batch's event ids usage_events holds
	// (binds: min ts, max ts in Unix seconds, the ids as an array).
	ReplayStored = add("replay.stored",
		"SELECT event_id FROM usage_events WHERE ts >= toDateTime(?) AND ts <= toDateTime(?) AND has(?, event_id)")
	// ReplayStoredRepriced is ReplayStored on usage_events_repriced for a
	// pricing version (binds: version, min ts, max ts, ids).
	ReplayStoredRepriced = add("replay.stored_repriced",
		"SELECT event_id FROM usage_events_repriced WHERE pricing_version = ? AND ts >= toDateTime(?) AND ts <= toDateTime(?) AND has(?, event_id)")
	// InsertRepriced inserts re-priced events.
	InsertRepriced = add("replay.insert_repriced", "INSERT INTO usage_events_repriced ("+RepricedColumns+")")
)

// reconcileCounts are ReconcileCount's statements, indexed by whether the
// window has a lower and an upper bound.
var reconcileCounts = [2][2]Statement{
	{add("reconcile.count", reconcileCount(false, false)), add("reconcile.count_to", reconcileCount(false, true))},
	{add("reconcile.count_from", reconcileCount(true, false)), add("reconcile.count_from_to", reconcileCount(true, true))},
}

// ReconcileCount returns the statement counting usage_events in a window,
// each event id once, and the rows before that deduplication. With a
// lower bound it binds the bound's Unix second and millisecond, with an
// upper bound the same for it (lower first).
func ReconcileCount(lower, upper bool) Statement {
	return reconcileCounts[b2i(lower)][b2i(upper)]
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func reconcileCount(lower, upper bool) string {
	var where strings.Builder
	where.WriteString("1")
	if lower {
		where.WriteString(" AND ts >= toDateTime(?) AND ts_ms >= ?")
	}
	if upper {
		where.WriteString(" AND ts <= toDateTime(?) AND ts_ms < ?")
	}
	return `SELECT count(), sum(c), sum(n) FROM (
		SELECT event_id, any(cost_nano_usd) AS c, count() AS n FROM usage_events WHERE ` + where.String() + ` GROUP BY event_id)`
}

// Console (pkg/console): the read pages. They read the rollups where one
// holds the figure, and usage_events only where a window of one department
// (its sorting key's prefix) or of time bounds the rows read. A bind of ”
// for a department means every department; the console decides which a
// user may see and binds it.
var (
	// ConsoleTopModels sums the served models' spend of a range of days
	// (binds: first day, last day as 'YYYY-MM-DD'); ConsoleTopModelsDept
	// one department's (binds: the same, then dept), which the sorting key
	// (day, dept) narrows.
	ConsoleTopModels = add("console.top_models", consoleTopModels(""))
	// ConsoleKeysLastUsed is the last day each key was used, within the
	// days since a date (bind: 'YYYY-MM-DD'), from the key rows of
	// usage_scope_daily, whose sorting key (scope, day) bounds the read.
	ConsoleKeysLastUsed = add("console.keys_last_used", `SELECT value, toString(max(day))
		FROM usage_scope_daily WHERE scope = 'key' AND day >= toDate(?) GROUP BY value`)
	ConsoleTopModelsDept = add("console.top_models_dept", consoleTopModels(" AND dept = ?"))
	// ConsoleTopTeams sums the teams' spend of a range of days, from the
	// team rows of usage_scope_daily (one a team and day; their values
	// qualified by the department as budgets spell them) (binds: first
	// day, last day, a qualified-value prefix twice: '' for every
	// department, 'eng/' for one).
	ConsoleTopTeams = add("console.top_teams", `SELECT value, sum(requests), sum(cost_nano_usd) AS c
		FROM usage_scope_daily WHERE scope = 'team' AND day >= toDate(?) AND day <= toDate(?) AND (? = '' OR startsWith(value, ?))
		GROUP BY value ORDER BY c DESC, value LIMIT 10`)
	// ConsoleSpendDaily is the spend per day of a range (binds as
	// ConsoleTopModels).
	ConsoleSpendDaily = add("console.spend_daily", `SELECT toString(day), sum(cost_nano_usd)
		FROM usage_dept_daily WHERE day >= toDate(?) AND day <= toDate(?) AND (? = '' OR dept = ?)
		GROUP BY day ORDER BY day`)
	// ConsoleCounted is the spend of every event stored, and of those
	// with a department (no binds); ConsoleCountedDept one department's
	// (bind: dept).
	ConsoleCounted     = add("console.counted", `SELECT sum(cost_nano_usd), sumIf(cost_nano_usd, dept != '') FROM usage_dept_daily`)
	ConsoleCountedDept = add("console.counted_dept", `SELECT sum(cost_nano_usd) FROM usage_dept_daily WHERE dept = ?`)
	// ConsoleTeamProjects lists a team's projects with spend in a window
	// (binds: dept, team, from, to in Unix seconds).
	ConsoleTeamProjects = add("console.team_projects", `SELECT project, sum(cost_nano_usd) AS c FROM usage_events
		WHERE dept = ? AND team = ? AND ts >= toDateTime(?) AND ts < toDateTime(?) AND project != ''
		GROUP BY project ORDER BY c DESC, project LIMIT 200`)
	// ConsoleProjectSubjects lists a project's subjects with spend in a
	// window (binds: dept, project, from, to in Unix seconds).
	ConsoleProjectSubjects = add("console.project_subjects", `SELECT subject, sum(cost_nano_usd) AS c FROM usage_events
		WHERE dept = ? AND project = ? AND ts >= toDateTime(?) AND ts < toDateTime(?) AND subject != ''
		GROUP BY subject ORDER BY c DESC, subject LIMIT 200`)
	// ConsoleSubjectKeys lists a subject's keys with spend from a day on
	// (binds: first day as 'YYYY-MM-DD', dept twice, subject).
	ConsoleSubjectKeys = add("console.subject_keys", `SELECT key_id, sum(cost_nano_usd) AS c FROM usage_subject_daily
		WHERE day >= toDate(?) AND (? = '' OR dept = ?) AND subject = ? AND key_id != ''
		GROUP BY key_id ORDER BY c DESC, key_id LIMIT 200`)
	// ConsoleKeyInDept counts a department's rows of a key (binds: dept,
	// key id): whether a department's user may see the key.
	ConsoleKeyInDept = add("console.key_in_dept", `SELECT count() FROM usage_subject_daily WHERE dept = ? AND key_id = ?`)
	// ConsoleRequestKeys finds a page of recent events of every
	// department, newest first, after a keyset cursor (ts_ms, request_id),
	// and returns their department, ts_ms and request id (binds: window
	// start and end in Unix seconds, team twice, served model twice,
	// status four times ('', 'ok', 'error' or a code), cursor ts_ms twice,
	// cursor request id, limit); ConsoleRequestKeysDept one department's
	// (binds: dept first, then the same). The window is a PREWHERE: the
	// other columns are read only where it holds. ConsoleRequestRows then
	// reads the page's rows by the sorting key (binds: the departments as
	// a set, first and last second, the request ids as an array).
	ConsoleRequestKeys     = add("console.request_keys", consoleRequestKeys("", true))
	ConsoleRequestKeysDept = add("console.request_keys_dept", consoleRequestKeys("dept = ? AND ", true))
	// ConsoleRecentKeys and ConsoleRecentKeysDept are ConsoleRequestKeys
	// and ConsoleRequestKeysDept without the team, model and status
	// filters and their binds: the page without filters reads three
	// columns.
	ConsoleRecentKeys     = add("console.recent_keys", consoleRequestKeys("", false))
	ConsoleRecentKeysDept = add("console.recent_keys_dept", consoleRequestKeys("dept = ? AND ", false))
	ConsoleRequestRows    = add("console.request_rows", `SELECT request_id, ts_ms, dept, team, project, subject, key_id,
		served_model, provider, status_code, error_type, prompt_tokens, completion_tokens, cost_nano_usd, latency_total_us
		FROM usage_events WHERE dept IN ? AND ts >= toDateTime(?) AND ts <= toDateTime(?) AND has(?, request_id)`)
	// ConsoleModelTraffic sums each served model's requests and failed
	// requests since a time (bind: Unix seconds).
	ConsoleModelTraffic = add("console.model_traffic", `SELECT served_model, sum(requests), sumIf(requests, error != '')
		FROM usage_traffic_5m WHERE bucket >= toDateTime(?) GROUP BY served_model ORDER BY served_model`)
)

func consoleRequestKeys(dept string, filtered bool) string {
	filters := ""
	if filtered {
		filters = `(? = '' OR team = ?) AND (? = '' OR served_model = ?)
			AND multiIf(? = '', 1, ? = 'ok', status_code < 400 AND error_type = '', ? = 'error', status_code >= 400 OR error_type != '', toString(status_code) = ?)
			AND `
	}
	return `SELECT dept, ts_ms, request_id FROM usage_events
		PREWHERE ` + dept + `ts >= toDateTime(?) AND ts <= toDateTime(?)
		WHERE ` + filters + `(ts_ms < ? OR ts_ms = ? AND request_id < ?)
		ORDER BY ts_ms DESC, request_id DESC LIMIT ?`
}

func consoleTopModels(and string) string {
	return `SELECT served_model, sum(requests), sum(cost_nano_usd) AS c
		FROM usage_model_daily WHERE day >= toDate(?) AND day <= toDate(?)` + and + `
		GROUP BY served_model ORDER BY c DESC, served_model LIMIT 10`
}

// Querier runs catalogue statements. A program reads ClickHouse through it
// (chstore.Querier adapts a clickhouse-go connection), so that a package
// which only reads, such as the console, does not link the client into a
// gateway built without ClickHouse.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) Row
}

// Rows are the rows of Querier.Query.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// Row is the row of Querier.QueryRow.
type Row interface {
	Scan(dest ...any) error
}

// Set is a bind of a set of values, written (v1, v2, ...): the right side
// of IN.
type Set []any
