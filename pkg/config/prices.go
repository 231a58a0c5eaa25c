package config

import (
	"fmt"
	"os"

	"github.com/tollgate/tollgate/pkg/pricing"
)

// PriceTable builds the price table the config names: the price book file
// (price_book) when set, else the embedded table, with the prices entries
// applied over it. Its version is the book's (or the embedded table's),
// followed by "+override" when prices has entries. The gateway calls it at
// start and on every reload, so a missing or malformed book refuses the
// file like any other config error; tollctl config check does the same.
func (c *Config) PriceTable() (*pricing.Table, error) {
	t := pricing.Default()
	if c.PriceBook != "" {
		data, err := os.ReadFile(c.PriceBook)
		if err != nil {
			return nil, fmt.Errorf("price_book: %w", err)
		}
		if t, err = pricing.Parse(data); err != nil {
			return nil, fmt.Errorf("price_book %s: %w", c.PriceBook, err)
		}
	}
	if len(c.Prices) == 0 {
		return t, nil
	}
	over := make(map[string]pricing.Price, len(c.Prices))
	for model, p := range c.Prices {
		pr, err := p.price()
		if err != nil {
			return nil, fmt.Errorf("prices.%s: %w", model, err)
		}
		over[model] = pr
	}
	return t.With(over, ""), nil
}

// price is p as a pricing.Price.
func (p Price) price() (pricing.Price, error) {
	pr, err := pricing.ParsePrice(p.Input, p.Output, p.CachedInput, p.PerRequest)
	if err == nil {
		pr, err = pr.WithUnits(p.PerImage, p.PerAudioSecond, p.Per1MCharacters)
	}
	if err == nil && len(p.PerImageBy) > 0 {
		pr, err = pr.WithImagePrices(p.PerImageBy)
	}
	if err == nil {
		pr, err = pr.WithCacheWrite(p.CacheWrite)
	}
	if err == nil && p.Long != nil {
		l := p.Long
		pr, err = pr.WithLong(l.AbovePromptTokens, l.Input, l.Output, l.CachedInput, l.CacheWrite)
	}
	if ts := p.Tiers; err == nil && ts != nil {
		for _, t := range []struct {
			name string
			p    *TierPrice
		}{{"flex", ts.Flex}, {"priority", ts.Priority}} {
			if t.p != nil && err == nil {
				pr, err = pr.WithServiceTier(t.name, t.p.Input, t.p.Output, t.p.CachedInput)
			}
		}
	}
	return pr, err
}
