package reconcile_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/chtest"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/gateway"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/ratelimit"
	"github.com/tollgate/tollgate/pkg/tokenize"
	"github.com/tollgate/tollgate/pkg/usage"
)

const (
	testSecret = "reconcile-test-secret-0123456789-abcdefgh"
	testIssuer = "tollgate-test"
)

// rig is the whole accounting path on loopback: a mock upstream, a gateway
// publishing usage events to an embedded JetStream server, the budget
// consumer writing spend totals, and the analytics loader writing a real
// ClickHouse server.
type rig struct {
	t       *testing.T
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	mock    *mockllm.Server
	mockURL string
	url     string
	store   *chstore.Store
	client  *http.Client
}

func rigConfig(mockURL string) string {
	return `
listen: 127.0.0.1:0
auth:
  issuers:
    - name: test
      issuer: ` + testIssuer + `
      algorithms: [HS256]
      keys: [{secret: ` + testSecret + `}]
providers:
  - name: mock
    kind: openai
    base_url: ` + mockURL + `/v1
    api_key: sk-test
  - name: failing
    kind: openai
    base_url: ` + mockURL + `/v1
    api_key: sk-test
    headers: {X-Mock-Status: "503"}
models:
  - name: mock-gpt
    targets: [{provider: mock}]
  - name: mock-embed
    type: embeddings
    targets: [{provider: mock}]
  - name: flaky-gpt
    targets: [{provider: failing, model: mock-gpt}]
    fallbacks: [mock-gpt]
`
}

func newRig(t *testing.T) *rig {
	t.Helper()
	chAddr := chtest.Start(t)
	ns := natstest.Start(t)
	nc := natstest.Connect(t, ns)
	discard := slog.New(slog.DiscardHandler)
	ucfg := usage.Config{SpoolDir: t.TempDir()}
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

	mock := mockllm.New(mockllm.Config{Chunks: 4})
	mln := listen(t)
	go func() { _ = mock.Serve(mln) }()
	t.Cleanup(func() { _ = mock.Shutdown() })
	mockURL := "http://" + mln.Addr().String()

	store, err := chstore.Open(ctx, chstore.Options{Addr: chAddr, Database: "reconcile_test"})
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
	cfg, err := config.Parse([]byte(rigConfig(mockURL)), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(cfg.Auth, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	tracker := budget.NewTracker(budget.TrackerOptions{})
	ucfg.OnAck = tracker.OnAck
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
	return &rig{t: t, js: js, kv: kv, mock: mock, mockURL: mockURL, url: "http://" + ln.Addr().String(), store: store, client: client}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// token mints a token for dept (none when empty) allowing models (all
// when nil).
func (r *rig) token(dept string, models []string) string {
	r.t.Helper()
	tok, err := auth.Mint(auth.MintOptions{Issuer: testIssuer, Subject: "alice", Dept: dept, Team: "nlp",
		Models: models, TTL: time.Hour, Key: []byte(testSecret)}, time.Now())
	if err != nil {
		r.t.Fatal(err)
	}
	return tok
}

// post sends a request to the gateway and returns the status and body.
func (r *rig) post(path, token, body string) (int, string) {
	r.t.Helper()
	resp := r.send(r.url+path, token, body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func (r *rig) send(url, token, body string) *http.Response {
	r.t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	return resp
}

// abortStream starts a stream, reads its first event and goes away.
func (r *rig) abortStream(token, body string) {
	r.t.Helper()
	resp := r.send(r.url+"/v1/chat/completions", token, body)
	if resp.StatusCode != http.StatusOK {
		r.t.Fatalf("abort stream: status %d", resp.StatusCode)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		r.t.Fatal(err)
	}
	resp.Body.Close()
}
