package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/pricing"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// bookConfig is a gateway config serving claude-sonnet-4-5 from two
// Anthropic-format providers (both the mock at base): claude, and
// claude-eu under the route name claude-eu, priced by the book at path.
func bookConfig(base, book string) string {
	return `
listen: 127.0.0.1:0
` + testAuthYAML + `providers:
  - {name: claude, kind: anthropic, base_url: "` + base + `", api_key: ` + testProvKey + `}
  - {name: claude-eu, kind: anthropic, base_url: "` + base + `", api_key: ` + testProvKey + `}
models:
  - name: claude-sonnet-4-5
    targets: [{provider: claude}]
  - name: claude-eu
    targets: [{provider: claude-eu, model: claude-sonnet-4-5}]
price_book: ` + book + `
`
}

// writeBook writes a price book as `tollctl prices import --format litellm`
// does (pricing.Import, then Table.Marshal) from the sample LiteLLM file,
// with extra entries added, and returns what it wrote.
func writeBook(t *testing.T, path, version string, extra map[string]pricing.Price) *pricing.Table {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "pricing", "testdata", "litellm_model_prices.json"))
	if err != nil {
		t.Fatal(err)
	}
	prices, _, err := pricing.Import(pricing.FormatLiteLLM, data, []string{"anthropic"})
	if err != nil {
		t.Fatal(err)
	}
	for m, p := range extra {
		prices[m] = p
	}
	book := pricing.NewTable(version, prices)
	if err := os.WriteFile(path, book.Marshal(), 0o600); err != nil {
		t.Fatal(err)
	}
	return book
}

// cacheWriteChat is a chat request of an 18-token prompt (as the mock
// counts it) of which the mock reports written tokens as
// cache_creation_input_tokens.
func cacheWriteChat(model string, stream bool, written int) string {
	return fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":50,"messages":[{"role":"user","content":"one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen"}],"mock":{"words":4,"chunks":4,"cache_write_tokens":%d}}`,
		model, stream, written)
}

// TestPriceBookCacheWrites: the gateway loads a price book written by the
// import code (price_book), records its version on every event, bills an
// Anthropic answer's cache_creation_input_tokens at the book's cache-write
// price (unary and streamed: message_start usage), prices a provider's
// entry (provider/model) before the model's, and picks a new book up on
// SIGHUP.
func TestPriceBookCacheWrites(t *testing.T) {
	dir := t.TempDir()
	bookPath, cfgPath := filepath.Join(dir, "book.yaml"), filepath.Join(dir, "tollgate.yaml")
	euPrice := pricing.Price{InputPerM: 4e9, OutputPerM: 20e9, CacheWriteInputPerM: 5e9}
	book := writeBook(t, bookPath, "litellm-test-1", map[string]pricing.Price{"claude-eu/claude-sonnet-4-5": euPrice})
	var s *Settings
	a := newAcctRig(t, func(c *config.Config) {
		writeConfig(t, cfgPath, bookConfig(strings.TrimSuffix(c.Providers[0].BaseURL, "/v1"), bookPath))
		var err error
		if s, err = LoadSettings(cfgPath, staticURL("")); err != nil {
			t.Fatal(err)
		}
		*c = *s.Config
	})
	if s.Prices.Version != "litellm-test-1" {
		t.Fatalf("settings price version %q, want the book's", s.Prices.Version)
	}
	sonnet, ok := book.Price("claude-sonnet-4-5")
	if !ok || sonnet.CacheWriteInputPerM != 3_750_000_000 || sonnet.InputPerM != 3_000_000_000 {
		t.Fatalf("imported sonnet price %+v", sonnet)
	}
	// The rig starts on the embedded table; the reload (the SIGHUP path)
	// applies the file's book.
	r := NewReloader(cfgPath, s, a.gw, a.tracker, staticURL(""), nil, slog.New(slog.DiscardHandler))
	sigs := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, sigs) }()
	t.Cleanup(func() { cancel(); <-done })
	sigs <- syscall.SIGHUP
	testkit.Wait(t, 5*time.Second, "the price book applied", func() bool { return a.gw.state.Load().prices.Version == "litellm-test-1" })

	tests := []struct {
		name, model  string
		stream       bool
		written      uint64
		price        pricing.Price
		wantProvider string
	}{
		{name: "unary", model: "claude-sonnet-4-5", written: 10, price: sonnet, wantProvider: "claude"},
		{name: "stream", model: "claude-sonnet-4-5", stream: true, written: 12, price: sonnet, wantProvider: "claude"},
		{name: "no cache writes", model: "claude-sonnet-4-5", price: sonnet, wantProvider: "claude"},
		{name: "provider entry", model: "claude-eu", written: 10, price: euPrice, wantProvider: "claude-eu"},
		{name: "provider entry, stream", model: "claude-eu", stream: true, written: 18, price: euPrice, wantProvider: "claude-eu"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := a.post("/v1/chat/completions", a.token(nil), cacheWriteChat(tt.model, tt.stream, int(tt.written)))
			body := readBody(t, resp)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			ev := a.events(t, i+1)[i]
			checkCacheWriteEvent(t, ev, tt.written, tt.price, tt.wantProvider, "litellm-test-1")
		})
	}

	// A new book on SIGHUP: its version and prices apply to new requests.
	cheaper := sonnet
	cheaper.CacheWriteInputPerM = 3_100_000_000
	writeBook(t, bookPath, "litellm-test-2", map[string]pricing.Price{"claude-sonnet-4-5": cheaper})
	sigs <- syscall.SIGHUP
	testkit.Wait(t, 5*time.Second, "the new price book applied", func() bool { return a.gw.state.Load().prices.Version == "litellm-test-2" })
	resp := a.post("/v1/chat/completions", a.token(nil), cacheWriteChat("claude-sonnet-4-5", false, 10))
	if body := readBody(t, resp); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	checkCacheWriteEvent(t, a.events(t, len(tests)+1)[len(tests)], 10, cheaper, "claude", "litellm-test-2")

	// A broken book is refused on SIGHUP; the running one stays.
	if err := os.WriteFile(bookPath, []byte("version: \"x\"\nprices:\n  m: {input: lots}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "price_book "+bookPath) {
		t.Fatalf("reload with a broken book: %v", err)
	}
	if v := a.gw.state.Load().prices.Version; v != "litellm-test-2" {
		t.Errorf("running price version %q after a refused reload", v)
	}
}

