package chstore

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// DefaultReplicaPath is Options.ReplicaPath's default: the ZooKeeper path
// under which each replicated table keeps its replication state, one
// folder per shard. {shard} is the server's macro (<macros> in its
// config), so the replicas of one shard share a path; the database and
// table names are appended to it.
const DefaultReplicaPath = "/clickhouse/tables/{shard}"

// clusterName and replicaPath are what Options.Cluster and
// Options.ReplicaPath may be: both are put into SQL, the first as an
// identifier, the second inside a quoted string.
var (
	clusterName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	replicaPath = regexp.MustCompile(`^/[A-Za-z0-9_{}/.-]{0,200}$`)
)

// eventsTable is the table of usage events.
const eventsTable = "usage_events"

// IngestTable is the table the loader and replay insert usage events into
// on a cluster: a Null table with the columns of usage_events, from which
// one materialized view fills usage_events and the others every rollup.
// The views are then siblings, each writing its own replicated table, so
// an insert sent again after a replica died is dropped, or stored, by
// each table's own block deduplication: ClickHouse skips the views of a
// table whose block it dropped as a duplicate, which would leave a rollup
// short of a batch that the dead replica had stored in usage_events but
// not yet in that rollup (docs/analytics.md, "Exactly once on a cluster").
const IngestTable = "usage_ingest"

// layout is how the migrations are applied: on one server (cluster empty),
// or on every server of a ClickHouse cluster with replicated tables.
type layout struct {
	db      string
	cluster string   // the cluster of the servers' <remote_servers>; "" for one server
	path    string   // ZooKeeper path prefix of the replicated tables
	shards  int      // the cluster's shards; above 1 adds Distributed tables
	hosts   []string // the cluster's servers, host:port (native protocol)
}

// eachServerMark starts a statement of rewrite's that runs on every server
// of the cluster in turn rather than ON CLUSTER: 18.16's distributed DDL
// refuses an ALTER of a table that is not replicated (IngestTable, the
// Distributed tables) on a shard with internal replication.
const eachServerMark = "-- on each server\n"

// Patterns of the statements the migrations hold (a test checks that every
// migration statement matches one of them when a cluster is set).
var (
	createTable = regexp.MustCompile(`(?is)^CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+([A-Za-z_][A-Za-z0-9_]*)(\s*\(.*)$`)
	createView  = regexp.MustCompile(`(?is)^CREATE\s+(MATERIALIZED\s+)?VIEW\s+IF\s+NOT\s+EXISTS\s+([A-Za-z_][A-Za-z0-9_]*)\s+(.*)$`)
	alterTable  = regexp.MustCompile(`(?is)^ALTER\s+TABLE\s+([A-Za-z_][A-Za-z0-9_]*)\s+(ADD\s+COLUMN\s.*)$`)
	insertInto  = regexp.MustCompile(`(?is)^INSERT\s+INTO\s`)
	// engine finds a MergeTree-family engine and the '(' of its arguments.
	engine = regexp.MustCompile(`(?is)ENGINE\s*=\s*(Replacing|Summing|Aggregating|Collapsing)?MergeTree\s*\(`)
	// fromTable finds the table of a FROM clause; a table already
	// qualified ("system.columns") or a subquery is left alone.
	fromTable = regexp.MustCompile(`(?i)\b(FROM|TO)\s+([A-Za-z_][A-Za-z0-9_]*)`)
)

// ErrUnsupportedStatement is returned by Migrate on a cluster for a
// migration statement the cluster rewrite does not know how to apply on
// every server: a new migration must keep to the forms the rewrite knows
// (cluster.go).
var ErrUnsupportedStatement = errors.New("migration statement not supported on a cluster")

