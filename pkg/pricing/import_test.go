package pricing

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestImportLiteLLM(t *testing.T) {
	prices, skips, err := Import(FormatLiteLLM, readTestdata(t, "litellm_model_prices.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		model string
		want  Price
	}{
		{"gpt-4o", Price{InputPerM: 2_500_000_000, OutputPerM: 10_000_000_000, CachedInputPerM: 1_250_000_000,
			Priority: TierPrices{InputPerM: 4_250_000_000, OutputPerM: 17_000_000_000, CachedInputPerM: 2_125_000_000}}},
		{"gpt-5", Price{InputPerM: 1_250_000_000, OutputPerM: 10_000_000_000, CachedInputPerM: 125_000_000,
			Flex:     TierPrices{InputPerM: 625_000_000, OutputPerM: 5_000_000_000, CachedInputPerM: 62_500_000},
			Priority: TierPrices{InputPerM: 2_500_000_000, OutputPerM: 20_000_000_000}}},
		{"gpt-4o-mini", Price{InputPerM: 150_000_000, OutputPerM: 600_000_000, CachedInputPerM: 75_000_000}},
		{"text-embedding-3-small", Price{InputPerM: 20_000_000}},
		{"whisper-1", Price{PerAudioSecond: 100_000}},
		{"tts-1", Price{CharactersPerM: 15_000_000_000}},
		{"gpt-image-1", Price{InputPerM: 5_000_000_000, PerImage: 42_000_000}},
		{"claude-sonnet-4-5", Price{InputPerM: 3_000_000_000, OutputPerM: 15_000_000_000, CachedInputPerM: 300_000_000, CacheWriteInputPerM: 3_750_000_000,
			Long: Tier{AbovePromptTokens: 200_000, InputPerM: 6_000_000_000, OutputPerM: 22_500_000_000, CachedInputPerM: 600_000_000, CacheWriteInputPerM: 7_500_000_000}}},
		{"gemini-2.5-pro", Price{InputPerM: 1_250_000_000, OutputPerM: 10_000_000_000, CachedInputPerM: 125_000_000,
			Long: Tier{AbovePromptTokens: 200_000, InputPerM: 2_500_000_000, OutputPerM: 15_000_000_000, CachedInputPerM: 250_000_000}}},
		{"bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0", Price{InputPerM: 3_300_000_000, OutputPerM: 16_500_000_000, CachedInputPerM: 330_000_000, CacheWriteInputPerM: 4_125_000_000}},
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			if got, ok := prices[tc.model]; !ok || got != tc.want {
				t.Errorf("got %+v (%v), want %+v", got, ok, tc.want)
			}
		})
	}
	for _, m := range []string{"sample_spec", "omni-moderation-latest", "cohere.rerank-v3-5:0", "standard/1024-x-1024/dall-e-3"} {
		if _, ok := prices[m]; ok {
			t.Errorf("%s imported", m)
		}
	}
	var skipped []string
	for _, s := range skips {
		skipped = append(skipped, s.Model)
	}
	if got := strings.Join(skipped, ","); got != "cohere.rerank-v3-5:0,omni-moderation-latest,standard/1024-x-1024/dall-e-3" {
		t.Errorf("skipped %s", got)
	}

	only, _, err := Import(FormatLiteLLM, readTestdata(t, "litellm_model_prices.json"), []string{"anthropic"})
	if err != nil {
		t.Fatal(err)
	}
	if len(only) != 2 {
		t.Errorf("provider anthropic: %d entries, want 2", len(only))
	}
}

