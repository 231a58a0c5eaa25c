package replay

import (
	"testing"

	"github.com/tollgate/tollgate/pkg/pricing"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

func TestReprice(t *testing.T) {
	book := pricing.NewTable("book-2", map[string]pricing.Price{
		"claude-sonnet-4-5":            {InputPerM: 3e9, OutputPerM: 15e9, CachedInputPerM: 3e8, CacheWriteInputPerM: 375e7},
		"bedrock-us/claude-sonnet-4-5": {InputPerM: 33e8, CacheWriteInputPerM: 4125e6},
		"gpt-4o":                       {InputPerM: 25e8, Flex: pricing.TierPrices{InputPerM: 125e7}},
	})
	tests := []struct {
		name                               string
		provider, deployment, served, reqd string
		tier                               string
		prompt, cached, written            uint64
		wantOK                             bool
		want                               int64
	}{
		// 3000 input at $3 + 2000 cached at $0.30 + 5000 written at $3.75 + 100 out at $15
		{name: "cache writes at their price", provider: "claude", deployment: "claude/claude-sonnet-4-5", served: "claude-sonnet-4-5",
			prompt: 10_000, cached: 2_000, written: 5_000, wantOK: true, want: 9_000_000 + 600_000 + 18_750_000 + 1_500_000},
		{name: "provider entry wins", provider: "bedrock-us", deployment: "bedrock-us/claude-sonnet-4-5", served: "claude-sonnet-4-5",
			prompt: 2_000, written: 1_000, wantOK: true, want: 3_300_000 + 4_125_000},
		{name: "requested model", provider: "x", deployment: "x/gpt-4o-mystery", served: "mystery", reqd: "gpt-4o",
			prompt: 1_000, wantOK: true, want: 2_500_000},
		{name: "service tier", provider: "openai", deployment: "openai/gpt-4o", served: "gpt-4o", tier: "flex",
			prompt: 1_000, wantOK: true, want: 1_250_000},
		{name: "no price", provider: "x", deployment: "x/m", served: "m", reqd: "m", prompt: 1, want: 42},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := &usagev1.UsageEvent{Provider: tt.provider, Deployment: tt.deployment, ServedModel: tt.served, RequestedModel: tt.reqd,
				PromptTokens: tt.prompt, CachedTokens: tt.cached, CacheWriteTokens: tt.written, CompletionTokens: 100,
				CostNanoUsd: 42, PricingVersion: "old", ServiceTier: tt.tier}
			if tt.provider == "bedrock-us" {
				ev.CompletionTokens = 0
			}
			if ok := Reprice(ev, book); ok != tt.wantOK || ev.CostNanoUsd != tt.want {
				t.Fatalf("Reprice = %v, cost %d; want %v, %d", ok, ev.CostNanoUsd, tt.wantOK, tt.want)
			}
			if want := map[bool]string{true: "book-2", false: "old"}[tt.wantOK]; ev.PricingVersion != want {
				t.Errorf("pricing_version %q, want %q", ev.PricingVersion, want)
			}
		})
	}
}
