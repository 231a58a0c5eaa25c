package finance

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/chtest"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/pricing"
)

type ev struct {
	req, dept, team, project, subject, model string
	ts                                       time.Time
	in, out, cached, written                 uint64
	cost                                     int64
	version                                  string
}

func day(d, h int) time.Time { return time.Date(2024, 3, d, h, 0, 0, 0, time.UTC) }

func open(t *testing.T, evs []ev) driver.Conn {
	t.Helper()
	addr := chtest.Start(t)
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	ctx := context.Background()
	s, err := chstore.Open(ctx, chstore.Options{Addr: addr, Database: "fin_" + hex.EncodeToString(suffix[:])})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := s.Conn().PrepareBatch(ctx, `INSERT INTO usage_events (event_id, request_id, ts, ts_ms, subject, key_id, dept, team, project,
		requested_model, served_model, provider, route, attempts, fallbacks, prompt_tokens, completion_tokens, cached_tokens,
		cache_write_tokens, cost_nano_usd, pricing_version, status_code, ingested_at)`)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		// Every event twice: FINAL must count it once.
		for range 2 {
			if err := b.Append("ev-"+e.req, e.req, e.ts, uint64(e.ts.UnixMilli()), e.subject, "k"+e.subject, e.dept, e.team, e.project,
				e.model, e.model, "openai", "chat", uint32(2), []string{"azure/" + e.model}, e.in, e.out, e.cached,
				e.written, e.cost, e.version, uint32(200), time.Unix(int64(i), 0)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	return s.Conn()
}

func TestExplain(t *testing.T) {
	def := pricing.Default()
	p, ok := def.Lookup("gpt-5")
	if !ok {
		t.Fatal("embedded table has no gpt-5")
	}
	u := pricing.Usage{PromptTokens: 120_000, CompletionTokens: 3_000, CachedTokens: 20_000}
	conn := open(t, []ev{
		{req: "r1", dept: "eng", team: "ml", project: "p", subject: "alice", model: "gpt-5", ts: day(3, 1), in: u.PromptTokens, out: u.CompletionTokens, cached: u.CachedTokens, cost: p.Cost(u), version: def.Version},
		{req: "r2", dept: "eng", team: "ml", project: "p", subject: "bob", model: "gpt-5", ts: day(3, 2), in: 10, out: 10, cost: 77, version: "custom-1"},
	})
	ctx := context.Background()
	tests := []struct {
		name, req string
		known     bool
		want      []string
	}{
		{"embedded prices", "r1", true, []string{"subject alice", "fallbacks azure/gpt-5", "$1.25", "per million", "= $" + pricing.FormatUSD(p.Cost(u))}},
		{"other table", "r2", false, []string{"custom-1 is not the embedded one", "$0.000000077"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Explain(ctx, conn, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if c.PriceKnown != tc.known {
				t.Fatalf("price known %v", c.PriceKnown)
			}
			if tc.known {
				sum := c.InputNano + c.CachedNano + c.CacheWriteNano + c.OutputNano + c.ReqNano
				if d := sum - c.CostNano; d < -2 || d > 2 {
					t.Fatalf("parts sum to %d, cost %d", sum, c.CostNano)
				}
			}
			var out bytes.Buffer
			if err := c.WriteText(&out); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
	if _, err := Explain(ctx, conn, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown request: %v", err)
	}
}

func TestSimulate(t *testing.T) {
	const usd = 1_000_000_000
	// eng/ml spends 4 USD a request, three times on March 1, twice on
	// March 2; sales once; one request in February.
	conn := open(t, []ev{
		{req: "a1", dept: "eng", team: "ml", subject: "alice", model: "m", ts: day(1, 1), cost: 4 * usd},
		{req: "a2", dept: "eng", team: "ml", subject: "alice", model: "m", ts: day(1, 2), cost: 4 * usd},
		{req: "a3", dept: "eng", team: "ml", subject: "bob", model: "m", ts: day(1, 3), cost: 4 * usd},
		{req: "a4", dept: "eng", team: "ml", subject: "bob", model: "m", ts: day(2, 1), cost: 4 * usd},
		{req: "a5", dept: "eng", team: "web", subject: "carol", model: "m", ts: day(2, 2), cost: 4 * usd},
		{req: "s1", dept: "sales", team: "crm", subject: "dave", model: "m", ts: day(2, 3), cost: 1 * usd},
		{req: "old", dept: "eng", team: "ml", subject: "alice", model: "m", ts: time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC), cost: 100 * usd},
	})
	tests := []struct {
		name    string
		budgets []config.BudgetLimit
		refused []string
		saved   int64
	}{
		{"none hit", []config.BudgetLimit{{Scope: "dept", Value: "*", AmountUSD: "100", Period: "month"}}, nil, 0},
		// 8 USD reached after a2: a3, a4 refused; web and sales unaffected.
		{"team month", []config.BudgetLimit{{Scope: "team", Value: "eng/ml", AmountUSD: "8", Period: "month"}}, []string{"a3", "a4"}, 8 * usd},
		{"team of every dept", []config.BudgetLimit{{Scope: "team", Value: "*/ml", AmountUSD: "8", Period: "month"}}, []string{"a3", "a4"}, 8 * usd},
		{"team of another dept", []config.BudgetLimit{{Scope: "team", Value: "sales/ml", AmountUSD: "8", Period: "month"}}, nil, 0},
		// Headroom left (4 < 5) lets a2 through; a day limit resets on March 2.
		{"team day", []config.BudgetLimit{{Scope: "team", Value: "*", AmountUSD: "5", Period: "day"}}, []string{"a3"}, 4 * usd},
		{"dept and global", []config.BudgetLimit{
			{Scope: "dept", Value: "eng", AmountUSD: "12", Period: "month"},
			{Scope: "global", AmountUSD: "16", Period: "month"},
		}, []string{"a4", "a5"}, 8 * usd},
		{"zero refuses all", []config.BudgetLimit{{Scope: "subject", Value: "dave", AmountUSD: "0", Period: "total"}}, []string{"s1"}, 1 * usd},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			limits, err := budget.ParseLimits(tc.budgets)
			if err != nil {
				t.Fatal(err)
			}
			sim, err := Simulate(context.Background(), conn, limits, day(1, 0), day(31, 0))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range sim.Refusals {
				got = append(got, r.RequestID)
			}
			if strings.Join(got, ",") != strings.Join(tc.refused, ",") || sim.SavedNano != tc.saved {
				t.Fatalf("refused %v saving %d; want %v saving %d", got, sim.SavedNano, tc.refused, tc.saved)
			}
			if sim.Events != 6 || sim.SpentNano+sim.SavedNano != 21*usd {
				t.Fatalf("events %d, spent %d + saved %d", sim.Events, sim.SpentNano, sim.SavedNano)
			}
		})
	}
}

func TestStatementChain(t *testing.T) {
	conn := open(t, []ev{
		{req: "f1", dept: "eng", team: "ml", project: "x", model: "gpt-5", ts: time.Date(2024, 1, 5, 0, 0, 0, 0, time.UTC), in: 10, out: 1, cost: 100},
		{req: "f2", dept: "eng", team: "web", project: "y", model: "gpt-5", ts: time.Date(2024, 2, 5, 0, 0, 0, 0, time.UTC), in: 20, out: 2, cost: 200},
		{req: "f3", dept: "eng", team: "ml", project: "y", model: "o3", ts: time.Date(2024, 2, 6, 0, 0, 0, 0, time.UTC), in: 30, out: 3, cost: 300},
		{req: "f4", dept: "sales", team: "crm", project: "z", model: "o3", ts: time.Date(2024, 2, 6, 0, 0, 0, 0, time.UTC), in: 1, out: 1, cost: 9},
		{req: "f5", dept: "eng", team: "ml", project: "x", model: "o3", ts: time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC), in: 1, out: 1, cost: 1},
	})
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	ctx := context.Background()
	var chain []*Statement
	var prev *Statement
	for _, m := range []string{"2024-01", "2024-02", "2024-03"} {
		s, err := BuildStatement(ctx, conn, "eng", m, time.Date(2024, 4, 1, 0, 0, 0, 0, time.UTC))
		if err != nil {
			t.Fatal(err)
		}
		s.Sign(prev, key)
		chain = append(chain, s)
		prev = s
	}
	feb := chain[1]
	if feb.Total.CostNanoUSD != 500 || feb.Total.Requests != 2 || len(feb.Teams) != 2 || len(feb.Models) != 2 || feb.Projects[0].Name != "y" {
		t.Fatalf("february: %+v", feb)
	}
	var csvOut bytes.Buffer
	if err := feb.WriteCSV(&csvOut); err != nil || !strings.Contains(csvOut.String(), "eng,2024-02,total,total,2,50,5,0.0000005") {
		t.Fatalf("csv %v:\n%s", err, csvOut.String())
	}
	// Round trip through JSON, as files do.
	reload := func(ss []*Statement) []*Statement {
		var out []*Statement
		for _, s := range ss {
			b, _ := json.Marshal(s)
			var c Statement
			if err := json.Unmarshal(b, &c); err != nil {
				t.Fatal(err)
			}
			out = append(out, &c)
		}
		return out
	}
	tests := []struct {
		name   string
		mutate func(ss []*Statement) []*Statement
		pub    ed25519.PublicKey
		ok     bool
	}{
		{"intact", func(ss []*Statement) []*Statement { return ss }, nil, true},
		{"intact with key", func(ss []*Statement) []*Statement { return ss }, key.Public().(ed25519.PublicKey), true},
		{"wrong key", func(ss []*Statement) []*Statement { return ss }, other.Public().(ed25519.PublicKey), false},
		{"cost changed", func(ss []*Statement) []*Statement { ss[1].Teams[0].CostNanoUSD = 1; return ss }, nil, false},
		{"re-signed middle breaks link", func(ss []*Statement) []*Statement {
			ss[1].Total.CostNanoUSD = 1
			ss[1].Sign(ss[0], key)
			return ss
		}, nil, false},
		{"month missing", func(ss []*Statement) []*Statement { return []*Statement{ss[0], ss[2]} }, nil, false},
		{"re-signed by another key", func(ss []*Statement) []*Statement { ss[2].Sign(ss[1], other); return ss }, nil, false},
		{"tail only", func(ss []*Statement) []*Statement { return ss[1:] }, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Verify(tc.mutate(reload(chain)), tc.pub)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrVerify)) {
				t.Fatalf("Verify = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
