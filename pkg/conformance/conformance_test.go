package conformance_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/conformance"
	"github.com/tollgate/tollgate/pkg/gateway"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/tokenize"
	"github.com/tollgate/tollgate/pkg/usage"
)

// verifyConfig is the kit's config, as shipped.
const verifyConfig = "../../deploy/verify/tollgate.yaml"

// kit is a gateway configured with deploy/verify/tollgate.yaml in front of
// mockllm, both on loopback sockets, publishing usage events to an embedded
// JetStream server.
type kit struct {
	url, token string
	js         jetstream.JetStream
}

// startKit starts the kit; mutate, when set, changes the shipped config
// (a misconfigured gateway).
func startKit(t *testing.T, mutate func(*config.Config)) *kit {
	t.Helper()
	data, err := os.ReadFile(verifyConfig)
	if err != nil {
		t.Fatal(err)
	}
	var cfg *config.Config
	url, js := startGateway(t, func(mockURL string) *config.Config {
		cfg, err = config.Parse(data, func(k string) string {
			if k == "MOCKLLM_URL" {
				return mockURL
			}
			return ""
		})
		if err != nil {
			t.Fatal(err)
		}
		if mutate != nil {
			mutate(cfg)
		}
		return cfg
	})
	tok, err := auth.Mint(auth.MintOptions{Issuer: "tollgate-dev", Audience: "tollgate", Subject: "verify", Dept: "verify",
		KID: "dev-1", Key: []byte("tollgate-dev-secret-do-not-use-in-production"), Models: []string{"verify-*"}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &kit{url: url, token: tok, js: js}
}

// startGateway starts a mock upstream, an embedded JetStream with the usage
// stream and a publisher, and a gateway on the config that configure
// returns for the mock's base URL; it returns the gateway's URL and the
// stream. Everything stops when the test ends.
func startGateway(t *testing.T, configure func(mockURL string) *config.Config) (string, jetstream.JetStream) {
	t.Helper()
	mock := mockllm.New(mockllm.Config{})
	mln := listen(t)
	go func() { _ = mock.Serve(mln) }()
	t.Cleanup(func() { _ = mock.Shutdown() })
	cfg := configure("http://" + mln.Addr().String() + "/v1")

	nc := natstest.Connect(t, natstest.Start(t))
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
	log := slog.New(slog.DiscardHandler)
	pub, err := usage.NewPublisher(js, ucfg, log)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = pub.Run(ctx) }()

	v, err := auth.NewVerifier(cfg.Auth, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Options{Config: cfg, Verifier: v, Logger: log, Accounting: gateway.Accounting{
		Publisher: pub, Prices: prices(t, cfg), Estimator: tokenize.New()}})
	if err != nil {
		t.Fatal(err)
	}
	gln := listen(t)
	go func() { _ = gw.Serve(gln) }()
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = gw.Shutdown(sctx)
	})
	return "http://" + gln.Addr().String(), js
}

// prices is the gateway's price table for cfg: the embedded one with the
// config's prices on top, as the gateway program builds it.
func prices(t *testing.T, cfg *config.Config) *pricing.Table {
	t.Helper()
	over := map[string]pricing.Price{}
	for model, p := range cfg.Prices {
		pr, err := pricing.ParsePrice(p.Input, p.Output, p.CachedInput, p.PerRequest)
		if err != nil {
			t.Fatal(err)
		}
		over[model] = pr
	}
	return pricing.Default().With(over, "")
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func (k *kit) run(t *testing.T, js jetstream.JetStream, cases ...string) *conformance.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := conformance.Run(ctx, conformance.Options{Gateway: k.url, Token: k.token, JetStream: js, Cases: cases})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestEveryCasePasses runs the whole matrix against a gateway configured
// with deploy/verify: every column of every case passes.
func TestEveryCasePasses(t *testing.T) {
	k := startKit(t, nil)
	rep := k.run(t, k.js)
	if want := conformance.Names(conformance.DefaultRoutes()); len(rep.Results) != len(want) || len(want) < 14 {
		t.Fatalf("%d results for %d cases", len(rep.Results), len(want))
	}
	for _, res := range rep.Results {
		t.Run(res.Case, func(t *testing.T) {
			for i, name := range []string{"routing", "fallback", "billing", "client"} {
				if c := res.Checks()[i]; c.Verdict != conformance.Pass {
					t.Errorf("%s: %s: %s", name, c.Verdict, c.Detail)
				}
			}
		})
	}
	if !rep.OK || !rep.BillingChecked {
		t.Errorf("report ok %v, billing checked %v", rep.OK, rep.BillingChecked)
	}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "all 14 cases pass") || strings.Contains(out.String(), "FAIL") {
		t.Errorf("table:\n%s", out.String())
	}
	t.Logf("\n%s", out.String())
}