// checkCacheWriteEvent checks that ev carries written cache-write tokens,
// served by provider, and cost exactly what price bills for its tokens
// under version, which differs from billing the written tokens as input.
func checkCacheWriteEvent(t *testing.T, ev *usagev1.UsageEvent, written uint64, price pricing.Price, provider, version string) {
	t.Helper()
	u := pricing.Usage{PromptTokens: ev.PromptTokens, CompletionTokens: ev.CompletionTokens, CachedTokens: ev.CachedTokens,
		CacheWriteTokens: ev.CacheWriteTokens}
	want := price.Cost(u)
	asInput := price.Cost(pricing.Usage{PromptTokens: ev.PromptTokens, CompletionTokens: ev.CompletionTokens})
	checks := []struct {
		name      string
		got, want any
	}{
		{"cache write tokens", ev.CacheWriteTokens, written},
		{"prompt tokens (18 from the mock)", ev.PromptTokens, uint64(18)},
		{"completion tokens", ev.CompletionTokens, uint64(4)},
		{"estimated", ev.Estimated, false},
		{"provider", ev.Provider, provider},
		{"pricing version", ev.PricingVersion, version},
		{"cost", ev.CostNanoUsd, want},
		{"cost differs from input price", written > 0 && want == asInput, false},
	}
	for _, c := range checks {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestServiceTierPrices: an OpenAI answer that reports service_tier flex or
// priority is billed at that tier's prices of the entry, unary and
// streamed, and the event records the tier; a tier the entry has no price
// for, and the standard tier, pay the base price.
func TestServiceTierPrices(t *testing.T) {
	a := newAcctRig(t, nil)
	base, _ := pricing.Default().Lookup("mock-gpt")
	tiered := base
	tiered.InputPerM, tiered.OutputPerM = 2_000_000_000, 8_000_000_000
	tiered.Flex = pricing.TierPrices{InputPerM: 1_000_000_000, OutputPerM: 4_000_000_000}
	tab := pricing.Default().With(map[string]pricing.Price{"mock-gpt": tiered}, "tiers-1")
	if err := a.gw.Reload(a.cfg, a.gw.state.Load().verifier, tab); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, tier string
		stream     bool
		wantTier   string
		wantTierOf pricing.ServiceTier
	}{
		{name: "flex", tier: "flex", wantTier: "flex", wantTierOf: pricing.TierFlex},
		{name: "flex stream", tier: "flex", stream: true, wantTier: "flex", wantTierOf: pricing.TierFlex},
		{name: "priority without a price", tier: "priority", wantTier: "priority", wantTierOf: pricing.TierPriority},
		{name: "standard", tier: "auto"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"model":"mock-gpt","service_tier":%q,"stream":%v,"messages":[{"role":"user","content":"one two three four five"}],"mock":{"words":6,"chunks":6}}`,
				tt.tier, tt.stream)
			resp := a.post("/v1/chat/completions", a.token(nil), body)
			if out := readBody(t, resp); resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			ev := a.events(t, i+1)[i]
			u := pricing.Usage{PromptTokens: ev.PromptTokens, CompletionTokens: ev.CompletionTokens, ServiceTier: tt.wantTierOf}
			want := tiered.Cost(u)
			standard := tiered.Cost(pricing.Usage{PromptTokens: ev.PromptTokens, CompletionTokens: ev.CompletionTokens})
			if ev.ServiceTier != tt.wantTier || ev.CostNanoUsd != want || ev.PricingVersion != "tiers-1" || ev.CompletionTokens != 6 {
				t.Errorf("event tier %q cost %d version %q completion %d; want tier %q cost %d", ev.ServiceTier, ev.CostNanoUsd,
					ev.PricingVersion, ev.CompletionTokens, tt.wantTier, want)
			}
			if isFlex := tt.wantTierOf == pricing.TierFlex; isFlex == (want == standard) {
				t.Errorf("flex %v: tier cost %d, standard cost %d", isFlex, want, standard)
			}
		})
	}
}
