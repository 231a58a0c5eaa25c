package pricing

import (
	"strings"
	"testing"
)

func TestLookupAt(t *testing.T) {
	base := Price{InputPerM: 1}
	azure := Price{InputPerM: 2}
	azureDated := Price{InputPerM: 3}
	tab := NewTable("v", map[string]Price{
		"gpt-4o":                  base,
		"azure-eu/gpt-4o":         azure,
		"azure-eu/gpt-4o-2024-08": azureDated,
		"azure-eu":                {InputPerM: 9}, // never a provider's price of all its models
	})
	tests := []struct {
		name             string
		provider, served string
		want             Price
		wantOK           bool
	}{
		{name: "exact", provider: "azure-eu", served: "azure-eu/gpt-4o", want: azure, wantOK: true},
		{name: "longest prefix", provider: "azure-eu", served: "azure-eu/gpt-4o-2024-08-06", want: azureDated, wantOK: true},
		{name: "dated variant", provider: "azure-eu", served: "azure-eu/gpt-4o-2024-11-20", want: azure, wantOK: true},
		{name: "other provider has none", provider: "openai", served: "openai/gpt-4o"},
		{name: "no entry for the model", provider: "azure-eu", served: "azure-eu/o3"},
		{name: "not the provider's prefix", provider: "azure", served: "azure-eu/gpt-4o"},
		{name: "provider name only", provider: "azure-eu", served: "azure-eu/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tab.LookupAt(tt.provider, tt.served)
			if ok != tt.wantOK || got != tt.want {
				t.Fatalf("LookupAt(%q, %q) = %+v, %v; want %+v, %v", tt.provider, tt.served, got, ok, tt.want, tt.wantOK)
			}
		})
	}
	if _, ok := Default().LookupAt("openai", "openai/gpt-4o"); ok {
		t.Error("the embedded table, which has no provider entries, found one")
	}
	if p, ok := Default().With(map[string]Price{"openai/gpt-4o": azure}, "").LookupAt("openai", "openai/gpt-4o"); !ok || p != azure {
		t.Errorf("an override keyed provider/model is not found: %+v, %v", p, ok)
	}
}

func TestLookupAtAllocs(t *testing.T) {
	tab := Default().With(map[string]Price{"azure-eu/gpt-4o": {InputPerM: 2}}, "")
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok := tab.LookupAt("azure-eu", "azure-eu/gpt-4o-2024-08-06"); !ok {
			t.Fatal("no price")
		}
		_, _ = tab.LookupAt("openai", "openai/gpt-4o-2024-08-06")
	})
	if allocs != 0 {
		t.Errorf("LookupAt allocates %.0f times, want 0", allocs)
	}
}

// BenchmarkLookupAt is the gateway's price lookup of a served route; expect
// 0 allocs/op.
func BenchmarkLookupAt(b *testing.B) {
	tab := Default().With(map[string]Price{"azure-eu/gpt-4o": {InputPerM: 2}}, "")
	for _, tt := range []struct{ name, provider, served string }{
		{"provider entry", "azure-eu", "azure-eu/gpt-4o-2024-08-06"},
		{"none", "openai", "openai/gpt-4o-2024-08-06"},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = tab.LookupAt(tt.provider, tt.served)
			}
		})
	}
}

func TestEffective(t *testing.T) {
	p := Price{InputPerM: 3_000_000_000, OutputPerM: 15_000_000_000, CachedInputPerM: 300_000_000,
		Long:     Tier{AbovePromptTokens: 200_000, InputPerM: 6_000_000_000, CacheWriteInputPerM: 7_500_000_000},
		Flex:     TierPrices{InputPerM: 1_500_000_000, OutputPerM: 7_500_000_000},
		Priority: TierPrices{InputPerM: 5_000_000_000, OutputPerM: 25_000_000_000, CachedInputPerM: 500_000_000}}
	tests := []struct {
		name   string
		prompt uint64
		tier   ServiceTier
		want   Price
	}{
		{name: "below the tier, writes at input", prompt: 1000,
			want: Price{InputPerM: 3_000_000_000, OutputPerM: 15_000_000_000, CachedInputPerM: 300_000_000, CacheWriteInputPerM: 3_000_000_000}},
		{name: "above the tier, zero tier fields keep the base", prompt: 200_001,
			want: Price{InputPerM: 6_000_000_000, OutputPerM: 15_000_000_000, CachedInputPerM: 300_000_000, CacheWriteInputPerM: 7_500_000_000}},
		{name: "flex, zero fields keep the base", prompt: 1000, tier: TierFlex,
			want: Price{InputPerM: 1_500_000_000, OutputPerM: 7_500_000_000, CachedInputPerM: 300_000_000, CacheWriteInputPerM: 1_500_000_000}},
		{name: "priority", prompt: 1000, tier: TierPriority,
			want: Price{InputPerM: 5_000_000_000, OutputPerM: 25_000_000_000, CachedInputPerM: 500_000_000, CacheWriteInputPerM: 5_000_000_000}},
		{name: "a service tier before the long tier", prompt: 300_000, tier: TierFlex,
			want: Price{InputPerM: 1_500_000_000, OutputPerM: 7_500_000_000, CachedInputPerM: 300_000_000, CacheWriteInputPerM: 1_500_000_000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := p.Effective(tt.prompt, tt.tier)
			if e != tt.want {
				t.Fatalf("Effective(%d, %v) = %+v, want %+v", tt.prompt, tt.tier, e, tt.want)
			}
			u := Usage{PromptTokens: tt.prompt, CompletionTokens: 500, CachedTokens: tt.prompt / 4, CacheWriteTokens: tt.prompt / 2,
				ServiceTier: tt.tier}
			if got, want := e.Cost(u), p.Cost(u); got != want {
				t.Errorf("Effective(%d).Cost = %d, Cost = %d", tt.prompt, got, want)
			}
		})
	}
}

