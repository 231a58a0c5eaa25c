package console

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/billing"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/chtest"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/finance"
	"github.com/tollgate/tollgate/pkg/gateway"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/ratelimit"
	"github.com/tollgate/tollgate/pkg/tokenize"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

const (
	rigSecret = "console-test-secret-0123456789-abcdefgh"
	rigIssuer = "tollgate-test"
)

// rig is the whole accounting path on loopback: a mockllm upstream, a
// gateway publishing usage events to an embedded JetStream server, the
// budget consumer writing spend totals (which the gateway's tracker
// watches), and the analytics loader writing a real ClickHouse server.
// data reads all of it as the console does.
type rig struct {
	t          *testing.T
	ns         *server.Server
	js         jetstream.JetStream
	store      *chstore.Store
	tracker    *budget.Tracker
	gw         *gateway.Gateway
	url        string
	configPath string
	client     *http.Client
	data       *Data
}

func rigConfig(mockURL string) string {
	return `
listen: 127.0.0.1:0
auth:
  issuers:
    - name: test
      issuer: ` + rigIssuer + `
      algorithms: [HS256]
      keys: [{secret: ` + rigSecret + `}]
providers:
  - name: mock
    kind: openai
    base_url: ` + mockURL + `/v1
    api_key: sk-test
models:
  - name: mock-gpt
    targets: [{provider: mock}]
  - name: mock-large
    targets: [{provider: mock, model: mock-gpt}]
budgets:
  - {scope: dept, value: eng, period: month, amount_usd: "100"}
  - {scope: dept, value: "*", period: day, amount_usd: "50"}
  - {scope: team, value: eng/nlp, period: month, amount_usd: "20"}
  - {scope: global, period: month, amount_usd: "1000"}
`
}

func newRig(t *testing.T) *rig {
	t.Helper()
	chAddr := chtest.Start(t)
	ns := natstest.Start(t)
	nc := natstest.Connect(t, ns)
	discard := slog.New(slog.DiscardHandler)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	if err := usage.EnsureStream(ctx, js, usage.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	kv, err := budget.EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	mock := mockllm.New(mockllm.Config{Chunks: 3})
	mln := listen(t)
	go func() { _ = mock.Serve(mln) }()
	t.Cleanup(func() { _ = mock.Shutdown() })
	mockURL := "http://" + mln.Addr().String()

	store, err := chstore.Open(ctx, chstore.Options{Addr: chAddr, Database: "console_test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	loader, err := chstore.NewLoader(store, js, chstore.LoaderOptions{BatchInterval: 20 * time.Millisecond, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := budget.NewConsumer(js, budget.ConsumerOptions{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	text := rigConfig(mockURL)
	configPath := filepath.Join(t.TempDir(), "tollgate.yaml")
	if err := os.WriteFile(configPath, []byte(text+"nats:\n  url: "+ns.ClientURL()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(text), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	limits, err := budget.ParseLimits(cfg.Budgets)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(cfg.Auth, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	tracker := budget.NewTracker(budget.TrackerOptions{Limits: limits})
	ucfg := usage.Config{SpoolDir: t.TempDir(), OnAck: tracker.OnAck}
	pub, err := usage.NewPublisher(js, ucfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []func(context.Context) error{
		func(ctx context.Context) error { return tracker.Run(ctx, kv) },
		pub.Run, consumer.Run, loader.Run,
	} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(ctx) }()
	}
	<-tracker.Ready()
	gw, err := gateway.New(gateway.Options{Config: cfg, Verifier: v, Logger: discard, Accounting: gateway.Accounting{
		Publisher: pub, Tracker: tracker, Prices: pricing.Default(),
		Limiter: ratelimit.New(ratelimit.Options{}), Estimator: tokenize.New(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	go func() { _ = gw.Serve(ln) }()
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = gw.Shutdown(sctx)
	})
	client := &http.Client{Timeout: 20 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	ex := &billing.Explainer{Store: finance.Store{Conn: store.Conn()}, Current: gw.Prices}
	return &rig{t: t, ns: ns, js: js, store: store, tracker: tracker, gw: gw, url: "http://" + ln.Addr().String(),
		configPath: configPath, client: client,
		data: &Data{Totals: tracker, CH: chstore.Querier(store.Conn()), Explainer: ex, Routes: gw.Routes}}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// principal is who a request of the rig is made as.
type principal struct {
	dept, team, project, subject, key string
}

// chat sends one chat completion as p for model and fails unless it
// answers status.
func (r *rig) chat(p principal, model string, status int) {
	r.t.Helper()
	tok, err := auth.Mint(auth.MintOptions{Issuer: rigIssuer, Subject: p.subject, KeyID: p.key, Dept: p.dept, Team: p.team,
		Project: p.project, TTL: time.Hour, Key: []byte(rigSecret)}, time.Now())
	if err != nil {
		r.t.Fatal(err)
	}
	body := `{"model":"` + model + `","messages":[{"role":"user","content":"count the tokens of this message for ` + p.subject + `"}]}`
	req, err := http.NewRequest(http.MethodPost, r.url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := r.client.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != status {
		r.t.Fatalf("chat as %+v: status %d, want %d: %s", p, resp.StatusCode, status, b)
	}
}

// settle waits until ClickHouse holds n events, with its rollups, and the totals the tracker
// watches have applied every one of them (the global total's requests).
func (r *rig) settle(n uint64) {
	r.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The loader's watermark moves once an insert has returned, with
		// the rollups its views write: usage_events alone shows rows first.
		var stored uint64
		if err := r.store.Conn().QueryRow(ctx, "SELECT count() FROM usage_events").Scan(&stored); err != nil {
			r.t.Fatal(err)
		}
		st, err := r.js.Stream(ctx, usage.StreamName)
		if err != nil {
			r.t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			r.t.Fatal(err)
		}
		wm, err := r.store.Watermark(ctx, chstore.DefaultStream, chstore.DefaultDurable)
		if err != nil {
			r.t.Fatal(err)
		}
		if wm < info.State.LastSeq {
			stored = 0
		}
		applied, cost := r.globalTotal()
		watched, _, _ := r.tracker.Spend(budget.TotalID{Scope: budget.ScopeGlobal, Period: budget.PeriodTotal})
		if stored == n && applied == n && watched == cost {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("after 30s: %d events stored, %d applied, want %d", stored, applied, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// globalTotal reads the requests and cost of the global all-time total
// from KV.
func (r *rig) globalTotal() (requests uint64, costNano int64) {
	r.t.Helper()
	kv, err := r.js.KeyValue(context.Background(), budget.Bucket)
	if err != nil {
		r.t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), budget.TotalID{Scope: budget.ScopeGlobal, Period: budget.PeriodTotal}.Key())
	if err != nil {
		return 0, 0
	}
	var st usagev1.SpendTotal
	if err := proto.Unmarshal(e.Value(), &st); err != nil {
		r.t.Fatal(err)
	}
	return st.Requests, st.CostNanoUsd
}
