package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/tollgate/tollgate/pkg/finance"
)

func TestExportFocus(t *testing.T) {
	addr, db, st := migratedStore(t, "focus")
	ctx := context.Background()
	b, err := st.Conn().PrepareBatch(ctx, "INSERT INTO usage_events (event_id, request_id, ts, ts_ms, dept, team, project, key_id, provider, served_model, prompt_tokens, completion_tokens, cost_nano_usd, ingested_at)")
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range []struct {
		dept string
		ts   time.Time
		cost int64
	}{
		{"eng", time.Date(2024, 5, 3, 10, 0, 0, 0, time.UTC), 1_500_000_001},
		{"eng", time.Date(2024, 5, 3, 11, 0, 0, 0, time.UTC), 2},
		{"ops", time.Date(2024, 5, 31, 23, 0, 0, 0, time.UTC), 250_000_000},
		{"ops", time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC), 9_000_000_000}, // June: not exported
	} {
		if err := b.Append("e"+string(rune('a'+i)), "r", e.ts, uint64(e.ts.UnixMilli()), e.dept, "t", "p", "k1", "openai", "gpt-5",
			uint64(100), uint64(10), e.cost, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TOLLGATE_CLICKHOUSE": addr}
	dir := t.TempDir()

	t.Run("csv on stdout", func(t *testing.T) {
		code, stdout, stderr := run1(t, env, "export", "focus", "--database", db, "--month", "2024-05")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		recs, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 3 || recs[0][0] != "BillingAccountId" {
			t.Fatalf("want a header and 2 rows (eng on the 3rd, ops on the 31st):\n%s", stdout)
		}
		col := map[string]int{}
		for i, n := range recs[0] {
			col[n] = i
		}
		if got := recs[1][col["BilledCost"]] + " " + recs[2][col["BilledCost"]]; got != "1.500000003 0.25" {
			t.Errorf("BilledCost %s, want 1.500000003 0.25", got)
		}
	})
	t.Run("csv file of one dept", func(t *testing.T) {
		out := filepath.Join(dir, "eng.csv")
		code, stdout, stderr := run1(t, env, "export", "focus", "--database", db, "--month", "2024-05", "--dept", "eng", "--out", out)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if want := "wrote " + out + ": 1 FOCUS rows of 2024-05, BilledCost 1.500000003 USD\n"; stdout != want {
			t.Errorf("stdout %q, want %q", stdout, want)
		}
		data, err := os.ReadFile(out)
		if err != nil || !strings.Contains(string(data), ",1.500000003,") || strings.Contains(string(data), "ops") {
			t.Errorf("%s (%v):\n%s", out, err, data)
		}
	})
	t.Run("parquet by extension", func(t *testing.T) {
		out := filepath.Join(dir, "may.parquet")
		code, stdout, stderr := run1(t, env, "export", "focus", "--database", db, "--month", "2024-05", "--out", out)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if !strings.Contains(stdout, "BilledCost 1.750000003 USD") {
			t.Errorf("stdout %q", stdout)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := parquet.Read[finance.FocusRow](bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, r := range rows {
			total += r.BilledCost
		}
		if len(rows) != 2 || total != 1_750_000_003 {
			t.Errorf("%d rows, total %d nano-USD; want 2, 1750000003", len(rows), total)
		}
	})
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"no month", nil},
		{"bad month", []string{"--month", "May"}},
		{"bad format", []string{"--month", "2024-05", "--format", "xlsx"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run1(t, env, append([]string{"export", "focus", "--database", db}, tc.args...)...)
			if code != 2 {
				t.Errorf("exit %d, want 2 (usage): %s", code, stderr)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("export dir has %d entries, want the 2 exports (no temporary files)", len(entries))
	}
}
