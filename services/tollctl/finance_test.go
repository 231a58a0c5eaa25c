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
