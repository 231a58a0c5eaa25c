package replay

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/chtest"
	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// history publishes n events, two per day from March 1 2024, alternating
// depts eng and sales, event i costing (i+1) USD with 1000*(i+1) prompt and
// 100 completion tokens of gpt-4o.
func history(t *testing.T, n int) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := usage.EnsureStream(ctx, js, usage.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		dept := []string{"eng", "sales"}[i%2]
		ev := &usagev1.UsageEvent{EventId: fmt.Sprintf("ev-%03d", i), RequestId: fmt.Sprintf("req-%03d", i),
			Timestamp: time.Date(2024, 3, 1+i/2, 10, 0, 0, 0, time.UTC).UnixNano(),
			Dept:      dept, Team: dept + "-t", Subject: "user" + dept, ServedModel: "gpt-4o", RequestedModel: "gpt-4o",
			Provider: "openai", PromptTokens: uint64(1000 * (i + 1)), CompletionTokens: 100,
			CostNanoUsd: int64(i+1) * 1_000_000_000, PricingVersion: "v1", StatusCode: 200}
		if i%3 == 0 { // every third: a budget checked, a hedge, units
			ev.Budgets = []*usagev1.BudgetCheck{{Scope: "dept", Value: dept, Period: "month", LimitNanoUsd: 10, SpentNanoUsd: 3, HeadroomNanoUsd: 7}}
			ev.Hedged, ev.Units, ev.Unit = true, 2, "image"
		}
		b, _ := proto.Marshal(ev)
		if _, err := js.Publish(ctx, usage.Subject(dept), b, jetstream.WithMsgID(ev.EventId)); err != nil {
			t.Fatal(err)
		}
	}
	return js
}

func TestRanges(t *testing.T) {
	js := history(t, 10)
	ctx := context.Background()
	tests := []struct {
		name        string
		o           Options
		first, last uint64
	}{
		{"all", Options{}, 1, 10},
		{"seq range", Options{FromSeq: 3, ToSeq: 5}, 3, 5},
		{"from seq", Options{FromSeq: 8}, 8, 10},
		{"to past end", Options{ToSeq: 99}, 1, 10},
		{"since future", Options{Since: time.Now().Add(-time.Hour)}, 1, 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			var last Progress
			tc.o.Batch = 2
			tc.o.Progress = func(p Progress) { last = p }
			st, err := Run(ctx, js, tc.o, NewNDJSON(&out))
			if err != nil {
				t.Fatal(err)
			}
			if st.FirstSeq != tc.first || st.LastSeq != tc.last || st.Events != int(tc.last-tc.first+1) {
				t.Fatalf("stats %+v, want %d..%d", st, tc.first, tc.last)
			}
			if last.Done != last.Total || last.Total != tc.last-tc.first+1 {
				t.Fatalf("progress %+v", last)
			}
			sc := bufio.NewScanner(&out)
			seq := tc.first
			for sc.Scan() {
				var ev usagev1.UsageEvent
				if err := protojson.Unmarshal(sc.Bytes(), &ev); err != nil {
					t.Fatal(err)
				}
				if want := fmt.Sprintf("ev-%03d", seq-1); ev.EventId != want {
					t.Fatalf("line for seq %d: %s, want %s", seq, ev.EventId, want)
				}
				seq++
			}
			if seq != tc.last+1 {
				t.Fatalf("%d lines", seq-tc.first)
			}
		})
	}
	if _, err := Run(ctx, js, Options{Until: time.Now().Add(-time.Hour)}, NewNDJSON(&bytes.Buffer{})); !errors.Is(err, ErrEmptyRange) {
		t.Fatalf("until in the past: %v, want ErrEmptyRange", err)
	}
}

