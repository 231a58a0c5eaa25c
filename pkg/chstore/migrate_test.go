package chstore

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSplitStatements(t *testing.T) {
	tests := []struct {
		name    string
		sql     string
		want    []string
		wantErr bool
	}{
		{name: "empty", sql: "", want: nil},
		{name: "comments only", sql: "-- a\n  -- b;\n", want: nil},
		{name: "one", sql: "CREATE TABLE a (x UInt8)\nENGINE = Memory;\n", want: []string{"CREATE TABLE a (x UInt8)\nENGINE = Memory"}},
		{name: "two with blank lines and comments",
			sql:  "-- head\n\nSELECT 1;\n\n-- between;\nSELECT\n  2 ;  \n",
			want: []string{"SELECT 1", "SELECT\n  2"}},
		{name: "semicolon inside a line does not split", sql: "SELECT ';' AS x, 1\n;\n", want: []string{"SELECT ';' AS x, 1"}},
		{name: "no final newline", sql: "SELECT 1;", want: []string{"SELECT 1"}},
		{name: "unterminated", sql: "SELECT 1;\nSELECT 2\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := splitStatements(tt.sql)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMigrations(t *testing.T) {
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 3 {
		t.Fatalf("%d migrations, want at least 3", len(ms))
	}
	for i, m := range ms {
		if m.Version != i+1 {
			t.Errorf("migration %s has version %d, want %d (no gaps)", m.Name, m.Version, i+1)
		}
		if len(m.Statements) == 0 {
			t.Errorf("migration %s has no statements", m.Name)
		}
		for _, st := range m.Statements {
			if !strings.Contains(st, "IF NOT EXISTS") && !addColumn.MatchString(st) && !backfillOnce(st) {
				t.Errorf("migration %s: statement is not idempotent: %.60q", m.Name, st)
			}
		}
	}
}

// backfillOnce reports whether st is a rollup's backfill that runs only
// while its table is empty: INSERT INTO t ... WHERE (SELECT count() FROM t) = 0.
func backfillOnce(st string) bool {
	rest, ok := strings.CutPrefix(strings.TrimSpace(st), "INSERT INTO ")
	if !ok {
		return false
	}
	table, _, _ := strings.Cut(rest, " ")
	return table != "" && strings.Contains(st, "WHERE (SELECT count() FROM "+table+") = 0")
}

func TestMigrate(t *testing.T) {
	s := newStore(t, ch.Addr(t)) // migrated once already
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var all []int
	for _, m := range ms {
		all = append(all, m.Version)
	}
	wantTables := []string{"audit_events", "budget_limits", "budget_limits_current", "schema_migrations", "spend_daily", "spend_hourly", "usage_daily", "usage_daily_mv",
		"usage_dept_daily", "usage_dept_daily_mv", "usage_dept_hourly", "usage_dept_hourly_mv", "usage_dims", "usage_dims_mv", "usage_events", "usage_events_repriced",
		"usage_hourly", "usage_hourly_mv", "usage_key_daily", "usage_key_daily_mv", "usage_model_daily", "usage_model_daily_mv", "usage_overhead_hourly", "usage_overhead_hourly_mv",
		"usage_scope_daily", "usage_scope_daily_mv", "usage_subject_daily", "usage_subject_daily_mv", "usage_team_daily", "usage_team_daily_mv",
		"usage_traffic_5m", "usage_traffic_5m_mv", "usage_ttft_hourly", "usage_ttft_hourly_mv", "watermarks"}

	steps := []struct {
		name string
		prep func() error
	}{
		{name: "after the first run"},
		{name: "run again", prep: func() error { return s.Migrate(ctx) }},
		{name: "run on a new Store", prep: func() error {
			s2, err := Open(ctx, Options{Addr: s.o.Addr, Database: s.Database()})
			if err != nil {
				return err
			}
			defer s2.Close()
			return s2.Migrate(ctx)
		}},
		{name: "every migration applied again", prep: func() error {
			// As if each had died after its statements, before recording.
			if err := s.conn.Exec(ctx, "DROP TABLE schema_migrations"); err != nil {
				return err
			}
			return s.Migrate(ctx)
		}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.prep != nil {
				if err := st.prep(); err != nil {
					t.Fatal(err)
				}
			}
			applied, err := s.AppliedMigrations(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(applied, all) {
				t.Fatalf("applied %v, want %v", applied, all)
			}
			tables := queryStrings(t, s, "SELECT name FROM system.tables WHERE database = ? ORDER BY name", s.Database())
			if !slices.Equal(tables, wantTables) {
				t.Fatalf("tables %v, want %v", tables, wantTables)
			}
		})
	}
}

// TestEventColumns checks eventColumns and columns.slices against the table.
func TestEventColumns(t *testing.T) {
	s := newStore(t, ch.Addr(t))
	table := queryStrings(t, s, "SELECT name FROM system.columns WHERE database = ? AND table = 'usage_events'", s.Database())
	listed := strings.Split(eventColumns, ", ")
	var c columns
	tests := []struct {
		name      string
		got, want int
	}{
		{name: "listed columns cover the table", got: len(listed), want: len(table)},
		{name: "one slice per listed column", got: len(c.slices()), want: len(listed)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Fatalf("got %d, want %d", tt.got, tt.want)
			}
		})
	}
	slices.Sort(table)
	slices.Sort(listed)
	if !slices.Equal(table, listed) {
		t.Fatalf("listed %v, table has %v", listed, table)
	}
}