// rewrite returns what applies stmt: stmt itself on one server; on a
// cluster, the statement run ON CLUSTER with its object names qualified by
// the database (the servers run distributed DDL in their default
// database), a MergeTree engine turned into its Replicated form, and, when
// the cluster has several shards, a Distributed table <name>_all over
// each replicated table (created and altered with it). usage_events gets
// IngestTable and its view, created and altered with it, and the rollups'
// materialized views read IngestTable instead of usage_events. An INSERT (a
// rollup's one-time backfill) runs on the server the migration reached:
// the replicated table copies it to the shard's other replicas.
func (l layout) rewrite(stmt string) ([]string, error) {
	if l.cluster == "" {
		return []string{stmt}, nil
	}
	on := " ON CLUSTER " + l.cluster
	if m := createTable.FindStringSubmatch(stmt); m != nil {
		name, rest := m[1], m[2]
		rest, replicated, err := l.replicate(name, rest)
		if err != nil {
			return nil, err
		}
		if strings.Contains(rest, "ReplicatedSummingMergeTree(") {
			if rest, err = addLoadSeq(name, rest); err != nil {
				return nil, err
			}
		}
		out := []string{"CREATE TABLE IF NOT EXISTS " + l.qualify(name) + on + rest}
		if replicated && l.distributed(name) {
			out = append(out, "CREATE TABLE IF NOT EXISTS "+l.qualify(name+"_all")+on+" AS "+l.qualify(name)+
				" ENGINE = Distributed("+l.cluster+", "+l.db+", "+name+", rand())")
		}
		if name == eventsTable {
			out = append(out,
				"CREATE TABLE IF NOT EXISTS "+l.qualify(IngestTable)+on+" AS "+l.qualify(eventsTable)+" ENGINE = Null",
				"CREATE MATERIALIZED VIEW IF NOT EXISTS "+l.qualify(IngestTable+"_mv")+on+" TO "+l.qualify(eventsTable)+
					" AS SELECT * FROM "+l.qualify(IngestTable))
		}
		return out, nil
	}
	if m := createView.FindStringSubmatch(stmt); m != nil {
		body := l.qualifyTables(m[3])
		if m[1] != "" { // a rollup's view reads what the loader inserts
			locs := fromEvents.FindAllStringIndex(body, -1)
			if len(locs) != 1 {
				return nil, fmt.Errorf("%w: materialized view %s does not read usage_events once", ErrUnsupportedStatement, m[2])
			}
			loc := locs[0]
			body = body[:loc[0]] + ",\n    max(stream_seq) AS " + loadSeq + "\nFROM " + l.qualify(IngestTable) + body[loc[1]:]
		}
		return []string{"CREATE " + m[1] + "VIEW IF NOT EXISTS " + l.qualify(m[2]) + on + " " + body}, nil
	}
	if m := alterTable.FindStringSubmatch(stmt); m != nil {
		out := []string{"ALTER TABLE " + l.qualify(m[1]) + on + " " + m[2]}
		if l.distributed(m[1]) {
			out = append(out, eachServerMark+"ALTER TABLE "+l.qualify(m[1]+"_all")+" "+m[2])
		}
		if m[1] == eventsTable { // after usage_events, which must have every column inserted
			out = append(out, eachServerMark+"ALTER TABLE "+l.qualify(IngestTable)+" "+m[2])
		}
		return out, nil
	}
	if insertInto.MatchString(stmt) {
		return []string{stmt}, nil
	}
	return nil, fmt.Errorf("%w: %.60q", ErrUnsupportedStatement, stmt)
}

// distributed reports whether table gets a Distributed table <table>_all:
// on a cluster of several shards, every replicated table but the loaders'
// own bookkeeping, which each shard keeps for itself.
func (l layout) distributed(table string) bool {
	return l.shards > 1 && table != "watermarks" && table != "schema_migrations"
}

// replicate turns the MergeTree-family engine in rest (a CREATE TABLE's
// columns and engine) into its Replicated form, with the table's own
// ZooKeeper path and the {replica} macro first among its arguments. It
// reports whether rest had such an engine.
func (l layout) replicate(table, rest string) (string, bool, error) {
	loc := engine.FindStringSubmatchIndex(rest)
	if loc == nil {
		return rest, false, nil
	}
	kind := ""
	if loc[2] >= 0 {
		kind = rest[loc[2]:loc[3]]
	}
	open := loc[1] // just past '('
	closing := matchParen(rest, open-1)
	if closing < 0 {
		return "", false, fmt.Errorf("%w: unbalanced engine arguments of %s", ErrUnsupportedStatement, table)
	}
	args := "'" + l.path + "/" + l.db + "/" + table + "', '{replica}'"
	if a := strings.TrimSpace(rest[open:closing]); a != "" {
		args += ", " + a
	}
	return rest[:loc[0]] + "ENGINE = Replicated" + kind + "MergeTree(" + args + ")" + rest[closing+1:], true, nil
}

// loadSeq is the column every rollup has on a cluster: the highest stream
// sequence among the rows of the insert that made the row. It makes the
// blocks of two inserts differ even where their sums are equal (two
// batches of one request each from the same team and model), so that
// block deduplication drops only a block sent again, never another
// batch's rows. Rollups are read with sum() and GROUP BY, which ignore it.
const loadSeq = "load_seq"

// fromEvents finds a materialized view's FROM usage_events (qualified).
var fromEvents = regexp.MustCompile(`\s+FROM\s+[A-Za-z_][A-Za-z0-9_]*\.usage_events\b`)

// addLoadSeq adds loadSeq to the column list of a CREATE TABLE's rest.
func addLoadSeq(table, rest string) (string, error) {
	open := strings.IndexByte(rest, '(')
	closing := -1
	if open >= 0 {
		closing = matchParen(rest, open)
	}
	if closing < 0 {
		return "", fmt.Errorf("%w: no column list in table %s", ErrUnsupportedStatement, table)
	}
	cols := strings.TrimRight(rest[:closing], " \t\n")
	return cols + ",\n    " + loadSeq + " UInt64\n" + rest[closing:], nil
}

// matchParen returns the index of the ')' closing the '(' at s[open], or -1.
func matchParen(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// qualify returns name in the layout's database.
func (l layout) qualify(name string) string { return l.db + "." + name }

// qualifyTables qualifies the unqualified tables of a view's FROM clauses
// and of a materialized view's TO.
func (l layout) qualifyTables(sql string) string {
	var b strings.Builder
	last := 0
	for _, m := range fromTable.FindAllStringSubmatchIndex(sql, -1) {
		end := m[5]
		if end < len(sql) && sql[end] == '.' {
			continue // already qualified: db.table
		}
		b.WriteString(sql[last:m[4]])
		b.WriteString(l.qualify(sql[m[4]:m[5]]))
		last = end
	}
	b.WriteString(sql[last:])
	return b.String()
}