func openStore(t *testing.T) *chstore.Store {
	t.Helper()
	addr := chtest.Start(t)
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	ctx := context.Background()
	s, err := chstore.Open(ctx, chstore.Options{Addr: addr, Database: "replay_" + hex.EncodeToString(suffix[:])})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

func count(t *testing.T, s *chstore.Store, q string) (n uint64, cost int64) {
	t.Helper()
	if err := s.Conn().QueryRow(context.Background(), q).Scan(&n, &cost); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n, cost
}

func TestClickHouse(t *testing.T) {
	js := history(t, 10)
	s := openStore(t)
	ctx := context.Background()
	prices, err := pricing.Parse([]byte("version: \"v2\"\nprices:\n  gpt-4o:\n    input: \"1\"\n    output: \"10\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	const raw = "SELECT toUInt64(count()), sum(cost_nano_usd) FROM usage_events"
	const rollup = "SELECT sum(requests), sum(cost_nano_usd) FROM usage_daily"
	const repriced = "SELECT toUInt64(count()), sum(cost_nano_usd) FROM usage_events_repriced FINAL WHERE pricing_version = 'v2'"
	// sum of i+1 for i < 10 = 55 USD; repriced: 1000*(i+1) tokens at $1/M
	// plus 100 at $10/M = 0.001*(i+1) + 0.001 USD each.
	wantRepriced := int64(55*1_000_000 + 10*1_000_000)
	tests := []struct {
		name     string
		o        Options
		repriced bool
		inserted int
		check    string
		n        uint64
		cost     int64
	}{
		{"part", Options{ToSeq: 4}, false, 4, raw, 4, 10_000_000_000},
		{"all", Options{}, false, 6, raw, 10, 55_000_000_000},
		{"again changes nothing", Options{}, false, 0, raw, 10, 55_000_000_000},
		{"rollups counted once", Options{FromSeq: 2}, false, 0, rollup, 10, 55_000_000_000},
		{"reprice", Options{Reprice: prices}, true, 10, repriced, 10, wantRepriced},
		{"reprice again", Options{Reprice: prices}, true, 0, repriced, 10, wantRepriced},
		{"originals kept", Options{}, false, 0, raw, 10, 55_000_000_000},
		// events 0, 3, 6 and 9: one budget each with headroom 7, 2 units, hedged
		{"budgets, hedge and units kept", Options{}, false, 0,
			"SELECT toUInt64(sum(length(budget_scope))), toInt64(sum(arraySum(budget_headroom_nano_usd)) + 100*sum(units) + 10000*sum(hedged)) FROM usage_events WHERE unit IN ('image', '')",
			4, 28 + 800 + 40000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sink := NewClickHouse(s.Conn(), tc.repriced)
			tc.o.Batch = 3
			if _, err := Run(ctx, js, tc.o, sink); err != nil {
				t.Fatal(err)
			}
			if sink.Inserted != tc.inserted {
				t.Errorf("inserted %d, want %d", sink.Inserted, tc.inserted)
			}
			if n, cost := count(t, s, tc.check); n != tc.n || cost != tc.cost {
				t.Errorf("%s = %d, %d; want %d, %d", tc.check, n, cost, tc.n, tc.cost)
			}
		})
	}
	var orig int64
	if err := s.Conn().QueryRow(ctx, "SELECT sum(original_cost_nano_usd) FROM usage_events_repriced FINAL").Scan(&orig); err != nil || orig != 55_000_000_000 {
		t.Fatalf("original costs %d, %v", orig, err)
	}
}

func TestBudgets(t *testing.T) {
	js := history(t, 10) // March 1..5, two a day
	ctx := context.Background()
	kv, err := budget.EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	// A stale total of the period with no events, and one of another period.
	stale := budget.TotalID{Scope: budget.ScopeTeam, Value: "gone", Period: budget.PeriodMonth, Start: 2024*12 + 2}
	other := budget.TotalID{Scope: budget.ScopeDept, Value: "eng", Period: budget.PeriodMonth, Start: 2024*12 + 1}
	for _, id := range []budget.TotalID{stale, other} {
		b, _ := proto.Marshal(&usagev1.SpendTotal{CostNanoUsd: 42, Requests: 1, AsOfSeq: 3})
		if _, err := kv.Put(ctx, id.Key(), b); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		period budget.Period
		at     time.Time
		id     budget.TotalID
		cost   int64
		reqs   uint64
	}{
		// eng is events 0,2,4,6,8: 1+3+5+7+9 = 25 USD.
		{"month dept", budget.PeriodMonth, time.Date(2024, 3, 9, 0, 0, 0, 0, time.UTC), budget.TotalID{Scope: budget.ScopeDept, Value: "eng", Period: budget.PeriodMonth, Start: 2024*12 + 2}, 25_000_000_000, 5},
		{"month global", budget.PeriodMonth, time.Date(2024, 3, 9, 0, 0, 0, 0, time.UTC), budget.TotalID{Scope: budget.ScopeGlobal, Period: budget.PeriodMonth, Start: 2024*12 + 2}, 55_000_000_000, 10},
		{"month stale zeroed", budget.PeriodMonth, time.Date(2024, 3, 9, 0, 0, 0, 0, time.UTC), stale, 0, 0},
		{"other month untouched", budget.PeriodMonth, time.Date(2024, 3, 9, 0, 0, 0, 0, time.UTC), other, 42, 1},
		// March 2: events 2 (eng, 3 USD) and 3 (sales, 4 USD).
		{"day sales", budget.PeriodDay, time.Date(2024, 3, 2, 5, 0, 0, 0, time.UTC), budget.TotalID{Scope: budget.ScopeDept, Value: "sales", Period: budget.PeriodDay, Start: int32(time.Date(2024, 3, 2, 0, 0, 0, 0, time.UTC).Unix() / 86400)}, 4_000_000_000, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sink, err := NewBudgets(kv, tc.period, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Run(ctx, js, Options{}, sink); err != nil {
				t.Fatal(err)
			}
			e, err := kv.Get(ctx, tc.id.Key())
			if err != nil {
				t.Fatalf("get %s: %v", tc.id.Key(), err)
			}
			var tot usagev1.SpendTotal
			if err := proto.Unmarshal(e.Value(), &tot); err != nil {
				t.Fatal(err)
			}
			if tot.CostNanoUsd != tc.cost || tot.Requests != tc.reqs {
				t.Fatalf("%s = %d nano, %d requests; want %d, %d", tc.id.Key(), tot.CostNanoUsd, tot.Requests, tc.cost, tc.reqs)
			}
			if tc.id != other && tot.AsOfSeq != 10 {
				t.Fatalf("as_of_seq %d, want 10", tot.AsOfSeq)
			}
		})
	}
	t.Run("consumer ahead", func(t *testing.T) {
		id := budget.TotalID{Scope: budget.ScopeDept, Value: "eng", Period: budget.PeriodMonth, Start: 2024*12 + 2}
		b, _ := proto.Marshal(&usagev1.SpendTotal{CostNanoUsd: 1, AsOfSeq: 11})
		if _, err := kv.Put(ctx, id.Key(), b); err != nil {
			t.Fatal(err)
		}
		sink, _ := NewBudgets(kv, budget.PeriodMonth, time.Date(2024, 3, 9, 0, 0, 0, 0, time.UTC))
		if _, err := Run(ctx, js, Options{}, sink); err == nil {
			t.Fatal("replay overwrote a total that is ahead of it")
		}
	})
}