func TestImportModelsDev(t *testing.T) {
	data := readTestdata(t, "models_dev_api.json")
	prices, skips, err := Import(FormatModelsDev, data, []string{"openai", "anthropic", "azure", "ollama-cloud"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Price{
		"gpt-4o":                 {InputPerM: 2_500_000_000, OutputPerM: 10_000_000_000, CachedInputPerM: 1_250_000_000}, // openai's, listed first
		"gpt-5":                  {InputPerM: 1_250_000_000, OutputPerM: 10_000_000_000, CachedInputPerM: 125_000_000},
		"gpt-5-mini":             {InputPerM: 250_000_000, OutputPerM: 2_000_000_000, CachedInputPerM: 25_000_000},
		"text-embedding-3-small": {InputPerM: 20_000_000},
		"claude-sonnet-4-5": {InputPerM: 3_000_000_000, OutputPerM: 15_000_000_000, CachedInputPerM: 300_000_000, CacheWriteInputPerM: 3_750_000_000,
			Long: Tier{AbovePromptTokens: 200_000, InputPerM: 6_000_000_000, OutputPerM: 22_500_000_000, CachedInputPerM: 600_000_000, CacheWriteInputPerM: 7_500_000_000}},
		"claude-haiku-4-5": {InputPerM: 1_000_000_000, OutputPerM: 5_000_000_000, CachedInputPerM: 100_000_000, CacheWriteInputPerM: 1_250_000_000},
	}
	if len(prices) != len(want) {
		t.Errorf("%d prices, want %d: %v", len(prices), len(want), prices)
	}
	for m, w := range want {
		if got := prices[m]; got != w {
			t.Errorf("%s: got %+v, want %+v", m, got, w)
		}
	}
	if len(skips) != 2 || skips[0].Model != "azure/gpt-4o" || skips[1].Model != "ollama-cloud/gpt-oss:120b" {
		t.Errorf("skips %+v", skips)
	}
	azure, _, err := Import(FormatModelsDev, data, []string{"azure", "openai"})
	if err != nil {
		t.Fatal(err)
	}
	if azure["gpt-4o"].InputPerM != 2_750_000_000 {
		t.Errorf("azure first: gpt-4o %+v, want azure's price", azure["gpt-4o"])
	}
	for _, providers := range [][]string{nil, {"nope"}} {
		if _, _, err := Import(FormatModelsDev, data, providers); err == nil {
			t.Errorf("providers %v accepted", providers)
		}
	}
}

func TestImportErrors(t *testing.T) {
	tests := []struct{ name, format, data string }{
		{"unknown format", "csv", `{}`},
		{"not json", FormatLiteLLM, `{`},
		{"models.dev not json", FormatModelsDev, `[`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := Import(tc.format, []byte(tc.data), []string{"x"}); err == nil {
				t.Error("accepted")
			}
		})
	}
	_, skips, err := Import(FormatLiteLLM, []byte(`{"neg": {"mode": "chat", "input_cost_per_token": -1e-06}}`), nil)
	if err != nil || len(skips) != 1 || !strings.Contains(skips[0].Reason, "negative") {
		t.Errorf("negative price: %v %+v", err, skips)
	}
}

// TestExact: file numbers become nano-USD from their text, never through
// a float (0.1+0.2 style drift, 1e-07 notation).
func TestExact(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"2.5e-06", 2_500_000_000}, {"1e-05", 10_000_000_000}, {"3.3e-07", 330_000_000},
		{"0.000000075", 75_000_000}, {"1.7e-05", 17_000_000_000}, {"2.125e-06", 2_125_000_000},
		{"1.0000000000000005e-15", 1}, {"4e-16", 0}, {"0", 0},
	} {
		got, err := exact(jsonNumber(tc.in), perTokenToPerM)
		if err != nil || got != tc.want {
			t.Errorf("exact(%s) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestCostTiersAndCacheWrites(t *testing.T) {
	p := Price{InputPerM: 3_000_000_000, OutputPerM: 15_000_000_000, CachedInputPerM: 300_000_000, CacheWriteInputPerM: 3_750_000_000,
		Long: Tier{AbovePromptTokens: 200_000, InputPerM: 6_000_000_000, OutputPerM: 22_500_000_000, CachedInputPerM: 600_000_000}}
	tests := []struct {
		name string
		u    Usage
		want int64
	}{
		// 100k*3 + 20k*0.30 + 10k*3.75 (per million) + 1k*15
		{"cache reads and writes", Usage{PromptTokens: 130_000, CachedTokens: 20_000, CacheWriteTokens: 10_000, CompletionTokens: 1_000},
			300_000_000 + 6_000_000 + 37_500_000 + 15_000_000},
		{"at the threshold: base prices", Usage{PromptTokens: 200_000, CompletionTokens: 1_000}, 600_000_000 + 15_000_000},
		// Above: every token at the long prices; cache writes keep the base
		// write price (the tier has none).
		{"above the threshold", Usage{PromptTokens: 200_001, CacheWriteTokens: 1, CompletionTokens: 1_000},
			(200_000*6_000_000_000 + 1*3_750_000_000 + 1_000*22_500_000_000 + 500_000) / 1_000_000},
		{"writes capped at the uncached prompt", Usage{PromptTokens: 10, CachedTokens: 6, CacheWriteTokens: 100}, (6*300_000_000 + 4*3_750_000_000 + 500_000) / 1_000_000},
		{"no write price: input price", Usage{PromptTokens: 1_000_000, CacheWriteTokens: 1_000_000}, 3_750_000_000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := p
			if tc.name == "no write price: input price" {
				q.CacheWriteInputPerM, q.Long = 0, Tier{}
				tc.want = 3_000_000_000
			}
			if got := q.Cost(tc.u); got != tc.want {
				t.Errorf("Cost = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	prices, _, err := Import(FormatLiteLLM, readTestdata(t, "litellm_model_prices.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tab := range []*Table{Default(), NewTable("litellm-2026-12-01", prices)} {
		back, err := Parse(tab.Marshal())
		if err != nil {
			t.Fatalf("%s: %v\n%s", tab.Version, err, tab.Marshal())
		}
		if back.Version != tab.Version || len(Diff(tab, back)) != 0 {
			t.Errorf("%s: round trip changed %v", tab.Version, Diff(tab, back))
		}
	}
}

func TestDiff(t *testing.T) {
	from := NewTable("a", map[string]Price{"keep": {InputPerM: 1}, "change": {InputPerM: 1}, "drop": {OutputPerM: 2}})
	to := NewTable("b", map[string]Price{"keep": {InputPerM: 1}, "change": {InputPerM: 2_500_000_000}, "new": {PerImage: 40_000_000}})
	var lines []string
	for _, c := range Diff(from, to) {
		lines = append(lines, c.String())
	}
	want := []string{
		`~ change {input: "0.000000001"} -> {input: "2.50"}`,
		`- drop {output: "0.000000002"}`,
		`+ new {per_image: "0.04"}`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("diff:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func jsonNumber(s string) json.Number { return json.Number(s) }

func TestParseLongTier(t *testing.T) {
	tab, err := Parse([]byte("version: v\nprices:\n  m: {input: \"1\", cache_write: \"1.25\", long: {above_prompt_tokens: 200000, input: \"2\"}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Price{InputPerM: 1_000_000_000, CacheWriteInputPerM: 1_250_000_000, Long: Tier{AbovePromptTokens: 200_000, InputPerM: 2_000_000_000}}
	if p, _ := tab.Price("m"); p != want {
		t.Errorf("got %+v, want %+v", p, want)
	}
	for _, bad := range []string{
		"version: v\nprices:\n  m: {input: \"1\", long: {input: \"2\"}}\n",                          // no threshold
		"version: v\nprices:\n  m: {input: \"1\", long: {above_prompt_tokens: 1, flex: \"2\"}}\n",   // unknown key
		"version: v\nprices:\n  m: {input: \"1\", long: {above_prompt_tokens: 1, input: \"-2\"}}\n", // negative
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