// TestMisconfigurationFails: a gateway configured wrongly makes the case
// that exercises the mistake fail, in the right column, with a reason.
func TestMisconfigurationFails(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*config.Config)
		kase   string
		column int // 0 routing, 1 fallback, 2 billing, 3 client
		reason string
	}{
		{"no fallback target", func(c *config.Config) { c.Models[0].Fallbacks = nil }, "429-before-first-byte", 1, "no fallback"},
		{"no fallback target: the client sees the 502", func(c *config.Config) { c.Models[0].Fallbacks = nil }, "529-before-first-byte", 3, "status 502, want 200"},
		{"wrong price", func(c *config.Config) { c.Prices["verify-primary"] = config.Price{Input: "1.50", Output: "2.00"} }, "non-stream", 2, "cost"},
		{"wrong fallback price", func(c *config.Config) { c.Prices["verify-backup"] = config.Price{Input: "3.00", Output: "5.00"} }, "529-before-first-byte", 2, "verify-backup at 3.00"},
		{"refusals fail over", func(c *config.Config) {
			c.Models[0].FallbackOn = append(c.Models[0].FallbackOn, config.TriggerContentPolicy)
		}, "content-filter", 1, "must not fail over"},
		{"context overflow fails over", func(c *config.Config) { c.Models[0].FallbackOn = config.DefaultFallbackOn() }, "context-length", 1, "must not fail over"},
		{"idle timeout below the slow stream's pace", func(c *config.Config) { c.Providers[0].Timeouts.Idle = 100 * time.Millisecond }, "slow-stream", 3, "upstream_timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := startKit(t, tc.mutate)
			rep := k.run(t, k.js, tc.kase)
			if rep.OK || len(rep.Results) != 1 {
				t.Fatalf("report ok %v with %d results; want one failing case", rep.OK, len(rep.Results))
			}
			res := rep.Results[0]
			c := res.Checks()[tc.column]
			if c.Verdict != conformance.Fail || !strings.Contains(c.Detail, tc.reason) {
				t.Errorf("column %d: %s %q, want FAIL naming %q", tc.column, c.Verdict, c.Detail, tc.reason)
			}
			var out bytes.Buffer
			if err := rep.WriteTable(&out); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "FAIL") || !strings.Contains(out.String(), tc.reason) {
				t.Errorf("table does not show the failure:\n%s", out.String())
			}
		})
	}
}

// TestBillingNotChecked: without JetStream the billing column says so and
// nothing else changes.
func TestBillingNotChecked(t *testing.T) {
	k := startKit(t, nil)
	rep := k.run(t, nil, "stream", "unknown-model")
	for _, res := range rep.Results {
		if res.Billing.Verdict != conformance.NotChecked || !res.OK() {
			t.Errorf("%s: billing %v, ok %v: %+v", res.Case, res.Billing.Verdict, res.OK(), res)
		}
	}
	if !rep.OK || rep.BillingChecked {
		t.Errorf("report ok %v, billing checked %v", rep.OK, rep.BillingChecked)
	}
}

// TestUnknownCase: a case name the matrix lacks is an error naming the
// cases.
func TestUnknownCase(t *testing.T) {
	_, err := conformance.Run(context.Background(), conformance.Options{Gateway: "http://127.0.0.1:1", Token: "t", Cases: []string{"nope"}})
	if !errors.Is(err, conformance.ErrUnknownCase) || !strings.Contains(err.Error(), "stream-cut") {
		t.Errorf("err = %v", err)
	}
}

// TestShippedConfigMatchesRoutes: deploy/verify/tollgate.yaml declares
// the models, targets, fallback and prices DefaultRoutes expects.
func TestShippedConfigMatchesRoutes(t *testing.T) {
	data, err := os.ReadFile(verifyConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := conformance.DefaultRoutes()
	models := map[string]config.Model{}
	for _, m := range cfg.Models {
		models[m.Name] = m
	}
	table := prices(t, cfg)
	for _, tc := range []struct {
		name   string
		model  string
		target conformance.Target
	}{
		{"primary", r.Model, r.Primary},
		{"backup", r.FallbackModel, r.Backup},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := models[tc.model]
			if !ok || len(m.Targets) != 1 || m.Targets[0].Provider != tc.target.Provider || m.Targets[0].Model != tc.target.Model {
				t.Fatalf("model %s: %+v, want one target %s", tc.model, m, tc.target.Deployment())
			}
			if p, ok := table.Lookup(tc.target.Model); !ok || p != tc.target.Price {
				t.Errorf("price of %s = %+v, want %+v", tc.target.Model, p, tc.target.Price)
			}
		})
	}
	if fb := models[r.Model].Fallbacks; !slices.Equal(fb, []string{r.FallbackModel}) {
		t.Errorf("fallbacks of %s = %v, want [%s]", r.Model, fb, r.FallbackModel)
	}
	if _, ok := models[r.UnknownModel]; ok {
		t.Errorf("the unknown model %s is configured", r.UnknownModel)
	}
}
