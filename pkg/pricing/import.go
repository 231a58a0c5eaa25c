package pricing

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
)

// Import formats: the public price files people maintain.
const (
	// FormatLiteLLM is LiteLLM's model_prices_and_context_window.json:
	// entries keyed by model, prices in USD per token (per second, per
	// character, per image for the other modes).
	FormatLiteLLM = "litellm"
	// FormatModelsDev is models.dev's api.json: providers, each with its
	// models, prices in USD per million tokens.
	FormatModelsDev = "models.dev"
)

// Skip is an entry of an imported file that did not become a price, and
// why.
type Skip struct {
	Model, Reason string
}

// Import reads a price file in format (FormatLiteLLM or FormatModelsDev)
// into model prices, exactly: amounts are read from the JSON number's text
// (2.5e-06 is 2.50 USD per million tokens, no float in between) and
// rounded half up to the nano-USD only where a file has more precision than
// that. providers selects entries by provider (LiteLLM's litellm_provider,
// models.dev's provider id); for models.dev it is required, since a model
// is listed once per provider, and a model two providers list takes the
// price of the first in providers. It returns the entries skipped with
// their reason.
func Import(format string, data []byte, providers []string) (map[string]Price, []Skip, error) {
	switch format {
	case FormatLiteLLM:
		return importLiteLLM(data, providers)
	case FormatModelsDev:
		return importModelsDev(data, providers)
	}
	return nil, nil, fmt.Errorf("import prices: unknown format %q (want %s or %s)", format, FormatLiteLLM, FormatModelsDev)
}

// Scale factors from a file's unit to nano-USD in Price's unit.
var (
	perTokenToPerM = big.NewRat(1_000_000*NanoPerUSD, 1) // USD per token -> nano-USD per million tokens
	perUnit        = big.NewRat(NanoPerUSD, 1)           // USD per unit (or per million) -> nano-USD
)

// exact converts a JSON number's text times scale into int64, rounding
// half up. An empty or null number is zero.
func exact(n json.Number, scale *big.Rat) (int64, error) {
	if n == "" {
		return 0, nil
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok {
		return 0, fmt.Errorf("not a number: %q", n)
	}
	if r.Sign() < 0 {
		return 0, fmt.Errorf("negative price %s", n)
	}
	r.Mul(r, scale)
	r.Add(r, big.NewRat(1, 2))
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if !q.IsInt64() || q.Int64() == math.MaxInt64 {
		return 0, fmt.Errorf("price %s out of range", n)
	}
	return q.Int64(), nil
}

// litellmModes are the LiteLLM modes whose prices Tollgate bills.
var litellmModes = []string{"chat", "completion", "responses", "embedding", "image_generation", "audio_transcription", "audio_speech"}

// litellmTier matches a long-context price key, e.g.
// input_cost_per_token_above_200k_tokens.
var litellmTier = regexp.MustCompile(`^(input_cost_per_token|output_cost_per_token|cache_read_input_token_cost|cache_creation_input_token_cost)_above_([0-9]+)k_tokens$`)

func importLiteLLM(data []byte, providers []string) (map[string]Price, []Skip, error) {
	var file map[string]map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&file); err != nil {
		return nil, nil, fmt.Errorf("import litellm prices: %w", err)
	}
	out := map[string]Price{}
	var skips []Skip
	for model, e := range file {
		if model == "sample_spec" {
			continue
		}
		provider, _ := e["litellm_provider"].(string)
		if len(providers) > 0 && !slices.Contains(providers, provider) {
			continue
		}
		if mode, _ := e["mode"].(string); !slices.Contains(litellmModes, mode) {
			skips = append(skips, Skip{model, fmt.Sprintf("mode %q is not billed by the gateway", mode)})
			continue
		}
		p, err := litellmPrice(e)
		if err != nil {
			skips = append(skips, Skip{model, err.Error()})
			continue
		}
		if p == (Price{}) {
			skips = append(skips, Skip{model, "no price the gateway bills (e.g. per pixel)"})
			continue
		}
		out[model] = p
	}
	sortSkips(skips)
	return out, skips, nil
}

