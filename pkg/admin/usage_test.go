package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/billing"
	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/chtest"
	"github.com/tollgate/tollgate/pkg/finance"
	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// budgetedEvent is a request admitted under a $500 monthly dept budget
// that had spent $212.30, and a token limit.
func budgetedEvent(ts time.Time) *usagev1.UsageEvent {
	return &usagev1.UsageEvent{
		EventId: "0193f0a2-7c4e-7d2a-9b1e-3f6a8c2d4e5f", RequestId: "req/explain-1", Timestamp: ts.UnixNano(),
		Issuer: "dev", Subject: "alice", KeyId: "k1", Dept: "research", Team: "nlp", Project: "bench",
		RequestedModel: "gpt-4o-mini", ServedModel: "gpt-4o-mini", Provider: "openai", Deployment: "openai/gpt-4o-mini",
		Route: "gpt-4o-mini", Attempts: 2, Fallbacks: []string{"azure/gpt-4o-mini"},
		PromptTokens: 1000, CompletionTokens: 200, CostNanoUsd: 270_000, PricingVersion: "test-v1",
		Endpoint: "/v1/chat/completions", StatusCode: 200,
		Budgets: []*usagev1.BudgetCheck{
			{Scope: "dept", Value: "research", Period: "month", PeriodStart: ts.Format("2006-01"), LimitNanoUsd: 500_000_000_000,
				SpentNanoUsd: 212_300_000_000, ReservedNanoUsd: 1_000_000, HeadroomNanoUsd: 287_700_000_000},
			{Scope: "subject", Value: "alice", Period: "total", FromToken: true, LimitNanoUsd: 5_000_000_000,
				SpentNanoUsd: 4_000_000_000, ReservedNanoUsd: 1_000_000, HeadroomNanoUsd: 1_000_000_000},
		},
	}
}

// TestUsageEndpoint publishes a usage event to a real JetStream stream,
// loads it into a real ClickHouse with the analytics loader, and explains
// it on GET /admin/usage/{request_id} from either source.
func TestUsageEndpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := usage.EnsureStream(ctx, js, usage.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	ev := budgetedEvent(time.Now().UTC())
	data, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	other := proto.Clone(ev).(*usagev1.UsageEvent)
	other.EventId, other.RequestId, other.Budgets = "0193f0a2-7c4e-7d2a-9b1e-000000000002", "req-other", nil
	odata, _ := proto.Marshal(other)
	for _, d := range [][]byte{odata, data} {
		if _, err := js.Publish(ctx, usage.SubjectPrefix+"research", d); err != nil {
			t.Fatal(err)
		}
	}

	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	st, err := chstore.Open(ctx, chstore.Options{Addr: chtest.Start(t), Database: "adm_" + hex.EncodeToString(suffix[:])})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := chstore.NewLoader(st, js, chstore.LoaderOptions{BatchInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(lctx) }()
	testkit.Wait(t, time.Minute, "the events to be loaded", func() bool {
		wm, err := st.Watermark(ctx, chstore.DefaultStream, chstore.DefaultDurable)
		return err == nil && wm >= 2
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	sources := []struct {
		name string
		ex   *billing.Explainer
	}{
		{"clickhouse", &billing.Explainer{Store: finance.Store{Conn: st.Conn()}}},
		{"stream", &billing.Explainer{JS: js, Stream: usage.StreamName, Window: time.Hour}},
	}
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			o := fullOptions(t)
			o.RequireToken = true
			o.Usage = src.ex.Lookup
			base := start(t, o) + "/admin/usage/"
			tests := []struct {
				name, id, bearer string
				status           int
				errType          string
			}{
				{name: "no token", id: ev.RequestId, status: 401, errType: "unauthorized"},
				{name: "bad token", id: ev.RequestId, bearer: "nope", status: 401, errType: "unauthorized"},
				{name: "no admin claim", id: ev.RequestId, bearer: token(t, false), status: 403, errType: "forbidden"},
				{name: "unknown request", id: "req-missing", bearer: token(t, true), status: 404, errType: "not_found"},
				{name: "found", id: ev.RequestId, bearer: token(t, true), status: 200},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					r := do(t, "GET", base+url.PathEscape(tt.id), tt.bearer)
					if r.status != tt.status {
						t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
					}
					if tt.errType != "" {
						if got := errorType(t, r); got != tt.errType {
							t.Fatalf("error type %q, want %q", got, tt.errType)
						}
						return
					}
					var c billing.Charge
					if err := json.Unmarshal([]byte(r.body), &c); err != nil {
						t.Fatal(err)
					}
					want := []billing.BudgetCheck{
						{Scope: "dept", Value: "research", Period: "month", PeriodStart: ev.Budgets[0].PeriodStart,
							LimitNano: 500_000_000_000, SpentNano: 212_300_000_000, ReservedNano: 1_000_000, HeadroomNano: 287_700_000_000},
						{Scope: "subject", Value: "alice", Period: "total", FromToken: true,
							LimitNano: 5_000_000_000, SpentNano: 4_000_000_000, ReservedNano: 1_000_000, HeadroomNano: 1_000_000_000},
					}
					if c.RequestID != ev.RequestId || c.Subject != "alice" || c.Route != "gpt-4o-mini" || c.CostNano != 270_000 ||
						len(c.Fallbacks) != 1 || c.PricingVersion != "test-v1" || c.PromptTokens != 1000 {
						t.Errorf("charge %+v", c)
					}
					if len(c.Budgets) != len(want) {
						t.Fatalf("budgets %+v, want %+v", c.Budgets, want)
					}
					for i := range want {
						if c.Budgets[i] != want[i] {
							t.Errorf("budget %d = %+v, want %+v", i, c.Budgets[i], want[i])
						}
					}
				})
			}
		})
	}
}