// TestMigrateAddsBudgetColumns applies 0005 to a usage_events table that
// already holds rows (as an upgrade does): the rows get empty budget
// arrays, and the migration can run again, whole or statement by statement.
func TestMigrateAddsBudgetColumns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := newStore(t, ch.Addr(t))
	if err := s.conn.Exec(ctx, "DROP DATABASE `"+s.Database()+"`"); err != nil {
		t.Fatal(err)
	}
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ms, func(m Migration) bool { return m.Name == "0005_budget_checks.sql" })
	if i < 0 {
		t.Fatal("no migration 0005_budget_checks.sql")
	}
	if err := s.migrate(ctx, ms[:i]); err != nil {
		t.Fatal(err)
	}
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO usage_events (event_id, request_id, ts, ts_ms, dept, cost_nano_usd, ingested_at)")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"old-1", "old-2"} {
		if err := b.Append(id, "req-"+id, time.Unix(1_764_460_800, 0), uint64(1_764_460_800_000), "eng", int64(5), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		run  func() error
	}{
		{"upgrade", func() error { return s.Migrate(ctx) }},
		{"again", func() error { return s.Migrate(ctx) }},
		{"statements again", func() error {
			for _, st := range ms[i].Statements {
				if err := s.apply(ctx, st); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if err := st.run(); err != nil {
				t.Fatal(err)
			}
			cols := queryStrings(t, s, "SELECT name FROM system.columns WHERE database = ? AND table = 'usage_events' AND name LIKE 'budget_%' ORDER BY name", s.Database())
			if len(cols) != 9 {
				t.Fatalf("budget columns %v, want 9", cols)
			}
			rows := queryStrings(t, s, "SELECT concat(event_id, ':', toString(length(budget_scope) + length(budget_headroom_nano_usd))) FROM usage_events ORDER BY event_id")
			if !slices.Equal(rows, []string{"old-1:0", "old-2:0"}) {
				t.Fatalf("rows %v, want the two old rows with empty budgets", rows)
			}
		})
	}
}

// TestMigrateBackfillsDailyRollups applies 0011 to a usage_events table that
// already holds rows (as an upgrade does): the new rollups hold the old
// events once, however often the migration or its statements run again,
// and events inserted afterwards reach them through their views.
func TestMigrateBackfillsDailyRollups(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := newStore(t, ch.Addr(t))
	if err := s.conn.Exec(ctx, "DROP DATABASE `"+s.Database()+"`"); err != nil {
		t.Fatal(err)
	}
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ms, func(m Migration) bool { return m.Name == "0011_daily_rollups.sql" })
	if i < 0 {
		t.Fatal("no migration 0011_daily_rollups.sql")
	}
	if err := s.migrate(ctx, ms[:i]); err != nil {
		t.Fatal(err)
	}
	insert := func(ids ...string) {
		t.Helper()
		b, err := s.conn.PrepareBatch(ctx, "INSERT INTO usage_events (event_id, request_id, ts, ts_ms, dept, team, served_model, subject, key_id, cost_nano_usd, ingested_at)")
		if err != nil {
			t.Fatal(err)
		}
		for n, id := range ids {
			ts := time.Unix(1_764_460_800+int64(n)*40_000, 0) // two days
			if err := b.Append(id, "req-"+id, ts, uint64(ts.UnixMilli()), "eng", "t"+id[len(id)-1:], "m", "alice", "k-"+id, int64(5+n), time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Send(); err != nil {
			t.Fatal(err)
		}
	}
	insert("old-1", "old-2", "old-3", "old-4", "old-5")
	// want is what each rollup must hold: the raw events' aggregate by the
	// rollup's key.
	check := func(t *testing.T) {
		t.Helper()
		for _, c := range []struct{ table, key string }{
			{"usage_dept_daily", "day, dept"},
			{"usage_team_daily", "day, dept, team, served_model"},
			{"usage_key_daily", "day, dept, team, served_model, subject, key_id"},
		} {
			q := "SELECT concat(toString(tuple(" + c.key + ")), ':', toString(sum(requests)), ':', toString(sum(cost_nano_usd))) AS r FROM "
			got := queryStrings(t, s, q+c.table+" GROUP BY "+c.key+" ORDER BY r")
			want := queryStrings(t, s, q+"(SELECT toDate(ts) AS day, *, toUInt64(1) AS requests FROM usage_events) GROUP BY "+c.key+" ORDER BY r")
			if len(want) == 0 || !slices.Equal(got, want) {
				t.Errorf("%s holds %v, want %v", c.table, got, want)
			}
		}
	}
	steps := []struct {
		name string
		run  func() error
	}{
		{"upgrade", func() error { return s.Migrate(ctx) }},
		{"again", func() error { return s.Migrate(ctx) }},
		{"statements again", func() error {
			for _, st := range ms[i].Statements {
				if err := s.apply(ctx, st); err != nil {
					return err
				}
			}
			return nil
		}},
		{"new events", func() error { insert("new-6", "new-7"); return nil }},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if err := st.run(); err != nil {
				t.Fatal(err)
			}
			check(t)
		})
	}
}
