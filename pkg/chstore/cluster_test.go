package chstore

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestRewrite(t *testing.T) {
	one := layout{db: "tg", cluster: "c1", path: "/ch/{shard}", shards: 1}
	two := one
	two.shards = 2
	tests := []struct {
		name string
		l    layout
		stmt string
		want []string
	}{
		{"one server keeps the statement", layout{db: "tg"},
			"CREATE TABLE IF NOT EXISTS t (a UInt8) ENGINE = MergeTree() ORDER BY a",
			[]string{"CREATE TABLE IF NOT EXISTS t (a UInt8) ENGINE = MergeTree() ORDER BY a"}},
		{"plain merge tree", one,
			"CREATE TABLE IF NOT EXISTS t (a UInt8) ENGINE = MergeTree() ORDER BY a",
			[]string{"CREATE TABLE IF NOT EXISTS tg.t ON CLUSTER c1 (a UInt8) ENGINE = ReplicatedMergeTree('/ch/{shard}/tg/t', '{replica}') ORDER BY a"}},
		{"summing with a tuple of columns", one,
			"CREATE TABLE IF NOT EXISTS s\n(\n a UInt8, n UInt64\n)\nENGINE = SummingMergeTree((n, a))\nORDER BY a",
			[]string{"CREATE TABLE IF NOT EXISTS tg.s ON CLUSTER c1\n(\n a UInt8, n UInt64,\n    load_seq UInt64\n)\nENGINE = ReplicatedSummingMergeTree('/ch/{shard}/tg/s', '{replica}', (n, a))\nORDER BY a"}},
		{"replacing with a version", one,
			"CREATE TABLE IF NOT EXISTS r (v UInt64) ENGINE = ReplacingMergeTree(v) ORDER BY v",
			[]string{"CREATE TABLE IF NOT EXISTS tg.r ON CLUSTER c1 (v UInt64) ENGINE = ReplicatedReplacingMergeTree('/ch/{shard}/tg/r', '{replica}', v) ORDER BY v"}},
		{"several shards add a distributed table", two,
			"CREATE TABLE IF NOT EXISTS usage_daily (v UInt64) ENGINE = SummingMergeTree(v) ORDER BY v",
			[]string{
				"CREATE TABLE IF NOT EXISTS tg.usage_daily ON CLUSTER c1 (v UInt64,\n    load_seq UInt64\n) ENGINE = ReplicatedSummingMergeTree('/ch/{shard}/tg/usage_daily', '{replica}', v) ORDER BY v",
				"CREATE TABLE IF NOT EXISTS tg.usage_daily_all ON CLUSTER c1 AS tg.usage_daily ENGINE = Distributed(c1, tg, usage_daily, rand())",
			}},
		{"watermarks stay per shard", two,
			"CREATE TABLE IF NOT EXISTS watermarks (seq UInt64) ENGINE = ReplacingMergeTree(seq) ORDER BY seq",
			[]string{"CREATE TABLE IF NOT EXISTS tg.watermarks ON CLUSTER c1 (seq UInt64) ENGINE = ReplicatedReplacingMergeTree('/ch/{shard}/tg/watermarks', '{replica}', seq) ORDER BY seq"}},
		{"materialized view", one,
			"CREATE MATERIALIZED VIEW IF NOT EXISTS mv TO h AS\nSELECT a FROM usage_events WHERE x IN (SELECT y FROM system.columns)",
			[]string{"CREATE MATERIALIZED VIEW IF NOT EXISTS tg.mv ON CLUSTER c1 TO tg.h AS\nSELECT a,\n    max(stream_seq) AS load_seq\nFROM tg.usage_ingest WHERE x IN (SELECT y FROM system.columns)"}},
		{"usage events get the ingest table", one,
			"CREATE TABLE IF NOT EXISTS usage_events (a UInt8, v DateTime) ENGINE = ReplacingMergeTree(v) ORDER BY a",
			[]string{
				"CREATE TABLE IF NOT EXISTS tg.usage_events ON CLUSTER c1 (a UInt8, v DateTime) ENGINE = ReplicatedReplacingMergeTree('/ch/{shard}/tg/usage_events', '{replica}', v) ORDER BY a",
				"CREATE TABLE IF NOT EXISTS tg.usage_ingest ON CLUSTER c1 AS tg.usage_events ENGINE = Null",
				"CREATE MATERIALIZED VIEW IF NOT EXISTS tg.usage_ingest_mv ON CLUSTER c1 TO tg.usage_events AS SELECT * FROM tg.usage_ingest",
			}},
		{"view over a subquery", one,
			"CREATE VIEW IF NOT EXISTS v AS\nSELECT d FROM\n(\n SELECT toDate(ts) AS d FROM usage_daily\n)",
			[]string{"CREATE VIEW IF NOT EXISTS tg.v ON CLUSTER c1 AS\nSELECT d FROM\n(\n SELECT toDate(ts) AS d FROM tg.usage_daily\n)"}},
		{"add column", two,
			"ALTER TABLE usage_events ADD COLUMN hedged UInt8",
			[]string{
				"ALTER TABLE tg.usage_events ON CLUSTER c1 ADD COLUMN hedged UInt8",
				"-- on each server\nALTER TABLE tg.usage_events_all ADD COLUMN hedged UInt8",
				"-- on each server\nALTER TABLE tg.usage_ingest ADD COLUMN hedged UInt8",
			}},
		{"a plain view keeps reading its table", one,
			"CREATE VIEW IF NOT EXISTS v AS SELECT count() FROM usage_events",
			[]string{"CREATE VIEW IF NOT EXISTS tg.v ON CLUSTER c1 AS SELECT count() FROM tg.usage_events"}},
		{"backfill runs where it is sent", one,
			"INSERT INTO d (a) SELECT a FROM usage_events WHERE (SELECT count() FROM d) = 0",
			[]string{"INSERT INTO d (a) SELECT a FROM usage_events WHERE (SELECT count() FROM d) = 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.l.rewrite(tt.stmt)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("rewrite:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestRewriteRefuses(t *testing.T) {
	l := layout{db: "tg", cluster: "c1", path: DefaultReplicaPath, shards: 1}
	for _, stmt := range []string{
		"DROP TABLE usage_events",
		"ALTER TABLE usage_events DROP COLUMN hedged",
		"CREATE TABLE IF NOT EXISTS t (a UInt8) ENGINE = MergeTree(( ORDER BY a",
	} {
		if _, err := l.rewrite(stmt); !errors.Is(err, ErrUnsupportedStatement) {
			t.Errorf("rewrite(%q) = %v, want ErrUnsupportedStatement", stmt, err)
		}
	}
}

// TestRewriteEveryMigration checks that the cluster rewrite knows every
// statement of the embedded migrations, and that every table it creates is
// replicated: a new migration that steps outside the forms it knows fails
// here, not on an operator's cluster.
func TestRewriteEveryMigration(t *testing.T) {
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	l := layout{db: "tg", cluster: "c1", path: DefaultReplicaPath, shards: 2}
	for _, m := range ms {
		for i, stmt := range m.Statements {
			out, err := l.rewrite(stmt)
			if err != nil {
				t.Errorf("%s statement %d: %v", m.Name, i+1, err)
				continue
			}
			for _, s := range out {
				if strings.HasPrefix(s, "INSERT") || strings.HasPrefix(s, eachServerMark+"ALTER TABLE ") {
					continue
				}
				if strings.HasPrefix(s, "CREATE MATERIALIZED VIEW") && !strings.Contains(s, "_mv ON CLUSTER c1 TO tg.usage_events AS") &&
					(strings.Contains(s, "FROM tg.usage_events") || !strings.Contains(s, "AS "+loadSeq+"\nFROM tg."+IngestTable)) {
					t.Errorf("%s statement %d: a rollup's view must read %s with %s: %.80q", m.Name, i+1, IngestTable, loadSeq, s)
				}
				if strings.Contains(s, "SummingMergeTree(") && !strings.Contains(s, loadSeq+" UInt64") {
					t.Errorf("%s statement %d: a rollup without %s: %.80q", m.Name, i+1, loadSeq, s)
				}
				if !strings.Contains(s, " ON CLUSTER c1") {
					t.Errorf("%s statement %d: not on the cluster: %.80q", m.Name, i+1, s)
				}
				if strings.HasPrefix(s, "CREATE TABLE") && !strings.Contains(s, "ENGINE = Replicated") && !strings.Contains(s, "ENGINE = Distributed") &&
					!strings.HasPrefix(s, "CREATE TABLE IF NOT EXISTS tg."+IngestTable+" ") {
					t.Errorf("%s statement %d: table not replicated: %.80q", m.Name, i+1, s)
				}
			}
		}
	}
}

func TestClusterOptions(t *testing.T) {
	for _, o := range []Options{
		{Cluster: "a b"},
		{Cluster: "x'); DROP"},
		{Cluster: "c", ReplicaPath: "relative/{shard}"},
		{Cluster: "c", ReplicaPath: "/x'"},
	} {
		if _, err := o.withDefaults(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: err %v, want ErrInvalidOptions", o, err)
		}
	}
	o, err := Options{Cluster: "tollgate", ReplicaPath: "/ch/{shard}/"}.withDefaults()
	if err != nil || o.ReplicaPath != "/ch/{shard}" {
		t.Errorf("withDefaults = %q, %v", o.ReplicaPath, err)
	}
}
