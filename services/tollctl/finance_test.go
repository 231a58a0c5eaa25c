package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/chtest"
)

func TestStatementCommands(t *testing.T) {
	addr := chtest.Start(t)
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	db := "cli_" + hex.EncodeToString(suffix[:])
	ctx := context.Background()
	st, err := chstore.Open(ctx, chstore.Options{Addr: addr, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := st.Conn().PrepareBatch(ctx, "INSERT INTO usage_events (event_id, request_id, ts, ts_ms, dept, team, project, served_model, cost_nano_usd, pricing_version, ingested_at)")
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range []time.Month{1, 2, 2} {
		ts := time.Date(2024, m, 10, 0, 0, 0, 0, time.UTC)
		if err := b.Append("e"+string(rune('a'+i)), "r"+string(rune('a'+i)), ts, uint64(ts.UnixMilli()), "eng", "ml", "p", "gpt-5", int64(1_000_000_000*(i+1)), "x", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	key := writeFile(t, dir, "seed.hex", strings.Repeat("ab", 32))
	out := t.TempDir()
	env := map[string]string{"TOLLGATE_CLICKHOUSE": addr}
	for _, m := range []string{"2024-01", "2024-02"} {
		code, stdout, stderr := run1(t, env, "statement", "--database", db, "--dept", "eng", "--month", m, "--key", key, "--dir", out)
		if code != 0 {
			t.Fatalf("statement %s: exit %d: %s", m, code, stderr)
		}
		if m == "2024-02" && !strings.Contains(stdout, "$5.00 over 2 requests, linked to 2024-01") {
			t.Fatalf("statement output: %s", stdout)
		}
	}
	feb := filepath.Join(out, "statement-eng-2024-02.json")
	csv, _ := os.ReadFile(filepath.Join(out, "statement-eng-2024-02.csv"))
	if !strings.Contains(string(csv), "eng,2024-02,total,total,2,0,0,5.00") {
		t.Fatalf("csv:\n%s", csv)
	}
	tests := []struct {
		name   string
		tamper func()
		code   int
	}{
		{"intact", func() {}, 0},
		{"tampered", func() {
			b, _ := os.ReadFile(feb)
			os.WriteFile(feb, []byte(strings.Replace(string(b), `"cost_nano_usd":5000000000`, `"cost_nano_usd":4000000000`, 1)), 0o644)
		}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.tamper()
			code, stdout, stderr := run1(t, nil, "statement", "verify", out)
			if code != tc.code {
				t.Fatalf("verify: exit %d, want %d: %s %s", code, tc.code, stdout, stderr)
			}
		})
	}
	if code, _, stderr := run1(t, env, "explain", "--database", db, "rb"); code != 0 {
		t.Fatalf("explain: %s", stderr)
	}
}

// TestExplainShowsBudgets: tollctl explain prints each budget checked at
// admission with its limit, spend and headroom.
func TestExplainShowsBudgets(t *testing.T) {
	addr := chtest.Start(t)
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	db := "cli_" + hex.EncodeToString(suffix[:])
	ctx := context.Background()
	st, err := chstore.Open(ctx, chstore.Options{Addr: addr, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := st.Conn().PrepareBatch(ctx, `INSERT INTO usage_events (event_id, request_id, ts, ts_ms, dept, served_model, cost_nano_usd,
		pricing_version, ingested_at, budget_scope, budget_value, budget_period, budget_period_start, budget_from_token,
		budget_limit_nano_usd, budget_spent_nano_usd, budget_reserved_nano_usd, budget_headroom_nano_usd)`)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	rows := []struct {
		req    string
		scopes []string
	}{{"with-budgets", []string{"dept", "subject"}}, {"no-budgets", []string{}}}
	for _, r := range rows {
		n := len(r.scopes)
		vals, periods, starts := []string{"research", "alice"}[:n], []string{"month", "total"}[:n], []string{"2026-11", ""}[:n]
		if err := b.Append("ev-"+r.req, r.req, ts, uint64(ts.UnixMilli()), "research", "gpt-5", int64(1), "x", time.Now(),
			r.scopes, vals, periods, starts, []uint8{0, 1}[:n], []int64{500e9, 5e9}[:n], []int64{212_300_000_000, 6e9}[:n],
			[]int64{10_000_000, 10_000_000}[:n], []int64{287_700_000_000, -1e9}[:n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TOLLGATE_CLICKHOUSE": addr}
	tests := []struct {
		name, req string
		want      []string
	}{
		{"with budgets", "with-budgets", []string{
			"budget:          dept=research month 2026-11: limit $500.00, spent $212.30 at admission, headroom $287.70 (this request reserved $0.01)",
			"budget:          subject=alice total (token limit): limit $5.00, spent $6.00 at admission, headroom -$1.00",
		}},
		{"without", "no-budgets", []string{"budgets:         none checked"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := run1(t, env, "explain", "--database", db, tt.req)
			if code != 0 {
				t.Fatalf("explain: exit %d: %s", code, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("output lacks %q:\n%s", w, stdout)
				}
			}
		})
	}
	if code, _, _ := run1(t, env, "explain", "--database", db, "missing"); code == 0 {
		t.Error("explain of an unknown request exited 0")
	}
}