func TestWithCacheWriteAndLong(t *testing.T) {
	tests := []struct {
		name    string
		build   func() (Price, error)
		want    Price
		wantErr string
	}{
		{name: "cache write", build: func() (Price, error) { return Price{InputPerM: 1}.WithCacheWrite("3.75") },
			want: Price{InputPerM: 1, CacheWriteInputPerM: 3_750_000_000}},
		{name: "empty cache write keeps zero", build: func() (Price, error) { return Price{InputPerM: 1}.WithCacheWrite("") },
			want: Price{InputPerM: 1}},
		{name: "bad cache write", build: func() (Price, error) { return Price{}.WithCacheWrite("x") }, wantErr: "cache_write"},
		{name: "long tier", build: func() (Price, error) {
			return Price{InputPerM: 1}.WithLong(200_000, "6", "22.50", "", "7.5")
		}, want: Price{InputPerM: 1, Long: Tier{AbovePromptTokens: 200_000, InputPerM: 6_000_000_000, OutputPerM: 22_500_000_000,
			CacheWriteInputPerM: 7_500_000_000}}},
		{name: "long tier needs a size", build: func() (Price, error) { return Price{}.WithLong(0, "6", "", "", "") },
			wantErr: "above_prompt_tokens"},
		{name: "bad long field named", build: func() (Price, error) { return Price{}.WithLong(10, "", "", "-1", "") },
			wantErr: "long.cached_input"},
		{name: "flex tier", build: func() (Price, error) { return Price{InputPerM: 1}.WithServiceTier("flex", "0.625", "5", "") },
			want: Price{InputPerM: 1, Flex: TierPrices{InputPerM: 625_000_000, OutputPerM: 5_000_000_000}}},
		{name: "priority tier", build: func() (Price, error) { return Price{}.WithServiceTier("priority", "", "", "0.25") },
			want: Price{Priority: TierPrices{CachedInputPerM: 250_000_000}}},
		{name: "unknown tier", build: func() (Price, error) { return Price{}.WithServiceTier("batch", "1", "", "") },
			wantErr: `unknown service tier "batch"`},
		{name: "bad tier field named", build: func() (Price, error) { return Price{}.WithServiceTier("flex", "", "x", "") },
			wantErr: "tiers.flex.output"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.build()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("= %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestServiceTierNames(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want ServiceTier
		name string
	}{{"flex", TierFlex, "flex"}, {"priority", TierPriority, "priority"}, {"default", TierStandard, ""},
		{"auto", TierStandard, ""}, {"scale", TierStandard, ""}, {"", TierStandard, ""}} {
		if got := ParseServiceTier(tt.in); got != tt.want || got.String() != tt.name {
			t.Errorf("ParseServiceTier(%q) = %v (%q), want %v (%q)", tt.in, got, got.String(), tt.want, tt.name)
		}
	}
}

func TestTiersRoundTrip(t *testing.T) {
	tab, err := Parse([]byte(`version: "v"
prices:
  gpt-5: {input: "1.25", output: "10", tiers: {flex: {input: "0.625", output: "5", cached_input: "0.0625"}, priority: {input: "2.5", output: "20"}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Price{InputPerM: 1_250_000_000, OutputPerM: 10_000_000_000,
		Flex:     TierPrices{InputPerM: 625_000_000, OutputPerM: 5_000_000_000, CachedInputPerM: 62_500_000},
		Priority: TierPrices{InputPerM: 2_500_000_000, OutputPerM: 20_000_000_000}}
	if p, _ := tab.Price("gpt-5"); p != want {
		t.Fatalf("parsed %+v, want %+v", p, want)
	}
	again, err := Parse(tab.Marshal())
	if err != nil {
		t.Fatalf("parse Marshal output: %v\n%s", err, tab.Marshal())
	}
	if p, _ := again.Price("gpt-5"); p != want {
		t.Errorf("after Marshal: %+v, want %+v", p, want)
	}
	if _, err := Parse([]byte("version: v\nprices:\n  m: {input: \"1\", tiers: {batch: {input: \"1\"}}}\n")); err == nil ||
		!strings.Contains(err.Error(), "batch") {
		t.Errorf("unknown tier in a price file: %v", err)
	}
}