// litellmPrice reads one LiteLLM entry's prices.
func litellmPrice(e map[string]any) (Price, error) {
	var p Price
	var errs []error
	get := func(key string, scale *big.Rat, dst *int64) {
		n, _ := e[key].(json.Number)
		v, err := exact(n, scale)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		}
		*dst = v
	}
	get("input_cost_per_token", perTokenToPerM, &p.InputPerM)
	get("output_cost_per_token", perTokenToPerM, &p.OutputPerM)
	get("cache_read_input_token_cost", perTokenToPerM, &p.CachedInputPerM)
	get("cache_creation_input_token_cost", perTokenToPerM, &p.CacheWriteInputPerM)
	get("input_cost_per_second", perUnit, &p.PerAudioSecond)
	get("input_cost_per_character", perTokenToPerM, &p.CharactersPerM)
	get("output_cost_per_image", perUnit, &p.PerImage)
	// The lowest long-context threshold the entry prices; its prices form
	// the tier.
	for key, v := range e {
		m := litellmTier.FindStringSubmatch(key)
		if m == nil {
			continue
		}
		if _, ok := v.(json.Number); !ok {
			continue // null
		}
		k, err := strconv.ParseUint(m[2], 10, 32)
		if err != nil || k == 0 {
			continue
		}
		if above := k * 1000; p.Long.AbovePromptTokens == 0 || above < p.Long.AbovePromptTokens {
			p.Long = Tier{AbovePromptTokens: above}
		}
	}
	if above := p.Long.AbovePromptTokens; above > 0 {
		sfx := "_above_" + strconv.FormatUint(above/1000, 10) + "k_tokens"
		get("input_cost_per_token"+sfx, perTokenToPerM, &p.Long.InputPerM)
		get("output_cost_per_token"+sfx, perTokenToPerM, &p.Long.OutputPerM)
		get("cache_read_input_token_cost"+sfx, perTokenToPerM, &p.Long.CachedInputPerM)
		get("cache_creation_input_token_cost"+sfx, perTokenToPerM, &p.Long.CacheWriteInputPerM)
	}
	get("input_cost_per_token_flex", perTokenToPerM, &p.Flex.InputPerM)
	get("output_cost_per_token_flex", perTokenToPerM, &p.Flex.OutputPerM)
	get("cache_read_input_token_cost_flex", perTokenToPerM, &p.Flex.CachedInputPerM)
	get("input_cost_per_token_priority", perTokenToPerM, &p.Priority.InputPerM)
	get("output_cost_per_token_priority", perTokenToPerM, &p.Priority.OutputPerM)
	get("cache_read_input_token_cost_priority", perTokenToPerM, &p.Priority.CachedInputPerM)
	return p, errors.Join(errs...)
}

// modelsDevCost is a models.dev cost object, USD per million tokens.
type modelsDevCost struct {
	Input           json.Number    `json:"input"`
	Output          json.Number    `json:"output"`
	CacheRead       json.Number    `json:"cache_read"`
	CacheWrite      json.Number    `json:"cache_write"`
	ContextOver200k *modelsDevCost `json:"context_over_200k"`
}

func importModelsDev(data []byte, providers []string) (map[string]Price, []Skip, error) {
	if len(providers) == 0 {
		return nil, nil, errors.New("import models.dev prices: name the providers to take prices from (models.dev lists a model once per provider)")
	}
	var file map[string]struct {
		Models map[string]struct {
			Cost *modelsDevCost `json:"cost"`
		} `json:"models"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, nil, fmt.Errorf("import models.dev prices: %w", err)
	}
	out := map[string]Price{}
	from := map[string]string{}
	var skips []Skip
	for _, prov := range providers {
		pf, ok := file[prov]
		if !ok {
			return nil, nil, fmt.Errorf("import models.dev prices: no provider %q in the file", prov)
		}
		for model, m := range pf.Models {
			if first, dup := from[model]; dup {
				skips = append(skips, Skip{prov + "/" + model, "priced by " + first + ", listed first"})
				continue
			}
			if m.Cost == nil {
				skips = append(skips, Skip{prov + "/" + model, "no cost"})
				continue
			}
			p, err := modelsDevPrice(m.Cost)
			if err != nil {
				skips = append(skips, Skip{prov + "/" + model, err.Error()})
				continue
			}
			if p == (Price{}) {
				skips = append(skips, Skip{prov + "/" + model, "free or unpriced"})
				continue
			}
			out[model], from[model] = p, prov
		}
	}
	sortSkips(skips)
	return out, skips, nil
}

func modelsDevPrice(c *modelsDevCost) (Price, error) {
	var p Price
	var errs []error
	get := func(name string, n json.Number, dst *int64) {
		v, err := exact(n, perUnit)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		*dst = v
	}
	get("input", c.Input, &p.InputPerM)
	get("output", c.Output, &p.OutputPerM)
	get("cache_read", c.CacheRead, &p.CachedInputPerM)
	get("cache_write", c.CacheWrite, &p.CacheWriteInputPerM)
	if l := c.ContextOver200k; l != nil {
		p.Long.AbovePromptTokens = 200_000
		get("context_over_200k.input", l.Input, &p.Long.InputPerM)
		get("context_over_200k.output", l.Output, &p.Long.OutputPerM)
		get("context_over_200k.cache_read", l.CacheRead, &p.Long.CachedInputPerM)
		get("context_over_200k.cache_write", l.CacheWrite, &p.Long.CacheWriteInputPerM)
	}
	return p, errors.Join(errs...)
}

func sortSkips(s []Skip) {
	slices.SortFunc(s, func(a, b Skip) int {
		if a.Model < b.Model {
			return -1
		}
		if a.Model > b.Model {
			return 1
		}
		return 0
	})
}
