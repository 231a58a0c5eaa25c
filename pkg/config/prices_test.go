package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/pricing"
)

// bookYAML is a price book as `tollctl prices import` writes it
// (pricing.Table.Marshal).
const bookYAML = `version: "import-2026-12-01"
prices:
  "claude-sonnet-4-5": {input: "3", output: "15", cached_input: "0.3", cache_write: "3.75", long: {above_prompt_tokens: 200000, input: "6", output: "22.5", cached_input: "0.6", cache_write: "7.5"}}
  "gpt-4o": {input: "2.5", output: "10", cached_input: "1.25"}
`

func TestPriceTable(t *testing.T) {
	dir := t.TempDir()
	book := filepath.Join(dir, "book.yaml")
	if err := os.WriteFile(book, []byte(bookYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: v\nprices:\n  m: {input: \"1\", colour: blue}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sonnet := pricing.Price{InputPerM: 3e9, OutputPerM: 15e9, CachedInputPerM: 3e8, CacheWriteInputPerM: 375e7,
		Long: pricing.Tier{AbovePromptTokens: 200_000, InputPerM: 6e9, OutputPerM: 225e8, CachedInputPerM: 6e8, CacheWriteInputPerM: 75e8}}
	tests := []struct {
		name        string
		yaml        string
		wantVersion string
		model       string // looked up exactly
		want        pricing.Price
		wantErr     []string
	}{
		{name: "embedded", yaml: "", wantVersion: pricing.Default().Version},
		{name: "price book", yaml: "price_book: " + book, wantVersion: "import-2026-12-01", model: "claude-sonnet-4-5", want: sonnet},
		{name: "book with overrides", yaml: "price_book: " + book + `
prices:
  gpt-4o: {input: "2", output: "8", cache_write: "2.5", long: {above_prompt_tokens: 128000, input: "4"}}
  azure-eu/gpt-4o: {input: "2.75"}
`, wantVersion: "import-2026-12-01+override", model: "gpt-4o",
			want: pricing.Price{InputPerM: 2e9, OutputPerM: 8e9, CacheWriteInputPerM: 25e8, Long: pricing.Tier{AbovePromptTokens: 128_000, InputPerM: 4e9}}},
		{name: "service tiers", yaml: "prices:\n  gpt-5: {input: \"1.25\", output: \"10\", tiers: {flex: {input: \"0.625\", output: \"5\"}, priority: {cached_input: \"0.25\"}}}\n",
			wantVersion: pricing.Default().Version + "+override", model: "gpt-5",
			want: pricing.Price{InputPerM: 125e7, OutputPerM: 10e9, Flex: pricing.TierPrices{InputPerM: 625e6, OutputPerM: 5e9},
				Priority: pricing.TierPrices{CachedInputPerM: 25e7}}},
		{name: "provider entry", yaml: "prices:\n  azure-eu/gpt-4o: {input: \"2.75\"}\n",
			wantVersion: pricing.Default().Version + "+override", model: "azure-eu/gpt-4o", want: pricing.Price{InputPerM: 275e7}},
		{name: "missing book", yaml: "price_book: " + filepath.Join(dir, "none.yaml"), wantErr: []string{"price_book: open ", "none.yaml"}},
		{name: "malformed book", yaml: "price_book: " + bad, wantErr: []string{"price_book " + bad + ": parse price table", "colour"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml), nil)
			if err != nil {
				t.Fatal(err)
			}
			tab, err := c.PriceTable()
			if len(tt.wantErr) > 0 {
				for _, w := range tt.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Fatalf("PriceTable error = %v, want one containing %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tab.Version != tt.wantVersion {
				t.Errorf("version %q, want %q", tab.Version, tt.wantVersion)
			}
			if tt.model == "" {
				return
			}
			if got, ok := tab.Price(tt.model); !ok || got != tt.want {
				t.Errorf("price of %s = %+v, %v; want %+v", tt.model, got, ok, tt.want)
			}
		})
	}
}
