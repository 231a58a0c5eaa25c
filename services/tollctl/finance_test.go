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
	addr, db, st := migratedStore(t, "cli")
	ctx := context.Background()
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
	addr, db, st := migratedStore(t, "cli")
	ctx := context.Background()
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

// TestExplainFindsThePriceBook: an event priced with a gateway's price
// book (plus prices overrides) is broken down, cache writes included, when
// explain is given the gateway's config or the book itself.
func TestExplainFindsThePriceBook(t *testing.T) {
	addr, db, st := migratedStore(t, "cli")
	ctx := context.Background()
	dir := t.TempDir()
	book := writeFile(t, dir, "book.yaml", `version: "book-7"
prices:
  "claude-sonnet-4-5": {input: "3", output: "15", cached_input: "0.3", cache_write: "3.75"}
`)
	gwCfg := writeFile(t, dir, "gateway.yaml", "providers: [{name: claude, kind: mock}]\nprice_book: "+book+"\n"+
		"prices:\n  claude/claude-sonnet-4-5: {input: \"4\", cache_write: \"5\"}\n")
	b, err := st.Conn().PrepareBatch(ctx, `INSERT INTO usage_events (event_id, request_id, ts, ts_ms, provider, deployment, served_model,
		prompt_tokens, cached_tokens, cache_write_tokens, completion_tokens, cost_nano_usd, pricing_version, ingested_at)`)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	// book-7: 3000 in at $3 + 2000 cached at $0.30 + 5000 written at $3.75 + 100 out at $15 = $0.02985.
	// book-7+override (claude's entry, which replaces the whole entry): 3000 in at $4 + 5000 written at $5 = $0.037.
	for _, r := range []struct {
		req, version string
		cost         int64
	}{{"by-book", "book-7", 29_850_000}, {"by-config", "book-7+override", 37_000_000}} {
		if err := b.Append("ev-"+r.req, r.req, ts, uint64(ts.UnixMilli()), "claude", "claude/claude-sonnet-4-5", "claude-sonnet-4-5",
			uint64(10_000), uint64(2_000), uint64(5_000), uint64(100), r.cost, r.version, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TOLLGATE_CLICKHOUSE": addr}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"book", []string{"--prices", book, "by-book"}, []string{"(2000 cached, 5000 written to cache)",
			"$3.00 in, $0.30 cached in, $3.75 cache write, $15.00 out", "$0.009 input + $0.0006 cached + $0.01875 cache write + $0.0015 output"}},
		{"config", []string{"--config", gwCfg, "by-config"}, []string{"$4.00 in, $0.00 cached in, $5.00 cache write",
			"$0.012 input + $0.00 cached + $0.025 cache write + $0.00 output + $0.00 per request = $0.037"}},
		{"not given", []string{"by-config"}, []string{"book-7+override is not the embedded one"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := run1(t, env, append([]string{"explain", "--database", db}, tt.args...)...)
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
}

// migratedStore starts (or shares) a ClickHouse server and returns its
// address, a fresh database named prefix_<random> with the migrations
// applied, and a store on it, closed when the test ends.
func migratedStore(t *testing.T, prefix string) (addr, db string, st *chstore.Store) {
	t.Helper()
	addr = chtest.Start(t)
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	db = prefix + "_" + hex.EncodeToString(suffix[:])
	ctx := context.Background()
	st, err := chstore.Open(ctx, chstore.Options{Addr: addr, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return addr, db, st
}
